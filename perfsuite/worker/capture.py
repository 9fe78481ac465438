"""What a worker's case prints, warns and raises: kept for its record, not written between the caller's lines.

Used by the worker process (:mod:`perfsuite.worker.process`) and by each rank of a
multi-rank case (:mod:`perfsuite.worker.distributed.launch`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def captured_output() -> Iterator[dict[str, str]]:
    """Send this process's stdout and stderr (file descriptors, so C code's and child processes' too) to a file."""
    box: dict[str, str] = {}
    with tempfile.TemporaryFile() as sink:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield box
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            box["output"] = sink.read().decode(errors="replace")


def warning_list(caught: list[warnings.WarningMessage]) -> list[dict[str, Any]]:
    """Distinct warnings with how often each was raised, in first-seen order."""
    counts: dict[tuple[str, str, str, int], int] = {}
    for w in caught:
        key = (w.category.__name__, str(w.message), w.filename, w.lineno)
        counts[key] = counts.get(key, 0) + 1
    return [
        {"category": category, "message": message, "where": f"{filename}:{lineno}", "count": count}
        for (category, message, filename, lineno), count in counts.items()
    ]


def raised_at(exc: BaseException) -> str:
    """`` (at file.py:line)``: where ``exc`` was raised (its traceback's innermost frame), or ``""``."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" (at {frames[-1].filename.rsplit(os.sep, 1)[-1]}:{frames[-1].lineno})" if frames else ""


def described_error(exc: BaseException) -> str:
    """A case's error as its record says it: its type and message, and where it was raised."""
    from perfsuite.core.registry import DeclarationError

    if isinstance(exc, DeclarationError):  # a project's code that is not what it declared: the line says where
        return str(exc)
    from perfsuite.core.spec import NonFiniteLoss

    name = type(exc).__name__
    if "OutOfMemory" in name or "out of memory" in str(exc).lower():
        return f"out of memory: {exc}"
    if isinstance(exc, NonFiniteLoss):  # perfsuite's check of what the step returned: where it checked says nothing
        return f"{name}: {exc}, as the case's step returned it"
    return f"{name}: {exc}{raised_at(exc)}"
