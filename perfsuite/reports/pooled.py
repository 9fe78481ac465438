"""What ``perfsuite baselines pool`` prints: the sessions and their drift, one line per case written or
refused, the cases the files did not hold often enough, and the A/A of each session held out. Plain lines,
read the same in a terminal, a CI log or a file."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from perfsuite.core.drift import MIN_CASES, Drift
from perfsuite.core.gates import rel_change
from perfsuite.core.pooled import MIN_SESSIONS, Pool, PooledCase, Session, Target, when
from perfsuite.core.pooled_aa import HeldOut
from perfsuite.core.pooled_trend import SIGNIFICANCE, Trend, lasting
from perfsuite.core.units import format_time

SHOWN = 5
"""Cases named in a line that counts many."""


def plural(n: int, word: str) -> str:
    """``1 case``, ``3 cases``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


CLOSE_S = 3600
"""Sessions closer together than this are said to sample one stretch of the host."""


def span(sessions: Sequence[Session]) -> str:
    """``from 2026-12-05T22:28 to 2026-12-06T02:41 UTC (4 h 13 min)``, or what is known of it."""
    dates = sorted(moment for s in sessions if (moment := when(s.date)) is not None)
    if len(dates) < len(sessions):
        return f"{len(sessions) - len(dates)} of them without a date read here"
    apart = lasting((dates[-1] - dates[0]).total_seconds() / 60)
    return f"from {dates[0]:%Y-%m-%dT%H:%M} to {dates[-1]:%Y-%m-%dT%H:%M} UTC ({apart})"


def _drift(group: str, drift: Drift, limit: float) -> str:
    """``float32 -2.9% (29 cases)``, and where the gate would not take it out."""
    dtype, cases = group.rsplit("/", 1)[-1], plural(drift.cases, "case")
    if drift.cases < MIN_CASES:
        return f"{dtype} {drift.change:+.1%} ({cases}: too few, each gated alone)"
    return f"{dtype} {drift.change:+.1%} ({cases}{'' if drift.applies(limit) else f': beyond ±{limit:.0%}, kept'})"


def _named(cases: Sequence[str]) -> str:
    more = f" and {len(cases) - SHOWN} more" if len(cases) > SHOWN else ""
    return ", ".join(cases[:SHOWN]) + more


def session_lines(result: Pool, sessions: Sequence[Session], targets: Mapping[str, Target]) -> list[str]:
    """The header (the class, when, the stack), one line per session with its drift against the pool, and
    whether that drift moved with the sessions' time."""
    versions = ", ".join(f"{k} {v}" for k, v in sorted(sessions[0].versions.items()))
    lines = [
        f"pooling {plural(len(sessions), 'session')} of {result.time_class}, {span(sessions)}",
        f"  stack: {versions}",
    ]
    dates = sorted(moment for s in sessions if (moment := when(s.date)) is not None)
    if len(dates) == len(sessions) and (dates[-1] - dates[0]).total_seconds() < CLOSE_S:
        lines += [
            "  all within an hour: one stretch of the host, as a refresh's repeats are; later sessions may",
            "  spread wider (pool sessions hours or nights apart)",
        ]
    limit = max((t.tolerance.time_drift_limit for t in targets.values()), default=0.0)
    for session, drifts in zip(sessions, result.drifts, strict=True):
        moved = "; ".join(_drift(g, d, limit) for g, d in sorted(drifts.items(), key=lambda gd: -gd[1].cases))
        lines.append(f"  {session.name} ({(session.commit or 'no commit')[:12]}): drift {moved or '—'}")
    return [*lines, *_trend(result.trend)]


def _trend(trend: Trend | None) -> list[str]:
    """Whether the host's drift moved with the sessions' time, and what the pool does about it."""
    if trend is None:
        return ["  drift against time: not read (it needs 4 dated sessions with a drift: a group of 5 cases or more)"]
    if not trend.found:
        return [f"  drift against time: no trend at p < {SIGNIFICANCE:g}", f"    {trend.describe()}"]
    return [
        "  drift against time: a trend",
        f"    {trend.describe()}",
        "    added to the spread of each case whose gate takes out no drift; the others' gates take each",
        "    session's drift out, which a later session may push past the limit",
    ]


def case_lines(result: Pool, targets: Mapping[str, Target], sessions: int) -> list[str]:
    """One line per case pooled or refused; the cases too few sessions read, counted in one line."""
    shown = [c for c in result.cases if not c.too_few]
    width = max((len(c.case) for c in shown), default=0)
    lines = [_case_line(c, targets[c.case], result.time_class, width) for c in shown]
    few = [c.case for c in result.cases if c.too_few]
    if few:
        lines.append(
            f"{plural(len(few), 'case')} not pooled, read in fewer than {MIN_SESSIONS} of the {sessions} "
            f"sessions (the others did not run them on {result.time_class}): {_named(few)}"
        )
    return lines


def _case_line(case: PooledCase, target: Target, time_class: str, width: int) -> str:
    if case.entry is None:
        said = str(case.refused).replace("\n", "\n" + " " * (width + 4))  # its further lines under its first
        return f"{case.case:<{width}}  refused: {said}"
    old = (target.stored or {}).get("time", {}).get(time_class)
    unit = case.entry["unit"]
    if not old or old.get("unit") != unit:
        before = "new"
    else:
        backed = f" ({plural(len(old['sessions']), 'session')})" if isinstance(old.get("sessions"), list) else ""
        before = f"{format_time(float(old['median']), unit)}{backed}"
    change = "" if before == "new" else f" ({rel_change(case.entry['median'], float(old['median'])):+.1%})"
    aside = f", {' and '.join(case.set_aside)} set aside as the farthest" if case.set_aside else ""
    aside += f", {case.trend_added:.1%} of it the host's trend" if case.trend_added else ""
    return (
        f"{case.case:<{width}}  {before} → {format_time(case.entry['median'], unit)}{change}, spread "
        f"{case.spread or 0.0:.1%} over {plural(len(case.sessions), 'session')}{aside}: gate "
        f"±{target.tolerance.time_tolerance(case.spread):.0%}"
    )


def held_out_lines(checks: Sequence[HeldOut], sessions: int) -> list[str]:
    """The A/A the files make: each session against the pool of the others."""
    if not checks:
        return [
            f"held out: none ({plural(sessions, 'session')}; of {MIN_SESSIONS + 1} or more, each is also gated "
            "against the pool of the others, an A/A from these files)"
        ]
    lines = ["held out, each session gated against the pool of the others as a later session's gate reads it:"]
    for check in checks:
        if not check.changes:
            lines.append(f"  {check.session}: no case compared (too few other sessions read its cases)")
            continue
        sizes = sorted(abs(c) for c in check.changes.values())
        outside = ", ".join(f"{c} {check.changes[c]:+.1%} (gate ±{check.gates[c]:.0%})" for c in check.beyond)
        lines.append(
            f"  {check.session}: {plural(len(sizes), 'case')}, median |change| {statistics.median(sizes):.1%}, "
            f"largest {sizes[-1]:.1%}; {f'outside their gates: {outside}' if outside else 'none outside its gate'}"
        )
    readings = sum(len(c.changes) for c in checks)
    if readings == 0:
        lines.append("  in all: no reading compared, so these files say nothing of the gate's false alarms")
    else:
        lines.append(
            f"  in all: {sum(len(c.beyond) for c in checks)} of {readings} first readings outside their gates "
            "(the gate runs such a case again; two of three runs decide)"
        )
    return lines
