"""Nothing of perfsuite's runs while a step is timed (the calibration once slowed every CPU
step ~1.8x): each case's record counts the threads that ran during its timed steps
(perfsuite/cpu_threads.py), and a case at two threads has two busy threads, through
either engine. The same case with its calibration's BLAS left at two threads (as before
the fix) shows a third, so the check can fail. ``perfsuite overhead`` measures the cost
against a bare loop (tests/test_overhead.py; its real rounds run nightly)."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import fault_cases
import pytest

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.cpu_threads import BUSY_SHARE, ThreadWindow
from perfsuite.worker.process import run_isolated

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)"),
    pytest.mark.alone,  # counts busy threads: another test beside it takes their cores
]


def _spec(engine: str) -> CaseSpec:
    return CaseSpec(
        model="tiny-bert", strategy="vanilla", engine=engine, steps=6, warmup_steps=2, device="cpu", threads=2
    )


def _busy(record: CaseRecord) -> int:
    assert record.status == "ok", record.error
    window = record.timed_threads
    assert isinstance(window, dict)
    return int(window["busy"])


def test_a_window_counts_a_busy_thread_and_not_a_sleeping_one() -> None:
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    def sleep() -> None:
        stop.wait()

    threads = [threading.Thread(target=spin, name="spinner"), threading.Thread(target=sleep, name="sleeper")]
    window = ThreadWindow()
    for t in threads:
        t.start()
    window.start()
    time.sleep(0.3)
    result = window.stop()
    stop.set()
    for t in threads:
        t.join()
    assert result is not None
    shares = {t["name"]: t["share"] for t in result["threads"]}
    assert shares["spinner"] >= BUSY_SHARE
    assert shares.get("sleeper", 0.0) < BUSY_SHARE
    assert shares.get("MainThread", 0.0) < BUSY_SHARE  # it slept too


def _spin_on(core: int, whose: str) -> Any:
    """A process spinning on ``core``: this one's child (its ``Popen``; ``ended``: for 1 s, then it
    exits), or ``another``'s (its pid: its parent exits at once), as another job's process is."""
    import subprocess

    spin = f"import os, time; os.sched_setaffinity(0, {{{core}}}); t = time.monotonic()\n"
    spin += "while time.monotonic() - t < 1.0: pass" if whose == "ended" else "while True: pass"
    if whose != "another":
        return subprocess.Popen([sys.executable, "-c", spin])
    start = (  # the spinner holds no end of the pipe this process reads till it closes
        f"import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', {spin!r}], "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
    )
    return int(subprocess.run([sys.executable, "-c", start], capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("whose", ["another", "running", "ended"], ids=["another-process", "its-child", "waited-for"])
def test_a_window_reads_what_another_process_took_of_the_cores_and_its_children_as_its_own(whose: str) -> None:
    """A process spinning on the one core a window may run on, while this one sleeps, took all of it;
    where it is this process's child (a DataLoader's worker), running at the window's end or exited
    and waited for within it, its time is the process's own: none taken."""
    import os
    import signal

    from perfsuite.worker.cpu_threads import others_share

    before = os.sched_getaffinity(0)
    core = min(before)
    spinner = _spin_on(core, whose)
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.2)  # it has started
        window = ThreadWindow()
        window.start()
        time.sleep(1.5)
        if whose == "ended":
            assert spinner.wait(5) == 0  # waited for inside the window: its time is RUSAGE_CHILDREN's now
        result = window.stop()
    finally:
        os.sched_setaffinity(0, before)
        if whose == "another":
            os.kill(spinner, signal.SIGKILL)
        else:
            spinner.kill()
            spinner.wait()
    assert result is not None
    assert result["cores"]["count"] == 1, result
    share = others_share([result], threads=1)
    assert share is not None
    if whose == "another":
        assert share >= 0.8, result
    else:
        assert share <= 0.2, result
        assert result["cores"]["own_s"] >= 0.7, result  # the child's time on the core, this one asleep


def test_contention_is_the_median_share_of_runnable_time_spent_waiting_for_a_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read between the timed steps and the calibrations: each one's waiting over its time on a CPU
    and waiting, apart (a load both share cancels out of a calibrated time; one on the steps alone
    does not), the median over the runs, as the gated time is a median: one spoiled step moves neither."""
    from perfsuite.worker import cpu_threads

    # Three steps: 10%, 10% and 90% of their runnable time waiting; a thread that ends during the
    # second (7) and one that begins during the third (9) are left out of it.
    reads = iter(
        [
            {1: (0, 0)},
            {1: (900, 100)},
            {1: (900, 100), 7: (5_000, 0)},
            {1: (1_800, 200)},
            {1: (1_800, 200)},
            {1: (1_900, 1_100), 9: (0, 9_000)},
        ]
    )
    monkeypatch.setattr(cpu_threads, "_process_sched", lambda: next(reads))
    threads = iter([(0, 0), (300, 300)])  # the calibration: half its time waiting
    monkeypatch.setattr(cpu_threads, "_thread_sched", lambda: next(threads))
    contention = cpu_threads.Contention()
    for _ in range(3):
        contention.step_ended(contention.step_starts())
    assert contention.calibrated(lambda: 0.013) == 0.013
    shares = contention.shares()
    assert shares is not None
    assert shares["steps"] == pytest.approx(0.1)
    assert shares["calibration"] == pytest.approx(0.5)
    assert cpu_threads.Contention().shares() == {"steps": None, "calibration": None}
    monkeypatch.setattr(cpu_threads, "_process_sched", lambda: None)  # no /proc: not read
    unread = cpu_threads.Contention()
    unread.step_ended(unread.step_starts())
    assert unread.shares() is None


@pytest.mark.cpu
@pytest.mark.parametrize("engine", ["loop", "trainer"])
def test_timed_steps_run_on_the_case_threads_only(engine: str) -> None:
    record = run_isolated(_spec(engine), timeout_s=300)
    assert record.threads == 2
    assert _busy(record) <= 2, record.timed_threads


@pytest.mark.cpu
def test_a_spinning_calibration_pool_shows_as_a_third_busy_thread() -> None:
    record = run_isolated(_spec("loop"), timeout_s=300, target=fault_cases.calibration_blas_spinning)
    assert _busy(record) == 3, record.timed_threads
