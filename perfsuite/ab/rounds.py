"""Cases compared side by side in rounds: a pair of runs of each case per round
(:mod:`perfsuite.ab.pairs`) until its time verdict is decided (:mod:`perfsuite.core.paired`),
and memory and loss of the first pair against the suite's own gates
(:mod:`perfsuite.core.gates`), side A standing in for the baseline."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfsuite.ab.envs import EnvError
from perfsuite.ab.lanes import Lane, Plan, hand_out, reset_lanes
from perfsuite.ab.pairs import Choice, Mode, Pair, check_mode, duet_fits, step_times
from perfsuite.ab.sides import Side
from perfsuite.core.baselines import build_baseline
from perfsuite.core.check import Check
from perfsuite.core.explain.explanation import Explanation
from perfsuite.core.gates import check_memory, is_regression
from perfsuite.core.kernels import check_kernels
from perfsuite.core.loss import check_against_seeds, check_loss, max_difference
from perfsuite.core.observation import observe
from perfsuite.core.paired import Paired, Schedule
from perfsuite.core.record import CaseRecord, StepRan
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance


@dataclass
class CaseResult:
    case: str
    mode: Mode = "alternate"
    """How its pairs ran (:mod:`perfsuite.ab.pairs`)."""
    time: Paired | None = None
    log_ratios: list[float] = field(default_factory=list)
    """Per pair, ``log(B / A)``: what the verdict is decided on."""
    steps_a: list[list[float]] = field(default_factory=list)
    """Per pair, each side's timed steps (s)."""
    steps_b: list[list[float]] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    """Memory (peak and breakdown) and loss of B against A."""
    memory_a: int | None = None
    memory_b: int | None = None
    breakdown_a: dict[str, int] = field(default_factory=dict)
    breakdown_b: dict[str, int] = field(default_factory=dict)
    loss_a: list[float] = field(default_factory=list)
    loss_b: list[float] = field(default_factory=list)
    error: str | None = None
    """Why the case could not be compared (a side's run failed: its error; or why both skipped it)."""
    skipped: bool = False
    """Both sides skipped the case, as the suite skips it (``error`` says why): not compared, not a failure."""
    candidate_failed: bool = False
    """B's run failed at the first pair (``error`` says how) where A's ran: *regressed*, not *cannot test*."""
    interrupted: bool = False
    """The comparison was stopped (Ctrl-C, SIGTERM) before this case's verdict: undecided, its pairs kept."""
    stopped: str | None = None
    """Why the rounds ended before this case's verdict when a side stopped answering (its server died
    between rounds): undecided, its pairs kept."""
    explanation: Explanation | None = None
    """Its verdict's cause, where one was explained (:mod:`perfsuite.ab.explain`)."""
    new: str | None = None
    """What the base's code does not declare of this case, which the candidate's adds (``model 'x'``):
    nothing to compare, its figures B's alone, one run."""
    ran: tuple[StepRan | None, StepRan | None] = (None, None)
    """What each side's first pair's build, first step and profile step ran of the code that differs
    (:mod:`perfsuite.core.reach`)."""

    @property
    def unjudged(self) -> bool:
        """Whether it has pairs (or an error) its verdict has not seen yet."""
        return self.error is not None or len(self.log_ratios) > (self.time.pairs if self.time else 0)

    def add(self, pair: Pair) -> None:
        self.log_ratios.append(pair.log_ratio)
        self.steps_a.append(step_times(pair.records[0]))
        self.steps_b.append(step_times(pair.records[1]))

    @property
    def loss_max_abs_diff(self) -> float | None:
        """The largest difference between B's loss curve and A's (``None`` without two of one length)."""
        return max_difference(self.loss_a, self.loss_b)

    @property
    def checks_regressed(self) -> bool:
        """Whether memory or the loss regressed (:func:`~perfsuite.core.gates.is_regression`). Known
        at the first pair (both are deterministic on one stack); the time needs its pairs."""
        return any(is_regression(c, self.checks) for c in self.checks)

    @property
    def verdict(self) -> str:
        """``regressed`` (slower, more memory, another loss, or B's run failed where A's ran), ``improved``,
        ``same``, ``undecided``, ``skipped``, ``cannot test`` or ``new`` (the base does not declare it)."""
        if self.error is not None:
            return "skipped" if self.skipped else "regressed" if self.candidate_failed else "cannot test"
        if self.new is not None:
            return "new"
        if self.checks_regressed or (self.time is not None and self.time.verdict == "slower"):
            return "regressed"
        if any(not c.ok for c in self.checks) or (self.time is not None and self.time.verdict == "faster"):
            return "improved"
        if self.interrupted or self.stopped or (self.time is not None and self.time.verdict == "undecided"):
            return "undecided"
        return "same"

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "verdict": self.verdict,
            "error": self.error,
            "candidate_failed": self.candidate_failed,
            "new": self.new,
            "interrupted": self.interrupted,
            "stopped": self.stopped,
            "time": _finite(dataclasses.asdict(self.time)) if self.time is not None else None,
            "mode": self.mode,
            "step_time_s": {  # per pair: each side's median step time, and its timed steps
                "a": [statistics.median(steps) for steps in self.steps_a],
                "b": [statistics.median(steps) for steps in self.steps_b],
                "steps_a": self.steps_a,
                "steps_b": self.steps_b,
            },
            "ratios": [math.exp(d) for d in self.log_ratios],
            "memory": {
                "a": self.memory_a,
                "b": self.memory_b,
                "breakdown_a": self.breakdown_a,
                "breakdown_b": self.breakdown_b,
            },
            "loss": {"a": self.loss_a, "b": self.loss_b, "max_abs_diff": self.loss_max_abs_diff},
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "explanation": None if self.explanation is None else self.explanation.as_json(),
            "ran": {side: None if step is None else step.to_json() for side, step in zip("ab", self.ran, strict=True)},
        }


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON has no infinity: an unbounded interval's end is ``None``."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}


def _as_baseline(case_id: str, record: CaseRecord) -> dict[str, Any]:
    """Side A's run in a baseline's shape, so that B is gated as the suite gates a run."""
    seen = observe(record, time_unit="s")
    return build_baseline(
        case_id=case_id,
        hardware=str(record.device),
        time_class=seen.time_class,
        time_unit="s",
        calibration=None,
        times=[seen.time],
        step_time_s=[seen.step_time_s],
        peaks=[seen.peak_bytes],
        breakdowns=[seen.breakdown],
        losses=[seen.losses],
        spec={"attention": seen.attention, "initial_weights": seen.initial_weights},
        provenance={},
    )


def _memory_and_loss(
    result: CaseResult, a: CaseRecord, b: CaseRecord, tol: Tolerance, pair: Pair, confidence: float = 0.99
) -> None:
    base = _as_baseline(result.case, a)
    seen_a, seen_b = observe(a, time_unit="s"), observe(b, time_unit="s")
    result.memory_a, result.memory_b = seen_a.peak_bytes, seen_b.peak_bytes
    result.breakdown_a, result.breakdown_b = dict(seen_a.breakdown), dict(seen_b.breakdown)
    result.loss_a, result.loss_b = list(seen_a.losses), list(seen_b.losses)
    result.ran = (a.step_ran, b.step_ran)
    kernels = check_kernels(result.case, base, seen_b, str(a.device))
    result.checks = (
        [kernels]
        if kernels
        else [
            *check_memory(result.case, base, seen_b, tol),
            _loss(result.case, base, seen_b, tol, a, pair, confidence),
        ]
    )


def _loss(
    case: str, base: dict[str, Any], seen_b: Any, tol: Tolerance, a: CaseRecord, pair: Pair, confidence: float
) -> Check:
    """B's loss curve against A's step by step; where they started from other initial weights, against A's
    curves at other seeds (the pair's, :func:`perfsuite.ab.pairs.other_seeds`) at ``confidence``, and
    without those another curve, said as such (an upgrade's change to the initialisation, or the project's own)."""
    check = check_loss(case, base, seen_b, tol, hardware=str(a.device), fail_uncompared=True)
    if check.compared:
        return check
    weights = f"{check.baseline} → {check.measured}"
    why = pair.seeds_error
    if pair.seeds:
        try:
            return check_against_seeds(case, [a.loss, *pair.seeds], seen_b.losses, weights, confidence)
        except ValueError as exc:  # their curves alike: no spread to judge by
            why = str(exc).removeprefix(f"{case}: ")
    if why:
        return dataclasses.replace(
            check, message=f"{check.message}; the base's curves at other seeds cannot judge it: {why}"
        )
    return check


def spec_fields(spec: CaseSpec, *, profile: bool) -> dict[str, Any]:
    """``spec``'s fields as a side runs it: no calibration workload, the memory profile's step only if ``profile``."""
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.init}
    return {**fields, "calibrate": False, "profile": spec.profile and profile}


def compare_cases(
    specs: Sequence[CaseSpec],
    lanes: tuple[Side, Side] | Sequence[Lane],
    schedule: Schedule,
    tolerance: Tolerance,
    *,
    timeout_s: float,
    device_type: str,
    mode: Choice = "auto",
    plan: Plan | None = None,
    progress: Callable[[CaseResult, bool], None] = lambda result, finished: None,
    on_round: Callable[[int, int], None] = lambda index, cases: None,
    on_checks: Callable[[CaseResult], None] = lambda result: None,
    stop_on_regression: bool = False,
    seed: int = 0,
    loss_seeds: int = 0,
    loss_confidence: float = 0.99,
) -> list[CaseResult]:
    """Every case compared in rounds: one pair of each open case per round, in a new random order
    each round, until its time verdict is decided or it reaches the cap.

    Both sides' forkservers are booted anew before every round, at once and before any of its
    runs (so no run shares the machine with a boot, and an alternating pair waits for one boot, not
    two): every worker forked
    from one interpreter inherits its randomised address-space layout, which moves a case's step
    time by a few percent the same way in every run on a CPU (measured: docs/ab.md), so each
    round draws a new one for each side, and the pairs average it out. On a GPU too: a
    host-bound GPU case may move by as much with a new forkserver (docs/gpu.md), and one kept
    per side would be a bias the pairs cannot remove. Memory and loss
    come from the first round's runs (profiled), and ``on_checks`` hears of them at once, each
    case's after its first pair; with ``stop_on_regression`` a case whose memory or loss
    regressed is finished at its time's first look, with the time verdict that look reached (a step
    slower too is said so: a change to a step's code seldom moves its memory alone). ``progress``
    hears of each verdict (and each error), and whether the case is finished, ``on_round`` of each
    round's start (its index, the cases it runs). ``loss_seeds``: where a case's first pair started
    from other initial weights, A runs it at that many other seeds and B's loss is judged against them
    at ``loss_confidence`` (``perfsuite ab``'s); 0, another curve is a regression (bisect's: the release
    that changed it).
    A side whose server dies fails the pair it was running; at the next round's renewal the rounds
    end, and each case still open is ``stopped``, keeping its pairs and the verdicts its looks reached.
    A side whose forkserver does not boot the first time (its imports fail: a release that resolves
    but does not import beside the rest) raises the :class:`EnvError`: nothing ran, so no case is
    stopped; the side cannot be tested.

    ``lanes``: both sides (one lane), or the lanes of ``plan`` (:mod:`perfsuite.ab.lanes`), whose
    forkservers are all renewed before each round; within a round the open cases go to free lanes.
    A case's pairs and verdicts do not depend on the lanes: pair ``i`` is the case's ``i``-th
    round's, judged when the round ends.
    """
    plan = plan or Plan()
    running = [lane for lane in lanes if isinstance(lane, Lane)] or [Lane((lanes[0], lanes[1]))]  # type: ignore[arg-type]
    results = {
        spec.id: CaseResult(
            case=spec.id, mode="duet" if mode != "alternate" and duet_fits(spec, device_type) else "alternate"
        )
        for spec in specs
    }
    check_mode(specs, device_type, mode)
    needs = {spec.id: plan.need(results[spec.id].mode, ranks=spec.launches_ranks) for spec in specs}
    gpus_used: dict[str, list[str]] = {}
    by_id = {spec.id: spec for spec in specs}
    pending = list(specs)
    order = random.Random(seed)
    index = 0
    try:
        while pending:
            on_round(index, len(pending))
            try:
                reset_lanes(running)
            except EnvError as exc:  # a side's server died: no round can run, but every pair so far stands
                if index == 0:  # at its first boot, importing what the cases need: a side that cannot be set up
                    raise
                for spec in pending:
                    results[spec.id].stopped = str(exc)
                    progress(results[spec.id], True)
                break

            def run(lane: Lane, case: str, gpu: str | None, cancel: threading.Event | None, index: int = index) -> Pair:
                fields = spec_fields(by_id[case], profile=index == 0)
                seeds = loss_seeds if index == 0 else 0  # judged at the first pair, with memory
                return lane.pair(fields, index, timeout_s, mode=results[case].mode, gpu=gpu, cancel=cancel, seeds=seeds)

            def done(case: str, pair: Pair, index: int = index) -> None:
                _add(results[case], pair, index, tolerance, loss_confidence)
                if index == 0 and results[case].error is None:
                    on_checks(results[case])

            cases = [spec.id for spec in order.sample(pending, len(pending))]
            hand_out(running, plan, cases, needs, run, done, gpus_used)
            index += 1
            pending = _judged(pending, results, schedule, progress, stop_on_regression)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (perfsuite.cli.ab): the pairs in flight are dropped
        # A look this round's pairs reached still counts; the other open cases are cut short.
        fresh = [spec for spec in pending if results[spec.id].unjudged]
        pending = [spec for spec in pending if not results[spec.id].unjudged]
        pending += _judged(fresh, results, schedule, progress, stop_on_regression)
        for spec in pending:
            if results[spec.id].error is None:
                results[spec.id].interrupted = True
    return [results[spec.id] for spec in specs]


def _add(result: CaseResult, pair: Pair, index: int, tolerance: Tolerance, loss_confidence: float = 0.99) -> None:
    if pair.error is not None:
        # At the first pair (A first, or beside B) a failure of B's own is the candidate's: regressed. Later, after
        # B's runs had passed, one is intermittent (the machine's, or a flake): the case cannot be compared.
        result.error, result.skipped = pair.error, pair.skipped
        result.candidate_failed = pair.candidate_failed and index == 0
        return
    if index == 0:
        a, b = pair.records
        assert a is not None, pair  # a pair without an error has both runs
        assert b is not None, pair
        _memory_and_loss(result, a, b, tolerance, pair, loss_confidence)
    result.add(pair)


def _judged(
    pending: list[CaseSpec],
    results: Mapping[str, CaseResult],
    schedule: Schedule,
    progress: Callable[[CaseResult, bool], None],
    stop_on_regression: bool = False,
) -> list[CaseSpec]:
    """The cases still open after a round: each judged where its pairs reach a look, and told to ``progress``."""
    still: list[CaseSpec] = []
    for spec in pending:
        result = results[spec.id]
        if result.error is not None:
            progress(result, True)
            continue
        paired = schedule.judge(result.log_ratios)
        if paired is not None:
            result.time = paired
            finished = schedule.finished(paired) or (stop_on_regression and result.checks_regressed)
            progress(result, finished)
            if finished:
                continue
        still.append(spec)
    return still


def compare_case(
    spec: CaseSpec,
    sides: tuple[Side, Side],
    schedule: Schedule,
    tolerance: Tolerance,
    *,
    timeout_s: float,
    device_type: str,
    progress: Callable[[CaseResult, bool], None] = lambda result, finished: None,
    loss_seeds: int = 0,
) -> CaseResult:
    """One case (``perfsuite bisect``'s step); ``progress`` and ``loss_seeds`` as :func:`compare_cases`'."""
    return compare_cases(
        [spec],
        sides,
        schedule,
        tolerance,
        timeout_s=timeout_s,
        device_type=device_type,
        progress=progress,
        loss_seeds=loss_seeds,
    )[0]
