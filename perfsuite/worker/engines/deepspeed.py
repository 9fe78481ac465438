"""DeepSpeed in one place: a ZeRO strategy's configuration, the world of one process it still wants,
what it asks about the machine (once), and where its engine keeps parameters and optimizer state.

Both engines hand :func:`deepspeed_setup`'s config to accelerate (the loop) or the Trainer, read
:func:`deepspeed_state` as their evidence and end with :func:`end_process_group`; the forkserver asks what
DeepSpeed asks about the machine, and loads its CPU Adam, before it forks (:func:`deepspeed_asks_once`,
:func:`load_cpu_adam`), and a rank launcher
skips the op a world of one never uses (:func:`skip_shm_comm_build`). DeepSpeed itself is imported
only inside the functions that use it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Callable
from pathlib import Path
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


def load_cpu_adam() -> None:
    """Load DeepSpeed's CPU Adam op, compiling it first where this machine has not (a JIT build, 30 s
    on a 2-core CPU). The forkserver of a session with an offload case calls it, so that the build
    never runs beside a case's timed steps, and every worker forked after it has the op loaded
    (DeepSpeed keeps a process's loaded ops; 0.4 s a worker otherwise). Where it cannot be built, each
    offload case fails on its own, saying why, as it would without this.

    Left to the cases, as before, where torch's build lock is there: a build under way in another
    process, or one killed half-way, whose lock torch would wait on for ever. A case waits within
    its own time limit, and says so in its record; a forkserver would hang every case behind it."""
    try:
        from deepspeed.ops.op_builder import CPUAdamBuilder
        from torch.utils.cpp_extension import _get_build_directory

        builder = CPUAdamBuilder()
        if (Path(_get_build_directory(builder.name, False)) / "lock").exists():
            return
        builder.load()
    except Exception:  # noqa: BLE001, S110  # the case's own load raises it again, in its record
        pass


def skip_shm_comm_build() -> None:
    # On CPU, deepspeed.comm JIT-compiles a shared-memory allreduce op at init (~1 min on
    # two cores) that a world of one process never uses. The switch is internal, hence
    # the guard: without it the op is merely built.
    try:
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    except (ImportError, AttributeError, TypeError):
        pass


def _devices(tensors: Any) -> list[str]:
    return sorted({str(t.device) for t in tensors if isinstance(t, torch.Tensor)})


def deepspeed_state(engine: Any, optimizer: Any) -> dict[str, Any]:
    """Where a DeepSpeed engine keeps parameters and optimizer state, read off the live objects.

    ZeRO-3 partitions parameters: outside a forward each one is an empty placeholder
    (``numel() == 0``) whose shard (``ds_tensor``) lives on the offload device. The
    ZeRO optimizer wraps the optimizer doing the update (DeepSpeedCPUAdam when
    offloading) and keeps the fp32 master partitions it updates.
    """
    zero_opt = optimizer.optimizer  # accelerate's wrapper -> DeepSpeed's ZeRO optimizer
    basic = getattr(zero_opt, "optimizer", None)
    params = list(engine.parameters())
    managed = [p for p in params if hasattr(p, "ds_numel")]
    # ZeRO-3 keeps parameters under stage3_param_persistence_threshold whole; the rest are
    # empty placeholders outside a forward, their shards (ds_tensor) on the offload device.
    partitioned = [p for p in managed if p.numel() == 0]
    masters = getattr(zero_opt, "single_partition_of_fp32_groups", None)  # ZeRO-1/2
    if masters is None:
        masters = getattr(zero_opt, "fp32_partitioned_groups_flat", None) or []  # ZeRO-3
    states = [v for st in getattr(basic, "state", {}).values() for v in st.values() if isinstance(v, torch.Tensor)]
    total = sum(int(p.ds_numel) for p in managed)
    return {
        "engine_class": type(engine).__name__,
        "zero_stage": int(engine.zero_optimization_stage()),
        "data_parallel_world_size": int(getattr(engine, "dp_world_size", 1)),
        "zero_optimizer_class": type(zero_opt).__name__,
        "optimizer_class": type(basic).__name__ if basic is not None else None,
        "partitioned_parameters": len(partitioned),
        "partitioned_fraction": sum(int(p.ds_numel) for p in partitioned) / total if total else 0.0,
        "parameter_shard_devices": _devices(p.ds_tensor for p in managed if getattr(p, "ds_tensor", None) is not None),
        "parameter_devices": _devices(p for p in params if p.numel() > 0),
        "master_weight_devices": _devices(masters),
        "optimizer_state_devices": _devices(states),
        "optimizer_state_bytes": sum(t.numel() * t.element_size() for t in states),
    }


def zero_optimizer(optimizer: Any) -> Any | None:
    """DeepSpeed's optimizer that keeps gradients in partitions of its own (ZeRO's, and the bf16
    optimizer ZeRO-1 becomes under bf16) behind accelerate's or the Trainer's wrapper; ``None`` for any other."""
    inner = getattr(optimizer, "optimizer", None)
    for candidate in (optimizer, inner):
        module = type(candidate).__module__
        if candidate is not None and module.startswith(("deepspeed.runtime.zero", "deepspeed.runtime.bf16_optimizer")):
            return candidate
    return None


def before_zero_update(zero: Any, read: Callable[[], None]) -> Callable[[], None]:
    """Call ``read`` each time ``zero`` (a ZeRO optimizer) is about to update: at the accumulation
    boundary, with every micro-batch's gradient reduced into its partitions and not yet unscaled or
    clipped, the one moment :func:`full_gradient` can read them. Returns the undo."""
    own = vars(zero).get("step")  # an instance attribute of its own, put back as it was
    step = zero.step

    def reading_first(*args: Any, **kwargs: Any) -> Any:
        read()
        return step(*args, **kwargs)

    def undo() -> None:
        if own is None:
            vars(zero).pop("step", None)
        else:
            zero.step = own

    zero.step = reading_first
    return undo


def full_gradient(param: torch.Tensor) -> torch.Tensor | None:
    """The whole gradient the update will use for ``param`` under ZeRO (its partitions assembled:
    DeepSpeed's ``safe_get_full_grad``), read inside :func:`before_zero_update`."""
    from deepspeed.utils import safe_get_full_grad

    return safe_get_full_grad(param)  # type: ignore[no-any-return]


def end_process_group() -> None:
    """End the process group DeepSpeed started: its destroy also drops its cached groups (torch's alone
    leaves them stale). Called after accelerate's ``free_memory()``, which still needs the group."""
    import deepspeed.comm

    deepspeed.comm.destroy_process_group()
