"""Untimed instrumented steps: the memory breakdown, FLOPs, matmul dtypes.

Each runs a real optimizer step after the timed ones: instrumentation intercepts
every op, so nothing here may overlap a timed step. The FLOPs, matmul dtypes and attention
kernels are counted in the memory profile's step (:class:`StepCounts`), or in a step of their
own where there is no such step.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perfsuite.worker.tensor_objects import tensors_among

if TYPE_CHECKING:
    from perfsuite.worker.engines.driven import Driven

_TOTAL = "Total"  # MemTracker's key of a device's total bytes

# MemTracker's reference types -> the report's category names.
_CATEGORIES = {
    "Parameter": "parameters",
    "Gradient": "gradients",
    "Optstate": "optimizer_state",
    "Activation": "activations",
    "Temp": "temporaries",
    "Buffer": "buffers",
    "Other": "other",
}

_MATMULS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention",
    "matmul",
    "linear",
}


def _attention_kind(op: str) -> str | None:
    """What an aten op says about the attention that ran.

    ``sdpa``: a fused scaled-dot-product kernel (``sdpa_backward`` its gradient);
    ``sdpa_math``: ``_safe_softmax``, which only SDPA's math fallback calls (torch >= 2.5:
    the CPU path when dropout or a mask rules the fused kernels out); ``softmax``: a plain
    softmax, what eager attention computes its probabilities with.
    """
    if "scaled_dot_product" in op:
        return "sdpa_backward" if "backward" in op else "sdpa"
    if op == "_safe_softmax":
        return "sdpa_math"
    if op in ("_softmax", "softmax"):
        return "softmax"
    return None


class MatmulDtypes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the output dtypes of matmul and attention kernels (proof of what autocast did),
    and the attention kernels that ran (proof of which attention implementation did)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts: Counter[str] = Counter()
        self.attention: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        kind = _attention_kind(func.overloadpacket.__name__)
        if kind is not None:
            self.attention[kind] += 1
        if func.overloadpacket.__name__ in _MATMULS:
            first = out[0] if isinstance(out, (tuple, list)) else out
            if isinstance(first, torch.Tensor):
                self.counts[str(first.dtype).removeprefix("torch.")] += 1
        return out


def _storage_key(t: torch.Tensor) -> tuple[str, int] | None:
    try:
        storage = t.untyped_storage()
        storage.data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, nested, DTensor and functional wrappers: no plain storage
        return None
    if storage.device.type == "meta" or storage.nbytes() == 0:
        return None
    return str(storage.device), storage.data_ptr()


def other_live_tensors(known: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """Every tensor alive in this process whose storage is not one of ``known``'s.

    The garbage collector tracks every tensor object, so this finds what a library's
    module-level cache, a leak in a global or a DataLoader's prefetched batches hold,
    however long ago it was allocated. (A tensor held only from C++, with no Python
    object, stays invisible; between steps torch holds none: the autograd graph is gone.)
    """
    seen = {key for t in known if (key := _storage_key(t)) is not None}
    found = []
    candidates = tensors_among(gc.get_objects())
    if "perfsuite.worker.frozen" in sys.modules:  # a worker: the forkserver's objects are frozen, unlisted
        from perfsuite.worker import frozen

        candidates += frozen.tensors()
    for obj in candidates:
        key = _storage_key(obj)
        if key is not None and key not in seen:
            seen.add(key)
            found.append(obj)
    return found


def _model_and_optimizer_tensors(trainer: Driven) -> list[torch.Tensor]:
    from torch.distributed.tensor import DTensor

    tensors: list[torch.Tensor] = [*trainer.model.parameters(), *trainer.model.buffers()]
    tensors += [p.grad for p in trainer.model.parameters() if p.grad is not None]
    for state in trainer.inner_optimizer.state.values():
        tensors += [v for v in state.values() if isinstance(v, torch.Tensor)]
    # A sharded (FSDP2) tensor's bytes are its local shard's.
    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def _followed(exc: Exception) -> str:
    """What stopped MemTracker, in the terms of a project's step where it is one's doing: its advice
    (``reset_mod_stats``) is what perfsuite does before each forward of ``model`` or each
    ``before_micro_batch`` call, which a step that calls the model's modules itself never reaches."""
    if "multiple iterative calls" in str(exc):
        return (
            "a module of the model ran again in one step with no forward of the model itself between, nor a "
            "before_micro_batch() call (perfsuite clears MemTracker's per-module figures at either): call the "
            "model, model(...), once per micro-batch, or take step(before_micro_batch=None, within=None) and call "
            "before_micro_batch() before each micro-batch (docs/engines.md)"
        )
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def frozen_parameters_take_no_grad_hooks() -> Iterator[None]:
    """Let MemTracker follow a model with frozen parameters (LoRA, partial fine-tuning).

    MemTracker (torch 2.5 to at least 2.13) registers a gradient hook on every parameter
    of every module it enters, and torch refuses one on a tensor that does not require
    grad, so the step fails. A frozen parameter never receives a gradient, so such a
    hook could never fire: while this is active, registering one on a tensor that does
    not require grad returns a handle that does nothing. ``tests/test_measure.py``
    keeps the upstream bug visible as a strict expected failure.
    """
    from torch.utils.hooks import RemovableHandle

    originals = {name: getattr(torch.Tensor, name) for name in ("register_hook", "register_post_accumulate_grad_hook")}

    def guarded(original: Any) -> Any:
        def register(self: torch.Tensor, hook: Any) -> Any:
            if not self.requires_grad:
                return RemovableHandle(collections.OrderedDict())
            return original(self, hook)

        return register

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, guarded(original))
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def _process_peak_tracker(mem_tracker: type) -> Any:
    """A MemTracker that keeps the process-wide peak and not each module's.

    After every op, MemTracker walks every module it has seen to update the ones running
    (``_update_peak_stats``): about half of a tiny model's profiling step, and its per-module
    figures are not read here. The process-wide part is kept as MemTracker computes it, so
    the peak and its split are MemTracker's own (``tests/test_measure.py`` compares the two
    on real steps); its snapshots are copied as plain dicts instead of deep-copied. A torch
    whose MemTracker has no such method gets its own, unchanged.
    """

    class ProcessPeak(mem_tracker):  # type: ignore[misc]
        def get_tracker_snapshot(self, type: str = "current") -> dict[torch.device, dict[Any, int]]:
            # MemTracker deep-copies: its module hooks take one at each module's every entry
            # and exit. Device -> reference type -> bytes: a copy of each dict is a deep copy.
            snap = {"current": self._curr_mem_snap, "peak": self._peak_mem_snap}.get(type)
            if snap is None:
                return super().get_tracker_snapshot(type)  # type: ignore[no-any-return]  # its error
            return {dev: dict(dev_snap) for dev, dev_snap in snap.items()}

        def _update_peak_stats(self, peak_state: Any) -> None:
            for dev, dev_snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL]:
                    self._peak_mem[dev] = dev_snap[_TOTAL]
                    self._peak_mem_snap[dev] = dict(dev_snap)  # reference type -> bytes: a copy is a deep one

    return ProcessPeak() if hasattr(mem_tracker, "_update_peak_stats") else mem_tracker()


def memory_breakdown(
    trainer: Driven, *, module_peaks: bool = False, counts: StepCounts | None = None
) -> dict[str, Any]:
    """One step under MemTracker: the peak of live tensor bytes and its split by category.

    Every tensor alive in the worker counts, whenever it was allocated and whoever holds
    it: the model's and the optimizer's by category, everything else as ``other`` (see
    :func:`other_live_tensors`). On CPU, which has no allocator counter, this peak is the
    case's peak memory; on CUDA ``max_memory_allocated`` is, and this is its breakdown.
    The split is taken at the moment of the peak, so the categories add up to it.
    Returns ``{"error": ...}`` where the tracker cannot follow the step (e.g.
    DeepSpeed's own parameter management). ``module_peaks`` runs MemTracker as it comes,
    keeping each module's figures too: the same peak and split, slower, and
    ``forward_activations``, the activation bytes each module's forward left alive. ``counts`` counts the
    same step's FLOPs: they hold no tensor, so the peak and its split are the same to the byte
    (``tests/test_measure.py``); complete only where no error is returned.
    """
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except ImportError as exc:  # torch < 2.5
        return {"error": f"MemTracker is not available in torch {torch.__version__}: {exc}"}
    tracker = MemTracker() if module_peaks else _process_peak_tracker(MemTracker)
    try:
        tracker.track_external(trainer.model, trainer.inner_optimizer)
        # After the model and optimizer: a tensor passed here is filed as "other" even if
        # MemTracker already knew it, so only the rest is passed.
        held_elsewhere = other_live_tensors(_model_and_optimizer_tensors(trainer))
        tracker.track_external(*held_elsewhere)
        other_bytes = sum(t.untyped_storage().nbytes() for t in held_elsewhere)  # one tensor per storage
        del held_elsewhere  # MemTracker holds weak references; these must be freeable

        @contextlib.contextmanager
        def tracked() -> Iterator[None]:
            # Entered by the engine in the thread that runs the step (a dispatch mode is per thread).
            with frozen_parameters_take_no_grad_hooks(), tracker, warnings.catch_warnings():
                # ModTracker warns for every backward hook of a module freed in between; harmless.
                warnings.filterwarnings("ignore", message="Module is None", category=UserWarning)
                with counts.counting() if counts is not None else contextlib.nullcontext():
                    yield

        # MemTracker follows one forward per module; accumulation runs several, so clear
        # the per-module stats between micro-batches (the global peak is kept).
        trainer.step(before_micro_batch=tracker.reset_mod_stats, within=tracked())
        snapshot = tracker.get_tracker_snapshot("peak")
    except Exception as exc:  # report the gap, keep the case's other figures
        trainer.optimizer.zero_grad(set_to_none=True)  # drop a half-accumulated step's gradients
        return {"error": f"MemTracker could not follow this step: {_followed(exc)}"}
    device_type = trainer.device_type
    per_device = {str(dev): snap for dev, snap in snapshot.items()}
    snap = next((s for dev, s in snapshot.items() if torch.device(dev).type == device_type), None)
    if snap is None:
        return {"error": f"MemTracker saw no tensors on {device_type}", "per_device": per_device}
    categories = {name: int(snap.get(key, 0)) for key, name in _CATEGORIES.items()}
    found = {
        "peak_bytes": int(snap[_TOTAL]),
        "categories": categories,
        "per_device": per_device,
        "held_elsewhere_bytes": other_bytes,
    }
    if module_peaks:
        found["forward_activations"] = _forward_activations(tracker, device_type)
    return found


def _forward_activations(tracker: Any, device_type: str) -> dict[str, int]:
    """Per module, the activation bytes its forward left alive (after its forward less before it,
    summed over its calls; the last micro-batch's), from MemTracker's snapshots of each module."""
    from torch.distributed._tools.mem_tracker import _ModState

    found: dict[str, int] = {}
    for stats in tracker.memory_tracking.values():
        total = 0
        before_forward = stats.snapshots.get(_ModState.PRE_FW, ())
        pairs = zip(
            before_forward, stats.snapshots.get(_ModState.POST_FW, ()), strict=False
        )  # a forward that raised has no after
        for before, after in pairs:
            for dev, snap in after.items():
                if torch.device(dev).type == device_type:
                    total += int(snap.get("Activation", 0)) - int(before.get(dev, {}).get("Activation", 0))
        found[stats.mod_fqn] = found.get(stats.mod_fqn, 0) + total
    return found


class _ProcessTotal:
    """Stands in for FlopCounterMode's ModuleTracker: every op's FLOPs go to the process total
    (``Global``, which FlopCounterMode always counts), and no module is hooked. The tracker's
    hooks on each module's outputs kept a checkpointed step's activations alive (tiny-bert-grad_ckpt's
    peak 2.4 times); perfsuite reads only the total."""

    parents = frozenset({"Global"})

    def __enter__(self) -> _ProcessTotal:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class StepCounts:
    """A step's FLOPs (``FlopCounterMode``'s own formulas and total, forward and backward,
    recomputation included), the dtypes its matmuls ran in and the attention kernels that ran.
    Dispatch modes that keep no tensor: entered in the memory profile's step, they leave its
    peak as it is."""

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._flops = FlopCounterMode(display=False)
        self._flops.mod_tracker = _ProcessTotal()  # type: ignore[assignment]
        self._dtypes = MatmulDtypes()

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        with self._flops, self._dtypes:
            yield

    def result(self) -> dict[str, Any]:
        return {
            "flops_per_step": int(self._flops.get_total_flops()),
            "matmul_dtypes": dict(self._dtypes.counts),
            "attention_ops": dict(self._dtypes.attention),
        }


def count_flops(trainer: Driven) -> dict[str, Any]:
    """One step of its own under :class:`StepCounts` (where the memory profile's step did not count)."""
    counts = StepCounts()
    trainer.step(within=counts.counting())
    return counts.result()
