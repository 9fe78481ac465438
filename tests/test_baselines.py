"""Baseline files: hardware keys, strict loading with errors that name the file, atomic writes; what a
refresh --missing takes on, and a refresh's time limit."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from perfsuite.core.baselines import (
    BaselineError,
    MissingBaseline,
    baseline_path,
    build_baseline,
    cannot_fit,
    hardware_key,
    incomplete,
    load_baseline,
    repeat_deviations,
    time_spread,
    with_other_classes,
    write_json_atomic,
)
from perfsuite.core.observation import Observation, Waiting
from perfsuite.core.stats import paired_change
from perfsuite.core.tolerance import Tolerance
from perfsuite.session import staging


def _valid(case: str = "tiny-bert-vanilla") -> dict[str, Any]:
    return build_baseline(
        case_id=case,
        hardware="cpu",
        time_class="amd-25.1-avx2",
        time_unit="calibrated",
        calibration="numpy-mix-v1",
        times=[1.0],
        step_time_s=[0.1],
        peaks=[10],
        breakdowns=[{"activations": 8}],
        losses=[[1.0, 0.9]],
        spec={},
        provenance={"repeats": 1},
    )


@pytest.mark.parametrize(
    ("device_type", "name", "key"),
    [
        ("cpu", "AMD EPYC 7B13", "cpu"),
        ("cuda", "NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("cuda", "NVIDIA H200", "nvidia-h200"),
    ],
)
def test_hardware_key_names_the_device_only(device_type: str, name: str, key: str) -> None:
    assert hardware_key(device_type, name) == key


def test_a_refresh_on_another_class_keeps_the_recorded_classes_times() -> None:
    old = _valid()
    new = build_baseline(
        case_id="tiny-bert-vanilla",
        hardware="cpu",
        time_class="intel-6.143-avx512-vnni-bf16-fp16-amx",
        time_unit="calibrated",
        calibration="numpy-mix-v1",
        times=[2.0],
        step_time_s=[0.2],
        peaks=[10],
        breakdowns=[{"activations": 8}],
        losses=[[1.0, 0.9]],
        spec={},
        provenance={"repeats": 1},
    )
    merged = with_other_classes(new, old)
    assert merged["time"]["amd-25.1-avx2"] == old["time"]["amd-25.1-avx2"]
    assert merged["time"]["intel-6.143-avx512-vnni-bf16-fp16-amx"]["median"] == 2.0
    assert with_other_classes(new, None) == new


def test_a_written_baseline_loads_back(tmp_path: Path) -> None:
    path = baseline_path(tmp_path, "cpu", "tiny-bert-vanilla")
    write_json_atomic(path, _valid())
    assert load_baseline(path, case_id="tiny-bert-vanilla", hardware="cpu") == _valid()
    assert path == tmp_path / "cpu" / "tiny-bert-vanilla.json"


def test_a_missing_baseline_names_the_refresh_command(tmp_path: Path) -> None:
    path = baseline_path(tmp_path, "cpu", "tiny-bert-fp16")
    with pytest.raises(MissingBaseline, match=r"record one with `perfsuite baselines refresh -k '\[tiny-bert-fp16\]'`"):
        load_baseline(path, case_id="tiny-bert-fp16", hardware="cpu")
    with pytest.raises(MissingBaseline, match=r"-k '\[bert-base-uncased-fp16\]'` \(on a machine with that GPU\)"):
        load_baseline(path, case_id="bert-base-uncased-fp16", hardware="nvidia-h100-80gb-hbm3")


def _time(**entry: Any) -> dict[str, Any]:
    """A valid baseline whose step time for its class has ``entry``'s values."""
    valid = _valid()
    return dict(valid, time={"amd-25.1-avx2": valid["time"]["amd-25.1-avx2"] | entry})


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ("[1, 2]", "not a JSON object"),
        (json.dumps(dict(_valid(), schema_version=1)), "schema_version is 1, this perfsuite reads 2"),
        (json.dumps(dict(_valid(), time={"amd-25.1-avx2": {"unit": "ratio", "median": 1.0}})), "`time` maps each"),
        (json.dumps(_valid("tiny-bert-fp16")), "it is the baseline of 'tiny-bert-fp16', not tiny-bert-vanilla"),
        (json.dumps(dict(_valid(), loss=[])), "`loss` must be a non-empty list"),
        (json.dumps(dict(_valid(), memory={"peak_bytes": "10", "breakdown": {}})), "`memory` needs peak_bytes"),
        ('{"truncated": ', "not JSON"),
        # figures no run measures: a gate against them would show "+inf%", or divide by zero
        (json.dumps(dict(_valid(), memory={"peak_bytes": -5, "breakdown": {}})), "none below 0"),
        (json.dumps(dict(_valid(), memory={"peak_bytes": 10, "breakdown": {"activations": -1}})), "none below 0"),
        (json.dumps(_time(median=0)), "a median above 0"),
        (json.dumps(_time(median=-5)), "a median above 0"),
        (json.dumps(_time(spread=-1)), "a spread of 0 or more"),
        # a median edited by hand (its repeats and steps left): the gate, pairing steps, would pass it
        (json.dumps(_time(median=1.0, repeats=[1.5, 1.6, 1.7])), "its repeats' median, where it lists them"),
        (json.dumps(_time(steps=[1.0, 0])), "the steps' times, each above 0"),
        (json.dumps(dict(_valid(), spec="x")), "`spec`, the case it was recorded from, is not an object"),
    ],
)
def test_a_bad_baseline_names_its_path_and_the_fix(tmp_path: Path, payload: str, problem: str) -> None:
    path = tmp_path / "tiny-bert-vanilla.json"
    path.write_text(payload)
    with pytest.raises(BaselineError) as info:
        load_baseline(path, case_id="tiny-bert-vanilla", hardware="cpu")
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "perfsuite baselines refresh -k '[tiny-bert-vanilla]'" in message


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: path.mkdir(), "cannot read the baseline (Is a directory)"),
        (lambda path: path.write_bytes(b'{"caf\xe9": 1}'), "cannot read the baseline (not UTF-8 text)"),
        (lambda path: path.write_text("[" * 100_000 + "]" * 100_000), "corrupt baseline (not JSON: nested too deeply)"),
    ],
    ids=["a directory", "not UTF-8", "nested too deeply"],
)
def test_a_baseline_that_cannot_be_read_is_one_line_naming_it(tmp_path: Path, make: Any, problem: str) -> None:
    path = tmp_path / "tiny-bert-vanilla.json"
    make(path)
    with pytest.raises(BaselineError, match=rf"^{re.escape(str(path))}: {re.escape(problem)}"):
        load_baseline(path, case_id="tiny-bert-vanilla", hardware="cpu")


def test_a_case_id_with_a_nul_byte_names_no_file_that_can_be_read(tmp_path: Path) -> None:
    """A case id comes from a results file (``perfsuite baselines pool``, ``report``): data anyone can write."""
    path = tmp_path / "tiny-bert\0vanilla.json"
    with pytest.raises(BaselineError, match="cannot read the baseline"):
        load_baseline(path, case_id="tiny-bert\0vanilla", hardware="cpu")


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(target, {"a": float("nan")})  # NaN is not JSON: never write it
    assert json.loads(target.read_text()) == {"a": 1}
    assert list(tmp_path.iterdir()) == [target]


def test_incomplete_says_why_a_refresh_missing_takes_a_case(tmp_path: Path) -> None:
    path = baseline_path(tmp_path, "cpu", "tiny-bert-vanilla")

    def why(
        time_class: str = "amd-25.1-avx2", unit: str = "calibrated", calibration: str | None = "numpy-mix-v1"
    ) -> str | None:
        return incomplete(
            path, case_id="tiny-bert-vanilla", hardware="cpu", time_class=time_class, unit=unit, calibration=calibration
        )

    assert why() == "no baseline"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    assert why() == "unreadable baseline"
    write_json_atomic(path, _valid())  # calibrated against numpy-mix-v1 on amd-25.1-avx2
    assert why() is None
    assert why("intel-6.143-avx512-vnni-bf16-fp16-amx") == "no step time for intel-6.143-avx512-vnni-bf16-fp16-amx"
    # What the gate would not compare either: another calibration workload, or seconds.
    assert why(calibration="numpy-mix-v3") == (
        "its amd-25.1-avx2 step time is calibrated (numpy-mix-v1), not calibrated (numpy-mix-v3)"
    )
    assert why(unit="s", calibration=None) == "its amd-25.1-avx2 step time is calibrated (numpy-mix-v1), not s (None)"


def test_a_refresh_budget_starts_a_case_only_while_the_longest_so_far_still_fits() -> None:
    from perfsuite.session.scope import RefreshBudget

    now = [100.0]
    budget = RefreshBudget(60, clock=lambda: now[0])
    assert budget.why_not("a") is None  # the first case always starts
    now[0] += 20
    budget.ran(20)
    assert budget.why_not("b") is None  # 40 s left > 20 s
    now[0] += 15
    budget.ran(15)
    assert budget.why_not("c") is None  # 25 s left > 20 s
    now[0] += 20
    budget.ran(20)
    reason = budget.why_not("d")  # 5 s left < 20 s
    assert reason is not None
    assert reason.startswith("not reached: 5 s of the 60 s time limit left")
    assert budget.not_reached == ["d"]
    assert budget.summary() == (
        "1 case(s) not reached within the 60 s time limit; "
        "`perfsuite baselines refresh --missing` (with the same -k) records them"
    )


def test_a_case_stopped_at_the_limit_fails_when_it_had_all_of_it() -> None:
    from perfsuite.core.record import CaseRecord
    from perfsuite.session.scope import RefreshBudget

    def failed(error: str) -> CaseRecord:
        return CaseRecord.from_json({"model": "m", "strategy": "s", "status": "failed", "error": error}, error)

    timed_out = [failed("timed out after 60 s; worker killed")]
    now = [0.0]
    budget = RefreshBudget(60, clock=lambda: now[0])
    now[0] = 61
    stopped = budget.why_stopped("a", timed_out)  # the first case: every later run of this limit would stop it too
    assert stopped is not None
    assert stopped[0] == "failed"
    assert "does not fit in the 60 s time limit" in stopped[1]
    assert budget.not_reached == []
    budget.ran(61)
    stopped = budget.why_stopped("b", timed_out)  # after another: the next run starts with it
    assert stopped is not None
    assert stopped[0] == "not reached"
    assert budget.not_reached == ["b"]
    crashed = [failed("worker killed by signal SIGSEGV")]
    assert budget.why_stopped("c", crashed) is None  # a crash is the case's own failure


# The H200's bert-base-uncased fp16 refresh: nine repeats' median step times (ms), none recordable
# at its 5% ceiling (a spread of at most 1.67%).
H200_FP16 = [40.92, 44.08, 50.79, 39.96, 44.03, 52.34, 47.22, 52.66, 45.43]


def test_a_refresh_stops_repeating_a_case_once_no_more_repeats_could_make_it_fit() -> None:
    widest = Tolerance(time_ceiling=0.05).widest_spread
    assert widest == pytest.approx(0.05 / 3)
    stops = [n for n in range(2, 10) if cannot_fit(repeat_deviations(H200_FP16[:n]), widest, 9)]
    # Of 9 repeats 2 are set aside, so 3 of these 5 would have to lie within 1.67% (x 1.5) of one median.
    assert stops[0] == 5
    # One burst among agreeing repeats is what more repeats are for: it is set aside, never given up on.
    assert not cannot_fit(repeat_deviations([75.0, 50.0, 50.0]), Tolerance().widest_spread, 9)
    assert not cannot_fit(repeat_deviations([75.0, 50.0, 50.0, 80.0]), Tolerance().widest_spread, 9)
    assert cannot_fit(repeat_deviations([75.0, 50.0, 50.0, 80.0, 100.0]), Tolerance().widest_spread, 9)
    # Two repeats far from the current median but close to each other: five more beside them would fit.
    assert not cannot_fit(repeat_deviations([70.0, 76.0, 130.0, 134.3]), widest, 9)
    wide = Tolerance(time_k=0, max_refresh_spread=0.35, time_ceiling=0.35).widest_spread
    assert not cannot_fit(repeat_deviations([0.05, 0.3, 0.66, 1.0, 1.34]), wide, 9)


# tiny-bert-vanilla's refresh on amd-25.1-avx2: three repeats' calibrated steps. Their medians lie
# 13.15-13.56, their steps scatter ±15%, and the repeats are the per-step median at 3, 3 and 6 of the 12 steps.
VANILLA_REPEATS = [
    [14.53, 13.24, 15.42, 13.37, 13.76, 12.68, 11.64, 11.0, 14.59, 11.67, 15.03, 14.29],
    [13.28, 13.65, 12.73, 13.43, 14.03, 13.92, 15.68, 14.32, 12.69, 12.66, 12.42, 12.59],
    [12.86, 12.68, 13.22, 10.8, 11.64, 14.52, 13.08, 14.02, 14.46, 14.56, 13.75, 13.04],
]


def test_a_repeat_is_compared_with_the_baseline_the_others_make() -> None:
    medians = [statistics.median(r) for r in VANILLA_REPEATS]
    deviations = repeat_deviations(medians, VANILLA_REPEATS)
    # Counted against per-step medians it is part of, each repeat read exactly 0 and the refresh
    # recorded a spread of 0.0%; against the other two, as a later run is gated, they read in the
    # order of their medians.
    assert deviations[0] > deviations[1] > deviations[2]
    assert time_spread(medians, VANILLA_REPEATS) == pytest.approx(0.0731, abs=5e-4)
    assert repeat_deviations([1.0, 1.1]) == pytest.approx([-1 / 11, 0.1])  # two: each against the other


def test_three_times_a_three_repeat_spread_holds_a_later_unchanged_run() -> None:
    """What a GPU's spread check relies on (k = 3): simulated refreshes of three repeats (levels 1%
    apart, steps 5% noisy), each followed by a run of the same stack gated step by step against it."""
    rng = random.Random(0)

    def run() -> list[float]:
        level = rng.gauss(1, 0.01)
        return [level * rng.gauss(1, 0.05) * (1 + 0.5 * (s % 4)) for s in range(12)]

    outside = 0
    for _ in range(400):
        repeats = [run() for _ in range(3)]
        spread = time_spread([statistics.median(r) for r in repeats], repeats)
        assert spread is not None
        later = paired_change(run(), [statistics.median(v) for v in zip(*repeats, strict=True)])
        outside += abs(later) > 3 * spread
    # Against the per-step medians each repeat is part of, the spread read 0 in 75 of these 400
    # refreshes and 46% of the later runs fell outside three times it.
    assert outside <= 0.05 * 400


def _refresh(
    steps: list[list[float]], tol: Tolerance, monkeypatch: pytest.MonkeyPatch, *, give_up: bool
) -> tuple[bool, int]:
    """What the refresh's own repeat loop does with repeats coming in this order (the first two taken,
    as a refresh does): whether it records the case, and how many repeats it took. Without
    ``give_up``, the loop as it was before it could stop early."""
    if not give_up:
        monkeypatch.setattr(staging, "cannot_fit", lambda *args: False)
    # What the loop reads of an observation: its time and its step times.
    made = cast(list[Observation], [SimpleNamespace(time=statistics.median(s), time_steps=s) for s in steps])
    observations = made[:2]
    staging.repeat_while_too_wide(observations, tol, lambda n: made[n - 1], None, time.monotonic())
    monkeypatch.undo()
    times, taken = [o.time for o in observations], [o.time_steps for o in observations]
    return tol.spread_fits(time_spread(times, taken)), len(observations)


@pytest.mark.parametrize(
    "trials", [pytest.param(1500, id="1500"), pytest.param(20000, marks=pytest.mark.nightly, id="20000")]
)
def test_giving_up_early_refuses_no_case_that_more_repeats_would_have_recorded(
    trials: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated refreshes through the refresh's repeat loop (20 steps a repeat, steps of three lengths,
    2% noise per step; run levels spread 0.5-4%, or two levels 6-10% apart as a host-bound GPU case's;
    one run in five of some cases 30% slow): stopping early records exactly the cases that taking
    every repeat records, with fewer repeats."""
    rng = random.Random(1)
    tol = Tolerance(time_ceiling=0.05)
    saved = 0
    for _ in range(trials):
        level_sd, bursts, split = rng.choice([0.005, 0.01, 0.02, 0.04]), rng.random() < 0.3, rng.random() < 0.2
        steps = []
        for _ in range(tol.refresh_max_repeats):
            level = rng.gauss(1, level_sd) * (1.3 if bursts and rng.random() < 0.2 else 1)
            level *= rng.choice([1.0, rng.uniform(1.06, 1.10)]) if split else 1.0
            steps.append([level * rng.gauss(1, 0.02) * (1 + 0.1 * (s % 3)) for s in range(20)])
        early, taken = _refresh(steps, tol, monkeypatch, give_up=True)
        every, all_taken = _refresh(steps, tol, monkeypatch, give_up=False)
        assert early == every
        saved += all_taken - taken
    assert saved > trials // 4  # the simulation does reach the early stop: a repeat saved in every fourth case


def test_a_refresh_timed_on_a_busy_machine_records_no_time(tmp_path: Path) -> None:
    """Repeats that agree can all be moved by one load beside them: where a repeat's steps or
    calibration waited for a CPU longer than the gate it would record, the time is refused, saying
    so, as every later run would be gated against it."""
    from perfsuite.core.gates import Outcome
    from perfsuite.core.record import CaseRecord
    from perfsuite.core.spec import CaseSpec

    spec = CaseSpec(model="tiny-bert", strategy="vanilla")
    record = CaseRecord.from_json({"model": "tiny-bert", "strategy": "vanilla", "status": "ok"}, "record")

    def observed(waited: float) -> Observation:
        return Observation(
            time=4.0,
            time_unit="calibrated",
            time_class="amd-25.17-avx512-vnni-bf16",
            calibration="numpy-mix-v1",
            time_steps=[4.0] * 12,
            step_time_s=0.4,
            peak_bytes=1 << 20,
            breakdown={"parameters": 1 << 20},
            losses=[2.0, 1.9],
            waited=Waiting(waited),
        )

    def stage(waited: list[float], ranks: bool = False) -> tuple[str | None, str]:
        stager = staging.RefreshStager(tmp_path, tmp_path, 3)
        outcome = Outcome(case=spec.id, status="")
        path = tmp_path / "tiny-bert-vanilla.json"
        tol = Tolerance(time_floor=0.15)  # the CPU tier's
        runs = [dataclasses.replace(observed(w), waited=Waiting(w, ranks=ranks)) for w in waited]
        said = stager.stage(spec, [record] * 3, runs, path, "cpu", outcome, tol)
        return said, outcome.status

    assert stage([0.02, 0.13, 0.04]) == (None, "refreshed")
    said, status = stage([0.02, 0.23, 0.04])
    assert status == "refused"
    assert said is not None
    assert said.startswith("the machine was busy: its steps or calibration waited for a CPU 23% of the time")
    assert said.endswith("such waiting moves a step's time by as much: refresh it again when the machine is quiet")
    # A multi-rank case's: the cores' share other processes took, which moves its ranks up to twice as much.
    assert stage([0.02, 0.07, 0.04], ranks=True) == (None, "refreshed")
    said, status = stage([0.02, 0.08, 0.04], ranks=True)
    assert status == "refused"
    assert said is not None
    assert said.startswith("the machine was busy: other processes took 8% of the cores' time while its ranks")
