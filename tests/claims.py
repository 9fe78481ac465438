"""What each newer strategy claims, as checks on run records (a strategy run and its control).

Each raises AssertionError when the claim does not hold. ``test_strategy_claims.py``
checks them on real runs; ``test_claims_without_their_strategy.py`` shows each one
failing when its strategy is silently not applied, so none of them can pass vacuously.
"""

from __future__ import annotations

from typing import Any

import torch

Record = dict[str, Any]

# Float tolerance for "the same training": identical maths in a different order
# (other matmul shapes, summed micro-batch gradients) differs in the last bits, which
# Adam's normalised updates carry into later steps. torchtune uses 1e-4 for the same check.
LOSS_RTOL = 1e-4
LOSS_ATOL = 1e-5
# Accumulation with half-precision autocast rounds each micro-batch's activations on its
# own: the trajectories agree to the precision's own loss tolerance (perfsuite.compare).
HALF_RTOL = {"fp16": 1e-2, "bf16": 2e-2}


def same_losses(a: Record, b: Record, *, rtol: float = LOSS_RTOL, atol: float = LOSS_ATOL) -> None:
    assert len(a["loss"]) == len(b["loss"])
    torch.testing.assert_close(torch.tensor(a["loss"]), torch.tensor(b["loss"]), rtol=rtol, atol=atol)


def mem(record: Record, category: str) -> int:
    """A category of the record's memory breakdown (MemTracker, at the peak), in bytes."""
    value = record["memory_breakdown_bytes"][category]
    assert isinstance(value, int), record["memory_breakdown_bytes"]
    return value


def state_bytes(record: Record) -> int:
    value = record["applied"]["optimizer_state_bytes"]
    assert isinstance(value, int), record["applied"]
    return value


def fused_adamw(record: Record, vanilla: Record) -> None:
    assert record["applied"]["optimizer_class"] == "torch.optim.adamw.AdamW"
    assert record["applied"]["fused"] is True, f"param groups say fused={record['applied']['fused']!r}"
    assert not vanilla["applied"]["fused"]
    same_losses(record, vanilla)  # the same AdamW update, one kernel instead of a loop


def lion(record: Record, vanilla: Record) -> None:
    assert record["applied"]["optimizer_class"] == "lion_pytorch.lion_pytorch.Lion"
    ratio = state_bytes(record) / state_bytes(vanilla)
    # One fp32 moment per parameter where AdamW keeps two (and a step count).
    assert 0.45 <= ratio <= 0.55, f"Lion's state is {ratio:.0%} of AdamW's"


def lion_8bit(record: Record, vanilla: Record) -> None:
    assert record["applied"]["optimizer_class"] == "bitsandbytes.optim.lion.Lion8bit"
    ratio = state_bytes(record) / state_bytes(vanilla)
    # One byte per parameter (plus block scales; tensors under 4096 elements stay 32-bit).
    assert ratio <= 0.2, f"8-bit Lion's state is {ratio:.0%} of AdamW's"


def galore(record: Record, vanilla: Record) -> None:
    info = record["applied"].get("galore")
    assert info, "no GaLore parameter group"
    assert info["projected_parameters"] > 0
    assert info["projectors"] == info["projected_parameters"], "a projected weight has no projector"
    assert info["projector_bytes"] > 0
    rank = info["rank"]
    for moment, weight in info["moment_shapes_vs_weights"]:
        assert rank in moment, f"moment {moment} of a {weight} weight is not rank {rank}"
        assert moment != weight, f"moment {moment} is as large as its {weight} weight"
    # The projected matrices: moments of rank r and the projection, against AdamW's 8 bytes per element.
    projected = (info["projected_moment_bytes"] + info["projector_bytes"]) / (8 * info["projected_numel"])
    assert projected <= 0.5, f"GaLore keeps {projected:.0%} of AdamW's state for the weights it projects"
    # Embeddings and biases keep full AdamW state, so the whole is less, by less.
    assert state_bytes(record) < 0.9 * state_bytes(vanilla)


def eager_attention(record: Record, vanilla: Record) -> None:
    eager, sdpa = record["attention_ops"], vanilla["attention_ops"]
    assert record["applied"]["attention_implementation"] == "eager"
    assert vanilla["applied"]["attention_implementation"] == "sdpa"
    assert not any(k.startswith("sdpa") for k in eager), f"eager attention ran SDPA kernels: {eager}"
    assert eager.get("softmax", 0) >= 1, f"eager attention ran no softmax: {eager}"
    assert sdpa.get("sdpa", 0) + sdpa.get("sdpa_math", 0) >= 1, f"vanilla ran no SDPA: {sdpa}"
    same_losses(record, vanilla)  # the same attention maths


def compiled(record: Record) -> None:
    info = record["applied"].get("compile")
    assert info, "no compile evidence"
    assert info["wrapper"] == "OptimizedModule"
    assert info["unique_graphs"] >= 1, info
    assert info["frames_ok"] >= 1, info
    assert info["graph_breaks"] == 0, info
    assert info["recompile_limit_hits"] == 0, "dynamo hit its recompile limit and fell back to eager"
    # Compilation happens in the warm-up, reported on its own: far longer than a step.
    assert record["compile_s"] is not None
    assert record["compile_s"] > 2 * record["step_time_s"]["median"]


def lora(record: Record, vanilla: Record, *, expected_adapters: int) -> None:
    info = record["applied"].get("lora")
    assert info, "no LoRA evidence"
    expected = expected_adapters
    assert info["adapter_parameters"] == expected, f"{info['adapter_parameters']} adapter parameters, not {expected}"
    assert info["trainable_parameters"] == record["applied"]["trainable_parameters"]
    assert info["trainable_parameters"] < 0.05 * vanilla["applied"]["trainable_parameters"]
    assert record["applied"]["frozen_parameters_with_grad"] == 0, "a frozen base weight got a gradient"
    # AdamW state: two fp32 moments per trainable parameter (plus a step count each).
    assert state_bytes(record) <= 8 * info["trainable_parameters"] * 1.05
    assert state_bytes(record) >= 8 * info["trainable_parameters"]


def lora_adapters(model: str, rank: int = 8) -> int:
    """r × (in + out) for every projection LoRA adapts, read off a built model."""
    from perfsuite.adapters import LORA_TARGETS
    from perfsuite.models import build_model, get_model_spec

    built = build_model(get_model_spec(model))
    targets = LORA_TARGETS[built.config.model_type]
    return sum(rank * sum(m.weight.shape) for name, m in built.named_modules() if name.rsplit(".", 1)[-1] in targets)


def accumulation_keeps_the_trajectory(accumulated: Record, single: Record, *, precision: str = "fp32") -> None:
    """Micro-batches summed to the same effective batch: the same loss and gradient norm, step by step."""
    assert accumulated["applied"]["accumulation_steps"] == 4
    assert single["applied"]["accumulation_steps"] == 1
    rtol = HALF_RTOL.get(precision, LOSS_RTOL)
    same_losses(accumulated, single, rtol=rtol, atol=max(LOSS_ATOL, rtol / 10))
    norms = [torch.tensor([float(v) for v in r["grad_norm"]]) for r in (accumulated, single)]
    torch.testing.assert_close(norms[0], norms[1], rtol=max(rtol, 1e-3), atol=1e-4)
