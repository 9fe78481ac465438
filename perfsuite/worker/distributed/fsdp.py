"""FSDP2: torch's ``fully_shard`` on every transformer block, then on the root.

perfsuite calls torch directly: accelerate's and the HF Trainer's FSDP paths are skipped
on a CPU (accelerate keeps ``MULTI_CPU`` and drops the plugin, so the run is plain DDP
under FSDP's name), which is exactly the silent fallback the FSDP claim exists to catch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of every ``ModuleList`` of same-class modules (BERT's ``layer``,
    GPT-2's ``h``, Llama's ``layers``, T5's ``block``): the units FSDP2 gathers one at a time."""
    found: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 1:
            kinds = {type(child) for child in module}
            if len(kinds) == 1 and any(True for _ in module[0].parameters()):
                found.extend(module)
    return found


def shard_model(model: torch.nn.Module, *, precision: str = "fp32") -> torch.nn.Module:
    """``model`` with each block and the root under ``fully_shard`` (bf16 compute through
    FSDP2's mixed-precision policy, gradients reduced in fp32)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    else:
        policy = MixedPrecisionPolicy()
    for block in blocks(model):
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def clip_grad_norm(params: Iterable[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip sharded gradients by their global norm; returns that norm as a plain tensor."""
    from torch.distributed.tensor import DTensor

    norm: Any = torch.nn.utils.clip_grad_norm_(list(params), max_norm)
    return norm.full_tensor() if isinstance(norm, DTensor) else norm
