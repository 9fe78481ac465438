"""Gating one case's run against its baseline, and running it again while only its time fails."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from perfsuite.core.check import BUSY, Check
from perfsuite.core.drift import Drift
from perfsuite.core.gates import Outcome, compare, only_time_failed
from perfsuite.core.observation import Observation
from perfsuite.core.record import CaseRecord
from perfsuite.core.tolerance import Tolerance


def _time_change(checks: list[Check]) -> str:
    return next((c.change for c in checks if c.metric == "step time"), "—")


def gate(
    case_id: str,
    baseline: Mapping[str, Any],
    observed: Observation,
    tolerance: Tolerance,
    outcome: Outcome,
    *,
    hardware: str,
    fail_uncompared: bool,
    drift: Drift | None,
    gate_time: bool = True,
    rerun: Callable[[], tuple[CaseRecord, Observation | None]],
) -> None:
    """``outcome.checks`` of ``observed`` against ``baseline``, retried through ``rerun`` (a fresh run and
    its observation, ``None`` when it did not run) while only the step time fails."""

    def checks_of(observation: Observation) -> list[Check]:
        return compare(
            case_id,
            baseline,
            observation,
            tolerance,
            hardware=hardware,
            fail_uncompared=fail_uncompared,
            drift=drift,
            gate_time=gate_time,
        )

    outcome.checks = checks_of(observed)
    _retry_time(tolerance, outcome, checks_of, rerun)


def _busy(checks: list[Check]) -> bool:
    """Whether the step time was read on a busy machine (:func:`perfsuite.core.gates.busy`): no vote."""
    return any(c.metric == "step time" and c.change == BUSY for c in checks)


def _retry_time(
    tolerance: Tolerance,
    outcome: Outcome,
    checks_of: Callable[[Observation], list[Check]],
    rerun: Callable[[], tuple[CaseRecord, Observation | None]],
) -> None:
    """Measure the case again while only its step time fails, or while it was read on a busy
    machine; the majority of runs decides.

    Up to ``tolerance.time_retries`` more runs, each in a fresh worker, stopping as soon
    as most of the ``time_retries + 1`` possible runs agree. A neighbour's burst rarely
    spoils most runs, and a real slowdown that one unlucky run reads low is still slow
    in the others (passing on any single good run let a +20.8% regression through on a
    +9.4% retry). A run read on a busy machine is no vote either way: it is run again
    (twice the budget at most), and where no run but busy ones is left, the time stays not gated.
    """
    first_busy = _busy(outcome.checks)
    if not (tolerance.time_retries and (first_busy or only_time_failed(outcome.checks))):
        return
    changes = [_time_change(outcome.checks)]
    runs = int(tolerance.time_retries) + 1
    majority = runs // 2 + 1
    failed, passed = (0 if first_busy else 1), 0
    for _ in range(2 * int(tolerance.time_retries)):
        if failed >= majority or passed >= majority:
            break
        time.sleep(tolerance.time_retry_pause_s)  # let a burst of a neighbour's load pass
        record, observed = rerun()
        outcome.records.append(record)
        if observed is None:
            break
        checks = checks_of(observed)
        changes.append(_time_change(checks))
        # The run that settles the majority is the one reported: it agrees with the verdict.
        outcome.checks = checks
        if _busy(checks):
            continue
        if not any(not c.ok for c in checks):
            passed += 1
            if failed == 0:
                break  # the first run read quietly passes, as a first run does
        elif only_time_failed(checks):
            failed += 1
        else:
            break  # another metric failed: that is the verdict, whatever the time does
    outcome.time_attempts = changes
    if only_time_failed(outcome.checks):
        failing = next(c for c in outcome.checks if not c.ok)
        outcome.checks[outcome.checks.index(failing)] = dataclasses.replace(
            failing,
            message=f"{failing.message} [out of tolerance in {failed} of {len(changes)} runs: {', '.join(changes)}]",
        )
