"""``perfsuite ab``'s rounds and pairs with fake sides (no workers): which cases run as a duet, the
per-step ratio, the round order, when a case leaves the rounds, a failing side; and the duet's
meeting points in the worker."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from perfsuite.ab import pairs, rounds
from perfsuite.ab.pairs import duet_fits, step_log_ratio
from perfsuite.ab.rounds import compare_cases
from perfsuite.core.paired import Schedule
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance
from perfsuite.worker import duet


def _spec(strategy: str = "vanilla", **kw: Any) -> CaseSpec:
    return CaseSpec(model="tiny-bert", strategy=strategy, steps=4, warmup_steps=1, threads=kw.pop("threads", 1), **kw)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a duet needs two cores; this machine has one")
def test_a_duet_is_a_cpu_case_in_one_process_on_one_thread() -> None:
    assert duet_fits(_spec(), "cpu")
    assert not duet_fits(_spec(), "cuda")  # a GPU runs one side at a time
    assert not duet_fits(_spec(threads=None), "cpu")  # torch's threads would take both cores
    assert not duet_fits(_spec("dataloader"), "cpu")  # its loader processes need a core
    assert not duet_fits(_spec("ddp", world_size=2), "cpu")  # two ranks


def test_a_duet_pair_is_the_median_of_its_steps_ratios() -> None:
    a = [1.0, 1.0, 1.0, 1.0, 1.0]
    b = [1.05, 1.05, 1.05, 1.05, 3.0]  # one step of B hit by a burst: the median ignores it
    assert step_log_ratio(a, b) == pytest.approx(math.log(1.05))
    with pytest.raises(ValueError, match="timed 5 and 4 steps"):
        step_log_ratio(a, b[:4])


def _identity(spec: dict[str, Any]) -> dict[str, Any]:
    return {"model": spec["model"], "strategy": spec["strategy"]}


class FakeSide:
    """A side whose step time is ``scale`` × the case's base time; records every run and reset."""

    def __init__(
        self,
        name: str,
        scale: dict[str, float],
        log: list[str],
        fail: str | None = None,
        noise: float = 0.0,
        loss: dict[str, list[float]] | None = None,
    ) -> None:
        self.name, self.scale, self.log, self.fail, self.noise = name, scale, log, fail, noise
        self.loss = loss or {}
        self.at_seeds: dict[str, CaseRecord] = {}

    def reset(self) -> None:
        self.log.append(f"{self.name} reset")

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        case = f"{spec['model']}-{spec['strategy']}"
        self.log.append(f"{self.name} {case} profile={spec['profile']} calibrate={spec['calibrate']}")
        if case == self.fail:
            return CaseRecord.from_json({**_identity(spec), "status": "error", "error": "boom"}, case)
        runs = sum(1 for line in self.log if line.startswith(f"{self.name} {case}"))
        jitter = 1 + self.noise * ((runs * 7) % 5 - 2) / 2  # within ± noise, never the same twice in a row
        step = 0.1 * self.scale.get(case, 1.0) * jitter
        return CaseRecord.from_json(self._figures(spec, step, case), case)

    def _figures(self, spec: dict[str, Any], step: float, case: str) -> dict[str, Any]:
        return {
            "status": "ok",
            "device": "cpu",
            "time_class": "fake",
            "step_time_s": {"median": step, "samples": [step] * 4},
            "peak_memory_bytes": 1000,
            "memory_breakdown_bytes": {"parameters": 600, "activations": 400},
            "loss": self.loss.get(case, [2.0, 1.5]),
            "model": spec["model"],
            "strategy": spec["strategy"],
            "applied": {"attention_implementation": "sdpa"},
        }


def _compare(
    specs: list[CaseSpec], slower: dict[str, float], fail: str | None = None, noise: float = 0.0, **kw: Any
) -> Any:
    log: list[str] = []
    sides = (FakeSide("A", {}, log), FakeSide("B", slower, log, fail, noise))
    return _rounds(specs, sides, Schedule(first=6, step=2, cap=10, floor=0.03, confidence=0.95), **kw), log


def _rounds(specs: list[CaseSpec], sides: tuple[FakeSide, FakeSide], schedule: Schedule, **kw: Any) -> Any:
    return compare_cases(
        specs,
        sides,  # type: ignore[arg-type]  # duck-typed: reset() and run()
        schedule,
        Tolerance(),
        timeout_s=60,
        device_type="cpu",
        mode="alternate",
        **kw,
    )


def test_rounds_run_every_open_case_then_renew_both_forkservers() -> None:
    specs = [_spec(), _spec("adafactor")]
    results, log = _compare(specs, {"tiny-bert-adafactor": 1.10})
    same, slower = results
    assert slower.time.verdict == "slower"
    assert same.time.verdict == "same"
    assert len(slower.log_ratios) == len(same.log_ratios) == 6  # both decided at the first look
    assert log.count("A reset") == log.count("B reset") == 6  # before every round, the first too
    assert log[:2] == ["A reset", "B reset"] or log[:2] == ["B reset", "A reset"]
    first_round = log[2 : log.index("A reset", 2)]
    assert sorted(first_round) == sorted(
        f"{side} tiny-bert-{s} profile=True calibrate=False" for side in "AB" for s in ("vanilla", "adafactor")
    )
    assert all("profile=False" in line for line in log[log.index("A reset", 2) :] if "reset" not in line)


def test_an_undecided_case_runs_to_the_cap_and_a_failing_side_ends_its_case() -> None:
    seen: list[str] = []
    results, _ = _compare(
        [_spec(), _spec("adafactor")],
        {},
        fail="tiny-bert-adafactor",
        noise=0.08,  # B's runs within ±8%: the interval does not fit inside ±3% by the cap
        progress=lambda r, finished: seen.append(f"{r.case} {r.verdict} {finished}"),
    )
    undecided, failed = results
    assert undecided.time.verdict == "undecided"
    assert len(undecided.log_ratios) == 10  # the cap
    assert failed.verdict == "regressed"  # B's run failed where A's ran: the worst regression, not untestable
    assert (failed.error, failed.candidate_failed) == ("B: boom", True)
    assert not failed.log_ratios
    assert "tiny-bert-adafactor regressed True" in seen
    assert seen[-1] == "tiny-bert-vanilla undecided True"  # finished at the cap, said so


class Interrupting(FakeSide):
    """B's side of ``FakeSide``, where Ctrl-C arrives during its ``after``-th run."""

    def __init__(self, after: int, log: list[str], scale: dict[str, float]) -> None:
        super().__init__("B", scale, log)
        self.after = after

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        if sum(line.startswith("B tiny") for line in self.log) + 1 == self.after:
            raise KeyboardInterrupt
        return super().run(spec, timeout_s, env)


def test_an_interrupted_comparison_keeps_every_pair_and_leaves_the_open_cases_undecided() -> None:
    log: list[str] = []
    sides = (FakeSide("A", {}, log), Interrupting(15, log, {"tiny-bert-adafactor": 1.10}))
    heard: list[str] = []
    specs = [_spec(), _spec("adafactor")]
    schedule = Schedule(first=6, step=2, cap=60, floor=0.03, confidence=0.95, alarms=(14,))
    same, open_ = _rounds(
        specs, sides, schedule, progress=lambda r, finished: heard.append(f"{r.case} {r.verdict} {finished}")
    )
    # vanilla is called same at 6 pairs; adafactor (10% slower) may be called slower only at 14,
    # and Ctrl-C arrives during B's 15th run: adafactor's 9th pair, which is dropped.
    assert same.time is not None
    assert open_.time is not None
    assert same.time.verdict == "same"
    assert not same.interrupted
    assert open_.interrupted
    assert open_.verdict == "undecided"
    assert len(open_.log_ratios) == 8  # every pair it finished, past its last look (8)
    assert open_.time.pairs == 8
    assert open_.time.verdict == "undecided"
    assert open_.as_json()["interrupted"] is True
    assert len(open_.as_json()["ratios"]) == 8
    assert heard == [  # each look once: the interrupted round reached none
        "tiny-bert-vanilla same True",
        "tiny-bert-adafactor undecided False",
        "tiny-bert-adafactor undecided False",
    ]


def test_a_look_reached_in_the_interrupted_round_still_decides() -> None:
    log: list[str] = []
    # Ctrl-C during B's 17th run: vanilla (decided at 6) ran 6 of them; adafactor's 11th pair is dropped
    # but its 10th reached the alarm look (10): called slower there, not interrupted.
    sides = (FakeSide("A", {}, log), Interrupting(17, log, {"tiny-bert-adafactor": 1.10}))
    schedule = Schedule(first=6, step=2, cap=60, floor=0.03, confidence=0.95, alarms=(10,))
    _, slower = _rounds([_spec(), _spec("adafactor")], sides, schedule)
    assert slower.time is not None
    assert slower.time.verdict == "slower"
    assert slower.time.pairs == 10
    assert not slower.interrupted


class DiesAtReset(FakeSide):
    """B's side of ``FakeSide``, whose server is gone by its ``after``-th forkserver renewal."""

    def __init__(self, after: int, log: list[str], scale: dict[str, float]) -> None:
        super().__init__("B", scale, log)
        self.after = after

    def reset(self) -> None:
        from perfsuite.ab.envs import EnvError

        super().reset()
        if self.log.count("B reset") == self.after:
            raise EnvError("B (current): its worker did not start (exit -9)")


def test_a_side_that_dies_between_rounds_keeps_every_pair_and_stops_the_open_cases() -> None:
    log: list[str] = []
    heard: list[str] = []
    # vanilla is called same at 6 pairs; adafactor (10% slower) may be called slower only at 14. B's
    # server is gone at the 9th renewal: 8 rounds ran, adafactor's 8 pairs stand, judged at each look.
    sides = (FakeSide("A", {}, log), DiesAtReset(9, log, {"tiny-bert-adafactor": 1.10}))
    schedule = Schedule(first=6, step=2, cap=60, floor=0.03, confidence=0.95, alarms=(14,))
    same, open_ = _rounds(
        [_spec(), _spec("adafactor")],
        sides,
        schedule,
        progress=lambda r, finished: heard.append(f"{r.case} {r.verdict} {finished}"),
    )
    assert same.time is not None
    assert same.time.verdict == "same"
    assert same.stopped is None
    assert open_.stopped == "B (current): its worker did not start (exit -9)"
    assert open_.error is None
    assert open_.verdict == "undecided"
    assert len(open_.log_ratios) == 8
    assert open_.time is not None
    assert open_.time.pairs == 8
    assert open_.as_json()["stopped"] == open_.stopped
    assert heard[-1] == "tiny-bert-adafactor undecided True"  # finished, and said so


def test_a_side_whose_forkserver_never_boots_cannot_be_tested_rather_than_stopped() -> None:
    """Its imports fail at the first boot (a release that resolves but does not import): nothing ran,
    so the error goes to the caller, which says the side cannot be tested (exit 3), not a stopped case."""
    from perfsuite.ab.envs import EnvError

    log: list[str] = []
    sides = (FakeSide("A", {}, log), DiesAtReset(1, log, {}))
    schedule = Schedule(first=6, step=2, cap=60, floor=0.03, confidence=0.95, alarms=(14,))
    with pytest.raises(EnvError, match="its worker did not start"):
        _rounds([_spec()], sides, schedule)


def test_a_duet_worker_waits_for_its_peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(duet.READY, str(tmp_path / "0"))
    monkeypatch.setenv(duet.PEER, str(tmp_path / "1"))
    monkeypatch.setenv(duet.STOP, str(tmp_path / "stop"))
    arrived = threading.Timer(0.2, lambda: (tmp_path / "1.timed").touch())
    arrived.start()
    duet.together("timed", wait_s=10)  # returns once the peer's mark appears
    assert (tmp_path / "0.timed").exists()
    (tmp_path / "stop").touch()
    with pytest.raises(duet.PeerGone, match="other side's run failed"):
        duet.together("again", wait_s=10)
    (tmp_path / "stop").unlink()
    with pytest.raises(duet.PeerGone, match="did not reach 'late' within 0.1 s"):
        duet.together("late", wait_s=0.1)


def test_outside_a_duet_nothing_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (duet.READY, duet.PEER, duet.CPUS):
        monkeypatch.delenv(name, raising=False)
    duet.together("timed", wait_s=0)
    before = os.sched_getaffinity(0)
    duet.pin()
    assert os.sched_getaffinity(0) == before
    assert pairs.MODES == ("auto", "duet", "alternate")


@pytest.mark.parametrize("stop", [False, True])
def test_memory_and_loss_are_told_at_the_first_pair_and_may_end_the_case_at_its_first_look(stop: bool) -> None:
    """A loss 4 times too large is known at pair 1; the time needs its pairs. Said at once, and
    with ``stop_on_regression`` the case ends at its time's first look, with the verdict that look reached:
    a step 20% slower too is called slower there."""
    from perfsuite.ab.said import checks_line

    log: list[str] = []
    changed = {"tiny-bert-grad_accum": [8.0, 6.0]}
    sides = (FakeSide("A", {}, log), FakeSide("B", {"tiny-bert-grad_accum": 1.2}, log, loss=changed))
    told: list[tuple[str, str, int]] = []

    def on_checks(result: Any) -> None:
        told.append((result.case, checks_line(result), len(result.log_ratios)))

    schedule = Schedule(first=6, step=2, cap=10, floor=0.03, confidence=0.95)
    same, worse = _rounds([_spec(), _spec("grad_accum")], sides, schedule, on_checks=on_checks, stop_on_regression=stop)
    assert sorted(told) == [
        ("tiny-bert-grad_accum", "regressed: loss max |Δ| 6 (final 1.5 → 6) at pair 1", 1),
        ("tiny-bert-vanilla", "memory and loss as base at pair 1 (time: pairs to come)", 1),
    ]
    assert worse.verdict == "regressed"
    # Decided at the first look either way (what the flag changes shows only where that look cannot decide).
    assert (len(worse.log_ratios), worse.time.verdict) == (6, "slower")
    assert same.verdict == "same"  # the other case goes on to its time verdict either way
    assert len(same.log_ratios) == 6
    # Pairs too noisy to decide the time at the first look: it ends there undecided, else goes on.
    log.clear()
    noisy = (FakeSide("A", {}, log), FakeSide("B", {"tiny-bert-grad_accum": 1.2}, log, loss=changed, noise=0.3))
    (worse,) = _rounds([_spec("grad_accum")], noisy, schedule, stop_on_regression=stop)
    assert worse.verdict == "regressed"
    assert (len(worse.log_ratios), worse.time.verdict) == ((6, "undecided") if stop else (8, "slower"))


def _at_peak(peak: int, **breakdown: int) -> CaseRecord:
    figures: dict[str, Any] = {"status": "ok", "device": "cpu", "time_class": "fake", "model": "team-tf"}
    figures["strategy"] = "vanilla"
    figures |= {"step_time_s": {"median": 0.1, "samples": [0.1] * 4}, "loss": [2.0, 1.5]}
    figures |= {"peak_memory_bytes": peak, "memory_breakdown_bytes": breakdown, "applied": {}}
    return CaseRecord.from_json(figures, "team-tf-vanilla")


MIB = 2**20
WIDE = _at_peak(8 * MIB, activations=6 * MIB, gradients=780, temporaries=2 * MIB)
NARROW = _at_peak(6 * MIB, activations=4 * MIB + 300_000, gradients=70_000, temporaries=MIB + 700_000)


@pytest.mark.parametrize(
    ("a", "b", "verdict", "line"),
    [
        # A lower peak is less memory, though a category grew at its moment: the moment moved, and
        # a higher peak is more, though one shrank there: neither is a gain.
        (
            WIDE,
            NARROW,
            "improved",
            "improved: peak memory -25.0%, memory: activations -28.6%, memory: temporaries -16.6%; "
            "moved with the peak's moment: memory: gradients +0.07 MiB at pair 1",
        ),
        (
            NARROW,
            WIDE,
            "regressed",
            "regressed: peak memory +33.3%, memory: activations +40.0%, memory: temporaries +19.9%; "
            "moved with the peak's moment: memory: gradients -98.9% at pair 1",
        ),
        # The same peak, another make-up: a category that grew counts.
        (
            WIDE,
            _at_peak(8 * MIB, activations=5 * MIB, gradients=MIB + 780, temporaries=2 * MIB),
            "regressed",
            "regressed: memory: gradients +1.00 MiB; improved: memory: activations -16.7% at pair 1",
        ),
    ],
)
def test_a_lower_peak_is_an_improvement_whatever_moved_at_its_moment(
    a: CaseRecord, b: CaseRecord, verdict: str, line: str
) -> None:
    from perfsuite.ab.said import checks_line
    from perfsuite.reports.ab import rows

    result = rounds.CaseResult(case="team-tf-vanilla")
    rounds._memory_and_loss(result, a, b, Tolerance(), pairs.Pair((a, b), "alternate", 0.0))
    assert result.verdict == verdict
    assert checks_line(result) == line
    # The table's breakdown cell marks what moved with the peak's moment, and nothing else.
    moment = line.partition("moved with the peak's moment: ")[2].removesuffix(" at pair 1").split(", ")
    cell = rows({"cases": [result.as_json()]})[0][5].split(", ")
    marked = [c.removesuffix(" (the peak's moment moved)") for c in cell if c.endswith("(the peak's moment moved)")]
    assert [f"memory: {c}" for c in marked] == [m for m in moment if m]


def test_a_candidate_that_starts_from_other_weights_changes_the_loss_and_says_why() -> None:
    """Another random generator or initialisation in the candidate is another loss curve: the
    case regressed at pair 1, the message naming the weights, not a divergence at step 0."""

    class Weighted(FakeSide):
        def __init__(self, *args: Any, digest: str, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.digest = digest

        def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
            return super().run(spec, timeout_s, env).updated(initial_weights=self.digest)

    log: list[str] = []
    other = {"tiny-bert-vanilla": [2.5, 1.9]}  # the other weights' curve
    sides = (Weighted("A", {}, log, digest="xxh3_128:aa"), Weighted("B", {}, log, digest="xxh3_128:bb", loss=other))
    schedule = Schedule(first=6, step=2, cap=10, floor=0.03, confidence=0.95)
    (result,) = _rounds([_spec()], sides, schedule, stop_on_regression=True)
    assert result.verdict == "regressed"
    assert len(result.log_ratios) == 6  # its time's first look
    (loss,) = [c for c in result.checks if c.metric == "loss"]
    assert not loss.ok
    assert not loss.compared
    assert "other initial weights than the baseline's (xxh3_128:bb against xxh3_128:aa" in loss.message
    from perfsuite.ab.said import checks_line

    assert checks_line(result) == "regressed: loss from other initial weights (weights aa → weights bb) at pair 1"


class Seeded(FakeSide):
    """A side whose initial weights and loss curve follow the seed asked (``curve(seed)``), and whose
    run at ``fail_seed`` fails; each seed it ran is logged."""

    def __init__(
        self, *args: Any, digest: str, curve: Any, fail_seed: int | None = None, by_seed: bool = True, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.digest, self.curve, self.fail_seed, self.by_seed = digest, curve, fail_seed, by_seed

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        seed = spec["seed"]
        self.log.append(f"{self.name} seed {seed} profile={spec['profile']}")
        if seed == self.fail_seed:
            return CaseRecord.from_json({**_identity(spec), "status": "error", "error": "boom"}, "x")
        record = super().run(spec, timeout_s, env)
        weights = f"xxh3_128:{self.digest}{seed if self.by_seed else ''}"
        return record.updated(initial_weights=weights, loss=tuple(self.curve(seed)))


def _seeded(
    b_curve: list[float], *, b_digest: str = "bb", fail_seed: int | None = None, a_digest_by_seed: bool = True
) -> tuple[Any, list[str]]:
    """One case compared with ``--loss-seeds 5``: A's curves move a little from seed to seed."""
    log: list[str] = []

    def a_curve(seed: int) -> list[float]:
        return [2.0 + 0.01 * (seed * 3 % 5), 1.5 + 0.01 * (seed * 7 % 5)]

    sides = (
        Seeded("A", {}, log, digest="aa", curve=a_curve, fail_seed=fail_seed, by_seed=a_digest_by_seed),
        Seeded("B", {}, log, digest=b_digest, curve=lambda seed: b_curve),
    )
    schedule = Schedule(first=6, step=2, cap=10, floor=0.03, confidence=0.95)
    (result,) = _rounds([_spec()], sides, schedule, loss_seeds=5)
    return result, log


def test_a_candidate_from_other_weights_is_judged_against_the_bases_curves_at_other_seeds() -> None:
    """Other initial weights (a re-seeded or re-drawn initialisation): A runs the case at 5 other seeds,
    unprofiled, once, at the first pair; B's curve whose mean lies within their 99% prediction interval
    converges as A's does at another seed (no regression, said), one far above it regressed; a run at
    another seed that fails leaves the loss not compared, saying why; alike weights run no other seed."""
    from perfsuite.ab.said import checks_line

    result, log = _seeded([2.02, 1.51])
    assert [line for line in log if line.startswith("A seed") and not line.startswith("A seed 0")] == [
        f"A seed {seed} profile=False" for seed in range(1, 6)
    ]
    (loss,) = [c for c in result.checks if c.metric == "loss"]
    assert (loss.ok, loss.seeds) == (True, 6)
    assert result.verdict == "same"
    assert checks_line(result).startswith(
        "memory as base, loss from other initial weights, as at another seed (mean loss step 0 2.02, step 1 1.51; "
        "the base's 6 seeds' 99% intervals: step 0 2.017 ± 0.084, step 1 1.517 ± 0.084)"
    )
    result, _ = _seeded([2.5, 1.9])
    assert result.verdict == "regressed"
    assert checks_line(result).startswith("regressed: loss from other initial weights, higher than at another seed (")
    (loss,) = [c for c in result.checks if c.metric == "loss"]
    assert loss.message.endswith(
        "step 0 2.5 in 2.017 ± 0.084; step 1 1.9 in 1.517 ± 0.084: higher than the base's at another seed (step 0)"
    )
    result, _ = _seeded([2.02, 1.51], fail_seed=3)
    (loss,) = [c for c in result.checks if c.metric == "loss"]
    assert (loss.ok, loss.compared, loss.seeds) == (False, False, None)
    assert loss.message.endswith("the base's curves at other seeds cannot judge it: at seed 3: A: boom")
    # A model that ignores the seed (a hard-coded one): its runs at other seeds start alike, and judge nothing.
    result, _ = _seeded([2.02, 1.51], a_digest_by_seed=False)
    (loss,) = [c for c in result.checks if c.metric == "loss"]
    assert (loss.ok, loss.compared) == (False, False)
    assert loss.message.endswith(
        "at seed 1: it started from the same initial weights: the case's seed does not draw them"
    )
    result, log = _seeded([2.0, 1.5], b_digest="aa")
    assert not [line for line in log if line.startswith("A seed") and not line.startswith("A seed 0")]
    assert result.verdict == "same"


def test_a_side_compared_again_reuses_its_curves_at_other_seeds() -> None:
    """A bisection compares its good end with each point: the good end runs each other seed once, the
    first time a point starts from other weights; a later point is judged against the same curves, and
    a seed whose run failed is run again."""
    log: list[str] = []

    def a_curve(seed: int) -> list[float]:
        return [2.0 + 0.01 * (seed * 3 % 5), 1.5 + 0.01 * (seed * 7 % 5)]

    good = Seeded("A", {}, log, digest="aa", curve=a_curve, fail_seed=3)
    schedule = Schedule(first=1, step=1, cap=1, floor=0.03, confidence=0.95)

    def point(curve: list[float]) -> Any:
        (result,) = _rounds(
            [_spec()], (good, Seeded("B", {}, log, digest="bb", curve=lambda _: curve)), schedule, loss_seeds=5
        )
        return result

    def other_seeds_run() -> list[str]:
        runs = [line for line in log if line.startswith("A seed") and not line.startswith("A seed 0")]
        log.clear()
        return runs

    point([2.02, 1.51])
    assert other_seeds_run() == [f"A seed {seed} profile=False" for seed in (1, 2, 3)]  # seed 3 fails
    good.fail_seed = None
    first = point([2.02, 1.51])
    assert other_seeds_run() == [f"A seed {seed} profile=False" for seed in (3, 4, 5)]  # 1 and 2 kept
    again, worse = point([2.02, 1.51]), point([2.5, 1.9])
    assert other_seeds_run() == []
    assert again.checks == first.checks
    (loss,) = [c for c in again.checks if c.metric == "loss"]
    assert (loss.ok, loss.seeds) == (True, 6)
    assert worse.verdict == "regressed"


def test_a_loss_that_moved_within_its_tolerance_is_said_with_where_it_ended() -> None:
    """On one stack a curve moves only where the code's arithmetic changed (a dropout, a reordered sum):
    within its tolerance it is no regression, but the line and the table say it moved, and where each
    side's curve ended, as they do for a loss that regressed."""
    from perfsuite.ab.said import checks_line
    from perfsuite.reports.ab import rows

    log: list[str] = []
    moved = {"tiny-bert-vanilla": [2.0, 1.5005], "tiny-bert-grad_accum": [2.0, 6.0]}
    sides = (FakeSide("A", {}, log), FakeSide("B", {}, log, loss=moved))
    schedule = Schedule(first=6, step=2, cap=6, floor=0.03, confidence=0.95)
    within, worse = _rounds([_spec(), _spec("grad_accum")], sides, schedule)
    assert within.verdict == "same"
    assert checks_line(within) == (
        "memory as base, loss within its tolerance (final 1.5 → 1.5005, max |Δ| 0.0005 from step 1) at pair 1 "
        "(time: pairs to come)"
    )
    assert checks_line(worse) == "regressed: loss max |Δ| 4.5 (final 1.5 → 6) at pair 1"
    payload = {"cases": [within.as_json(), worse.as_json()]}
    assert [row[-1] for row in rows(payload)] == [
        "final 1.5 → 1.5005, max |Δ| 0.0005 from step 1, within its tolerance",
        "final 1.5 → 6, max |Δ| 4.5 from step 1",
    ]
    same = (FakeSide("A", {}, log), FakeSide("B", {}, log))
    (alike,) = _rounds([_spec()], same, schedule)
    assert checks_line(alike) == "memory and loss as base at pair 1 (time: pairs to come)"
    assert rows({"cases": [alike.as_json()]})[0][-1] == "identical, final 1.5"
    other = {**worse.as_json(), "checks": [{"metric": "loss", "ok": False, "compared": False}]}
    longer = {**within.as_json(), "loss": {"a": [2.0], "b": [2.0, 1.5], "max_abs_diff": None}}
    assert [row[-1] for row in rows({"cases": [other, longer]})] == [
        "final 1.5 → 6, max |Δ| 4.5 from step 1, other initial weights",  # not compared: said why
        "1 → 2 steps",
    ]


class Dying(FakeSide):
    """A side whose server stops answering with a record (it died, or sent what is no record)."""

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        from perfsuite.ab.envs import EnvError

        raise EnvError("its server answered: applied is None, not an object")


def test_an_alternating_pair_whose_side_answers_no_record_fails_that_pair_not_the_run() -> None:
    log: list[str] = []
    fields = {"model": "tiny-bert", "strategy": "vanilla", "profile": False, "calibrate": False}
    pair = pairs.alternate((FakeSide("A", {}, log), Dying("B", {}, log)), fields, 0, 30)  # type: ignore[arg-type]
    assert pair.error == "B: its server answered: applied is None, not an object"
    assert math.isnan(pair.log_ratio)


class Unimportable(FakeSide):
    """A side whose server says, naming itself and its environment, that its code does not import."""

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        from perfsuite.ab.envs import EnvError

        raise EnvError(f"{self.name} (current, HEAD^1): UnknownNameError: unknown model 'mine'")


def test_a_side_whose_error_names_it_is_not_named_twice() -> None:
    fields = {"model": "tiny-bert", "strategy": "vanilla", "profile": False, "calibrate": False}
    sides = (FakeSide("A", {}, []), Unimportable("B", {}, []))
    pair = pairs.alternate(sides, fields, 0, 30)  # type: ignore[arg-type]
    assert pair.error == "B (current, HEAD^1): UnknownNameError: unknown model 'mine'"


class Skipping(FakeSide):
    """A side that skips ``skip`` as the suite skips a strategy its engine does not apply."""

    def __init__(self, name: str, log: list[str], skip: str) -> None:
        super().__init__(name, {}, log)
        self.skip = skip

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        case = f"{spec['model']}-{spec['strategy']}"
        if case != self.skip:
            return super().run(spec, timeout_s, env)
        self.log.append(f"{self.name} {case} skipped")
        return CaseRecord.from_json({**_identity(spec), "status": "skipped", "error": "its engine skips it"}, case)


def test_a_case_both_sides_skip_is_skipped_and_one_side_skips_is_cannot_test() -> None:
    """A strategy a project's engine does not apply is *skipped* on both sides, as the suite reports it,
    not *cannot test*; where only one side skips it, the two cannot be compared."""
    log: list[str] = []
    fields = {"model": "tiny-bert", "strategy": "fp16", "profile": False, "calibrate": False}
    both = (Skipping("A", log, "tiny-bert-fp16"), Skipping("B", log, "tiny-bert-fp16"))
    for index, order in ((0, "AB"), (1, "BA")):  # whichever side runs first, the other runs too
        log.clear()
        pair = pairs.alternate(both, fields, index, 30)  # type: ignore[arg-type]
        assert (pair.skipped, pair.error) == (True, "its engine skips it")
        assert log == [f"{side} tiny-bert-fp16 skipped" for side in order]
    one = (Skipping("A", log, "tiny-bert-fp16"), FakeSide("B", {}, log))
    pair = pairs.alternate(one, fields, 0, 30)  # type: ignore[arg-type]
    assert (pair.skipped, pair.error) == (False, "A: its engine skips it")
    result = rounds.CaseResult(case="tiny-bert-fp16")
    rounds._add(result, pairs.alternate(both, fields, 0, 30), 0, Tolerance())  # type: ignore[arg-type]
    assert (result.verdict, result.as_json()["error"]) == ("skipped", "its engine skips it")
    result = rounds.CaseResult(case="tiny-bert-fp16")
    rounds._add(result, pairs.alternate(one, fields, 0, 30), 0, Tolerance())  # type: ignore[arg-type]
    assert result.verdict == "cannot test"


def test_a_duet_pair_that_failed_names_the_side_whose_own_run_failed() -> None:
    """The base stopped because its peer's run failed: the candidate's own error is the cause."""
    from types import SimpleNamespace

    sides = (SimpleNamespace(name="base"), SimpleNamespace(name="candidate"))
    gone = SimpleNamespace(ok=False, status="failed", error="PeerGone: duet: the other side's run failed")
    own = SimpleNamespace(ok=False, status="failed", error="ModuleNotFoundError: No module named 'torch'")
    pair = pairs._unpaired(sides, (gone, own), [None, None], "duet")  # type: ignore[arg-type]
    assert pair is not None
    assert pair.error == "candidate: ModuleNotFoundError: No module named 'torch'"
    assert pair.candidate_failed  # the base ran until its peer failed: the candidate's failure, a regression
    both = pairs._unpaired(sides, (own, gone), [None, None], "duet")  # type: ignore[arg-type]
    assert both is not None
    assert both.error == "base: ModuleNotFoundError: No module named 'torch'"
    assert not both.candidate_failed  # the base's own run failed: the case cannot be compared
    each = pairs._unpaired(sides, (own, own), [None, None], "duet")  # type: ignore[arg-type]
    assert each is not None
    assert not each.candidate_failed


def test_a_candidate_failure_is_a_regression_only_where_the_base_ran_first_or_beside_it() -> None:
    """An even pair runs A first: B's failure after A ran is the candidate's. An odd pair runs B first:
    its failure is said, but A never ran in that pair, so nothing is claimed; a failure of both is A's.
    A duet's candidate that only waited for a slow base (PeerGone) is no failure of its own."""
    from types import SimpleNamespace

    log: list[str] = []
    fields = {"model": "tiny-bert", "strategy": "vanilla", "profile": False, "calibrate": False}
    sides = (FakeSide("A", {}, log), FakeSide("B", {}, log, fail="tiny-bert-vanilla"))
    pair = pairs.alternate(sides, fields, 0, 30)  # type: ignore[arg-type]
    assert (pair.error, pair.candidate_failed) == ("B: boom", True)
    pair = pairs.alternate(sides, fields, 1, 30)  # type: ignore[arg-type]
    assert (pair.error, pair.candidate_failed) == ("B: boom", False)
    both = (FakeSide("A", {}, log, fail="tiny-bert-vanilla"), FakeSide("B", {}, log, fail="tiny-bert-vanilla"))
    pair = pairs.alternate(both, fields, 0, 30)  # type: ignore[arg-type]
    assert (pair.error, pair.candidate_failed) == ("A: boom", False)
    named = (SimpleNamespace(name="base"), SimpleNamespace(name="candidate"))
    ok = SimpleNamespace(ok=True, status="ok", error=None)
    waited = SimpleNamespace(ok=False, status="failed", error="PeerGone: duet: the peer did not reach 'timed'")
    slow_base = pairs._unpaired(named, (ok, waited), [None, None], "duet")  # type: ignore[arg-type]
    assert slow_base is not None
    assert not slow_base.candidate_failed


def test_only_a_failure_at_the_first_pair_makes_the_case_regressed() -> None:
    """B's runs passed, then one failed (a flake, the machine): the case cannot be compared, as before."""

    class Flaky(FakeSide):
        def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
            self.fail = "tiny-bert-vanilla" if sum(line.startswith("B ") for line in self.log) >= 2 else None
            return super().run(spec, timeout_s, env)

    log: list[str] = []
    sides = (FakeSide("A", {}, log), Flaky("B", {}, log))
    schedule = Schedule(first=6, step=2, cap=10, floor=0.03, confidence=0.95)
    (result,) = _rounds([_spec()], sides, schedule)
    assert (result.verdict, result.error, result.candidate_failed) == ("cannot test", "B: boom", False)
