"""Duet runs (``perfsuite ab``, :mod:`perfsuite.ab.pairs`): the two sides' workers of one pair
run at the same time, each pinned to its own core, and start their timed steps together, so
that whatever else the machine does in those seconds slows both (Bulej et al., ICPE 2020,
"Duet benchmarking: improving measurement accuracy in the cloud").

They meet once, at the start of the timed steps. A meeting before every step was tried
first; over the quick set it read a uniform 5% slowdown as 1.025-1.062 (median 1.045 at
the first look, a run stopped after it), against 1.008-1.077 (median 1.041) for one
meeting: no measurable difference, so the simpler one stayed (docs/ab.md).

The side that asks for a duet run sets, in the worker's environment, the core to run on,
the name this worker marks its readiness with, its peer's, and a file whose
existence means the peer failed (so this worker stops waiting). Outside a duet run, none is
set and every function here returns at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CPUS = "PERFSUITE_DUET_CPU"
READY = "PERFSUITE_DUET_READY"
PEER = "PERFSUITE_DUET_PEER"
STOP = "PERFSUITE_DUET_STOP"
WAIT_S = 300.0
"""How long a worker waits for its peer at one meeting point (the slower side's build and warm-up)."""
_POLL_S = 0.0002


class PeerGone(RuntimeError):
    """The other side's worker failed or never arrived: this run has no partner to be timed against."""


def pin() -> None:
    """Run this process (and what it starts) on the duet's core."""
    core = os.environ.get(CPUS)
    if core:
        os.sched_setaffinity(0, {int(core)})


def together(tag: str, wait_s: float = WAIT_S) -> None:
    """Return once the peer has reached meeting point ``tag`` too (at once outside a duet run)."""
    ready, peer, stop = os.environ.get(READY), os.environ.get(PEER), os.environ.get(STOP)
    if not ready or not peer:
        return
    Path(f"{ready}.{tag}").touch()
    theirs, gone, deadline = Path(f"{peer}.{tag}"), Path(stop) if stop else None, time.monotonic() + wait_s
    while not theirs.exists():
        if gone is not None and gone.exists():
            raise PeerGone("duet: the other side's run failed")
        if time.monotonic() > deadline:
            raise PeerGone(f"duet: the other side's worker did not reach {tag!r} within {wait_s:g} s")
        time.sleep(_POLL_S)
