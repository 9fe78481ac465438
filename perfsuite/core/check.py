"""One metric of one case against its baseline: what every gate returns. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

UNTIMED = "too noisy here"
"""A step-time check's change where its class keeps no time of the case (:mod:`perfsuite.core.untimed`)."""
RECORDABLE = "no time kept"
"""Its change where the class keeps no time of the case, but the case's gate now admits the pooled
spread (widened knowingly): a refresh of the case records one."""
BUSY = "machine busy"
"""A step-time check's change where the run waited for a CPU too long to gate (:func:`perfsuite.core.gates.busy`)."""
NOT_GATED = "not gated"
"""Its change under ``--perfsuite-time=off``: measured, gated on purpose by nothing."""


def why_not_compared(change: str, case: str) -> str:
    """What a table's note says of ``case``'s step time not compared, by its check's ``change``."""
    return {
        NOT_GATED: "not gated (--perfsuite-time=off)",
        UNTIMED: "too noisy on this time class",
        RECORDABLE: f"no time kept, though its gate now admits the pooled spread: "
        f"`perfsuite baselines refresh -k '[{case}]'`",
        BUSY: "the machine was busy",
    }.get(change, "no figure for this time class")


@dataclass(frozen=True)
class Check:
    """One metric of one case against its baseline."""

    metric: str
    ok: bool
    baseline: str
    measured: str
    change: str
    tolerance: str
    message: str
    """Empty when ``ok`` and compared; otherwise the whole explanation, naming the case."""
    compared: bool = True
    """False when there was nothing to compare with (no step time recorded for this time class)."""
    rel: float | None = None
    """The signed relative change the gate judged (the loss: at its worst step), for reports and history."""
    limit: float | None = None
    """The relative tolerance it was judged against: a compared check passes exactly when ``|rel| <= limit``."""
    raw_rel: float | None = None
    """Step time: the change against the baseline alone, before the session's drift is taken out."""
    drift: float | None = None
    """Step time: the session's drift it was gated against (``None`` when it was gated on its own change)."""
    seeds: int | None = None
    """The loss, where the run started from other initial weights than its reference: judged against
    this many of the reference's curves at other seeds (:func:`perfsuite.core.loss.check_against_seeds`)."""
    moment: bool = False
    """A breakdown category that moved against a peak that moved past its tolerance: the moment the
    breakdown is taken at moved (:func:`perfsuite.core.gates.moved_with_the_peak`), neither a regression
    nor a gain."""


class TimeCheck(NamedTuple):
    """One case's step-time check, as a session's verdict line counts it."""

    compared: bool
    time_class: str | None
    limit: float | None
    """The smallest change its gate catches (``None`` when not compared)."""
    untimed: bool = False
    """Not compared because its class keeps no time of the case: too noisy there (:data:`UNTIMED`)."""
    busy: bool = False
    """Not compared because the machine was busy while it was timed (:data:`BUSY`)."""
    recordable: bool = False
    """Untimed, but its gate now admits the pooled spread: a refresh records its time (:data:`RECORDABLE`)."""

    @classmethod
    def of(cls, compared: bool, time_class: str | None, limit: float | None, change: str) -> TimeCheck:
        """The check whose change is ``change`` (what each kind of step time not compared says)."""
        return cls(compared, time_class, limit, change in (UNTIMED, RECORDABLE), change == BUSY, change == RECORDABLE)
