"""Two sides' step profiles diffed: per level (aten ops, Python functions, Python time by package,
a GPU's activities) what changed, ranked by the change in time per step, against the profiles' own
noise.

Each side is profiled twice (A B A B). A **call count** that differs between the sides while each
side's two profiles agree on it is evidence, whatever the timing: the same code on the same data
calls an op the same number of times. A **time** change is shown only beyond the level's
threshold: :data:`NOISE_FACTOR` times the largest change of any entry of that level between two
profiles of one side (the explanation's own A/A). A side profiled once has no threshold: only its
call counts are evidence.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from perfsuite.core.explain.frames import BUILTIN, OP, caller, is_backward, kind, package, python_parts
from perfsuite.core.explain.records import StackRow, StepProfile

LEVELS = ("op", "python", "package", "device")
"""The tables an explanation diffs, in the order a reader meets them."""
LEVEL_NAMES = {"op": "ops", "python": "Python functions", "package": "Python time by package", "device": "GPU"}
NOISE_FACTOR = 3.0
"""The threshold's multiple of the A/A's largest change. The sides' difference is a mean of two
profiles against two, the A/A's changes single profiles against single ones. Simulated with 60
entries that vary by 1-5% from profile to profile and whole runs by 0-8%, an A/A shows a time
change at some entry in 14-20% of explanations at a factor of 1, 2-6% at 2 and 0.3-2.5% at 3; the
price is that a time change must be large beside the level's noisiest entry to be shown, which is
why call counts, exact, carry most causes (``python benchmarks/explain/threshold.py``)."""
MIN_THRESHOLD_US = 5.0
"""No threshold is below this (µs per step): two identical profiles would otherwise call any change."""
KEPT = 40
"""Changes kept per level (the JSON's, the report's); the summary shows fewer."""


@dataclass(frozen=True)
class Row:
    """One entry of a level's table, per profiled step."""

    calls: float
    us: float
    bytes: float = 0.0


def tables(profile: StepProfile) -> dict[str, dict[str, Row]]:
    """``profile``'s tables per step, by level: an op's or a Python function's self time and calls (a
    built-in is a Python function too; an op inside one of its name is that call), a package's Python
    self time (a built-in's is its caller's package's), a GPU activity's time, calls and bytes."""
    steps = max(profile.steps, 1)
    sums: dict[str, dict[str, list[float]]] = {level: {} for level in LEVELS}
    packages = [package(f) for f in profile.frames]
    for row in profile.stacks:
        name = profile.frames[row.path[-1]]
        level = "op" if kind(name) == OP else "python" if python_parts(name) or kind(name) == BUILTIN else None
        if level is None:
            continue
        if kind(name) == BUILTIN:  # a built-in's time is its Python caller's: `hook.py(3): f → <built-in ...>`
            caller = next((profile.frames[i] for i in reversed(row.path[:-1]) if python_parts(profile.frames[i])), None)
            name = name if caller is None else f"{caller} → {name}"
        _add(sums[level], name, _asked(profile, row) if level == "op" else row.calls, row.self_us)
        if level == "python":
            owners = [found for i in reversed(row.path) if (found := packages[i]) is not None]
            _add(sums["package"], owners[0] if owners else "python", 0, row.self_us)
    for device in profile.device:
        _add(sums["device"], f"{device.kind}: {device.name}", device.calls, device.us, device.bytes)
    return {
        level: {key: Row(c / steps, us / steps, b / steps) for key, (c, us, b) in table.items()}
        for level, table in sums.items()
    }


def op_callers(profile: StepProfile, ops: Iterable[str]) -> dict[str, dict[tuple[str, bool], float]]:
    """Per op of ``ops``, its calls per step by the frame that asked for them (:func:`frames.caller`)
    and whether through that frame's backward: an op the autograd engine ran (in the caller's thread
    under the engine's frame, or in a device's thread with no Python frame at all) for a forward op
    profiled in the same steps is asked for by the forward's frame. An op no Python frame asked for
    is counted under ``("", False)``."""
    steps = max(profile.steps, 1)
    wanted = set(ops)
    asked: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[str, bool]] = {}  # one search per distinct stack
    found: dict[str, dict[tuple[str, bool], float]] = {}
    for row in profile.stacks:
        name = profile.frames[row.path[-1]]
        if name not in wanted:
            continue
        key = (row.path, row.origin)
        if key not in asked:
            by = caller([profile.frames[i] for i in row.path]) or ""
            forward = caller([profile.frames[i] for i in row.origin]) if row.origin else None
            asked[key] = (forward, True) if forward is not None and (not by or is_backward(by)) else (by, False)
        by_caller = found.setdefault(name, {})
        by_caller[asked[key]] = by_caller.get(asked[key], 0.0) + _asked(profile, row) / steps
    return found


def _asked(profile: StepProfile, row: StackRow) -> float:
    """``row``'s calls as its caller asked for them: an op that runs inside an op of its own name (an
    ``aten::eye`` that fills its result through ``aten::eye``'s out variant) is part of that call."""
    name = profile.frames[row.path[-1]]
    return 0.0 if any(profile.frames[i] == name for i in row.path[:-1]) else row.calls


def _add(table: dict[str, list[float]], key: str, calls: float, us: float, size: float = 0.0) -> None:
    total = table.setdefault(key, [0.0, 0.0, 0.0])
    total[0] += calls
    total[1] += us
    total[2] += size


def step_us(profile: StepProfile) -> float:
    """The profiled step's host time (µs): the sum of every stack's self time per step."""
    return sum(row.self_us for row in profile.stacks) / max(profile.steps, 1)


@dataclass(frozen=True)
class Source:
    """A frame whose calls of an op differ between the sides (per step, each side's mean)."""

    frame: str
    calls_a: float
    calls_b: float
    backward: bool = False
    """The calls are the backward's of what ``frame`` called in the forward."""
    line_a: int | None = None
    """Where ``frame`` (B's name) is a function that moved lines since A: the line it started on in A."""


@dataclass(frozen=True)
class Change:
    """One entry that differs between the sides (per step: each side's mean over its profiles)."""

    level: str
    key: str
    calls_a: float
    calls_b: float
    us_a: float
    us_b: float
    counted: bool
    """Its call count differs between the sides, and each side's profiles agree on it: evidence."""
    timed: bool
    """Its time changed beyond the level's threshold."""
    bytes_a: float = 0.0
    bytes_b: float = 0.0
    sources: tuple[Source, ...] = ()
    """An op's counted change by the frames that asked for it, the largest change first."""

    def __post_init__(self) -> None:
        if self.level not in LEVEL_NAMES:
            raise ValueError(f"level {self.level!r} is none of {', '.join(LEVEL_NAMES)}")

    @property
    def delta_us(self) -> float:
        return self.us_b - self.us_a

    @property
    def status(self) -> str:
        """``new`` (not called on A), ``vanished`` (not called on B) or ``changed``."""
        if self.level != "package" and self.calls_a == 0 < self.calls_b:
            return "new"
        if self.level != "package" and self.calls_b == 0 < self.calls_a:
            return "vanished"
        return "changed"


@dataclass(frozen=True)
class ProfileDiff:
    """The sides' profiles diffed (see the module's docstring)."""

    profiles: int
    """Profiles per side (2: their differences set the thresholds; 1: none)."""
    step_us_a: float
    step_us_b: float
    thresholds: dict[str, float]
    """Per level, the smallest time change shown (µs per step); absent: no A/A, no time shown."""
    changes: tuple[Change, ...]
    """What changed, per level in :data:`LEVELS` order, each level's ranked by the change in time."""
    traces: tuple[str | None, str | None] = (None, None)
    """One Chrome trace per side (its first profile's), where kept."""
    unstable: dict[str, int] = field(default_factory=dict)
    """Per level, entries whose calls differ between one side's profiles (their counts are not evidence)."""
    noise_factor: float = NOISE_FACTOR
    """The thresholds' multiple of the A/A's largest change."""

    def level(self, name: str) -> list[Change]:
        return [c for c in self.changes if c.level == name]


def _mean_tables(profiles: Sequence[StepProfile]) -> list[dict[str, dict[str, Row]]]:
    return [tables(p) for p in profiles]


def _joined(level: str, a: Sequence[Mapping[str, Row]], b: Sequence[Mapping[str, Row]]) -> dict[str, str]:
    """B's keys renamed to A's where Python functions only moved lines (a new release of their file):
    each side has as many unmatched functions of that file and name (a decorator's ``wrapper``s), and
    they pair in the order of their lines, as a file keeps its functions' order when lines move."""
    if level != "python":
        return {}
    keys_a = set().union(*a)
    keys_b = set().union(*b)

    def by_function(keys: Iterable[str]) -> dict[tuple[str, str], list[str]]:
        found: dict[tuple[str, str], list[str]] = {}
        for key in keys:
            parts = python_parts(key)
            if parts is not None:
                found.setdefault((parts[0], parts[2]), []).append(key)
        return found

    def in_order(keys: list[str]) -> list[str]:
        return sorted(keys, key=lambda key: (python_parts(key) or ("", 0, ""))[1])

    only_a, only_b = by_function(keys_a - keys_b), by_function(keys_b - keys_a)
    return {
        key_b: key_a
        for f, b_keys in only_b.items()
        if len(only_a.get(f, ())) == len(b_keys)
        for key_a, key_b in zip(in_order(only_a[f]), in_order(b_keys), strict=True)
    }


def _spread(tables_: Sequence[Mapping[str, Row]], key: str) -> tuple[float, bool]:
    """The time difference between one side's profiles for ``key`` and whether their calls agree."""
    rows = [t.get(key, Row(0.0, 0.0)) for t in tables_]
    times = [r.us for r in rows]
    return max(times) - min(times), len({round(r.calls, 6) for r in rows}) == 1


def diff(a: Sequence[StepProfile], b: Sequence[StepProfile]) -> ProfileDiff:
    """Side A's profiles against side B's (see the module's docstring)."""
    if not a or not b:
        raise ValueError("an explanation diffs at least one profile of each side")
    tables_a, tables_b = _mean_tables(a), _mean_tables(b)
    repeated = len(a) > 1 and len(b) > 1
    thresholds: dict[str, float] = {}
    changes: list[Change] = []
    unstable: dict[str, int] = {}
    moved_lines: dict[str, str] = {}
    for level in LEVELS:
        side_a = [t[level] for t in tables_a]
        renamed = _joined(level, side_a, [t[level] for t in tables_b])
        if level == "python":
            moved_lines = {a: b for b, a in renamed.items()}  # A's name of a function that moved lines → B's
        side_b = [{renamed.get(k, k): row for k, row in t[level].items()} for t in tables_b]
        keys = sorted(set().union(*side_a, *side_b))
        if not keys:
            continue
        spreads = {k: (_spread(side_a, k), _spread(side_b, k)) for k in keys}
        if repeated:
            noise = max(max(sa[0], sb[0]) for sa, sb in spreads.values())
            thresholds[level] = max(NOISE_FACTOR * noise, MIN_THRESHOLD_US)
        unstable[level] = sum(1 for sa, sb in spreads.values() if not (sa[1] and sb[1]))
        found = []
        for key in keys:
            row_a, row_b = _mean(side_a, key), _mean(side_b, key)
            (_, steady_a), (_, steady_b) = spreads[key]
            counted = level != "package" and steady_a and steady_b and not math.isclose(row_a.calls, row_b.calls)
            timed = level in thresholds and abs(row_b.us - row_a.us) > thresholds[level]
            if counted or timed:
                shown = key if key not in renamed.values() else _moved(key, renamed)
                found.append(
                    Change(
                        level,
                        shown,
                        row_a.calls,
                        row_b.calls,
                        row_a.us,
                        row_b.us,
                        counted,
                        timed,
                        row_a.bytes,
                        row_b.bytes,
                    )
                )
        found.sort(key=lambda c: (-abs(weight(c)), c.key))
        changes += found[:KEPT]
    counted_ops = {c.key for c in changes if c.level == "op" and c.counted}
    if counted_ops:  # who asked for the calls that differ: searched only for the ops whose calls did
        callers_a = [_renamed(op_callers(p, counted_ops), moved_lines) for p in a]  # a moved function is one asker
        callers_b = [op_callers(p, counted_ops) for p in b]
        lines_a = {new: parts[1] for old, new in moved_lines.items() if (parts := python_parts(old))}
        changes = [
            dataclasses.replace(c, sources=_sources(c.key, callers_a, callers_b, lines_a))
            if c.level == "op" and c.counted
            else c
            for c in changes
        ]
    return ProfileDiff(
        profiles=min(len(a), len(b)),
        step_us_a=statistics.fmean(step_us(p) for p in a),
        step_us_b=statistics.fmean(step_us(p) for p in b),
        thresholds=thresholds,
        changes=tuple(changes),
        traces=(a[0].trace, b[0].trace),
        unstable=unstable,
    )


def _renamed(
    callers: dict[str, dict[tuple[str, bool], float]], names: Mapping[str, str]
) -> dict[str, dict[tuple[str, bool], float]]:
    """``callers`` with its frames renamed by ``names`` (A's name of a function that moved lines → B's)."""
    return {op: {(names.get(f, f), back): n for (f, back), n in by.items()} for op, by in callers.items()}


def _sources(
    op: str,
    a: Sequence[Mapping[str, Mapping[tuple[str, bool], float]]],
    b: Sequence[Mapping[str, Mapping[tuple[str, bool], float]]],
    lines_a: Mapping[str, int],
) -> tuple[Source, ...]:
    """The frames whose calls of ``op`` differ between the sides, the largest change first (``lines_a``:
    B's name of a function that moved lines → its line in A)."""
    askers = sorted(set().union(*(p.get(op, {}) for p in (*a, *b))))

    def mean(side: Sequence[Mapping[str, Mapping[tuple[str, bool], float]]], asker: tuple[str, bool]) -> float:
        return statistics.fmean(p.get(op, {}).get(asker, 0.0) for p in side)

    found = [
        Source(frame, mean(a, (frame, back)), mean(b, (frame, back)), back, lines_a.get(frame))
        for frame, back in askers
    ]
    moved = [s for s in found if not math.isclose(s.calls_a, s.calls_b)]
    return tuple(sorted(moved, key=lambda s: (-abs(s.calls_b - s.calls_a), s.frame, s.backward)))


def weight(change: Change) -> float:
    """What ranks a change: its time change beyond the noise, else its calls' change at the time a call
    takes (a count's change is exact where its time is not)."""
    if change.timed or not change.counted:
        return change.delta_us
    calls = change.calls_a + change.calls_b
    per_call = (change.us_a + change.us_b) / calls if calls else 0.0  # both sides' calls together
    return (change.calls_b - change.calls_a) * per_call


def _moved(key: str, renamed: Mapping[str, str]) -> str:
    """A function matched across a line move, named with both lines: ``file(12 → 14): name``."""
    new = next(b for b, a in renamed.items() if a == key)
    parts_a, parts_b = python_parts(key), python_parts(new)
    assert parts_a is not None
    assert parts_b is not None
    return f"{parts_a[0]}({parts_a[1]} → {parts_b[1]}): {parts_a[2]}"


def _mean(side: Sequence[Mapping[str, Row]], key: str) -> Row:
    rows = [t.get(key, Row(0.0, 0.0)) for t in side]
    return Row(*(statistics.fmean(getattr(r, f) for r in rows) for f in ("calls", "us", "bytes")))
