"""A time class on which a case's step time is not kept, and why.

``perfsuite baselines pool`` reads a case over several sessions of one time class. Where they spread
wider than the case's gate allows, a time stored for the class would fail unchanged code or pass a
change its gate claims to catch, so the pool removes the class's time and writes this instead, under
``untimed`` in the baseline (one entry per class). The gate then says so in place of comparing (memory
and loss are gated as ever); a refresh keeps it, since one stretch of one host does not outweigh the
sessions that set it, and ``--missing`` does not take the case on for it; a later pool whose sessions
fit stores their time and removes it. Pure: no torch, no pytest.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEY = "untimed"
"""The baseline's key: time class → :class:`Untimed`, as JSON."""


@dataclass(frozen=True, kw_only=True)
class Untimed:
    """Why a class holds no step time of a case: its pooled sessions' spread."""

    spread: float
    """How far the sessions spread (the pool's spread: each against the others, the drift taken out)."""
    widest: float
    """The widest spread the case's gate admits (:meth:`perfsuite.core.tolerance.Tolerance.widest_spread`)."""
    sessions: int
    date: str | None = None
    """The latest session's date (ISO 8601), where the sessions had one."""

    def describe(self, widest: float | None = None) -> str:
        """One clause: ``6 sessions to 2026-12-06 spread 14.2%, past the 10.0% its gate admits`` (``widest``:
        the spread the case's gate admits now, where known; else what it admitted when pooled)."""
        until = f" to {self.date[:10]}" if self.date else ""
        admits = self.widest if widest is None else widest
        where = "past" if self.spread > admits else "within"
        return f"{self.sessions} sessions{until} spread {self.spread:.1%}, {where} the {admits:.1%} its gate admits"

    def why_ungated(self, widest: float, admits: bool, refresh: str) -> str:
        """The gate's words for a class kept untimed: too noisy there; or, where the case's gate now
        ``admits`` the pooled spread (``widest`` the spread it admits), the ``refresh`` that records a time."""
        pooled = self.describe(widest)
        if admits:
            return (
                f"no time kept there, though its gate now admits the pooled spread ({pooled}): record it with {refresh}"
            )
        return f"too noisy there ({pooled})"

    def to_json(self) -> dict[str, Any]:
        return {"spread": self.spread, "widest": self.widest, "sessions": self.sessions, "date": self.date}

    @classmethod
    def from_json(cls, value: object) -> Untimed:
        """Read one entry; ``ValueError`` naming what is wrong (a baseline file is anyone's data)."""
        if not isinstance(value, Mapping) or set(value) != {"spread", "widest", "sessions", "date"}:
            raise ValueError("each class maps to spread, widest, sessions and date")
        spread, widest, sessions, date = value["spread"], value["widest"], value["sessions"], value["date"]
        if not (_fraction(spread) and _fraction(widest) and spread > widest):
            raise ValueError("spread and widest are finite numbers of 0 or more, the spread the wider")
        if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 2:
            raise ValueError("sessions is a whole number of 2 or more")
        if date is not None and not _date(date):
            raise ValueError("date is an ISO 8601 date and time, or null")
        return cls(spread=float(spread), widest=float(widest), sessions=sessions, date=date)


def _fraction(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value) and value >= 0
    except OverflowError:  # an integer past a float's range
        return False


def _date(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def problem(baseline: Mapping[str, Any]) -> str | None:
    """What is wrong with a baseline's ``untimed`` (``None`` when it is absent or right): for
    :func:`perfsuite.core.baselines.load_baseline`."""
    entries = baseline.get(KEY, {})
    if not isinstance(entries, Mapping):
        return f"`{KEY}` maps time classes to why they hold no step time"
    for time_class, entry in entries.items():
        try:
            Untimed.from_json(entry)
        except ValueError as exc:
            return f"`{KEY}`: {time_class}: {exc}"
        if time_class in baseline.get("time", {}):
            return f"`{KEY}`: {time_class} also holds a step time"
    return None


def untimed_on(baseline: Mapping[str, Any], time_class: str | None) -> Untimed | None:
    """Why ``baseline`` keeps no step time for ``time_class`` (``None`` when nothing says so)."""
    entry = baseline.get(KEY, {}).get(time_class) if time_class else None
    return None if entry is None else Untimed.from_json(entry)


def withdrawn(baseline: Mapping[str, Any], time_class: str, why: Untimed) -> dict[str, Any]:
    """``baseline`` with ``time_class``'s step time removed and ``why`` kept in its place."""
    out = dict(baseline)
    out["time"] = {c: e for c, e in baseline["time"].items() if c != time_class}
    out[KEY] = dict(sorted({**baseline.get(KEY, {}), time_class: why.to_json()}.items()))
    return out


def timed(baseline: Mapping[str, Any], time_class: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """``baseline`` with ``entry`` as ``time_class``'s step time, and no longer untimed there."""
    out = lifted(baseline, time_class)
    out["time"] = dict(sorted({**baseline["time"], time_class: dict(entry)}.items()))
    return out


def lifted(baseline: Mapping[str, Any], time_class: str) -> dict[str, Any]:
    """``baseline`` no longer untimed on ``time_class`` (its time, if any, as it is)."""
    out = dict(baseline)
    rest = {c: e for c, e in baseline.get(KEY, {}).items() if c != time_class}
    if rest:
        out[KEY] = rest
    else:
        out.pop(KEY, None)
    return out


def kept(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """A refresh's ``new`` baseline with ``old``'s untimed classes kept untimed, a time it recorded for one
    of them dropped: one stretch of one host does not outweigh the sessions that withdrew it."""
    marks = dict((old or {}).get(KEY, {}))
    if not marks:
        return dict(new)
    out = dict(new)
    out["time"] = {c: e for c, e in new["time"].items() if c not in marks}
    out[KEY] = dict(sorted(marks.items()))
    return out
