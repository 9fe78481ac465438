"""A session's machine drift: the median step-time change of its cases. Pure: no torch, no pytest.

The calibration (:mod:`perfsuite.worker.calibrate`) cancels most of what a shared machine does
to a CPU step time, not all of it: on another host of the same CPU class (another
cache, clock or neighbour) a whole run reads a few to 10% off its baselines, every case
alike, and the cases scatter around that centre by a few percent. A CI run on such a
host read tiny-bert-grad_ckpt and tiny-bert-lora at -18.8% and -17.2% against a 15%
gate, while the median of its cases sat near -9%: two false alarms that no single case
could have told from a speed-up.

So where a case's tolerance allows it (``time_drift_limit``, the CPU tier's), its
step time is gated against the session's drift: ``(1 + change) / (1 + drift) - 1``,
the drift being the median raw change over the session's cases of the same group
(at least :data:`MIN_CASES` of them, so that one case cannot be its own reference). A
case that moves against the rest still fails, and a regression that the drift had
hidden (+20% on a host that reads 12% fast: +5.6% raw) fails too.

A group is a time class and the dtype most of a case's matmuls ran in
(:func:`group_of`): a host moves half-precision kernels differently from fp32 ones. On
a host that read the fp32 cases a median 8.4% fast, tiny-bert fp16, bf16 and ``all``
(fp16) read +4.6..+5.0%, 14% off that median, while the Trainer's ``fp16`` case, whose
matmuls run in fp32 on a CPU, read with the fp32 cases.

A drift beyond the limit is not taken for the machine's: it is the stack, every case
slower or faster (a torch upgrade that slows every matmul), and each case is then gated
on its own change, as if no drift had been estimated. The calibration keeps that
visible: its workload goes through none of the libraries under test.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfsuite.core.record import CaseRecord

MIN_CASES = 5
"""Fewest cases whose median is taken for the machine's drift; fewer are gated on their own."""


@dataclass(frozen=True)
class Drift:
    """The median raw step-time change of one session's cases of one group (:func:`group_of`)."""

    group: str
    change: float
    """The median over the cases of their relative change against their baselines."""
    cases: int
    """How many cases it is the median of."""

    def applies(self, limit: float) -> bool:
        """Whether a case with this ``time_drift_limit`` is gated against the drift."""
        return limit > 0 and self.cases >= MIN_CASES and abs(self.change) <= limit

    def gated(self, change: float, limit: float) -> float:
        """The change a case is judged on: against the drift when it applies, else its own."""
        return (1.0 + change) / (1.0 + self.change) - 1.0 if self.applies(limit) else change

    def describe(self, limit: float) -> str:
        """One sentence for a summary or a failure message."""
        what = f"the median step-time change of this session's {self.cases} {self.group} case(s) is {self.change:+.1%}"
        if self.cases < MIN_CASES:
            return f"{what}: too few for the machine's drift ({MIN_CASES} needed); each case is gated on its own"
        if abs(self.change) > limit:
            return (
                f"{what}: beyond the ±{limit:.0%} a machine drifts, so every case moved (the stack, not the "
                "machine); each case is gated on its own change"
            )
        return f"{what}: taken for the machine's drift, each case's time is gated against it"


def group_of(time_class: str, matmul_dtypes: Mapping[str, int] | None, precision: str) -> str:
    """``amd-25.1-avx2/float32``: the time class and the dtype most matmuls ran in (the
    precision asked for when the run counted none)."""
    dtype = max(matmul_dtypes, key=lambda d: matmul_dtypes[d]) if matmul_dtypes else precision
    return f"{time_class}/{dtype}"


def drift_group(record: CaseRecord) -> str:
    """:func:`group_of` a run's record."""
    return group_of(str(record.time_class), record.matmul_dtypes, str(record.precision))


def estimate(group: str, changes: Sequence[float]) -> Drift | None:
    """The drift of ``changes`` (each case's raw relative change), ``None`` without any."""
    if not changes:
        return None
    return Drift(group=group, change=statistics.median(changes), cases=len(changes))
