"""Stopping a run from outside, the same way in every command: SIGTERM (a CI job's time limit or
cancel button, ``kill``) and SIGINT (Ctrl-C) both become one ``KeyboardInterrupt``, so the command
drops the case in flight, keeps what finished, writes it and says it was interrupted.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class Interrupt:
    """What :func:`terminate_as_interrupt` heard: ``signum`` is ``None`` until a signal came."""

    signum: int | None = None

    @property
    def name(self) -> str:
        """``SIGTERM`` or ``SIGINT`` (``SIGINT`` too for a ``KeyboardInterrupt`` raised otherwise)."""
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + (self.signum or signal.SIGINT)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[Interrupt]:
    """SIGTERM stops the run as Ctrl-C does, and so does SIGINT even where it came in ignored (a job
    a shell started in the background): what was measured is written.

    One signal is enough: later ones are ignored until the context ends. A terminal's Ctrl-C and
    coreutils' ``timeout`` signal the whole process group, so the command hears the signal twice
    (directly and through its group), and a second KeyboardInterrupt would land in the bounded
    shut-down (stopping workers, writing results) and lose the results."""
    heard = Interrupt()

    def interrupt(signum: int, frame: object) -> None:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        heard.signum = signum
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:  # after ``previous`` is bound: a signal in between finds it
        signal.signal(sig, interrupt)
    try:
        yield heard
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
