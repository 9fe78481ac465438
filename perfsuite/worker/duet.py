"""Duet runs (``perfsuite ab``, :mod:`perfsuite.ab.pairs`): the two sides' workers of one pair
run at the same time, each pinned to its own core, and start their timed steps together, so
that whatever else the machine does in those seconds slows both (Bulej et al., ICPE 2020,
"Duet benchmarking: improving measurement accuracy in the cloud").

They meet once, not before every step: the faster side would wait for the slower one at
each step, and while it waits the slower one runs alone, faster than beside it (on cores
that share execution units, as a VM's two vCPUs may). Measured: with a meeting at every
step, a 5% slowdown read as 3-4%; with one at the start, the steps of both sides run beside
each other throughout and only the slower side's last step or so runs alone, which the
median over steps ignores.

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
