"""Case functions that misbehave, for the worker tests. Module level so the forkserver can import them."""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from perfsuite.core.spec import CaseSkipped, CaseSpec


def crash(spec: CaseSpec) -> dict[str, Any]:
    os.abort()  # SIGABRT, as a native crash in a CUDA or DeepSpeed kernel would


def hang(spec: CaseSpec) -> dict[str, Any]:
    time.sleep(3600)
    raise AssertionError("unreachable")


def out_of_memory(spec: CaseSpec) -> dict[str, Any]:
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def skip(spec: CaseSpec) -> dict[str, Any]:
    raise CaseSkipped("needs an H100")


def ok(spec: CaseSpec) -> dict[str, Any]:
    return {"model": spec.model, "strategy": spec.strategy, "status": "ok", "error": None, "pid": os.getpid()}


def warns(spec: CaseSpec) -> dict[str, Any]:
    """A case that prints and raises the same warning twice: what its worker keeps in its record."""
    print("a note from the case")
    for _ in range(2):
        warnings.warn("a case's warning", UserWarning, stacklevel=1)
    return ok(spec)


def chatty(spec: CaseSpec) -> dict[str, Any]:
    """A case that prints more than its record keeps: the end is kept, and the record says it was cut."""
    for i in range(3000):
        print(f"line {i:04d} of a chatty case")
    return ok(spec)


def wrong_record(spec: CaseSpec) -> dict[str, Any]:
    """An engine's evidence of the wrong type: the case's own fault, not the run's."""
    return {**ok(spec), "applied": None}


def gpu_holder(spec: CaseSpec) -> dict[str, Any]:
    """A case that reports the GPUs its worker was given and when it held them."""
    start = time.monotonic()
    time.sleep(0.4)
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "status": "ok",
        "error": None,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "held": [start, time.monotonic()],
    }


def calibration_blas_spinning(spec: CaseSpec) -> dict[str, Any]:
    """The case with its calibration's BLAS given two threads, as before the harness fix:
    numpy's OpenBLAS threads spin on through the step after each calibration."""
    from threadpoolctl import threadpool_limits

    import perfsuite.worker.calibrate

    init = perfsuite.worker.calibrate.Calibration.__init__

    def two_blas_threads(self: perfsuite.worker.calibrate.Calibration) -> None:
        init(self)
        threadpool_limits(limits=2, user_api="blas")

    perfsuite.worker.calibrate.Calibration.__init__ = two_blas_threads  # type: ignore[method-assign]
    from perfsuite.worker.run import train

    return dict(train(spec))


def imported_at_start(spec: CaseSpec) -> dict[str, Any]:
    """Which optional packages the worker had before its case imported anything."""
    import sys

    optional = ("bitsandbytes", "peft", "deepspeed", "transformers.trainer", "transformers.models.bert.modeling_bert")
    cpuinfo, ops = sys.modules.get("cpuinfo"), sys.modules.get("deepspeed.ops")
    asked = getattr(getattr(cpuinfo, "get_cpu_info", None), "cache_info", None)
    return {
        "status": "ok",
        "imported": sorted(n for n in optional if n in sys.modules),
        "cpu_info_known": asked is not None and asked().currsize == 1,
        "ops_probed": ops is not None and "__compatible_ops__" in vars(ops),
        "ops_loaded": sorted(_deepspeed_ops_loaded()),
    }


def _deepspeed_ops_loaded() -> dict[str, Any]:
    """The DeepSpeed ops this process has loaded (DeepSpeed keeps them per process), without importing DeepSpeed."""
    import sys

    builder = sys.modules.get("deepspeed.ops.op_builder.builder")
    return getattr(getattr(builder, "OpBuilder", None), "_loaded_ops", {})


def start_method(spec: CaseSpec) -> dict[str, Any]:
    """How the case's own code would start a process, and how long a DataLoader's first batch takes."""
    import multiprocessing
    import time

    import torch

    start = time.perf_counter()
    data = torch.utils.data.TensorDataset(torch.arange(4))
    next(iter(torch.utils.data.DataLoader(data, batch_size=2, num_workers=1)))
    first_batch_s = time.perf_counter() - start
    return {"status": "ok", "start_method": multiprocessing.get_start_method(), "first_batch_s": first_batch_s}


def live_tensors(spec: CaseSpec) -> dict[str, Any]:
    """What the memory profile's search for live tensors finds in a worker, with the forkserver's
    objects frozen (as a worker has them) and with them unfrozen and listed like the worker's own."""
    import gc
    import sys

    from perfsuite.worker import frozen, measure

    def found() -> list[str]:
        return sorted(str(measure._storage_key(t)) for t in measure.other_live_tensors([]))

    listed = len(gc.get_objects())
    forkserver_tensors = len(frozen.tensors())
    frozen_walk = found()
    gc.unfreeze()
    del sys.modules["perfsuite.worker.frozen"]  # the search as it was: every object listed
    return {
        "status": "ok",
        "listed": listed,
        "all": len(gc.get_objects()),
        "forkserver_tensors": forkserver_tensors,
        "frozen_walk": frozen_walk,
        "full_walk": found(),
    }
