"""CPU time per thread of this process over a window, read from ``/proc`` at its two ends.

A case's worker reads it around its timed steps (calibrations included), so that its
record shows which threads ran while steps were timed and for how long: torch's
intra-op pool, the thread that steps, and nothing else of perfsuite's. A thread that
should not be there (a BLAS pool left spinning after the calibration, a progress
display, a sampler) shows as one more busy thread than the case's thread count; the
CPU tier's claim tests read it. Two reads of small files per window, outside the
timed steps: nothing samples while they run.

Linux only (``/proc/self/task/<tid>/schedstat``: nanoseconds on a CPU); elsewhere the
window reads ``None``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

BUSY_SHARE = 0.10
"""A thread is busy when it ran at least this share of the window's wall time."""

_TASKS = Path("/proc/self/task")


def _cpu_ns() -> dict[int, tuple[str, int]] | None:
    """Each thread's name and nanoseconds on a CPU so far, ``None`` where ``/proc`` has no schedstat."""
    found: dict[int, tuple[str, int]] = {}
    try:
        tasks = list(_TASKS.iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            ran = int((task / "schedstat").read_text().split()[0])
            name = (task / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
        found[int(task.name)] = (name, ran)
    return found or None


class ThreadWindow:
    """CPU time per thread between :meth:`start` and :meth:`stop`."""

    def __init__(self) -> None:
        self._start: dict[int, tuple[str, int]] | None = None
        self._wall = 0.0
        self.result: dict[str, Any] | None = None

    def start(self) -> None:
        self._start = _cpu_ns()
        self._wall = time.perf_counter()

    def stop(self) -> dict[str, Any] | None:
        """``{"window_s", "busy", "threads": [{"tid", "name", "cpu_s", "share"}]}`` (threads that ran
        at all, busiest first), or ``None`` without ``/proc``."""
        wall = time.perf_counter() - self._wall
        end = _cpu_ns()
        if self._start is None or end is None or wall <= 0:
            return None
        threads: list[dict[str, Any]] = []
        python_names = {t.native_id: t.name for t in threading.enumerate()}  # MainThread, hf-trainer...
        for tid, (name, ran) in end.items():
            before = self._start.get(tid, (name, 0))[1]  # a thread started inside the window: all its time
            cpu_s = (ran - before) / 1e9
            if cpu_s > 0:
                name = python_names.get(tid, name)  # else the OS's: a native pool's (OpenMP, BLAS) has none
                threads.append({"tid": tid, "name": name, "cpu_s": cpu_s, "share": cpu_s / wall})
        threads.sort(key=lambda t: -float(t["cpu_s"]))
        self.result = {
            "window_s": wall,
            "busy": sum(1 for t in threads if float(t["share"]) >= BUSY_SHARE),
            "threads": threads,
        }
        return self.result
