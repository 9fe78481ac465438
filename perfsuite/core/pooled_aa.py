"""Pooled step times checked by their own sessions: each session held out and gated against the pool of
the others, as a later session's gate will read it (an A/A from the files that made the pool). Pure: no
torch, no pytest."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from perfsuite.core.pooled import MIN_SESSIONS, Session, Target, drifts_of, pool, safe_change


@dataclass(frozen=True, kw_only=True)
class HeldOut:
    """One session gated against the pool of the other sessions, as a later session's gate reads it: an
    A/A of the pooled times, from the files themselves."""

    session: str
    changes: dict[str, float]
    """Each written case's change as the gate judges it (its drift taken out where the gate takes it out)."""
    gates: dict[str, float]
    """Each one's gate: the tolerance its spread in that pool sets."""

    @property
    def beyond(self) -> list[str]:
        """The cases whose first reading lies outside their gate (a retry would run them again)."""
        return [case for case, change in self.changes.items() if abs(change) > self.gates[case]]


def held_out(
    sessions: Sequence[Session],
    targets: Mapping[str, Target],
    time_class: str,
    *,
    written: Callable[[str], bool] = lambda case: True,
    kept: Collection[str] | None = None,
) -> list[HeldOut]:
    """Each session gated against :func:`pool` of the others (none of fewer than ``MIN_SESSIONS + 1``
    sessions): the first readings of the cases ``kept`` (default: every case written), the drift of its
    group counted as in :func:`pool`. A case another pool refuses (its sessions that remain too few or too
    far apart) is not gated in that session."""
    if len(sessions) <= MIN_SESSIONS:
        return []
    checks = []
    for k, session in enumerate(sessions):
        pooled = pool([s for i, s in enumerate(sessions) if i != k], targets, time_class, written=written)
        entries = {c.case: c for c in pooled.cases if c.entry is not None}
        raw: dict[str, float] = {}
        for case_id, target in targets.items():
            reading = session.readings.get(case_id)
            if reading is None:
                continue
            if case_id in entries:
                change = safe_change({"time": {time_class: entries[case_id].entry}}, reading.observed)
            elif target.stored is not None and not written(case_id):
                change = safe_change(target.stored, reading.observed)
            else:
                continue
            if change is not None:
                raw[case_id] = change
        drifts = drifts_of(0, session, {case: {0: change} for case, change in raw.items()}, targets)
        changes, gates = {}, {}
        for case_id, entry in entries.items():
            if case_id not in raw or (kept is not None and case_id not in kept):
                continue
            tolerance = targets[case_id].tolerance
            drift = drifts.get(session.readings[case_id].group)
            change = raw[case_id]
            changes[case_id] = drift.gated(change, tolerance.time_drift_limit) if drift is not None else change
            gates[case_id] = tolerance.time_tolerance(entry.spread)
        checks.append(HeldOut(session=session.name, changes=changes, gates=gates))
    return checks
