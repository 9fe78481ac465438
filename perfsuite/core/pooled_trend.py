"""Whether the sessions being pooled drift with their time. Pure: no torch, no pytest.

A pool takes its sessions for repeats of one stationary host: a later session is expected to
spread around the pooled time as they did. A host whose speed moves with the hour or with the VM's
age breaks that, and the sessions' held-out A/A cannot show it, since each session held out sits
among the others. So the host's drift (its largest group's, the fp32 cases on a CPU) is read
against each session's date: Kendall's tau and its exact p-value say whether the sessions order by
time more than chance orders them, and the Theil-Sen slope says by how much the drift moved from
the first session to the last. A case whose gate takes out no session's drift meets the host's
whole drift in a later session, so where a trend is found that move is added to such a case's
spread (:func:`perfsuite.core.pooled.pool`): its gate widens by it, or it is refused past its
ceiling. The other cases are gated against their session's drift, and the trend is only reported.
A move in time order is called a trend on its p-value alone, however small: it is the move, not
the call, that widens a gate.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfsuite.core.drift import MIN_CASES, Drift
from perfsuite.core.stats import kendall_trend, theil_sen_slope

SIGNIFICANCE = 0.05
"""The p-value below which the sessions' order in time is taken for a trend of the host's drift."""


@dataclass(frozen=True, kw_only=True)
class Trend:
    """The host's drift against the sessions' time."""

    group: str
    """The drift group read (the one with the most cases)."""
    sessions: int
    """How many sessions it is read over: those with a date and a drift of the group."""
    minutes: float
    """From the first session to the last."""
    tau: float
    """Kendall's tau between the sessions' dates and their drift (tau-a: a tie counts neither way)."""
    p: float
    """Its exact two-sided p-value: how often the sessions in a random order agree with time as well."""
    change: float
    """How far the drift moved from the first session to the last (the Theil-Sen slope over the span)."""

    @property
    def found(self) -> bool:
        """Whether the sessions' drift orders by their time more than chance would (p below
        :data:`SIGNIFICANCE`)."""
        return self.p < SIGNIFICANCE

    def describe(self) -> str:
        """``float32 moved +8.1% over 7 sessions in 4 h 4 min (Kendall's tau +0.71, p 0.030)``."""
        return (
            f"{self.group.rsplit('/', 1)[-1]} moved {self.change:+.1%} over {self.sessions} sessions in "
            f"{lasting(self.minutes)} (Kendall's tau {self.tau:+.2f}, p {self.p:.3f})"
        )


def lasting(minutes: float) -> str:
    """``4 h 4 min``, ``35 min``: a span of sessions, to the minute."""
    whole = round(minutes)
    return f"{whole // 60} h {whole % 60} min" if whole >= 60 else f"{whole} min"


def host_trend(dates: Sequence[datetime.datetime | None], drifts: Sequence[Mapping[str, Drift]]) -> Trend | None:
    """The trend of the drift group with the most cases, over the sessions that have a date and a drift
    in it (``None`` where fewer than 4 do: no order of 3 is unlikely enough to call)."""
    sizes: dict[str, int] = {}
    for by_group in drifts:
        for group, drift in by_group.items():
            if drift.cases >= MIN_CASES:
                sizes[group] = sizes.get(group, 0) + drift.cases
    if not sizes:
        return None
    group = max(sorted(sizes), key=lambda g: sizes[g])
    # A session whose drift of the group is a few cases' (fewer than the gate takes for a drift) is no point.
    points = sorted(
        (d, by_group[group].change)
        for d, by_group in zip(dates, drifts, strict=True)
        if d is not None and group in by_group and by_group[group].cases >= MIN_CASES
    )
    if len(points) < 4:
        return None
    minutes = [(d - points[0][0]).total_seconds() / 60 for d, _ in points]
    changes = [c for _, c in points]
    tau, p = kendall_trend(minutes, changes)
    return Trend(
        group=group,
        sessions=len(points),
        minutes=minutes[-1],
        tau=tau,
        p=p,
        change=theil_sen_slope(minutes, changes) * minutes[-1],
    )
