"""``perfsuite ab --jobs``: the lanes planned on a machine's cores and GPUs (pure functions, any core
set), and rounds run on several lanes of fake sides (no workers): the same pairs and verdicts as on
one, and ``--jobs 1`` exactly the single lane's sequence of pairs."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_ab_rounds import FakeSide, _spec

from perfsuite.ab.lanes import Lane, Need, Plan, Slot, next_start, pick_gpu, plan_for, plan_lanes
from perfsuite.ab.pairs import duet_core
from perfsuite.ab.rounds import CaseResult, compare_cases
from perfsuite.cli import main
from perfsuite.core.paired import Schedule
from perfsuite.core.record import CaseRecord
from perfsuite.core.tolerance import Tolerance
from perfsuite.worker.duet import CPUS

two_cores = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a duet needs two cores; this machine has one")


def test_duets_get_disjoint_core_pairs_and_the_cores_left_over_alternate() -> None:
    plan = plan_lanes(3, cores=range(8), device_type="cpu", duets=2, alternates=3)
    assert [s.cores for s in plan.slots] == [(0, 1), (2, 3), (4, 5, 6, 7)]
    assert [(s.duets, s.alternates) for s in plan.slots] == [(True, False), (True, False), (False, True)]
    assert plan.describe() == "perfsuite: 3 lanes: duets on cores 0-1, 2-3; alternating on cores 4-7"
    many = plan_lanes(7, cores=[15, *range(15)], device_type="cpu", duets=31, alternates=4)
    pairs = [s.duet_cores for s in many.slots]
    assert pairs == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13)]  # two each, none shared
    assert not any(s.alternates for s in many.slots)  # --jobs 7 is seven lanes: the alternating cases come after
    assert many.need("alternate", ranks=True) == "whole"
    assert many.need("duet", ranks=False) == "duet"
    # No more duet lanes than duet cases; a lane of their own needs two cores left over.
    assert [s.cores for s in plan_lanes(4, cores=range(9), device_type="cpu", duets=3, alternates=1).slots] == [
        (0, 1),
        (2, 3),
        (4, 5),
        (6, 7, 8),
    ]


@pytest.mark.parametrize(
    ("jobs", "cores", "duets", "alternates"),
    [(1, range(16), 31, 4), (4, range(8), 0, 4), (2, range(5), 1, 0), (1, [0], 0, 3)],
    ids=["jobs-1", "nothing-to-share", "one-duet", "one-core"],
)
def test_one_lane_is_the_single_lane_of_old(jobs: int, cores: range | list[int], duets: int, alternates: int) -> None:
    """Whatever the machine, one lane runs as ``perfsuite ab`` always ran: unpinned, duets on the first two cores."""
    plan = plan_lanes(jobs, cores=cores, device_type="cpu", duets=duets, alternates=alternates)
    assert plan == Plan()
    assert plan.slots[0].duet_cores is None  # run_pair takes the first two cores this process may use
    assert plan.need("alternate", ranks=True) == "alternate"
    assert plan.describe() is None


@pytest.mark.parametrize(
    ("jobs", "device_type", "message"),
    [
        (0, "cpu", "--jobs 0: must be at least 1"),
        (3, "cpu", "--jobs 3: 3 lanes need 6 cores, two each; this process may use 5 (0-4)"),
        (3, "cuda", "--jobs 3: 3 lanes need a GPU each; 2 visible (0, 1)"),
    ],
)
def test_more_lanes_than_the_machine_allows_is_one_clear_error(jobs: int, device_type: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}$"):
        plan_lanes(jobs, cores=range(5), gpus=["0", "1"], device_type=device_type, duets=4, alternates=4)


def test_the_cores_of_a_duet_swap_sides_every_pair() -> None:
    assert [(duet_core((4, 5), 0, i), duet_core((4, 5), 1, i)) for i in range(4)] == [(4, 5), (5, 4), (4, 5), (5, 4)]


def test_gpus_one_case_each_and_a_case_moves_between_them() -> None:
    plan = plan_lanes(4, cores=(), gpus=["0", "1", "2", "3"], device_type="cuda", duets=0, alternates=6)
    assert plan.gpus == ("0", "1", "2", "3")
    assert len(plan.slots) == 4
    assert all(s.cores == () and s.alternates for s in plan.slots)
    assert plan.need("alternate", ranks=False) == "alternate"
    assert plan.need("alternate", ranks=True) == "whole"  # a multi-rank case takes every GPU, alone
    assert plan_lanes(4, cores=(), gpus=["0", "1", "2", "3"], device_type="cuda", duets=0, alternates=1) == Plan()
    assert pick_gpu(["0", "1", "2"], []) == "0"
    assert pick_gpu(["0", "1", "2"], ["0", "1"]) == "2"  # one it has not run on
    assert pick_gpu(["0", "1"], ["0", "1", "1", "0"]) == "1"  # as often on each: the one longest ago
    assert pick_gpu(["1"], ["1"]) == "1"  # the only free one


def test_a_case_that_fits_no_lane_waits_for_the_whole_machine() -> None:
    slots = (Slot((0, 1), alternates=False), Slot((2, 3), alternates=False))
    needs: list[Need] = ["duet", "duet", "whole"]
    assert next_start(needs, [0, 1], busy=0, whole=False, slots=slots) == (0, 0)
    assert next_start(needs[2:], [1], busy=1, whole=False, slots=slots) is None  # a duet still runs
    assert next_start(needs[2:], [0, 1], busy=0, whole=False, slots=slots) == (0, 0)
    assert next_start(["duet"], [1], busy=1, whole=True, slots=slots) is None  # nothing beside it
    alternate_lane = (Slot((0, 1), alternates=False), Slot((2, 3, 4), duets=False))
    assert next_start(["duet", "alternate"], [1], busy=1, whole=False, slots=alternate_lane) == (1, 1)
    assert next_start(["duet"], [1], busy=1, whole=False, slots=alternate_lane) is None


def test_plan_for_counts_the_cases_that_run_after_the_others() -> None:
    specs = [_spec(), _spec("adafactor"), _spec("dataloader"), _spec("ddp", world_size=2)]
    plan = plan_for(specs, "cpu", "auto", 2, cores=range(4))
    if len(os.sched_getaffinity(0)) >= 2:  # duets are possible here
        assert plan.after == 2
        assert plan.describe() == (
            "perfsuite: 2 lanes: duets on cores 0-1, 2-3; 2 case(s) after the others, one at a time"
        )
    assert plan_for(specs, "cpu", "auto", 1, cores=range(4)) == Plan()
    on_gpus = plan_for(specs, "cuda", "auto", 2, gpus=["0", "1"])
    assert (on_gpus.gpus, on_gpus.after) == (("0", "1"), 1)


class Recording(FakeSide):
    """A fake side that notes each run's core or GPU, takes a moment (so lanes overlap), and counts
    how many of its kind run at once."""

    running = 0
    most = 0
    lock = threading.Lock()
    noting = threading.Lock()
    lane: tuple[int, ...] = ()

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
        with Recording.lock:
            Recording.running += 1
            Recording.most = max(Recording.most, Recording.running)
        try:
            time.sleep(0.01 + 0.002 * (len(spec["strategy"]) % 4))  # lanes overlap, finishing out of order
            with Recording.noting:  # its line and what is added to it, with no other lane's line between
                record = super().run(spec, timeout_s, env)
                env = env or {}
                if CPUS in env:
                    self.log[-1] += f" core={env[CPUS]}"
                if "CUDA_VISIBLE_DEVICES" in env:
                    self.log[-1] += f" gpu={env['CUDA_VISIBLE_DEVICES']}"
                if self.lane:
                    self.log[-1] += f" lane={'-'.join(map(str, self.lane))}"
        finally:
            with Recording.lock:
                Recording.running -= 1
        return record


def _field(line: str, name: str) -> str | None:
    """``name=value`` of a run's log line."""
    return next((word.split("=")[1] for word in line.split() if word.startswith(f"{name}=")), None)


SPECS = ["vanilla", "adafactor", "lora", "bf16", "dataloader"]
B_SCALE = {"tiny-bert-adafactor": 1.10, "tiny-bert-bf16": 1.02}


def _run(lanes: int, mode: str = "auto", specs: list[str] = SPECS, **kw: Any) -> tuple[list[CaseResult], list[str]]:
    log: list[str] = []

    def sides(slot: Slot) -> tuple[FakeSide, FakeSide]:
        a, b = Recording("A", {}, log), Recording("B", B_SCALE, log, noise=0.04)
        a.lane = b.lane = slot.cores
        return a, b

    lanes_of = (Slot((10, 11), alternates=False), Slot((12, 13), alternates=False), Slot((14, 15, 16), duets=False))
    if mode == "alternate":
        lanes_of = (Slot(duets=False),) * 3
    plan = kw.pop("plan", None) or (Plan(lanes_of[:lanes]) if lanes > 1 else Plan())
    Recording.most = 0
    results = compare_cases(
        [_spec(s) for s in specs],
        [Lane(sides(slot), slot) for slot in plan.slots],  # type: ignore[arg-type]  # duck-typed sides
        Schedule(first=6, step=2, cap=12, floor=0.03, confidence=0.95),
        Tolerance(),
        timeout_s=60,
        device_type=kw.pop("device_type", "cpu"),
        mode=mode,  # type: ignore[arg-type]
        plan=plan,
        seed=3,
        **kw,
    )
    return results, log


def _rounds(log: list[str]) -> list[list[str]]:
    """Each round's pairs: ``case AB`` (alternating, A first) or ``case A<core> B<core>`` (a duet)."""
    rounds: list[list[str]] = [[]]
    runs: dict[str, list[str]] = {}
    for line in log:
        if line == "A reset" and rounds[-1]:  # every lane's A renews before a round
            rounds.append([])
        if "reset" in line:
            continue
        side, case = line.split()[:2]
        ran = runs.setdefault(case.removeprefix("tiny-bert-"), [])
        core = _field(line, "core")
        ran.append(side + (core or ""))
        if len(ran) == 2:
            rounds[-1].append(f"{case.removeprefix('tiny-bert-')} {' '.join(sorted(ran)) if core else ''.join(ran)}")
            ran.clear()
    return rounds


@two_cores
def test_one_lane_runs_exactly_the_pairs_it_always_ran() -> None:
    """The single lane's sequence, recorded before lanes existed (seed 3): the round order, A or B
    first, the duet's cores (as indexes of this machine's) swapping sides every pair."""
    _, log = _run(1)
    first, second = sorted(os.sched_getaffinity(0))[:2]  # a single lane's duets run there
    seen = [[pair.replace(f"A{first}", "A0").replace(f"B{second}", "B1") for pair in r] for r in _rounds(log)]
    seen = [[pair.replace(f"A{second}", "A1").replace(f"B{first}", "B0") for pair in r] for r in seen]
    duet0, duet1 = "A0 B1", "A1 B0"
    assert seen == [
        [f"adafactor {duet0}", "dataloader AB", f"bf16 {duet0}", f"lora {duet0}", f"vanilla {duet0}"],
        ["dataloader BA", f"vanilla {duet1}", f"adafactor {duet1}", f"lora {duet1}", f"bf16 {duet1}"],
        [f"adafactor {duet0}", f"bf16 {duet0}", f"lora {duet0}", "dataloader AB", f"vanilla {duet0}"],
        [f"adafactor {duet1}", "dataloader BA", f"lora {duet1}", f"vanilla {duet1}", f"bf16 {duet1}"],
        [f"vanilla {duet0}", "dataloader AB", f"bf16 {duet0}", f"lora {duet0}", f"adafactor {duet0}"],
        [f"vanilla {duet1}", f"lora {duet1}", f"adafactor {duet1}", f"bf16 {duet1}", "dataloader BA"],
        ["dataloader AB", f"bf16 {duet0}", f"lora {duet0}", f"vanilla {duet0}"],
        [f"bf16 {duet1}", f"vanilla {duet1}", "dataloader BA", f"lora {duet1}"],
        [f"bf16 {duet0}"],
        [f"bf16 {duet1}"],
        [f"bf16 {duet0}"],
        [f"bf16 {duet1}"],
    ]
    assert Recording.most == 2  # a duet's two sides, nothing else


def _figures(results: list[CaseResult]) -> list[tuple[Any, ...]]:
    return [
        (r.case, r.mode, r.verdict, r.time, r.log_ratios, r.steps_a, r.steps_b, r.checks, r.loss_a, r.memory_b)
        for r in results
    ]


@two_cores
@pytest.mark.parametrize("mode", ["auto", "alternate"])
def test_several_lanes_give_every_case_the_same_pairs_and_verdicts(mode: str) -> None:
    one, _ = _run(1, mode)
    three, log = _run(3, mode)
    assert _figures(three) == _figures(one)
    assert [r.verdict for r in one] == ["same", "regressed", "same", "undecided", "same"]
    assert Recording.most >= 3  # the lanes overlapped
    assert log.count("A reset") == log.count("B reset") == 3 * 12  # every lane's, before every round
    runs = [line for line in log if "reset" not in line]
    if mode == "auto":  # duets on their lane's two cores, swapping sides; the DataLoader case on the cores left over
        assert {_field(line, "lane") for line in runs if "dataloader" in line} == {"14-15-16"}
        for case in ("vanilla", "adafactor", "lora", "bf16"):
            a = [line for line in runs if line.startswith(f"A tiny-bert-{case} ")]
            b = [line for line in runs if line.startswith(f"B tiny-bert-{case} ")]
            for pair, (x, y) in enumerate(zip(a, b, strict=True)):
                assert _field(x, "lane") == _field(y, "lane") in {"10-11", "12-13"}
                core_a, core_b = int(_field(x, "core") or -1), int(_field(y, "core") or -1)
                assert f"{min(core_a, core_b)}-{max(core_a, core_b)}" == _field(x, "lane")
                assert core_a % 2 == pair % 2  # A on the lane's first core in even pairs, its second in odd


@two_cores
def test_a_case_that_fits_no_lane_runs_after_the_duets_alone() -> None:
    plan = Plan((Slot((10, 11), alternates=False), Slot((12, 13), alternates=False)))
    one, _ = _run(1)
    two, log = _run(2, plan=plan)
    assert _figures(two) == _figures(one)
    rounds = _rounds(log)
    assert all(r[-1].startswith("dataloader") for r in rounds[:8])  # each round's last


def test_on_gpus_the_sides_alternate_on_one_gpu_and_a_case_moves_between_them() -> None:
    plan = Plan((Slot(duets=False), Slot(duets=False)), gpus=("0", "1"))
    specs = ["bf16", "vanilla"]  # both start together each round: the one first in order picks, the other swaps
    results, log = _run(2, specs=specs, plan=plan, device_type="cuda")
    assert all(r.mode == "alternate" for r in results)
    gpus: dict[str, list[str]] = {}
    for line in log:
        if "reset" in line:
            continue
        side, case = line.split()[:2]
        gpus.setdefault(f"{side} {case}", []).append(line.split("gpu=")[1])
    assert len(gpus["A tiny-bert-bf16"]) == 12  # undecided at the cap
    for case in (f"tiny-bert-{s}" for s in specs):
        assert gpus[f"A {case}"] == gpus[f"B {case}"]  # both sides of a pair on the same GPU
        on = gpus[f"A {case}"]
        assert all(on[i] != on[i + 1] for i in range(len(on) - 1)), on  # each pair on the other GPU


def test_ctrl_c_with_several_lanes_drops_every_pair_in_flight_and_keeps_every_finished_case() -> None:
    """Ctrl-C reaches the comparison's thread (here raised by a lane's side) while the other lane's
    pair still runs: that pair is dropped, the case decided before is kept, the open ones undecided."""

    class Stopping(Recording):
        def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> CaseRecord:
            runs = sum(line.startswith(f"B tiny-bert-{spec['strategy']} ") for line in self.log)
            if runs == 8 and spec["strategy"] == "adafactor":
                raise KeyboardInterrupt  # during adafactor's 9th pair
            if runs == 8 and spec["strategy"] == "lora":
                time.sleep(0.5)  # lora's 9th pair: still running when Ctrl-C arrives
            return super().run(spec, timeout_s, env)

    log: list[str] = []
    scale = {"tiny-bert-adafactor": 1.10, "tiny-bert-lora": 1.10}
    sides = [(Recording("A", {}, log), Stopping("B", scale, log)) for _ in range(2)]
    lanes = [Lane(pair, Slot(duets=False)) for pair in sides]  # type: ignore[arg-type]  # duck-typed sides
    heard: list[str] = []
    same, slower, open_ = compare_cases(
        [_spec(), _spec("adafactor"), _spec("lora")],
        lanes,
        Schedule(first=6, step=2, cap=60, floor=0.03, confidence=0.95, alarms=(14,)),
        Tolerance(),
        timeout_s=60,
        device_type="cpu",
        mode="alternate",
        plan=Plan((Slot(duets=False), Slot(duets=False))),
        progress=lambda r, finished: heard.append(f"{r.case} {r.verdict} {finished}"),
    )
    assert (same.verdict, same.interrupted, len(same.log_ratios)) == ("same", False, 6)
    for result in (slower, open_):
        assert result.interrupted
        assert result.verdict == "undecided"
        assert len(result.log_ratios) == 8  # the 9th pair of each, in flight, dropped
    assert heard.count("tiny-bert-vanilla same True") == 1


def test_jobs_beyond_the_cores_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    args = ["ab", "--base", "current", "--candidate", "current", "--models", "tiny-bert", "--strategies", "vanilla"]
    assert main([*args, "--device", "cpu", "--jobs", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "perfsuite: error: --jobs 2: 2 lanes need 4 cores, two each; this process may use 3 (0-2)"
    with pytest.raises(SystemExit, match="2"):
        main([*args, "--jobs", "0"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--jobs: must be at least 1, got 0" in line


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 4, reason="two duets at once need four cores")
def test_two_duets_at_once_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ab.json"
    args = ["ab", "--base", "current", "--candidate", "current", "--models", "tiny-bert"]
    args += ["--strategies", "vanilla,adafactor", "--pairs", "2", "--max-pairs", "2", "--steps", "4", "--jobs", "2"]
    assert main([*args, "--json", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert [(c["mode"], len(c["ratios"])) for c in payload["cases"]] == [("duet", 2), ("duet", 2)]
    assert all(c["memory"]["a"] == c["memory"]["b"] > 0 for c in payload["cases"])
    assert "perfsuite: 2 lanes: duets on cores " in capsys.readouterr().err
