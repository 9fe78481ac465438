"""What both engines share: the step's report, DeepSpeed's single-process setup, and the
evidence helpers that read what a run really did from the objects it trained with."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from perfsuite.core.strategies import Strategy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deepspeed_config(
    strategy: Strategy, *, micro_batch_size: int, lr: float, max_grad_norm: float, hidden_size: int
) -> dict[str, Any]:
    """The DeepSpeed config of a ZeRO strategy (CPU Adam when offloading, else torch AdamW, see
    :func:`deepspeed_builds_optimizer`).

    Bucket sizes follow the HF Trainer's ``"auto"`` values, which scale with the model:
    DeepSpeed's bare defaults allocate a 500M-element (2 GB) gradient bucket and keep
    every parameter under 100k elements whole, i.e. all of a small model.
    """
    zero: dict[str, Any] = {"stage": strategy.zero_stage, "reduce_bucket_size": hidden_size * hidden_size}
    if strategy.zero_stage == 3:
        zero["stage3_prefetch_bucket_size"] = int(0.9 * hidden_size * hidden_size)
        zero["stage3_param_persistence_threshold"] = 10 * hidden_size
    if strategy.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    if strategy.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": strategy.grad_accum_steps,
        "gradient_clipping": max_grad_norm,
        "zero_optimization": zero,
        "fp16": {"enabled": strategy.precision == "fp16"},
        "bf16": {"enabled": strategy.precision == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if deepspeed_builds_optimizer(strategy):
        config["optimizer"] = {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0}}
    return config


def deepspeed_builds_optimizer(strategy: Strategy) -> bool:
    """Whether DeepSpeed builds the optimizer itself (its CPU Adam, when offloading) rather than
    wrapping the torch AdamW the engine built (ZeRO without offload: the same update as
    ``vanilla``, and no fused-Adam op to JIT-compile on a CPU)."""
    return strategy.offload_optimizer


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


def deepspeed_setup(
    strategy: Strategy, model: Any, *, on_accelerator: bool, micro_batch_size: int, lr: float, max_grad_norm: float
) -> dict[str, Any] | None:
    """For a ZeRO strategy, a world of one's environment and the DeepSpeed config; else ``None``."""
    if not strategy.uses_deepspeed:
        return None
    single_process_group_env(on_accelerator)
    return deepspeed_config(
        strategy,
        micro_batch_size=micro_batch_size,
        lr=lr,
        max_grad_norm=max_grad_norm,
        hidden_size=int(model.config.hidden_size),
    )


def single_process_group_env(device_is_accelerator: bool) -> None:
    """The environment of a world of one, which DeepSpeed still wants (gloo on CPU)."""
    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if not device_is_accelerator:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    deepspeed_asks_once()
    skip_shm_comm_build()


def deepspeed_asks_once(*, now: bool = False) -> None:
    """What DeepSpeed asks about this machine, asked once per process (``now``: here, for the
    workers a forkserver forks). Loading its CPU Adam asks py-cpuinfo for the CPU's flags three
    times, each a cpuid run in a subprocess (0.15 s on a 2-core CPU), and its first look at its
    ops' compatibility compiles test programs (0.1 s); neither answer changes while the machine
    runs. Where either is not there to ask (no py-cpuinfo, a DeepSpeed without the lazy probe),
    DeepSpeed asks as it does."""
    try:
        import cpuinfo
    except ImportError:  # DeepSpeed falls back to lscpu
        return
    if not hasattr(cpuinfo.get_cpu_info, "cache_info"):
        cpuinfo.get_cpu_info = functools.cache(cpuinfo.get_cpu_info)
    if now:
        cpuinfo.get_cpu_info()
        with contextlib.suppress(ImportError, AttributeError):
            import deepspeed.ops

            deepspeed.ops.__compatible_ops__  # noqa: B018  # probed on first access, kept in the module


def skip_shm_comm_build() -> None:
    # On CPU, deepspeed.comm JIT-compiles a shared-memory allreduce op at init (~1 min on
    # two cores) that a world of one process never uses. The switch is internal, hence
    # the guard: without it the op is merely built.
    try:
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    except (ImportError, AttributeError, TypeError):
        pass


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
