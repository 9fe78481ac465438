"""A time class's step times pooled from several sessions' results files. Pure: no torch, no pytest.

A refresh records one stretch of one machine: its repeats share whatever that host reads that hour,
which their spread does not show. On a shared 2-core CI VM a refresh's repeats agreed within a few
percent, and sessions of the same stack one to three hours later read the whole class 8-15% slower;
a gate is only as good as the centre it is drawn around. Pooling takes the first run of each case in
each of several sessions (a CI job's ``--perfsuite-json`` files, hours or nights apart) as the
repeats of one baseline, and reads their spread as the gate will:

- each session is compared with the per-step medians of the *other* sessions (as a refresh's
  repeats are: :func:`perfsuite.core.baselines.repeat_deviations`);
- a session's drift (the median of those changes over its cases of one group,
  :mod:`perfsuite.core.drift`) is taken out where the gate would take it out, since a later session
  is gated against its own drift; a session that drifted beyond the limit keeps its raw changes,
  as the gate would;
- the spread is :func:`perfsuite.core.baselines.robust_spread` of what remains, and a case whose
  spread asks for a gate wider than its ceiling is refused, as a refresh refuses it;
- where the host's drift moved with the sessions' time (:mod:`perfsuite.core.pooled_trend`), a case
  whose gate takes out no drift has that move added to its spread: a later session meets a drift
  these do not span, and the case's gate widens by it, or the case is refused past its ceiling.

Only the step time is pooled: memory and loss are the baseline's already, and a session whose run
of a case differs from them in either (or ran from other weights, or other kernels) ran another stack
or another case, and the case is refused, naming that session.
"""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.core.baselines import robust_spread, set_aside, step_medians
from perfsuite.core.drift import Drift, estimate
from perfsuite.core.gates import busy, compare, time_change
from perfsuite.core.observation import Observation
from perfsuite.core.pooled_trend import Trend, host_trend
from perfsuite.core.stats import paired_change
from perfsuite.core.tolerance import Tolerance
from perfsuite.core.untimed import Untimed

MIN_SESSIONS = 3
"""Fewest sessions a case's pooled step time is read from (a refresh's default repeats)."""
SPEC_KEYS = ("threads", "steps", "warmup_steps", "batch_size", "micro_batch_size", "seq_len", "world_size")
"""What a run must share with its baseline's ``spec`` for its step time to be a repeat of that case's: the
same memory and loss can come from a run of other threads or steps, whose time is another."""


def differing(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The keys whose values differ between two ``versions`` tables (one missing counts), sorted."""
    return [k for k in sorted({*ours, *theirs}) if ours.get(k) != theirs.get(k)]


def when(date: str | None) -> datetime.datetime | None:
    """A results file's ``date`` as an aware time (one without a zone taken as UTC); ``None`` when it is not
    an ISO 8601 date."""
    try:
        parsed = datetime.datetime.fromisoformat(date) if date else None
    except ValueError:
        return None
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One session's first run of one case."""

    observed: Observation
    group: str
    """Its drift group (:func:`perfsuite.core.drift.group_of`)."""
    hardware: str
    """Its baselines' directory (``cpu``, or the GPU model)."""
    precision: str = "fp32"
    """The precision the case asked for, which picks its loss tolerance."""
    spec: Mapping[str, Any] = field(default_factory=dict)
    """How it ran, in the baseline's ``spec`` keys (:data:`SPEC_KEYS`), to be checked against it."""
    device: str | None = None
    """The device's name, kept with the step time for a reader."""


@dataclass(frozen=True, kw_only=True)
class Session:
    """One results file: when and on what it ran, and its readings by case id."""

    name: str
    """How the output names it (its file below the directory all the files lie in)."""
    date: str | None
    commit: str | None
    host: str | None
    versions: Mapping[str, Any]
    """The stack it ran (its ``env.versions``), which each case's baseline must have recorded too."""
    readings: Mapping[str, Reading]


@dataclass(frozen=True, kw_only=True)
class Target:
    """A case's stored baseline and the tolerance its gate resolves to (``error`` when it cannot be read)."""

    stored: Mapping[str, Any] | None
    tolerance: Tolerance
    hardware: str
    error: str | None = None


@dataclass(kw_only=True)
class PooledCase:
    """One case's pooled step time, or why it was not pooled."""

    case: str
    sessions: list[str] = field(default_factory=list)
    """The names of the sessions that read it, in order."""
    deviations: list[float] = field(default_factory=list)
    """Each session's change against the others, its drift taken out where the gate takes it out."""
    spread: float | None = None
    set_aside: list[str] = field(default_factory=list)
    """The sessions the spread set aside as the farthest (:func:`perfsuite.core.baselines.set_aside`)."""
    carries_drift: bool = False
    """Whether a session's drift stayed in its change (the gate would take none out): none is set aside."""
    trend_added: float = 0.0
    """The host's drift's move over the sessions, added to the spread of a case that carries drift where
    the sessions' drift moved with their time (:mod:`perfsuite.core.pooled_trend`)."""
    entry: dict[str, Any] | None = None
    """The time entry to store under the class (``None`` when refused)."""
    refused: str | None = None
    untimed: Untimed | None = None
    """Refused for its sessions' spread (not for too few of them, nor another stack): what the baseline
    keeps in place of the class's time (:mod:`perfsuite.core.untimed`)."""

    @property
    def too_few(self) -> bool:
        """Refused only for being read in fewer than :data:`MIN_SESSIONS` sessions."""
        return self.refused is not None and len(self.sessions) < MIN_SESSIONS and self.refused.startswith("read in")


@dataclass(frozen=True, kw_only=True)
class Pool:
    """What pooling found: each session's drift per group, and each case."""

    time_class: str
    drifts: list[dict[str, Drift]]
    """One mapping per session (in order): group → its drift against the pooled baseline (the median
    change of its cases there, as a later session's gate reads it)."""
    cases: list[PooledCase]
    trend: Trend | None = None
    """The host's drift against the sessions' dates (:mod:`perfsuite.core.pooled_trend`), where 4 or more have
    both."""


def _differs(case_id: str, session: Session, target: Target, reading: Reading) -> str | None:
    """Why this session's run is not of the stack and case the baseline recorded (``None`` when it is)."""
    assert target.stored is not None
    recorded = (target.stored.get("provenance") or {}).get("versions") or {}
    stack = [
        f"{k} {recorded.get(k)} there, {session.versions.get(k)} here" for k in differing(recorded, session.versions)
    ]
    if stack:
        return (
            f"{session.name} ran other package versions than its baseline was recorded on ({'; '.join(stack)}): "
            "refresh the case on this stack first, or pool sessions of the baseline's"
        )
    spec = target.stored.get("spec") or {}
    ran = [
        f"{k} {spec[k]} there, {reading.spec[k]} here"
        for k in SPEC_KEYS
        if spec.get(k) is not None and reading.spec.get(k) is not None and spec[k] != reading.spec[k]
    ]
    if ran:
        return (
            f"{session.name} ran it otherwise than its baseline recorded ({'; '.join(ran)}): pool sessions that "
            "ran it as the baseline did"
        )
    if not _positive(reading.observed):
        return f"{session.name}'s step times are not all finite and above 0"
    limit = target.tolerance.time_tolerance(
        (target.stored.get("time") or {}).get(reading.observed.time_class, {}).get("spread")
    )
    if (blind := busy(reading.observed.waited, limit)) is not None:  # a pooled time gates every later run
        return f"{session.name}: {blind}: pool sessions of a quiet machine"
    checks = compare(
        case_id, target.stored, reading.observed, target.tolerance, hardware=target.hardware, gate_time=False
    )
    for check in checks:
        if check.metric != "step time" and not (check.ok and check.compared):
            return (
                f"{session.name}'s {check.metric} differs from its baseline's ({check.baseline} there, "
                f"{check.measured} here): another stack or case "
                "ran; pool sessions of the baseline's stack, or refresh the case first"
            )
    return None


def _readable(case_id: str, sessions: Sequence[Session], target: Target) -> tuple[list[int], str | None]:
    """The indices of the sessions whose reading of the case pools, or why the case does not."""
    if target.error is not None:
        return [], target.error
    read = [i for i, s in enumerate(sessions) if case_id in s.readings]
    if len(read) < MIN_SESSIONS:
        return read, f"read in {len(read)} of {len(sessions)} sessions; a pooled step time needs {MIN_SESSIONS}"
    for i in read:
        problem = _differs(case_id, sessions[i], target, sessions[i].readings[case_id])
        if problem is not None:
            return read, problem
    lengths = {len(sessions[i].readings[case_id].observed.time_steps) for i in read}
    units = {
        (sessions[i].readings[case_id].observed.time_unit, sessions[i].readings[case_id].observed.calibration)
        for i in read
    }
    if 0 in lengths:
        return read, "a session kept no step-by-step times of it"
    if len(lengths) != 1:
        return read, f"its sessions timed different numbers of steps ({', '.join(map(str, sorted(lengths)))})"
    if len(units) != 1:
        return read, "its sessions' step times are in different units or calibrations"
    return read, None


def _raw_deviations(steps: Sequence[Sequence[float]]) -> list[float]:
    """Each session's paired change against the per-step medians of the others."""
    return [paired_change(s, step_medians([o for j, o in enumerate(steps) if j != i])) for i, s in enumerate(steps)]


def pool(
    sessions: Sequence[Session],
    targets: Mapping[str, Target],
    time_class: str,
    *,
    written: Callable[[str], bool] = lambda case: True,
) -> Pool:
    """Pool the step times over ``sessions`` (all of ``time_class``) of ``targets``' cases that ``written``
    selects. The others count towards each session's drift as a later gate counts them: against the time
    their baseline holds for the class, where it holds one."""
    cases: list[PooledCase] = []
    # Each case's change in each session: against the other sessions (what its spread is read from), and
    # against the pooled baseline (what a later session is gated against).
    against_others: dict[str, dict[int, float]] = {}
    against_pool: dict[str, dict[int, float]] = {}
    for case_id, target in sorted(targets.items()):
        read, problem = _readable(case_id, sessions, target)
        if written(case_id):
            cases.append(PooledCase(case=case_id, sessions=[sessions[i].name for i in read], refused=problem))
        if problem is None and written(case_id):
            steps = [sessions[i].readings[case_id].observed.time_steps for i in read]
            against_others[case_id] = dict(zip(read, _raw_deviations(steps), strict=True))
            against_pool[case_id] = {i: paired_change(s, step_medians(steps)) for i, s in zip(read, steps, strict=True)}
        elif target.stored is not None:
            kept = _against_stored(case_id, sessions, target)
            against_others[case_id] = against_pool[case_id] = kept

    drifts = [drifts_of(i, session, against_pool, targets) for i, session in enumerate(sessions)]
    others = [drifts_of(i, session, against_others, targets) for i, session in enumerate(sessions)]
    trend = host_trend([when(s.date) for s in sessions], drifts)
    for pooled in cases:
        if pooled.refused is not None:
            continue
        target = targets[pooled.case]
        limit = target.tolerance.time_drift_limit
        read = sorted(against_others[pooled.case])
        for i in read:
            group = sessions[i].readings[pooled.case].group
            change = against_others[pooled.case][i]
            # Whether the gate would take the session's drift out is read against the pooled baseline, as
            # a later session's is; what is taken out is its drift against the other sessions, the same
            # reference as the case's own change (Drift.gated, with the two references apart).
            applies = group in drifts[i] and drifts[i][group].applies(limit)
            pooled.deviations.append((1 + change) / (1 + others[i][group].change) - 1 if applies else change)
            pooled.carries_drift |= not applies
        # A session set aside is a burst that a retry would not meet again. A case that carries a session's
        # drift (its group too small to take one out, or a drift past the limit) meets it in every retry of
        # that session, so none of its sessions is set aside: its spread is the largest.
        aside = 0 if pooled.carries_drift else set_aside(len(read))
        pooled.spread = max(abs(d) for d in pooled.deviations) if aside == 0 else robust_spread(pooled.deviations)
        if pooled.carries_drift and trend is not None and trend.found:
            pooled.trend_added = abs(trend.change)
            pooled.spread = (pooled.spread or 0.0) + pooled.trend_added
        farthest = sorted(range(len(read)), key=lambda j: -abs(pooled.deviations[j]))[:aside]
        pooled.set_aside = [pooled.sessions[j] for j in sorted(farthest)]
        if not target.tolerance.spread_fits(pooled.spread):
            pooled.refused = _too_wide(pooled, target.tolerance, time_class)
            latest = _latest([sessions[i] for i in read])
            pooled.untimed = Untimed(
                spread=pooled.spread or 0.0,
                widest=round(target.tolerance.widest_spread, 6),
                sessions=len(read),
                date=latest,
            )
            continue
        pooled.entry = _entry([sessions[i] for i in read], pooled.case, pooled.spread)
    return Pool(time_class=time_class, drifts=drifts, cases=cases, trend=trend)


def _against_stored(case_id: str, sessions: Sequence[Session], target: Target) -> dict[int, float]:
    """A case not written: its change in each session against the time its baseline holds for the class
    (none where it holds none, as the gate compares none)."""
    assert target.stored is not None
    changes = {}
    for i, session in enumerate(sessions):
        reading = session.readings.get(case_id)
        # A busy reading is no evidence of its session's drift (nor pooled: :func:`_differs`).
        change = None if reading is None else safe_change(target.stored, reading.observed, target.tolerance)
        if change is not None:
            changes[i] = change
    return changes


def safe_change(stored: Mapping[str, Any], observed: Observation, tol: Tolerance | None = None) -> float | None:
    """:func:`perfsuite.core.gates.time_change`, ``None`` where a step time is not above 0."""
    return time_change(stored, observed, tol) if _positive(observed) else None


def _positive(observed: Observation) -> bool:
    """Whether every step time of ``observed`` is finite and above 0 (a results file is anyone's data)."""
    return all(math.isfinite(t) and t > 0 for t in (observed.time, *observed.time_steps))


def drifts_of(
    index: int, session: Session, changes: Mapping[str, Mapping[int, float]], targets: Mapping[str, Target]
) -> dict[str, Drift]:
    """Session ``index``'s drift per group: the median of its cases' ``changes`` (those the gate would
    take a drift out of)."""
    by_group: dict[str, list[float]] = {}
    for case_id, by_session in changes.items():
        if index in by_session and targets[case_id].tolerance.time_drift_limit > 0:
            by_group.setdefault(session.readings[case_id].group, []).append(by_session[index])
    return {g: d for g, values in by_group.items() if (d := estimate(g, values)) is not None}


def _too_wide(pooled: PooledCase, tol: Tolerance, time_class: str) -> str:
    """Why a case's sessions disagree too much to pool, each session's change, and the ways on (a line each)."""
    spread = pooled.spread or 0.0
    shown = ", ".join(f"{name} {d:+.1%}" for name, d in zip(pooled.sessions, pooled.deviations, strict=True))
    over = [f"a ±{tol.wanted_tolerance(spread):.1%} gate, over its ±{tol.ceiling:.0%} ceiling"]
    if spread > tol.max_refresh_spread:
        over.append(f"over max_refresh_spread {tol.max_refresh_spread:.0%}")
    moved = (
        f"and the host's drift moved {pooled.trend_added:.1%} with their time, added: a later session meets it whole\n"
        if pooled.trend_added
        else ""
    )
    ceiling = tol.ceiling_admitting(spread)
    return (
        f"sessions spread {spread:.1%} ({'; '.join(over)})\neach against the others: {shown}\n{moved}"
        + (
            "Its gate takes no session's drift out, so the hosts' drift is its noise: its time on this class goes\n"
            "ungated, or widen its gate knowingly and pool again:\n"
            if pooled.carries_drift
            else "Pool more sessions (of 4-6 the farthest is set aside), or widen its gate knowingly:\n"
        )
        + f'[tool.perfsuite.overrides."{time_class}/{pooled.case}"]\ntime_ceiling = {ceiling:g}'
        + (f"\nmax_refresh_spread = {math.ceil(spread * 100) / 100:g}" if spread > tol.max_refresh_spread else "")
    )


def _entry(sessions: Sequence[Session], case_id: str, spread: float | None) -> dict[str, Any]:
    """The time entry a pooled case stores: the same keys a refresh writes, one repeat per session,
    and the sessions it was pooled from."""
    readings = [s.readings[case_id] for s in sessions]
    first = readings[0].observed
    return {
        "unit": first.time_unit,
        "median": statistics.median(r.observed.time for r in readings),
        "spread": spread,
        "repeats": [r.observed.time for r in readings],
        "steps": step_medians([r.observed.time_steps for r in readings]),
        "step_time_s_median": statistics.median(r.observed.step_time_s for r in readings),
        "calibration": first.calibration,
        "recorded": _latest(sessions),
        "device": readings[0].device,
        "sessions": [{"date": s.date, "commit": s.commit, "host": s.host} for s in sessions],
    }


def _latest(sessions: Sequence[Session]) -> str | None:
    """The latest of the sessions' dates, as written (``None`` where none had one)."""
    dated = [(moment, s.date) for s in sessions if (moment := when(s.date)) is not None]
    return max(dated)[1] if dated else None
