"""One case end to end, inside its worker: build, warm up, time, instrument, record.

Order of a case: build (:mod:`perfsuite.worker.build`), warm-up steps (loss kept, time
dropped), timed steps (the device's step timer only: nothing samples memory while they
run; on a CPU each is bracketed by the calibration workload, see
:mod:`perfsuite.worker.calibrate`), then an untimed profiling step under MemTracker
for the memory breakdown (every live tensor of the process counted) and FlopCounterMode for
FLOPs and the dtypes the matmuls ran in (not counted where this case was counted before on
the same stack: :mod:`perfsuite.worker.flop_cache`). The record's shape is
:class:`perfsuite.core.record.CaseRecord`'s, sent as JSON.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from perfsuite.core.record import RecordJson
from perfsuite.core.spec import CaseSpec, NonFiniteLoss
from perfsuite.core.stats import first_non_finite
from perfsuite.worker.build import Built, build, check_runnable
from perfsuite.worker.record import Timed, case_record

if TYPE_CHECKING:
    from collections.abc import Callable

    from perfsuite.worker.calibrate import Calibration
    from perfsuite.worker.cpu_threads import Contention
    from perfsuite.worker.reach import Watch


def run_case(spec: CaseSpec) -> RecordJson:
    """Build and run one case; returns its result record. Runs inside a worker.

    A multi-rank case launches its ranks from here (:mod:`perfsuite.worker.distributed.launch`),
    each running :func:`train` on its share of every global batch, and returns their
    records aggregated into one (:mod:`perfsuite.worker.distributed.aggregate`).
    """
    if spec.launches_ranks:
        from perfsuite.worker.distributed.launch import run_ranks

        check_runnable(spec)
        return run_ranks(spec, train)
    return train(spec)


def train(spec: CaseSpec, *, rank: int = 0, world_size: int = 1) -> RecordJson:
    """Train ``spec`` in this process and measure it: the whole case, or rank ``rank`` of a
    ``world_size``-rank one (whose process group is already up, see :mod:`perfsuite.worker.distributed`)."""
    import torch

    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    from perfsuite.worker import reach, teardown

    # Read (and taken out of the environment) before anything runs: no subprocess a case starts (a
    # compiler) inherits what may be a long request. Every rank reads it; rank 0's record is kept,
    # so it alone watches.
    asked = reach.asked()
    watch = asked if rank == 0 else None
    started = time.perf_counter()
    # perfsuite ab: what the build runs of the code that differs between the sides (an engine's or a
    # model's __init__). Taken off before the first step; the build's seconds include it.
    with watch.building() if watch is not None else contextlib.nullcontext():
        built = build(spec, rank=rank, world_size=world_size)
    built_at = time.perf_counter()
    # Inside a worker, a single-process case's engine is left to the worker's exit (nothing
    # measured depends on its teardown); a rank's process group is its launcher's to end. A
    # project's engine is always closed: its close() is part of the interface it was promised.
    defer = teardown.deferring() and world_size == 1 and spec.engine_spec is None
    closed: float | None = None
    try:
        timed = _steps(spec, built, watch)
    finally:
        if defer:
            teardown.keep(built.engine)
        else:
            closing = time.perf_counter()
            built.engine.close()
            closed = time.perf_counter() - closing
    timed.phases["build"] = built_at - started
    if closed is not None:
        timed.phases["close"] = closed
    return case_record(spec, built, timed, rank=rank, world_size=world_size)


def _calibrate(calibration: Calibration, contention: Contention | None) -> Callable[[], float]:
    """One run of the calibration workload, its waiting for a CPU counted where ``contention`` reads it."""
    if contention is None:
        return calibration.run_once
    return lambda: contention.calibrated(calibration.run_once)


def _steps(spec: CaseSpec, built: Built, watch: Watch | None) -> Timed:
    from perfsuite.worker import flop_cache, measure
    from perfsuite.worker.calibrate import Calibration
    from perfsuite.worker.cpu_threads import Contention, ThreadWindow
    from perfsuite.worker.duet import together
    from perfsuite.worker.engines.driven import Driven

    device = built.device
    where = f"{spec.engine_spec.declared_at}.class" if spec.engine_spec is not None else spec.engine
    # A step that returns a bare loss counts every position of its batch as a real token.
    engine = Driven(built.engine, device_type=device.type, tokens=built.token_positions, where=where)
    out = Timed()
    # Host seconds per phase, each read after waiting for the device (only ever after the
    # timed steps' timer has been read: nothing of this runs while steps are timed).
    mark = time.perf_counter()

    def phase(name: str) -> None:
        nonlocal mark
        device.synchronize()
        now = time.perf_counter()
        out.phases[name] = now - mark
        mark = now

    # Host-side drift cancels against a workload outside the stack under test; a GPU's
    # step time is its kernels', which a host workload says nothing about.
    calibration = None if device.is_accelerator or not spec.calibrate else Calibration()
    if watch is not None and _first_step_watched(spec):
        # perfsuite ab: what an engine runs as it starts (the Trainer makes its optimizer and
        # DataLoader in its first step); an unwatched warm-up step follows before anything is timed.
        engine.watch_next_step(watch.starting())
    warm_timer = device.timer()
    for _ in range(spec.warmup_steps):
        warm_timer.start()
        out.warm.append(engine.step())
        warm_timer.stop()
    out.warmup_times = warm_timer.elapsed()
    phase("warmup")
    # The calibration runs in the thread that runs the steps (the Trainer's own), so it
    # measures the core and the state the steps ran in.
    if calibration is not None:
        engine.in_training_thread(calibration.run_once)  # its own warm-up (page faults, BLAS buffers)
    together("timed")  # a duet (perfsuite ab): both sides start their timed steps at once
    mark = time.perf_counter()  # the wait for the other side is neither warm-up nor steps
    device.reset_peak_memory()
    threads = ThreadWindow()  # which threads ran while steps were timed (read at the two ends only)
    threads.start()
    # Read between the timed steps and the calibrations, never within one; a GPU's time is its kernels'.
    contention = None if device.is_accelerator else Contention()
    timer = device.timer()
    for _ in range(spec.steps):
        if calibration is not None:
            out.calibrations.append(engine.in_training_thread(_calibrate(calibration, contention)))
        started = contention.step_starts() if contention is not None else None
        timer.start()
        out.timed.append(engine.step())
        timer.stop()
        if contention is not None:
            contention.step_ended(started)
    if calibration is not None:
        out.calibrations.append(engine.in_training_thread(_calibrate(calibration, contention)))
    out.step_times = timer.elapsed()
    out.threads = threads.stop()
    if out.threads is not None and contention is not None:
        out.threads["contention"] = contention.shares()
    out.allocator_peaks = device.peak_memory()
    phase("timed")
    losses = [float(o.loss) for o in out.warm + out.timed]
    bad = first_non_finite(losses)
    if bad is not None:
        raise NonFiniteLoss(f"loss is {losses[bad]} at optimizer step {bad} (of 0-{len(losses) - 1})")
    out.micro_batches = engine.micro_batches(len(losses))
    if watch is not None:  # perfsuite ab: what the profile's step runs of the code that differs between its sides
        watch.blind = _blind_spots(spec, device.type, first_watched=watch.first_step)
        engine.watch_next_step(watch.watching())  # the memory profile's step, or the FLOP count's
    if spec.profile:
        # The FLOPs are counted in the memory profile's step, whose peak that leaves as it is (no
        # module hooks: measure.StepCounts); counting in a warm-up step instead moved two
        # tiny-llama cases' losses by 1e-6. A cached count skips the counting.
        key = _flop_key(spec, built)
        known = flop_cache.cached(key)
        counts = measure.StepCounts()
        out.breakdown = measure.memory_breakdown(engine, counts=counts if known is None else None)
        phase("memory_profile")
    # Read before a FLOP step of its own: the evidence (batches seen, steps logged) is then the
    # same whichever step counted the FLOPs.
    out.evidence = engine.evidence()
    if spec.profile:
        if known is not None:
            out.flops = known
        else:
            # Where MemTracker could not follow the step, its counts are partial: a step of their own.
            found = measure.count_flops(engine) if "error" in out.breakdown else counts.result()
            out.flops = flop_cache.counted(key, found)
        phase("flop_count")
    if watch is not None:
        out.ran = watch.ran()  # never raises: what it cannot match is left out, said by its record
    return out


def _flop_key(spec: CaseSpec, built: Built) -> str | None:
    from perfsuite.worker import flop_cache

    if not flop_cache.enabled(spec):
        return None
    device = built.device
    return flop_cache.cache_key(
        spec, initial_weights=built.initial_weights, device_type=device.type, device_name=device.name
    )


def _blind_spots(spec: CaseSpec, device_type: str, *, first_watched: bool) -> tuple[str, ...]:
    """What a watch of this case's steps cannot see (:mod:`perfsuite.worker.reach`); ``first_watched``:
    whether the first step ran under it (an engine of the project's may ignore what a step is given)."""
    spots = ["compiled"] if spec.strategy_spec.compile else []
    if not first_watched:
        spots.append("first step")
    return (*spots, *(["backward on the GPU"] if device_type == "cuda" else []))


def _first_step_watched(spec: CaseSpec) -> bool:
    """Whether ``perfsuite ab``'s watch covers the case's first step: only where another warm-up step
    follows it before the timed steps, and not where torch.compile compiles in it (its every call
    watched would stretch the compilation)."""
    return spec.warmup_steps >= 2 and not spec.strategy_spec.compile
