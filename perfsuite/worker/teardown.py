"""What a worker leaves undone: an engine's teardown, once the case's record is sent.

Closing an engine (DataLoader workers, a process group, the Trainer's thread, the
allocator's cache) measures nothing and took 3-5% of a case's time in workers. A worker's
process ends right after it sends its record, and the parent then kills the worker's
process group, which takes any loader workers with it (:func:`perfsuite.worker.process.run_isolated`).
So inside a worker a single-process case's engine is not closed: :func:`keep` holds it, and
after the record is sent :func:`discard` removes only what would outlive the process (an
engine's ``discard()``: the Trainer's output directory on disk).

Everywhere else (a case run in the caller's own process, a rank of a multi-rank case, whose
process group its launcher waits on) engines are closed as before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

_STATE: dict[str, Any] = {"worker": None, "kept": []}


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within it, :func:`deferring` is true in this process: the worker's own case runs here."""
    _STATE["worker"] = os.getpid()
    try:
        yield
    finally:
        _STATE["worker"] = None


def deferring() -> bool:
    """Whether an engine closed now may be left to the worker's exit instead: only in the worker
    itself, not in a process forked from it (a rank on a CPU)."""
    return bool(_STATE["worker"] == os.getpid())


def keep(engine: Any) -> None:
    """Hold ``engine`` unclosed until the worker exits (its objects stay alive until then)."""
    _STATE["kept"].append(engine)


def discard() -> None:
    """After the record is sent: what the kept engines would leave on disk, removed."""
    for engine in _STATE["kept"]:
        remove = getattr(engine, "discard", None)
        if remove is not None:
            with contextlib.suppress(Exception):  # the record is already sent: nothing to report to
                remove()
    _STATE["kept"].clear()
