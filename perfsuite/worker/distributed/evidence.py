"""What one rank held and did after its steps, read off the live objects (for the claims)."""

from __future__ import annotations

import hashlib
from typing import Any

import torch


def _local(param: torch.Tensor) -> torch.Tensor:
    """The bytes this rank holds of ``param``: its DTensor shard, its ZeRO-3 partition, or all of it."""
    from torch.distributed.tensor import DTensor

    if isinstance(param, DTensor):
        return param.to_local()
    shard = getattr(param, "ds_tensor", None)
    if isinstance(shard, torch.Tensor) and param.numel() == 0:
        return shard
    return param


def _global_numel(param: torch.Tensor) -> int:
    return int(getattr(param, "ds_numel", 0) or param.numel())


def parameter_digest(params: list[torch.Tensor]) -> str:
    """SHA-256 of the bytes of ``params`` in order: equal on two ranks exactly when they hold the same weights."""
    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def rank_evidence(engine: Any) -> dict[str, Any]:
    """The process group, the wrappers, and what this rank holds of the parameters (``engine``: the loop's)."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from perfsuite.worker.optimizers import state_bytes

    params = list(engine.model.parameters())
    local = [_local(p) for p in params]
    dtensors = [p for p in params if isinstance(p, DTensor)]
    initialized = dist.is_available() and dist.is_initialized()
    return {
        "rank": dist.get_rank() if initialized else 0,
        "world_size": dist.get_world_size() if initialized else 1,
        "backend": dist.get_backend() if initialized else None,
        "accelerate_distributed_type": str(engine.accelerator.distributed_type).rsplit(".", 1)[-1],
        "accelerate_processes": int(engine.accelerator.num_processes),
        "model_class": type(engine.model).__name__,
        "dtensor_parameters": len(dtensors),
        "parameters": len(params),
        "placements": sorted({str(tuple(p.placements)) for p in dtensors}),
        "parameter_numel": sum(_global_numel(p) for p in params),
        "local_parameter_numel": sum(int(t.numel()) for t in local),
        "local_parameter_bytes": sum(int(t.numel() * t.element_size()) for t in local),
        "parameter_digest": parameter_digest(local),
        "optimizer_state_bytes": state_bytes(engine.inner_optimizer),
    }
