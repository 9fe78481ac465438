"""An interrupted session (SIGTERM or SIGINT, :mod:`perfsuite.cli.interrupt`): every selected case gets an
outcome, the runs made before the interrupt kept in it, and the summary says what had finished.

A gate's ``--perfsuite-json`` then holds what was measured, the up-front runs included; a refresh
still writes nothing (all or nothing), and says which cases had finished and where to go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.gates import Outcome
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.session.scope import GO_ON

NOT_REACHED = "not reached"


def close_outcomes(
    outcomes: list[Outcome], selected: Sequence[CaseSpec], records: Mapping[CaseSpec, list[CaseRecord]]
) -> None:
    """The case in flight (its outcome has no verdict yet) and every selected case without an outcome
    become ``not reached``, each with the runs it finished (under pytest-xdist the cases measured
    first run inside the first case's test, so that case too may have one)."""
    finished = {spec.id: list(runs) for spec, runs in records.items() if runs}
    for outcome in outcomes:
        if outcome.status == "failed" and not outcome.message:  # its runs so far: those made before its test
            outcome.records = outcome.records or finished.get(outcome.case, [])
            why = "interrupted before it was gated; its run is kept" if outcome.records else "interrupted while it ran"
            outcome.status, outcome.message = NOT_REACHED, f"{outcome.case}: {why}"
    seen = {outcome.case for outcome in outcomes}
    for spec in dict.fromkeys(selected):
        if spec.id in seen:
            continue
        runs = finished.get(spec.id, [])
        why = "interrupted before it was gated; its run is kept" if runs else "interrupted before it ran"
        outcomes.append(Outcome(case=spec.id, status=NOT_REACHED, message=f"{spec.id}: {why}", records=runs))


def summary_lines(outcomes: Sequence[Outcome], *, refresh: bool, signal: str | None, json: Any) -> list[str]:
    """What the summary says of an interrupted session, after its table."""
    by = f" by {signal}" if signal else ""
    if refresh:
        finished = [o.case for o in outcomes if o.status != NOT_REACHED]
        done = ", ".join(finished) if finished else "none"
        return [
            f"interrupted{by}: no baseline was written (a refresh writes all or nothing)",
            f"finished before the interrupt, {len(finished)} of {len(outcomes)} case(s): {done}",
            f"{GO_ON}; --time-limit stops a refresh in time and writes what it finished",
        ]
    measured = sum(any(r.ok for r in o.records) for o in outcomes)
    gated = sum(o.status != NOT_REACHED for o in outcomes)
    where = f"; what was measured is in {json}" if json is not None else ""
    return [
        f"perfsuite: interrupted{by}: {measured} of {len(outcomes)} case(s) measured, {gated} gated{where}",
    ]
