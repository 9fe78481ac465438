"""CPU time per thread of this process over a window, read from ``/proc`` at its two ends.

A case's worker reads it around its timed steps (calibrations included), so that its
record shows which threads ran while steps were timed and for how long: torch's
intra-op pool, the thread that steps, and nothing else of perfsuite's. A thread that
should not be there (a BLAS pool left spinning after the calibration, a progress
display, a sampler) shows as one more busy thread than the case's thread count; the
CPU tier's claim tests read it. A few reads of small files at each end of a window (and
of each process's ``stat``, for the children below this one), outside the timed steps:
nothing samples while they run.

The window also reads how long the CPUs this process may run on were busy (``/proc/stat``),
whoever ran on them, and this process's own CPU time, its children's (a DataLoader's workers)
included: less its own (and, for a multi-rank case, its other ranks'), what other processes took of
the cores while steps were timed.

Linux only (``/proc/self/task/<tid>/schedstat``: nanoseconds on a CPU); elsewhere the
window reads ``None``.
"""

from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from pathlib import Path
from typing import Any

BUSY_SHARE = 0.10
"""A thread is busy when it ran at least this share of the window's wall time."""

_TASKS = Path("/proc/self/task")


def _cpu_ns(named: bool = True) -> dict[int, tuple[str, int, int]] | None:
    """Each thread's name (``""`` unless ``named``), nanoseconds on a CPU so far and nanoseconds it
    waited, runnable, for one (schedstat's first two fields), ``None`` where ``/proc`` has no schedstat."""
    found: dict[int, tuple[str, int, int]] = {}
    try:
        tasks = list(_TASKS.iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            ran, waited = (int(field) for field in (task / "schedstat").read_text().split()[:2])
            name = (task / "comm").read_text().strip() if named else ""
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
        found[int(task.name)] = (name, ran, waited)
    return found or None


_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
"""Of a ``/proc/stat`` CPU line's times: user, nice, system, irq, softirq and steal (a hypervisor
running another machine on the core); not idle or iowait. Guest time is already in user."""


def _cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return []


def _quota() -> bool:
    """Whether a cgroup caps this process's CPU time (a container's ``--cpus``): its affinity then
    names cores its quota never lets it fill, busy with what never waits for it."""
    for path, unlimited in (("/sys/fs/cgroup/cpu.max", "max"), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1")):
        try:
            return Path(path).read_text().split()[0] != unlimited
        except (OSError, IndexError):
            continue
    return False


def _own_s() -> float:
    """This process's CPU seconds so far, threads that have ended included, and its children's (a
    DataLoader's workers): those it has waited for, and those below it still running. Its own are read
    last, so the reading's own time is in them; a child waited for while those below were read (its
    time then in neither) has them read again."""
    for _ in range(3):
        ended = _seconds(resource.RUSAGE_CHILDREN)
        below = _running_below_s()
        if _seconds(resource.RUSAGE_CHILDREN) == ended:
            break
    return _seconds(resource.RUSAGE_SELF) + ended + below


def _seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _running_below_s() -> float:
    """CPU seconds so far of the processes below this one not yet waited for (``/proc/<pid>/stat``'s
    utime, stime and their own waited-for children's, in clock ticks); 0 without ``/proc``. A child
    waited for between two reads moves to ``RUSAGE_CHILDREN`` with all its time: the sum goes on."""
    below: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    try:
        entries = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return 0.0
    for pid in entries:
        try:  # after the name's closing parenthesis: state, ppid, ... utime (14), stime, cutime, cstime (17)
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            parent, spent = int(fields[1]), sum(int(field) for field in fields[11:15])
        except (OSError, ValueError, IndexError):
            continue  # a process that ended between the listing and the read
        below.setdefault(parent, []).append(int(pid))
        ticks[int(pid)] = spent
    total, todo = 0, list(below.get(os.getpid(), []))
    while todo:
        child = todo.pop()
        total += ticks[child]
        todo.extend(below.get(child, []))
    return total / os.sysconf("SC_CLK_TCK")


def _cores_busy(cores: list[int]) -> float | None:
    """Seconds ``cores`` have run anything so far (``/proc/stat``), ``None`` where it cannot be read.
    Only the cores this process may run on: a container's host has others, busy with what never
    shares a core with it."""
    wanted = {f"cpu{core}" for core in cores}
    busy = 0
    found = 0
    try:
        with open("/proc/stat") as handle:
            for line in handle:
                name, _, rest = line.partition(" ")
                if name in wanted:
                    fields = rest.split()
                    busy += sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
                    found += 1
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    return busy / ticks if found == len(wanted) and wanted else None


class ThreadWindow:
    """CPU time per thread between :meth:`start` and :meth:`stop`, and the time the cores this
    process may run on were busy, whoever ran."""

    def __init__(self) -> None:
        self._start: dict[int, tuple[str, int, int]] | None = None
        self._wall = 0.0
        self._cores: list[int] = []
        self._cores_busy: float | None = None
        self._own = 0.0
        self.result: dict[str, Any] | None = None

    def start(self) -> None:
        self._cores = [] if _quota() else _cores()
        self._own = _own_s()  # first: its own reading's time is in neither end's difference
        self._cores_busy = _cores_busy(self._cores)
        self._start = _cpu_ns()
        self._wall = time.perf_counter()

    def stop(self) -> dict[str, Any] | None:
        """``{"window_s", "busy", "threads": [{"tid", "name", "cpu_s", "share"}], "cores": {"count",
        "busy_s", "own_s"}}`` (threads that ran at all, busiest first; ``cores``: how long the cores this
        process may run on ran anything, and this process, ``None`` where unread or under a cgroup's
        quota), or ``None`` without ``/proc``."""
        wall = time.perf_counter() - self._wall
        end = _cpu_ns()
        own = _own_s() - self._own
        cores_busy = _cores_busy(self._cores) if self._cores_busy is not None else None
        if self._start is None or end is None or wall <= 0:
            return None
        threads: list[dict[str, Any]] = []
        python_names = {t.native_id: t.name for t in threading.enumerate()}  # MainThread, hf-trainer...
        for tid, (name, ran, _) in end.items():
            before = self._start.get(tid, (name, 0, 0))[1]  # a thread started inside the window: all its time
            cpu_s = (ran - before) / 1e9
            if cpu_s > 0:
                name = python_names.get(tid, name)  # else the OS's: a native pool's (OpenMP, BLAS) has none
                threads.append({"tid": tid, "name": name, "cpu_s": cpu_s, "share": cpu_s / wall})
        threads.sort(key=lambda t: -float(t["cpu_s"]))
        self.result = {
            "window_s": wall,
            "busy": sum(1 for t in threads if float(t["share"]) >= BUSY_SHARE),
            "threads": threads,
            "cores": None
            if cores_busy is None or self._cores_busy is None
            else {"count": len(self._cores), "busy_s": cores_busy - self._cores_busy, "own_s": own},
        }
        return self.result


TICKS_READ = 100
"""The fewest clock ticks (``/proc/stat`` counts in them, 10 ms each) of the cores' time a window
must span for :func:`others_share` to read it: a tick's rounding is then at most 1% of it per core."""


UNREAD = 0.05
"""How much less busy than the processes alone, as a share of the cores' time, the cores may read
and still count as read (none taken): the ranks' windows start and end a few milliseconds apart."""


def others_share(windows: list[Any], threads: int) -> float | None:
    """Of the cores' time over the first of ``windows`` (:meth:`ThreadWindow.stop`'s results, one per
    process of a case: its ranks', each on ``threads`` threads), the share the cores ran anything but
    those processes. The ranks' windows span the same steps, as their collectives keep them together.
    ``None``, not assessed, where a window was not read, where the processes could not fill the cores
    (more cores than their threads: a load on the others would not be theirs to wait for), where the
    window is shorter than :data:`TICKS_READ`, or where the cores read less busy than the processes
    alone by more than :data:`UNREAD` (a ``/proc/stat`` that is not this machine's: a container's
    emulation)."""
    read: list[dict[str, Any]] = [
        w["cores"] for w in windows if isinstance(w, dict) and isinstance(w.get("cores"), dict)
    ]
    if not read or len(read) != len(windows) or not all("own_s" in cores for cores in read):
        return None
    count = int(read[0]["count"])
    span = float(windows[0]["window_s"]) * count
    tick = 1 / os.sysconf("SC_CLK_TCK")
    if not count or count > len(windows) * threads or span < TICKS_READ * tick:
        return None
    others = float(read[0]["busy_s"]) - sum(float(cores["own_s"]) for cores in read)
    if others < -UNREAD * span:  # far less busy than the processes alone: not these cores' reading
        return None
    return float(min(1.0, max(0.0, others) / span))


def _process_sched() -> dict[int, tuple[int, int]] | None:
    """Each thread's nanoseconds on a CPU and waiting for one so far (no names: half the reads)."""
    found = _cpu_ns(named=False)
    return None if found is None else {tid: (ran, waited) for tid, (_, ran, waited) in found.items()}


def _thread_sched() -> tuple[int, int] | None:
    """The calling thread's nanoseconds on a CPU and waiting for one so far."""
    try:
        ran, waited = (int(field) for field in Path("/proc/thread-self/schedstat").read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return ran, waited


class Contention:
    """How long the timed steps, and apart from them the calibration workload, waited for a CPU, read
    between them (never while one is timed). A calibrated time is a step's wall time over the
    workload's: a load both share cancels out of it, one that falls on the steps alone (a burst,
    another job's threads arriving) does not. Each is the median over its runs of the share each run
    waited, as the time gated is the median step over the median calibration: a burst that spoiled
    one step moves neither."""

    def __init__(self) -> None:
        self._steps: list[float] = []
        self._calibration: list[float] = []
        self._known = True

    def _add(self, into: list[float], before: tuple[int, int] | None, after: tuple[int, int] | None) -> None:
        if before is None or after is None:
            self._known = False
            return
        ran, waited = after[0] - before[0], after[1] - before[1]
        if ran + waited > 0:
            into.append(waited / (ran + waited))

    def step_starts(self) -> dict[int, tuple[int, int]] | None:
        return _process_sched()

    def step_ended(self, started: dict[int, tuple[int, int]] | None) -> None:
        """The step's waiting over the threads there at both reads (one that ended, or began, in between
        would add its whole life's)."""
        ended = _process_sched()
        if started is None or ended is None:
            self._add(self._steps, None, None)
            return
        both = started.keys() & ended.keys()
        self._add(
            self._steps,
            (sum(started[t][0] for t in both), sum(started[t][1] for t in both)),
            (sum(ended[t][0] for t in both), sum(ended[t][1] for t in both)),
        )

    def calibrated(self, run_once: Any) -> float:
        """``run_once()`` (the workload, in the thread that runs it), its waiting counted."""
        before = _thread_sched()
        took = float(run_once())
        self._add(self._calibration, before, _thread_sched())
        return took

    def shares(self) -> dict[str, float | None] | None:
        """``{"steps": ..., "calibration": ...}``: the median share of its runnable time a step (a run of
        the workload) spent waiting for a CPU (``None``: none ran); ``None`` without ``/proc``."""
        if not self._known:
            return None
        return {
            "steps": statistics.median(self._steps) if self._steps else None,
            "calibration": statistics.median(self._calibration) if self._calibration else None,
        }
