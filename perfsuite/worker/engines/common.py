"""What perfsuite's own engines share: the case they are built from (:class:`OwnCase`), checkpointing,
and the evidence helpers that read what a run really did from the objects it trained with
(DeepSpeed's setup and state: :mod:`~perfsuite.worker.engines.deepspeed`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from perfsuite.worker.engines.interface import EngineCase

if TYPE_CHECKING:
    from perfsuite.core.models import ModelSpec
    from perfsuite.worker.data import TokenDataset
    from perfsuite.worker.device import Device


def _batched_by_the_engine(**kwargs: Any) -> Mapping[str, torch.Tensor]:
    raise NotImplementedError("perfsuite's own engines batch OwnCase.dataset themselves (a DataLoader, the Trainer's)")


@dataclass(frozen=True, kw_only=True)
class OwnCase(EngineCase):
    """What perfsuite's own engines are built from, as ``Class(case)``: the :class:`EngineCase` a
    project's engine gets, and what training a registered (transformers) model on perfsuite's data
    takes beyond it. :func:`perfsuite.worker.build.build` makes one for every case of its engines."""

    hardware: Device
    """perfsuite's interface to :attr:`device`: its precisions, timers and pinned memory."""
    dataset: TokenDataset
    """The case's samples; each engine batches them its own way (the loop's DataLoader, the Trainer's)."""
    model_spec: ModelSpec
    """The registered model: its task and target length."""
    tokenizer: str | None
    """The tokenizer's directory for a case on real text, else ``None`` (generated tokens)."""
    deepspeed: dict[str, Any] | None
    """The DeepSpeed config of a ZeRO strategy (:func:`~perfsuite.worker.engines.deepspeed.deepspeed_setup`)."""
    pin_memory: bool
    """Whether batches are pinned (the strategy asks, and the device can)."""
    rank: int = 0
    """This process's rank, which takes its share of every batch."""
    world_size: int = 1
    """How many ranks train the case."""
    make_batch: Callable[..., Mapping[str, torch.Tensor]] = field(default=_batched_by_the_engine, repr=False)


def enable_checkpointing(model: Any, *, offload: bool = False) -> None:
    # transformers 5 renamed gradient_checkpointing_enable to activation_checkpointing_enable (the old
    # name warns where both exist); 4.x and 5.17 have only the old one, which took offload= in 5.17.
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)
    key = "activation_checkpointing_kwargs"
    if enable is None:
        enable, key = model.gradient_checkpointing_enable, "gradient_checkpointing_kwargs"
    if not offload:
        enable(**{key: kwargs})
        return
    import inspect

    if "offload" not in inspect.signature(enable).parameters:
        from perfsuite.core.spec import CaseSkipped

        raise CaseSkipped("activation offloading needs transformers >= 5.17 (checkpointing_enable(offload=True))")
    # The saved checkpoint inputs go to pinned host memory (torch.autograd.graph.save_on_cpu).
    enable(**{key: kwargs}, offload=True)


def checkpointing_enabled(model: Any) -> bool:
    # transformers 5 renamed is_gradient_checkpointing; 4.x only has the old name.
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def group_flag(optimizer: torch.optim.Optimizer, key: str) -> Any:
    values = {group.get(key) for group in optimizer.param_groups}
    return values.pop() if len(values) == 1 else sorted(values, key=str)


def galore_evidence(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Which parameters GaLore projects, to what rank, and what its state holds."""
    projected = [p for group in optimizer.param_groups if "rank" in group for p in group["params"]]
    projectors = [optimizer.state[p]["projector"] for p in projected if "projector" in optimizer.state[p]]
    moments = [optimizer.state[p]["exp_avg"] for p in projected if "exp_avg" in optimizer.state[p]]
    projected_state = [
        v for p in projected for v in optimizer.state[p].values() if isinstance(v, torch.Tensor) and v.dim() > 0
    ]
    return {
        "projected_parameters": len(projected),
        "projected_numel": sum(p.numel() for p in projected),
        "projected_moment_bytes": sum(v.numel() * v.element_size() for v in projected_state),
        "projectors": len(projectors),
        "rank": next((g["rank"] for g in optimizer.param_groups if "rank" in g), None),
        "moment_shapes_vs_weights": [[list(m.shape), list(p.shape)] for m, p in zip(moments, projected, strict=False)][
            :4
        ],
        "projector_bytes": sum(
            int(pr.ortho_matrix.numel() * pr.ortho_matrix.element_size())
            for pr in projectors
            if isinstance(getattr(pr, "ortho_matrix", None), torch.Tensor)
        ),
    }


def dynamo_evidence(model: Any) -> dict[str, Any]:
    """What torch.compile did: the wrapper, and dynamo's process-wide counters (one case per process)."""
    from torch._dynamo.utils import counters

    frames = dict(counters["frames"])
    stats = dict(counters["stats"])
    return {
        "wrapper": type(model).__name__,
        "compiled_module": type(getattr(model, "_orig_mod", model)).__name__,
        "frames_ok": int(frames.get("ok", 0)),
        "frames_total": int(frames.get("total", 0)),
        "unique_graphs": int(stats.get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        # Past torch._dynamo.config.recompile_limit a frame silently runs eager from then on.
        "recompile_limit_hits": int(
            sum(n for reason, n in counters["unimplemented"].items() if "recompile limit" in reason.lower())
        ),
    }
