"""The session's runs: each case's records, made once and shared by every test that reads them
(the matrix test, the claims), started early on a GPU pool when there is one."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, as_completed, wait
from typing import Any

import pytest

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import DEFAULTS, CaseSpec


class RunCache:
    """Records per case for one pytest session; runs go through the ``pytest_perfsuite_run_case`` hook."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: dict[CaseSpec, list[CaseRecord]] = {}
        self._pending: dict[CaseSpec, Future[CaseRecord]] = {}
        self._runner: Any = None
        self._pool: Any = None  # the GPUs --perfsuite-gpus selects, which every GPU run holds
        self._stopping = False
        self.deadline: float | None = None
        """A ``time.monotonic()`` past which no run may go on (a refresh's time limit): a run
        still going then is killed like one past its timeout."""
        self.alone: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
        """The machine to this process alone for a timed run; under pytest-xdist, while other tests
        run in other processes, a turn of :class:`perfsuite.session.parallel.MachineLock`."""
        self.beside_others = False
        """Whether a run that is not timed runs beside other tests (under pytest-xdist)."""
        self.ahead: Callable[[bool], bool] | None = None
        """Called before a timed CPU run waits for the machine, with whether to renew the forkserver
        first: under pytest-xdist, where perfsuite's own runner serves, it boots the forkserver there,
        so that its imports (and a first offload case's CPU Adam build) run beside other tests
        instead of holding them up. ``False`` where it booted nothing (a conftest's runner): a
        renewal is then left to the run."""
        self._beside: set[CaseSpec] = set()
        self.first: Callable[[], None] | None = None
        """What runs before this session's first run (under pytest-xdist, the CPU cases measured
        first, in the one worker whose tests read them)."""

    def get(self, spec: CaseSpec, count: int = 1, *, timed: bool = True) -> list[CaseRecord]:
        """``count`` runs of ``spec``, each in a fresh worker; runs already made this session are reused,
        except, for ``timed`` ones, runs made beside other tests."""
        self._start()
        runs = self.records.setdefault(spec, [])
        pending = self._pending.pop(spec, None)
        if pending is not None:
            runs.append(pending.result())
        if timed and spec in self._beside:  # its time was taken with other tests running: not one to gate
            self._beside.discard(spec)
            runs.clear()
        # A crash or skip repeats itself: once one run is not ok, don't pay for it again.
        while len(runs) < count and all(r.ok for r in runs):
            runs.append(self.run(spec, fresh_layout=bool(runs), timed=timed))
            if not timed and self.beside_others:
                self._beside.add(spec)
        return runs

    def run(
        self, spec: CaseSpec, env: dict[str, str] | None = None, *, fresh_layout: bool = False, timed: bool = True
    ) -> CaseRecord:
        """One more run of ``spec``, not cached; a ``timed`` one has the machine alone (:attr:`alone`)."""
        self._start()
        if timed and spec.device == "cpu" and self.ahead is not None:
            if self.ahead(fresh_layout and DEFAULTS["cpu"].fresh_layout):
                fresh_layout = False  # renewed already
        with self.alone() if timed else contextlib.nullcontext():
            return self._run(spec, env, fresh_layout=fresh_layout)

    def _start(self) -> None:
        first, self.first = self.first, None
        if first is not None:
            first()

    def _run(self, spec: CaseSpec, env: dict[str, str] | None = None, *, fresh_layout: bool = False) -> CaseRecord:
        """One more run of ``spec``. A repeat or a retry passes ``fresh_layout``: where
        the device's defaults say a layout matters (:attr:`perfsuite.core.spec.RunDefaults.fresh_layout`),
        the forkserver is renewed first, so the run does not inherit the address-space layout (and
        its bias) of the runs before it. Never from the GPU pool's threads, which fork at once. A hook
        that answers with a record as JSON (a ``conftest.py``'s) has it checked and typed here."""
        defaults = DEFAULTS["cpu" if spec.device == "cpu" else "cuda"]
        if fresh_layout and defaults.fresh_layout:
            from perfsuite.worker.process import renew_forkserver

            renew_forkserver()
        if spec.device != "cpu" and "CUDA_VISIBLE_DEVICES" not in (env or {}) and self._selected() is not None:
            return self._holding_gpus(spec, env or {})  # not from the pool's threads: held there
        timeout = defaults.timeout
        if self.deadline is not None:
            timeout = max(min(timeout, self.deadline - time.monotonic()), 1.0)
        answer = self.config.hook.pytest_perfsuite_run_case(
            config=self.config, spec=spec, timeout_s=timeout, env=env or {}
        )
        if isinstance(answer, CaseRecord):
            return answer
        return CaseRecord.from_json(answer, f"{spec.id}: pytest_perfsuite_run_case's record")

    def _holding_gpus(self, spec: CaseSpec, env: dict[str, str]) -> CaseRecord:
        """A GPU run outside the pool's threads (a repeat, a retry, a claim's run, one GPU's runs):
        it waits for the GPUs it needs of those selected (another session's run may hold them), at
        most until the time limit, then runs seeing only them."""
        from perfsuite.worker.pool import gpu_env, with_gpus

        pool = self._selected()
        stop = threading.Event()
        timer = threading.Timer(self.deadline - time.monotonic(), stop.set) if self.deadline is not None else None
        if timer is not None:
            timer.start()
        try:
            with pool.acquire(max(1, spec.world_size), stop) as ids:
                held = {**env, **gpu_env(ids)}
                return with_gpus(self._run(spec, held), held, pool)
        except CancelledError:
            why = "its time limit ran out while it waited for its GPUs (another run on the machine held them)"
            return CaseRecord.failed(spec, status="failed", error=why)
        finally:
            if timer is not None:
                timer.cancel()

    def _selected(self) -> Any:
        """The pool of the GPUs ``--perfsuite-gpus`` selects, made once; ``None`` where this machine
        shows none (a project's runner that runs its cases elsewhere)."""
        from perfsuite.worker.pool import GPUPool, machine_gpus

        if self._pool is None:
            try:
                gpus = machine_gpus(self.config.getoption("perfsuite_gpus"))
            except ValueError as exc:
                raise pytest.UsageError(f"--perfsuite-gpus: {exc}") from None
            self._pool = GPUPool(gpus) if gpus else False
        return self._pool or None

    def prefetch(self, specs: list[CaseSpec]) -> None:
        """Hold every GPU run to the GPUs ``--perfsuite-gpus`` selects (:mod:`perfsuite.worker.pool`):
        each holds the GPUs it runs on and sees only those, so a run never touches a GPU outside the
        selection or one another session holds. With two or more, start the first run of each GPU
        case on them side by side; a case's test then waits for its run. With one, and for repeats
        and retries, a run is made in its test, one at a time (a refresh's time limit decides each)."""
        from perfsuite.worker.pool import PoolRunner, submit_cases

        pool = self._selected()
        if pool is None or len(pool.gpus) < 2:
            return
        gpus = pool.gpus
        self._runner = PoolRunner(pool)
        fitting = [spec for spec in specs if spec.world_size <= len(gpus)]
        self._pending.update(submit_cases(self._runner, pool, fitting, self.run))

    def run_each_once(self, specs: list[CaseSpec], progress: Callable[[str], None], heading: str = "") -> None:
        """Run each case once, reporting each: the one-process CPU cases :func:`lanes` at a time, each
        lane a core of its own, then the rest one after another. ``heading`` is reported first, once
        the machine is this process's alone (under pytest-xdist no other test's outcome is printed
        among these lines)."""
        one_process = [s for s in specs if s.device == "cpu" and s.world_size == 1]
        count = lanes(self.config.getoption("perfsuite_lanes", "auto"), one_process)
        side_by_side = one_process if count > 1 else []
        alone = [s for s in specs if s not in side_by_side]
        if self.ahead is not None and any(s.device == "cpu" for s in specs):
            self.ahead(False)
        with self.alone():
            if heading:
                progress(heading)
            self._each_once(side_by_side, alone, count, len(specs), progress)

    def _each_once(
        self,
        side_by_side: list[CaseSpec],
        alone: list[CaseSpec],
        count: int,
        total: int,
        progress: Callable[[str], None],
    ) -> None:
        done = iter(range(1, total + 1))

        def report(spec: CaseSpec, record: CaseRecord, seconds: float) -> None:
            self.records.setdefault(spec, []).append(record)
            progress(f"perfsuite: [{next(done)}/{total}] {spec.id}: {record.status} in {seconds:.0f} s")

        if side_by_side:
            with ThreadPoolExecutor(max_workers=count, thread_name_prefix="perfsuite-lane") as pool:
                running = {pool.submit(self._timed, spec): spec for spec in side_by_side}
                try:
                    for future in as_completed(running):
                        report(running[future], *future.result())
                except BaseException:  # an interrupt: the runs in flight are dropped, as one run alone is
                    from perfsuite.worker.process import stop_workers

                    self._stopping = True  # a lane about to start its run starts none
                    pool.shutdown(wait=False, cancel_futures=True)
                    while not all(future.done() for future in running):  # a worker started meanwhile too
                        stop_workers()
                        wait(running, timeout=0.2)
                    raise
        for spec in alone:
            report(spec, *self._timed(spec))

    def _timed(self, spec: CaseSpec) -> tuple[CaseRecord, float]:
        if self._stopping:
            return CaseRecord.failed(spec, status="failed", error="interrupted before it ran"), 0.0
        start = time.perf_counter()
        return self._run(spec), time.perf_counter() - start

    def close(self) -> None:
        """Stop runs nobody waits for any more (an interrupted session)."""
        if self._runner is not None:
            self._runner.close(cancel=True)


LANES = 2
"""The most CPU cases :meth:`RunCache.run_each_once` measures side by side. Two one-thread cases at once
on a 2-core machine read the same calibrated step times as one at a time: the every-push cases run
twice each way, alternating, differed from each other as much as two runs one at a time did
(docs/timing.md). More lanes have not been measured."""


def lanes(asked: str | int, specs: list[CaseSpec]) -> int:
    """How many of ``specs`` run side by side: ``asked``, or for ``auto`` :data:`LANES` where this process
    may use that many cores for the cases' threads each (a case on torch's default threads takes them
    all), else 1."""
    if asked != "auto":
        return int(asked)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max((cores if spec.threads is None else spec.threads for spec in specs), default=cores)
    return LANES if cores >= LANES * threads else 1
