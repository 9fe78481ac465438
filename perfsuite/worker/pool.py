"""A machine's GPUs handed to cases: a case on N ranks gets N GPUs, single-GPU cases run side by side.

Why perfsuite's own pool and not a pytest-xdist worker per GPU: xdist can only pin each
worker to fixed GPUs, never hand N of them to the one case that needs N, and
pytest-benchmark switches itself off under xdist, which ``--benchmark-compare`` needs.
perfsuite already runs every case in a worker process of its own, so the pool only has
to choose the worker's ``CUDA_VISIBLE_DEVICES`` (the torchtitan integration tests'
pattern). A GPU is held through a lock file (``flock``), so threads of one run, two
pytest sessions and a ``perfsuite run`` beside the nightly all share one machine safely,
and a crashed holder's lock goes with its process. No torch: the GPU count comes from the
caller, or ``PERFSUITE_GPUS`` (a count or a list of ids, how tests fake a GPU machine).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, TypeVar

from perfsuite.core.record import CaseRecord

T = TypeVar("T")


def parse_gpus(value: str, available: Sequence[str]) -> list[str]:
    """``all``, a count (``2``: the first two) or ids (``0,3``) → the GPU ids to use."""
    value = value.strip()
    if value == "all":
        return list(available)
    if value.isdigit():
        count = int(value)
        if count == 0:
            raise ValueError("0 GPUs asked for: a count is 1 or more (`all` for every visible GPU)")
        if count > len(available):
            raise ValueError(f"{count} GPUs asked for; {len(available)} visible ({', '.join(available) or 'none'})")
        return list(available[:count])
    ids = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [i for i in ids if i not in available]
    if unknown or not ids:
        raise ValueError(f"unknown GPU id(s) {', '.join(unknown) or repr(value)}; visible: {', '.join(available)}")
    return ids


def visible_gpus(count: Callable[[], int], env: Mapping[str, str] = os.environ) -> list[str]:
    """The GPU ids this process may use: ``PERFSUITE_GPUS`` (a count or ids: a faked machine),
    else ``CUDA_VISIBLE_DEVICES``, else ``0 .. count()-1``."""
    faked = env.get("PERFSUITE_GPUS")
    if faked:
        return [str(i) for i in range(int(faked))] if faked.isdigit() else faked.split(",")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip()]
    return [str(i) for i in range(count())]


class GPUPool:
    """``acquire(n)`` holds n free GPUs (all or none, so two cases never deadlock) until released."""

    def __init__(self, gpus: Sequence[str], *, lock_dir: Path | None = None, poll_s: float = 0.2) -> None:
        if not gpus:
            raise ValueError("a GPU pool needs at least one GPU")
        self.gpus = list(gpus)
        self.lock_dir = lock_dir or Path(tempfile.gettempdir()) / f"perfsuite-gpus-{os.getuid()}"
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.poll_s = poll_s

    def _lock_file(self, gpu: str) -> Path:
        return self.lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock"

    def _try(self, count: int) -> list[tuple[str, IO[str]]]:
        held: list[tuple[str, IO[str]]] = []
        for gpu in self.gpus:
            handle: IO[str] = open(self._lock_file(gpu), "a")  # noqa: SIM115 (held until release)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            held.append((gpu, handle))
            if len(held) == count:
                return held
        for _, handle in held:  # not enough free: give back what was taken
            handle.close()
        return []

    @contextlib.contextmanager
    def acquire(self, count: int, stop: threading.Event | None = None) -> Iterator[list[str]]:
        """Wait for ``count`` free GPUs and hold them for the ``with`` block; yields their ids.
        Once ``stop`` is set, a wait ends with :class:`CancelledError` instead."""
        if not 1 <= count <= len(self.gpus):
            raise ValueError(f"{count} GPUs asked for; the pool has {len(self.gpus)} ({', '.join(self.gpus)})")
        stop = stop or threading.Event()  # one never set: wait as long as it takes
        while not (held := self._try(count)):
            if stop.wait(self.poll_s):
                raise CancelledError("the run was stopped while this case waited for its GPUs")
        try:
            yield [gpu for gpu, _ in held]
        finally:
            for _, handle in held:
                handle.close()  # closing releases the flock


def gpu_env(ids: Iterable[str]) -> dict[str, str]:
    """The worker's environment for ``ids``: its ranks see exactly these GPUs, numbered as nvidia-smi does."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(ids), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


class PoolRunner:
    """Runs cases on a :class:`GPUPool`, as many at once as it has GPUs.

    ``submit(world_size, fn)`` calls ``fn(env)`` in a thread once ``world_size`` GPUs are
    held, ``env`` being :func:`gpu_env` of them; cases needing more GPUs should be submitted
    first (a waiting wide case is not starved by narrow ones that start before it). After
    ``close(cancel=True)`` (an interrupted run) no case starts: not one still queued, and not
    one whose thread was waiting for GPUs that the stopped cases then free.
    """

    def __init__(self, pool: GPUPool) -> None:
        self.pool = pool
        self._executor = ThreadPoolExecutor(max_workers=len(pool.gpus), thread_name_prefix="perfsuite-gpu")
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self._stopped = threading.Event()

    def submit(self, world_size: int, fn: Callable[[dict[str, str]], T]) -> Future[T]:
        def run() -> T:
            with self.pool.acquire(max(1, world_size), self._stopped) as ids:
                if self._stopped.is_set():  # stopped as the GPUs came free
                    raise CancelledError("the run was stopped before this case started")
                with self._lock:
                    self.in_flight += 1
                    self.most_in_flight = max(self.most_in_flight, self.in_flight)
                try:
                    return fn(gpu_env(ids))
                finally:
                    with self._lock:
                        self.in_flight -= 1

        return self._executor.submit(run)

    def close(self, *, cancel: bool = False) -> None:
        if cancel:
            self._stopped.set()
        self._executor.shutdown(wait=not cancel, cancel_futures=cancel)


def with_gpus(record: CaseRecord, env: Mapping[str, str], pool: GPUPool) -> CaseRecord:
    """``record`` noting the GPUs its case ran on and the pool it shared (timings taken side by side)."""
    return record.updated(gpus=tuple(env["CUDA_VISIBLE_DEVICES"].split(",")), gpu_pool=tuple(pool.gpus))


def machine_gpus(option: str) -> list[str]:
    """The GPUs ``option`` (``--gpus`` / ``--perfsuite-gpus``: all, a count or ids) picks of this machine's;
    a ``ValueError`` says what is wrong with it."""
    from perfsuite.worker.device import cuda_device_count

    return parse_gpus(option, visible_gpus(cuda_device_count))


def too_wide(specs: Iterable[Any], gpus: Sequence[str]) -> str | None:
    """Why some of ``specs`` cannot run on the GPUs selected (``gpus``): a case on more ranks than
    there are; ``None`` where all can."""
    wide = [f"{spec.id} ({spec.world_size})" for spec in dict.fromkeys(specs) if spec.world_size > len(gpus)]
    if not wide:
        return None
    return f"{', '.join(wide)} need(s) more GPUs than the {len(gpus)} selected ({', '.join(gpus)})"


def submit_cases(
    runner: PoolRunner, pool: GPUPool, specs: Iterable[Any], run: Callable[[Any, dict[str, str]], CaseRecord]
) -> dict[Any, Future[CaseRecord]]:
    """Each case on the pool as ``run(spec, env)``, the widest first (a case on N ranks waits for N
    free GPUs, so it goes before single-GPU cases fill them); its record names the GPUs it held."""

    def on_gpus(spec: Any) -> Callable[[dict[str, str]], CaseRecord]:
        return lambda env: with_gpus(run(spec, env), env, pool)

    return {
        spec: runner.submit(spec.world_size, on_gpus(spec))
        for spec in sorted(dict.fromkeys(specs), key=lambda s: -int(s.world_size))
    }
