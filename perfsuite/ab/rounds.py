"""One case compared side by side: pairs of runs in alternating order until the time verdict is
decided (:mod:`perfsuite.core.paired`), and memory and loss of the first pair against the
suite's own gates (:mod:`perfsuite.core.compare`), side A standing in for the baseline."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfsuite.ab.sides import Side
from perfsuite.core.baselines import build_baseline
from perfsuite.core.check import Check
from perfsuite.core.compare import check_loss, check_memory
from perfsuite.core.kernels import check_kernels
from perfsuite.core.observation import observe
from perfsuite.core.paired import Paired, Verdict, decide, log_ratios, next_pairs
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance


@dataclass(frozen=True)
class Schedule:
    """How many pairs: ``first`` before any verdict, ``step`` more while undecided, up to ``cap``."""

    first: int
    step: int
    cap: int
    floor: float
    confidence: float


@dataclass
class CaseResult:
    case: str
    time: Paired | None = None
    times_a: list[float] = field(default_factory=list)
    times_b: list[float] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    """Memory (peak and breakdown) and loss of B against A."""
    memory_a: int | None = None
    memory_b: int | None = None
    breakdown_a: dict[str, int] = field(default_factory=dict)
    breakdown_b: dict[str, int] = field(default_factory=dict)
    loss_a: list[float] = field(default_factory=list)
    loss_b: list[float] = field(default_factory=list)
    error: str | None = None
    """Why the case could not be compared (a side's run failed: its error)."""

    @property
    def verdict(self) -> str:
        """``regressed`` (slower, more memory or another loss), ``improved``, ``same``, ``undecided``
        or ``cannot test``."""
        if self.error is not None:
            return "cannot test"
        worse = any(not c.ok and (c.rel is None or c.rel > 0 or c.metric == "loss") for c in self.checks)
        if worse or (self.time is not None and self.time.verdict == "slower"):
            return "regressed"
        if any(not c.ok for c in self.checks) or (self.time is not None and self.time.verdict == "faster"):
            return "improved"
        if self.time is not None and self.time.verdict == "undecided":
            return "undecided"
        return "same"

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "verdict": self.verdict,
            "error": self.error,
            "time": _finite(dataclasses.asdict(self.time)) if self.time is not None else None,
            "step_time_s": {"a": self.times_a, "b": self.times_b},
            "ratios": [b / a for a, b in zip(self.times_a, self.times_b, strict=False)],
            "memory": {
                "a": self.memory_a,
                "b": self.memory_b,
                "breakdown_a": self.breakdown_a,
                "breakdown_b": self.breakdown_b,
            },
            "loss": {"a": self.loss_a, "b": self.loss_b, "max_abs_diff": _max_diff(self.loss_a, self.loss_b)},
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON has no infinity: an unbounded interval's end is ``None``."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}


def _max_diff(a: list[float], b: list[float]) -> float | None:
    if not a or len(a) != len(b):
        return None
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _median_step(record: Mapping[str, Any]) -> float:
    return float(record["step_time_s"]["median"])


def _as_baseline(case_id: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """Side A's run in a baseline's shape, so that B is gated as the suite gates a run."""
    seen = observe(record, time_unit="s")
    return build_baseline(
        case_id=case_id,
        hardware=str(record["device"]),
        time_class=seen.time_class,
        time_unit="s",
        calibration=None,
        times=[seen.time],
        step_time_s=[seen.step_time_s],
        peaks=[seen.peak_bytes],
        breakdowns=[seen.breakdown],
        losses=[seen.losses],
        spec={"attention": seen.attention},
        provenance={},
    )


def _memory_and_loss(result: CaseResult, a: Mapping[str, Any], b: Mapping[str, Any], tol: Tolerance) -> None:
    base = _as_baseline(result.case, a)
    seen_a, seen_b = observe(a, time_unit="s"), observe(b, time_unit="s")
    result.memory_a, result.memory_b = seen_a.peak_bytes, seen_b.peak_bytes
    result.breakdown_a, result.breakdown_b = dict(seen_a.breakdown), dict(seen_b.breakdown)
    result.loss_a, result.loss_b = list(seen_a.losses), list(seen_b.losses)
    kernels = check_kernels(result.case, base, seen_b, str(a["device"]))
    result.checks = (
        [kernels]
        if kernels
        else [*check_memory(result.case, base, seen_b, tol), check_loss(result.case, base, seen_b, tol)]
    )


def compare_case(
    spec: CaseSpec,
    sides: tuple[Side, Side],
    schedule: Schedule,
    tolerance: Tolerance,
    *,
    timeout_s: float,
    progress: Callable[[CaseResult], None] = lambda result: None,
) -> CaseResult:
    """Pairs of fresh runs of ``spec`` on each side, A first in even pairs and B first in odd ones."""
    result = CaseResult(case=spec.id)
    fields = {**dataclasses.asdict(spec), "calibrate": False}
    verdict: Verdict = "undecided"
    while more := next_pairs(len(result.times_a), verdict, first=schedule.first, step=schedule.step, cap=schedule.cap):
        for _ in range(more):
            index = len(result.times_a)
            # The first pair profiles memory and loss; the rest only time.
            run_fields = fields if index == 0 else {**fields, "profile": False}
            order = (0, 1) if index % 2 == 0 else (1, 0)
            if index > 0:  # each pair on new forkservers: no side keeps one memory layout's bias
                for side in sides:
                    side.reset()
            records: dict[int, dict[str, Any]] = {}
            for which in order:
                record = sides[which].run(run_fields, timeout_s)
                if record.get("status") != "ok":
                    result.error = f"{sides[which].name}: {record.get('error') or record.get('status')}"
                    return result
                records[which] = record
            if index == 0:
                _memory_and_loss(result, records[0], records[1], tolerance)
            result.times_a.append(_median_step(records[0]))
            result.times_b.append(_median_step(records[1]))
        result.time = decide(
            log_ratios(result.times_a, result.times_b), floor=schedule.floor, confidence=schedule.confidence
        )
        verdict = result.time.verdict
        progress(result)
    return result

