"""``perfsuite overhead``: what perfsuite's harness adds to a step, against a bare loop.

For each selected case, rounds alternate (ABBA: case then bare loop, then bare loop then
case) between the case as perfsuite runs it (:func:`perfsuite.worker.run.run_case`, with its
calibration, thread window and instruments) and the bare loop of exactly the same
config (:mod:`perfsuite.worker.bare`), each in its own worker forked from the same forkserver.
A round's ratio is the median over steps of the case's step time over the bare loop's
for the same step (both train on the same batches in the same order); the case's
overhead is the median of its rounds' ratios, shown with their range. Both sides'
losses are compared too: a ratio means something only when both trained the same.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.core.stats import median_interval, paired_change
from perfsuite.worker.bare import INTERLEAVED, family, run_bare, run_interleaved

MIN_ROUNDS_FOR_INTERVAL = 6
"""Rounds below which a 95% interval of the median cannot be had from the rounds alone."""

DEFAULT_SELECTION = (
    ("vanilla", "loop"),
    ("bf16", "loop"),
    ("fp16", "loop"),
    ("adamw_8bit", "loop"),
    ("zero2_offload", "loop"),
    ("vanilla", "trainer"),
)
"""One case per family (fp32, autocast, 8-bit, ZeRO offload, Trainer), fp16 beside bf16."""

NOT_RUN = "interrupted before it ran"
"""The error of a case an interrupt left out."""


@dataclass
class Overhead:
    """One case's rounds against its bare loop."""

    spec: CaseSpec
    family: str
    ratios: list[float] = field(default_factory=list)
    """Per round: median over steps of case step ÷ bare step."""
    case_ms: list[float] = field(default_factory=list)
    bare_ms: list[float] = field(default_factory=list)
    loss_diff: float = 0.0
    """Largest absolute difference of the two sides' losses, step by step, over the rounds."""
    interleaved: list[float] = field(default_factory=list)
    """Per pair of steps in one process (:func:`perfsuite.worker.bare.run_interleaved`): case step ÷ bare step."""
    busy_threads: list[int | None] = field(default_factory=list)
    """Per round: threads busy while the case's steps were timed (see :mod:`perfsuite.worker.cpu_threads`)."""
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def interleaved_ratio(self) -> float | None:
        return statistics.median(self.interleaved) if self.interleaved else None

    @property
    def interleaved_interval(self) -> tuple[float, float] | None:
        return median_interval(self.interleaved) if len(self.interleaved) >= MIN_ROUNDS_FOR_INTERVAL else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """95% interval of the median ratio (sign test over rounds); ``None`` under 6 rounds."""
        return median_interval(self.ratios) if len(self.ratios) >= MIN_ROUNDS_FOR_INTERVAL else None

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.spec.id,
            "family": self.family,
            "threads": self.spec.threads,
            "ratio": self.ratio,
            "interval_95": self.interval,
            "interleaved_ratio": self.interleaved_ratio,
            "interleaved_interval_95": self.interleaved_interval,
            "interleaved_ratios": self.interleaved,
            "ratios": self.ratios,
            "case_step_ms": self.case_ms,
            "bare_step_ms": self.bare_ms,
            "max_loss_diff": self.loss_diff,
            "busy_threads": self.busy_threads,
            "error": self.error,
        }


Runner = Callable[..., CaseRecord]


def _round_ratio(case: CaseRecord, bare: CaseRecord) -> float:
    now, base = case.timed().samples, bare.timed().samples
    if len(now) == len(base):
        return 1.0 + paired_change(now, base)
    return float(case.timed().median) / float(bare.timed().median)


def measure(
    specs: Sequence[CaseSpec],
    *,
    rounds: int,
    timeout_s: float,
    run: Runner,
    pairs: int = 0,
    progress: Callable[[Overhead, int], None] = lambda result, round_: None,
    results: list[Overhead] | None = None,
) -> list[Overhead]:
    """Each spec's rounds, case and bare loop alternated ABBA; ``run`` is :func:`perfsuite.worker.run_isolated`.

    Each case goes into ``results`` as it starts, so an interrupt (``KeyboardInterrupt``) leaves there
    every round that finished: the case in flight says after how many rounds it was interrupted, and
    every later case that it was interrupted before it ran."""
    results = [] if results is None else results
    try:
        _measure(specs, rounds, timeout_s, run, pairs, progress, results)
    except KeyboardInterrupt:
        last = results[-1] if results else None
        if last is not None and last.error is None and (len(last.ratios) < rounds if rounds else not last.interleaved):
            done = len(last.ratios)
            last.error = f"interrupted after {done} of {rounds} rounds" if done else "interrupted while it ran"
        results += [Overhead(s, family(s.strategy, s.engine) or "", error=NOT_RUN) for s in specs[len(results) :]]
        raise
    return results


def _measure(
    specs: Sequence[CaseSpec],
    rounds: int,
    timeout_s: float,
    run: Runner,
    pairs: int,
    progress: Callable[[Overhead, int], None],
    results: list[Overhead],
) -> None:
    """:func:`measure`'s rounds, each case put in ``results`` as it starts."""
    for spec in specs:
        name = family(spec.strategy, spec.engine)
        assert name is not None, spec.id
        result = Overhead(spec, name)
        results.append(result)
        if pairs and spec.engine == "loop" and spec.strategy in INTERLEAVED:
            paired = run(dataclasses.replace(spec, steps=pairs), timeout_s=timeout_s, target=run_interleaved)
            if not paired.ok:
                result.error = f"interleaved: {paired.error}"
                continue
            result.interleaved = [float(r) for r in paired.extra["ratios"]]  # the interleaved run's own figure
        for round_ in range(rounds):
            order = ("case", "bare") if round_ % 2 == 0 else ("bare", "case")
            records = {
                side: run(spec, timeout_s=timeout_s, target=run_bare if side == "bare" else None) for side in order
            }
            failed = [f"{side}: {r.error}" for side, r in records.items() if not r.ok]
            if failed:
                result.error = "; ".join(failed)
                break
            case, bare = records["case"], records["bare"]
            result.ratios.append(_round_ratio(case, bare))
            result.case_ms.append(1e3 * float(case.timed().median))
            result.bare_ms.append(1e3 * float(bare.timed().median))
            diffs = [abs(a - b) for a, b in zip(case.loss, bare.loss, strict=False)]
            result.loss_diff = max([result.loss_diff, *diffs])
            result.busy_threads.append((case.timed_threads or {}).get("busy"))
            progress(result, round_)


def _with_interval(value: float | None, interval: tuple[float, float] | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" + ("" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]")


def table_rows(results: Sequence[Overhead]) -> list[list[str]]:
    """The terminal table (:data:`HEADERS`): each ratio with its 95% interval, both sides' medians, the
    largest loss difference, the threads busy during the case's timed steps per round."""
    rows = []
    for r in results:
        rows.append(
            [
                r.spec.id,
                r.family,
                str(r.spec.threads or "default"),
                _with_interval(r.interleaved_ratio, r.interleaved_interval),
                _with_interval(r.ratio, r.interval),
                f"{statistics.median(r.case_ms):.1f}" if r.case_ms else "—",
                f"{statistics.median(r.bare_ms):.1f}" if r.bare_ms else "—",
                f"{r.loss_diff:.2g}" if r.ratios else "—",
                r.error or ",".join("?" if b is None else str(b) for b in r.busy_threads),
            ]
        )
    return rows


HEADERS = [
    "case",
    "family",
    "threads",
    "in one process [95%]",
    "across processes [95%]",
    "case ms",
    "bare ms",
    "max |Δloss|",
    "busy threads",
]
