"""How a change of two sides' profiles (:mod:`perfsuite.core.explain.profile`) reads: its counts and
time per step, and the frames that asked for an op's calls that changed. Pure: no torch, no pytest."""

from __future__ import annotations

import math
import re

from perfsuite.core.explain.frames import is_backward, python_parts, short
from perfsuite.core.explain.profile import Change, weight
from perfsuite.core.units import format_byte_range

_MOVED = re.compile(r"^(?P<file>[^()]+?)\((?P<a>\d+) → (?P<b>\d+)\): (?P<function>.+?)(?= → |$)")
"""A Python function that moved lines, as the profile's diff keys it (``file(12 → 14): name``), and what
it called after it."""
SOURCES_SHOWN = 2
"""Callers named after an op whose calls changed; more are counted."""


def describe(change: Change) -> str:
    """``aten::addmm 36 → 48 calls/step, +1.90 ms/step``; new and vanished entries said so, a new or
    vanished Python function with the line it starts on (where to look). Where its calls changed and
    its time did not clear the level's threshold, what the calls cost at its time per call
    (:func:`~perfsuite.core.explain.profile.weight`): ``≈+0.53 ms/step by its time per call``. The
    count is exact and the time per call a mean over both sides' calls, where the difference of its two
    times is the profiles' noise (an op called once more can read faster)."""
    name = change.key
    moved = _MOVED.match(change.key) if change.level == "python" else None
    if moved is not None:  # a function found at other lines on the two sides, named as a caller is
        called = change.key[moved.end() :].split(" → ")[1:]
        head = f"{moved['file']}:{moved['function']} (defined at line {moved['a']} → {moved['b']})"
        name = " → ".join([head, *map(short, called)])
    elif change.level == "python":
        named = short if change.status == "changed" else _located
        name = " → ".join(map(named, change.key.split(" → ")))
    parts = []
    if change.level != "package":
        parts.append(f"{_count(change.calls_a)} → {_count(change.calls_b)} calls/step")
    if change.bytes_a or change.bytes_b:
        parts.append(f"{format_byte_range(change.bytes_a, change.bytes_b)}/step")
    if change.timed:
        parts.append(f"{change.delta_us / 1e3:+,.2f} ms/step")
    elif change.counted and round(estimate := weight(change) / 1e3, 2):
        parts.append(f"≈{estimate:+,.2f} ms/step by its time per call")
    head = {"new": "new: ", "vanished": "vanished: "}.get(change.status, "")
    asked = called_from(change)
    said = f"{head}{name} {', '.join(parts)}" + (f": {', '.join(asked)}" if asked else "")
    return said + (IMPORTS if set_up_only(change) else "")


def set_up_only(change: Change) -> bool:
    """Whether ``change`` is of Python's import machinery's own functions (:data:`IMPORTS`)."""
    return change.level == "python" and change.key.startswith(_IMPORT_MACHINERY)


_IMPORT_MACHINERY = "<frozen importlib."
IMPORTS = " (Python's import machinery: its calls follow each side's import path, which an overlay lengthens)"
"""Said after a change of the import machinery's own functions (a module found on a longer path
stats more directories): a difference of the sides' set-ups, not of the code compared."""


def called_from(change: Change, shown: int | None = SOURCES_SHOWN) -> list[str]:
    """``["+1 from acme/model.py:_remix (defined at line 83) and +1 from its backward"]``: where an op's extra (or
    missing) calls were asked for, per frame, the ``shown`` frames of largest change (``None``: all)
    and how many more; ``[]`` for a change with none named."""
    by_frame: dict[str, dict[bool, float]] = {}
    moved = {source.frame: source.line_a for source in change.sources}
    for source in change.sources:  # the largest change first; a frame's forward and backward together
        by_frame.setdefault(source.frame, {})[source.backward] = source.calls_b - source.calls_a
    named = []
    for frame, calls in list(by_frame.items())[:shown]:
        if not frame:
            named.append(f"{_count_change(calls[False])} with no Python frame")
            continue
        where = "the backward pass" if is_backward(frame) else _located(frame, moved[frame])
        if False not in calls:
            named.append(f"{_count_change(calls[True])} from the backward of {where}")
        else:
            also = f" and {_count_change(calls[True])} from its backward" if True in calls else ""
            named.append(f"{_count_change(calls[False])} from {where}{also}")
    if shown is not None and len(by_frame) > shown:
        named.append(f"{len(by_frame) - shown} more")
    return named


def _count_change(calls: float) -> str:
    return f"{calls:+,.0f}" if math.isclose(calls, round(calls)) else f"{calls:+,.2f}"


def _located(name: str, line_a: int | None = None) -> str:
    """A Python frame as ``file.py:function (defined at line 12)``, the line its ``def`` is on (the profiler
    knows no other; ``(defined at line 10 → 12)`` where it moved from
    ``line_a``), other frames as :func:`short` names them."""
    parts = python_parts(name)
    if parts is None:
        return short(name)
    line = parts[1] if line_a in (None, parts[1]) else f"{line_a} → {parts[1]}"
    return f"{short(name)} (defined at line {line})"


def _count(calls: float) -> str:
    return f"{calls:,.0f}" if math.isclose(calls, round(calls)) else f"{calls:,.2f}"
