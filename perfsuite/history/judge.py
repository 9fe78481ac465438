"""Judging a series of nightly results, not a single night.

A *series* is one case's one metric on one hardware/software fingerprint, night after
night, each value the night's measurement divided by the committed baseline (1.0 is the
baseline). A *segment* is a stretch of nights on one fingerprint and one baseline: an
upgrade of the stack or a baseline refresh starts a new one, so streaks and drift never
reach across it.

- Memory and the loss curve are deterministic: a night out of tolerance is a regression
  on that very night.
- Step time is noisy: a night *violates* when it is out of tolerance; the series is a
  **regression** when its last ``consecutive`` nights (default 2) all violate on the same
  side (slower: ``regression``, faster: ``improvement``, which asks for a refresh),
  **suspicious** when an earlier run of ``suspicious_run`` (default 3) violations sits
  in the window, **insufficient data** below ``min_points`` nights in the segment.
- **Drift**: the median of the last ``drift_nights`` nights against the median of the
  segment's first ones, reported and never failing.

Pure: no torch, no pytest.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["ok", "regression", "improvement", "suspicious", "insufficient_data"]
FAILING: frozenset[str] = frozenset({"regression"})
"""The verdicts that fail the nightly workflow."""


@dataclass(frozen=True)
class Night:
    """One night's value of one series."""

    night: str
    """Its date (``YYYY-MM-DD``), or any key that sorts in time order."""
    value: float
    """Measured ÷ baseline: 1.10 is 10% over the baseline."""
    fingerprint: str
    """Hardware and software versions the night ran on."""
    baseline: str = ""
    """Which baseline it was compared with (its recording date): a refresh starts a new segment."""


@dataclass(frozen=True)
class Rules:
    """How a series is judged; the tolerance is the gate's own for that case and metric."""

    tolerance: float
    """Relative: a night violates when ``|value - 1| > tolerance``."""
    deterministic: bool = False
    """Memory and loss: the first night out of tolerance is a regression."""
    consecutive: int = 2
    suspicious_run: int = 3
    min_points: int = 3
    window: int = 14
    drift_nights: int = 7


@dataclass
class Judgement:
    """What a series says tonight."""

    verdict: Verdict
    segment: list[Night]
    """The current segment's nights, oldest first."""
    violations: list[bool] = field(default_factory=list)
    """Per night of the segment: out of tolerance."""
    drift: float | None = None
    """Median of the last nights ÷ median of the segment's first ones, minus 1."""
    reason: str = ""


def segments(nights: Sequence[Night]) -> list[list[Night]]:
    """``nights`` (oldest first) cut where the fingerprint or the baseline changes."""
    cut: list[list[Night]] = []
    for night in nights:
        if cut and (cut[-1][-1].fingerprint, cut[-1][-1].baseline) == (night.fingerprint, night.baseline):
            cut[-1].append(night)
        else:
            cut.append([night])
    return cut


def _trailing(flags: Sequence[int]) -> tuple[int, int]:
    """Length and side (+1 slower, -1 faster) of the run of same-side violations at the end."""
    if not flags or flags[-1] == 0:
        return 0, 0
    side = flags[-1]
    length = 0
    for flag in reversed(flags):
        if flag != side:
            break
        length += 1
    return length, side


def _longest(flags: Sequence[int]) -> int:
    longest = current = 0
    previous = 0
    for flag in flags:
        current = current + 1 if flag != 0 and flag == previous else (1 if flag else 0)
        previous = flag
        longest = max(longest, current)
    return longest


def judge(nights: Sequence[Night], rules: Rules) -> Judgement:
    """The verdict on a series (``nights`` oldest first) under ``rules``."""
    if not nights:
        return Judgement("insufficient_data", [], reason="no nights")
    segment = segments(sorted(nights, key=lambda n: n.night))[-1]
    side = [0 if abs(n.value - 1) <= rules.tolerance else (1 if n.value > 1 else -1) for n in segment]
    violations = [s != 0 for s in side]
    drift = None
    if len(segment) >= 2 * rules.drift_nights:
        first = statistics.median(n.value for n in segment[: rules.drift_nights])
        last = statistics.median(n.value for n in segment[-rules.drift_nights :])
        drift = last / first - 1
    judged = Judgement("ok", segment, violations, drift)
    if rules.deterministic:
        if violations[-1]:
            judged.verdict = "regression"
            judged.reason = f"{segment[-1].value - 1:+.2%} against the baseline tonight"
        return judged
    if len(segment) < rules.min_points:
        judged.verdict = "insufficient_data"
        judged.reason = f"{len(segment)} night(s) in this segment, {rules.min_points} needed"
        return judged
    run, direction = _trailing(side)
    if run >= rules.consecutive:
        judged.verdict = "regression" if direction > 0 else "improvement"
        values = ", ".join(f"{n.value - 1:+.1%}" for n in segment[-run:])
        judged.reason = f"the last {run} nights out of ±{rules.tolerance:.0%}: {values}"
        return judged
    earlier = side[-rules.window : len(side) - run] if run else side[-rules.window :]
    if _longest(earlier) >= rules.suspicious_run:
        judged.verdict = "suspicious"
        judged.reason = f"{_longest(earlier)} consecutive nights out of ±{rules.tolerance:.0%} earlier in the window"
    return judged
