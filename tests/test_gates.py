"""The pure gating logic: tolerances from config, each check's verdict and message, refusals, the diff."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from perfsuite.core.baselines import build_baseline, robust_spread, set_aside, time_spread
from perfsuite.core.gates import (
    category_change,
    check_memory,
    check_time,
    compare,
    is_regression,
)
from perfsuite.core.loss import check_loss, max_difference, side_by_side
from perfsuite.core.observation import Observation, Waiting, observe
from perfsuite.core.record import CaseRecord
from perfsuite.core.refresh import diff_rows, refusals
from perfsuite.core.tolerance import ConfigError, Tolerance, resolve_tolerance

MIB = 2**20
CLASS = "amd-25.1-avx2"


def _baseline(**changes: Any) -> dict[str, Any]:
    base = build_baseline(
        case_id="tiny-bert-fp16",
        hardware="cpu",
        time_class=CLASS,
        time_unit="calibrated",
        calibration="numpy-mix-v1",
        times=[4.0, 4.2, 4.0],
        step_time_s=[0.4, 0.42, 0.4],
        peaks=[100 * MIB] * 3,
        breakdowns=[{"activations": 80 * MIB, "parameters": 2 * MIB}] * 3,
        losses=[[2.0, 1.5, 1.0]] * 3,
        spec={"model": "tiny-bert"},
        provenance={},
    )
    base.update(changes)
    return base


def _observed(**changes: Any) -> Observation:
    fields: dict[str, Any] = {
        "time": 4.0,
        "time_unit": "calibrated",
        "time_class": CLASS,
        "calibration": "numpy-mix-v1",
        "time_steps": [],
        "step_time_s": 0.4,
        "peak_bytes": 100 * MIB,
        "breakdown": {"activations": 80 * MIB, "parameters": 2 * MIB},
        "losses": [2.0, 1.5, 1.0],
    }
    return Observation(**(fields | changes))


def test_baseline_records_median_and_largest_relative_deviation() -> None:
    base = _baseline()
    assert base["time"][CLASS]["median"] == 4.0
    assert base["time"][CLASS]["spread"] == pytest.approx(0.05)  # 4.2 against the other two's median, 4.0
    assert base["memory"]["spread"] == 0.0
    assert base["loss_repeat_max_abs_diff"] == 0.0


def test_time_tolerance_is_the_larger_of_floor_and_k_times_spread() -> None:
    tol = Tolerance(time_floor=0.05, time_k=3)
    assert tol.time_tolerance(0.01) == 0.05
    assert tol.time_tolerance(0.05) == pytest.approx(0.15)
    assert tol.time_tolerance(None) == 0.05


@pytest.mark.parametrize(("time", "ok"), [(4.0, True), (4.59, True), (4.61, False), (3.41, True), (3.39, False)])
def test_time_is_two_sided(time: float, ok: bool) -> None:
    check = check_time("c", _baseline(), _observed(time=time), Tolerance(time_floor=0.05, time_k=3), "cpu")
    assert check.ok is ok
    if not ok:
        assert ("a regression" in check.message) is (time > 4)
        assert ("refresh" in check.message) is (time < 4)


def test_time_in_another_unit_fails_instead_of_comparing_apples_to_pears() -> None:
    check = check_time("c", _baseline(), _observed(time=0.4, time_unit="s", calibration=None), Tolerance(), "cpu")
    assert not check.ok
    assert "stores a 'calibrated' time (calibration numpy-mix-v1) but this run measured 's'" in check.message
    other = check_time("c", _baseline(), _observed(calibration="numpy-mix-v2"), Tolerance(), "cpu")
    assert not other.ok
    assert "refresh with `perfsuite baselines refresh -k '[c]'`" in other.message


def test_time_of_another_cpu_class_is_not_compared_and_says_how_to_record_it() -> None:
    xeon = "intel-6.143-avx512-vnni-bf16-fp16-amx"
    observed = _observed(time=1.1, time_class=xeon)  # 4x faster: another class's kernels, not a change
    checks = compare("tiny-bert-fp16", _baseline(), observed, Tolerance(), hardware="cpu")
    time = checks[0]
    assert time.ok
    assert not time.compared
    assert time.change == "not compared"
    assert f"step times for {CLASS}, this machine is {xeon}" in time.message
    assert "`perfsuite baselines refresh -k '[tiny-bert-fp16]'`" in time.message
    assert all(c.ok and c.compared for c in checks[1:])  # memory and loss still gated
    strict = check_time("tiny-bert-fp16", _baseline(), observed, Tolerance(), "cpu", fail_uncompared=True)
    assert not strict.ok
    assert not strict.compared


def test_a_time_read_on_a_busy_machine_is_not_gated_and_says_why() -> None:
    """Past its tolerance, the share of the time its steps (or calibration) waited for a CPU could hide
    a change the gate should catch, or raise a false alarm: neither a pass nor a failure, said."""
    tol = Tolerance(time_floor=0.15, time_k=3)
    slower = _observed(time=4.4)  # +10%: within ±15%, a pass were the machine quiet
    assert check_time("c", _baseline(), slower, tol, "cpu").compared
    quiet = check_time("c", _baseline(), dataclasses.replace(slower, waited=Waiting(0.13)), tol, "cpu")
    assert quiet.ok  # the most a quiet CPU tier waited
    assert quiet.compared
    busy = check_time("c", _baseline(), dataclasses.replace(slower, waited=Waiting(0.23)), tol, "cpu")
    assert busy.ok
    assert not busy.compared
    assert busy.change == "machine busy"
    assert busy.message.startswith("c: step time not gated (+10.0% read): the machine was busy: its steps or ")
    assert "waited for a CPU 23% of the time they were runnable, more than its tolerance ±15.0%" in busy.message
    # A failure is no more trusted than a pass: -30% read while busy is not gated either.
    assert not check_time("c", _baseline(), _observed(time=2.8, waited=Waiting(0.23)), tol, "cpu").compared
    # Nor is a busy reading evidence of the session's drift, which every other case is gated against.
    from perfsuite.core.gates import time_change

    assert time_change(_baseline(), dataclasses.replace(slower, waited=Waiting(0.23))) == pytest.approx(0.1)
    assert time_change(_baseline(), dataclasses.replace(slower, waited=Waiting(0.23)), tol) is None
    assert time_change(_baseline(), dataclasses.replace(slower, waited=Waiting(0.13)), tol) == pytest.approx(0.1)


def test_a_multi_rank_case_is_busy_by_what_other_processes_took_of_the_cores() -> None:
    """Its ranks wait for each other's cores by design: their waiting says nothing of another job;
    the cores' time other processes took does."""
    record = {
        "model": "tiny-bert",
        "strategy": "ddp",
        "status": "ok",
        "device": "cpu",
        "time_class": CLASS,
        "step_time_s": {"median": 0.3, "samples": [0.3] * 3},
        "peak_memory_bytes": 1,
        "loss": [1.0],
        "timed_threads": {"contention": {"steps": 0.4, "calibration": 0.3, "others": 0.05}},
    }
    single = observe(CaseRecord.from_json(record, "record"), time_unit="s")
    assert single.waited == Waiting(0.4)
    ranks = observe(CaseRecord.from_json(record | {"world_size": 2}, "record"), time_unit="s")
    assert ranks.waited == Waiting(0.05, ranks=True)
    tol = Tolerance(time_floor=0.3)
    assert check_time("c", _baseline(), dataclasses.replace(_observed(), waited=ranks.waited), tol, "cpu").compared
    # Every rank waits for the one kept from its core: such a load moves their steps up to twice its share.
    assert check_time(
        "c", _baseline(), dataclasses.replace(_observed(), waited=Waiting(0.15, ranks=True)), tol, "cpu"
    ).compared
    busy = check_time("c", _baseline(), dataclasses.replace(_observed(), waited=Waiting(0.16, ranks=True)), tol, "cpu")
    assert not busy.compared
    assert "other processes took 16% of the cores' time while its ranks were timed, and such a load " in busy.message
    assert "can move their steps by up to 32% (2 times as much), more than its tolerance ±30.0%" in busy.message


def test_memory_is_tight_and_two_sided_per_category() -> None:
    tol = Tolerance(memory_rtol=0.01, memory_atol_bytes=64 * 1024)
    assert all(c.ok for c in check_memory("c", _baseline(), _observed(), tol))
    smaller = check_memory("c", _baseline(), _observed(peak_bytes=98 * MIB), tol)
    assert [c.metric for c in smaller if not c.ok] == ["peak memory"]
    assert "less than the baseline" in smaller[0].message
    more = check_memory("c", _baseline(), _observed(breakdown={"activations": 82 * MIB, "parameters": 2 * MIB}), tol)
    assert [c.metric for c in more if not c.ok] == ["memory: activations"]
    changed = check_memory("c", _baseline(), _observed(breakdown={"activations": 80 * MIB}), tol)
    assert [c.metric for c in changed if not c.ok] == ["memory: parameters"]


def test_a_category_that_grew_at_a_peak_that_fell_is_no_regression_where_it_moves_within_a_step() -> None:
    breakdown = {"activations": 80 * MIB, "gradients": MIB, "parameters": 2 * MIB}
    base = _baseline(memory={"peak_bytes": 100 * MIB, "spread": 0.0, "breakdown": breakdown})
    moment = {"activations": 70 * MIB, "gradients": 3 * MIB, "parameters": 2 * MIB}
    lower = _observed(peak_bytes=90 * MIB, breakdown=moment)
    checks = check_memory("c", base, lower, Tolerance())
    failing = {c.metric: c for c in checks if not c.ok}
    assert set(failing) == {"peak memory", "memory: activations", "memory: gradients"}
    said = failing["memory: gradients"].message
    assert "at the peak, which fell: its moment moved; refresh it if expected" in said
    assert not any(is_regression(c, checks) for c in checks)
    # Parameters hold through a step: more of them is more memory, wherever the peak fell.
    held = _observed(peak_bytes=90 * MIB, breakdown={"activations": 70 * MIB, "gradients": MIB, "parameters": 3 * MIB})
    checks = check_memory("c", base, held, Tolerance())
    assert [c.metric for c in checks if is_regression(c, checks)] == ["memory: parameters"]
    higher = _observed(peak_bytes=110 * MIB, breakdown=moment)
    checks = check_memory("c", base, higher, Tolerance())
    assert [c.metric for c in checks if is_regression(c, checks)] == ["peak memory", "memory: gradients"]
    # The other way round: a peak that rose, taken where the step holds fewer activations and no
    # gradients, is more memory; those two categories are its moment moving, neither a gain.
    later = _observed(peak_bytes=110 * MIB, breakdown={"activations": 70 * MIB, "gradients": 0, "parameters": 2 * MIB})
    checks = check_memory("c", base, later, Tolerance())
    assert [c.metric for c in checks if is_regression(c, checks)] == ["peak memory"]
    assert [c.metric for c in checks if c.moment] == ["memory: activations", "memory: gradients"]
    assert "less than the baseline at the peak, which rose: its moment moved" in checks[1].message
    # From none at all: a peak that fell from the forward, which held no gradients yet, to the backward.
    none_yet = {"activations": 80 * MIB, "gradients": 0, "parameters": 2 * MIB}
    forward = _baseline(memory={"peak_bytes": 100 * MIB, "spread": 0.0, "breakdown": none_yet})
    backward = _observed(
        peak_bytes=90 * MIB, breakdown={"activations": 60 * MIB, "gradients": MIB, "parameters": 2 * MIB}
    )
    checks = check_memory("c", forward, backward, Tolerance())
    assert [c.metric for c in checks if c.moment] == ["memory: gradients"]
    assert not any(is_regression(c, checks) for c in checks)


def test_a_category_of_a_few_bytes_changes_in_bytes_a_larger_one_in_percent() -> None:
    few = Tolerance().memory_atol_bytes
    assert category_change("optimizer_state", 4 * 2**20, 5 * 2**20) == "optimizer state +25.0%"
    assert category_change("buffers", 0, 256 * 2**10) == "buffers +0.25 MiB"  # of nothing: no percent
    assert category_change("buffers", 0, 4 * 2**10) == "buffers +4.0 KiB"  # where MiB would read +0.00
    assert category_change("buffers", 100, 68) == "buffers -32 B"  # and bytes below a KiB
    assert category_change("buffers", few - 1, few - 1 + 3 * 2**20) == "buffers +3.00 MiB"
    assert category_change("buffers", few, 0) == "buffers -100.0%"


def test_loss_names_first_diverging_step_and_largest_differences() -> None:
    tol = Tolerance(loss_rtol=1e-3, loss_atol=1e-4)
    check = check_loss("c", _baseline(), _observed(losses=[2.0, 1.52, 1.1]), tol)
    assert not check.ok
    assert "at step 1 (of 0-2): 1.52 vs 1.5" in check.message
    assert "largest absolute difference 0.1 (step 2), largest relative 0.1" in check.message


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_loss_never_passes(bad: float) -> None:
    loose = Tolerance(loss_rtol=1e9, loss_atol=1e9)
    check = check_loss("c", _baseline(), _observed(losses=[2.0, bad, 1.0]), loose)
    assert not check.ok
    assert "at step 1" in check.message


def test_loss_step_counts_must_line_up() -> None:
    check = check_loss("c", _baseline(), _observed(losses=[2.0, 1.5]), Tolerance())
    assert not check.ok
    assert "the baseline has 3 steps and this run 2" in check.message


def test_compare_passes_identical_measurements() -> None:
    assert all(c.ok for c in compare("c", _baseline(), _observed(), Tolerance(), hardware="cpu"))


def test_tolerance_layers_defaults_precision_config_and_overrides() -> None:
    config = {
        "tolerance": {"time_floor": 0.1, "loss": {"fp16": {"rtol": 0.05}}},
        "overrides": {"cpu/*": {"time_floor": 0.3}, "*/tiny-bert-fp16": {"memory_rtol": 0.02}},
    }
    tol = resolve_tolerance(config, hardware="cpu", case_id="tiny-bert-fp16", precision="fp16")
    assert (tol.time_floor, tol.memory_rtol, tol.loss_rtol) == (0.3, 0.02, 0.05)
    gpu = resolve_tolerance(config, hardware="nvidia-h100", case_id="bert-base-uncased-vanilla", precision="fp32")
    assert (gpu.time_floor, gpu.memory_rtol, gpu.loss_rtol) == (0.1, 0.01, 1e-3)
    assert resolve_tolerance({}, hardware="cpu", case_id="x", precision="bf16").loss_rtol == 2e-2


def test_an_override_may_name_a_cpu_time_class_which_only_that_class_gets() -> None:
    config = {"overrides": {"cpu/*": {"time_floor": 0.15}, "amd-25.1-avx2/tiny-*": {"time_floor": 0.25}}}

    def floor(time_class: str | None, case_id: str = "tiny-bert-vanilla") -> float:
        return resolve_tolerance(
            config, hardware="cpu", case_id=case_id, precision="fp32", time_class=time_class
        ).time_floor

    assert floor("amd-25.1-avx2") == 0.25
    assert floor("amd-26.2-avx512-vnni-bf16") == 0.15
    assert floor(None) == 0.15  # the class unknown: the hardware's tables only
    assert floor("amd-25.1-avx2", "bert-base-uncased-vanilla") == 0.15  # the case glob still applies
    # Later tables win, whichever key they name.
    config["overrides"] = dict(reversed(list(config["overrides"].items())))
    assert floor("amd-25.1-avx2") == 0.15


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"tolerance": {"time_flor": 1}}, "unknown key(s) time_flor"),
        ({"tolerance": {"loss": {"fp8": {}}}}, "unknown precision(s) fp8"),
        ({"overrides": {"*/*": {"memory_rtol": -1}}}, "memory_rtol must be a finite number >= 0, not -1"),
    ],
)
def test_bad_config_is_a_clear_error(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_tolerance(config, hardware="cpu", case_id="x", precision="fp32")


def test_refusals_name_each_unstable_metric() -> None:
    noisy = build_baseline(
        case_id="c",
        hardware="cpu",
        time_class=CLASS,
        time_unit="s",
        calibration=None,
        times=[1.0, 1.3, 1.0],
        step_time_s=[1.0, 1.3, 1.0],
        peaks=[100 * MIB, 100 * MIB, 110 * MIB],
        breakdowns=[{}] * 3,
        losses=[[1.0, 0.5], [1.0, 0.5], [1.0, 0.6]],
        spec={},
        provenance={},
    )
    reasons = refusals(noisy, Tolerance(), CLASS)
    assert len(reasons) == 3
    assert reasons[0].startswith("step time spread 30.0% over 3 repeats, over max_refresh_spread 15%")
    assert refusals(_baseline(), Tolerance(), CLASS) == []


def test_time_tolerance_stops_at_the_ceiling_and_the_check_says_so() -> None:
    tol = Tolerance(time_floor=0.05, time_k=3, time_ceiling=0.15)
    assert tol.time_tolerance(0.02) == pytest.approx(0.06)
    assert tol.time_tolerance(0.134) == 0.15  # 3 x 13.4% = 40.2% asked for: the gate stays at 15%
    assert Tolerance(time_floor=0.3, time_ceiling=0.15).time_tolerance(0.0) == 0.3  # a floor set higher wins
    check = check_time("c", _baseline(), _observed(time=4.0 * 1.2), Tolerance(time_floor=0.05, time_k=10), "cpu")
    assert not check.ok  # +20%: the spread's 10 x 5% = 50% would have passed it
    assert check.limit == 0.15
    assert "at most the ceiling 15%" in check.message
    assert "the baseline's spread asks for ±50.0%: re-record it where it fits" in check.message


def _repeats(case_id: str, times: list[float]) -> dict[str, Any]:
    """A baseline of a refresh whose repeats took ``times`` (seconds), memory and loss identical."""
    return build_baseline(
        case_id=case_id,
        hardware="cpu",
        time_class=CLASS,
        time_unit="s",
        calibration=None,
        times=times,
        step_time_s=times,
        peaks=[MIB] * len(times),
        breakdowns=[{}] * len(times),
        losses=[[1.0]] * len(times),
        spec={},
        provenance={},
    )


@pytest.mark.parametrize("spread", [0.0, 0.01, 0.04, 0.05, 0.051, 0.1, 0.134, 0.3, 0.9])
@pytest.mark.parametrize(("floor", "k", "ceiling"), [(0.05, 3.0, 0.15), (0.15, 1.5, 0.15), (0.05, 3.0, 0.05)])
def test_a_noisy_refresh_never_records_a_gate_wider_than_the_ceiling(
    spread: float, floor: float, k: float, ceiling: float
) -> None:
    """Either the refresh refuses the spread, or the gate it makes is within the ceiling."""
    tol = Tolerance(time_floor=floor, time_k=k, time_ceiling=ceiling, max_refresh_spread=1.0)
    new = _repeats("c", [1.0, 1.0 + spread, 1.0])  # 1 + spread against the others' median, 1.0
    refused = refusals(new, tol, CLASS)
    assert bool(refused) is (k * spread > ceiling + 1e-12)
    if not refused:
        assert tol.wanted_tolerance(new["time"][CLASS]["spread"]) <= ceiling + 1e-12


def test_a_refusal_says_what_to_run_next() -> None:
    new = _repeats("convnet-vanilla-conv_step", [1.0, 1.134, 1.0])
    (reason,) = refusals(new, Tolerance(), CLASS)
    assert reason.startswith(
        "step time spread 13.4% over 3 repeats, so its gate would be ±40.2% (3 × spread), wider than its ceiling ±15%"
    )
    assert "Next: run `perfsuite baselines refresh --missing -k '[convnet-vanilla-conv_step]'` again" in reason
    assert '[tool.perfsuite.overrides."cpu/convnet-vanilla-conv_step"] time_ceiling = 0.41' in reason
    assert "catches only changes of 41% or more" in reason


def test_more_repeats_set_the_farthest_aside() -> None:
    assert [set_aside(n) for n in (3, 4, 7)] == [0, 1, 2]
    assert robust_spread([0.01, -0.02, 0.03]) == 0.03  # three repeats: the largest, as always
    assert robust_spread([0.01, -0.02, 0.03, 0.4, -0.01]) == 0.03  # five: one burst set aside
    assert robust_spread([0.01, -0.02, 0.03, 0.4, -0.01, 0.02, 0.35]) == 0.03  # seven: two
    assert robust_spread([0.02]) is None
    steps = [[1.0, 1.0], [1.02, 1.02], [0.99, 0.99], [1.5, 1.5], [1.01, 1.01]]
    # Each against the other four's median: 0.99 against 1.015 is the largest once 1.5 is set aside.
    assert time_spread([1.0, 1.02, 0.99, 1.5, 1.01], steps) == pytest.approx(0.025 / 1.015, rel=1e-6)


def test_observe_takes_the_calibrated_or_the_absolute_time() -> None:
    record = {
        "model": "tiny-bert",
        "strategy": "vanilla",
        "status": "ok",
        "time_class": CLASS,
        "step_time_s": {"median": 0.3},
        "step_time_calibrated": {"median": 12.5},
        "calibration": {"workload": "numpy-mix-v1"},
        "peak_memory_bytes": 5,
        "memory_breakdown_bytes": None,
        "loss": [1.0],
    }
    calibrated = observe(CaseRecord.from_json(record, "record"), time_unit="calibrated")
    assert (calibrated.time, calibrated.calibration, calibrated.time_class) == (12.5, "numpy-mix-v1", CLASS)
    assert observe(CaseRecord.from_json(record, "record"), time_unit="s").time == 0.3
    with pytest.raises(ValueError, match="no calibrated step time"):
        observe(CaseRecord.from_json(dict(record, step_time_calibrated=None), "record"), time_unit="calibrated")


def test_diff_rows_show_old_and_new() -> None:
    old, new = _baseline(), _baseline()
    new["time"] = {CLASS: dict(new["time"][CLASS], median=4.4)}
    rows = {metric: (before, after, change) for metric, before, after, change in diff_rows(old, new, CLASS)}
    assert rows[f"step time [{CLASS}]"] == ("4.000× calibration", "4.400× calibration", "+10.0%")
    assert rows["peak memory"][2] == "+0.0%"
    assert "memory changed" not in rows
    assert "loss changed" not in rows
    assert {metric: change for metric, _, _, change in diff_rows(None, new, CLASS)}[f"step time [{CLASS}]"] == "new"


def test_a_refresh_on_a_new_class_says_when_it_would_change_memory_or_loss() -> None:
    xeon = "intel-6.143-avx512-vnni-bf16-fp16-amx"
    old = _baseline()
    new = _baseline(loss=[2.0, 1.5, 1.01])
    new["time"] = {xeon: new["time"].pop(CLASS)}
    rows = {metric: (before, after, change) for metric, before, after, change in diff_rows(old, new, xeon)}
    assert rows[f"step time [{xeon}]"][2] == "new"
    assert rows["step time, other classes"] == (CLASS, "kept", "")
    assert rows["loss changed"][2].startswith("rewritten for every time class")


def test_a_refresh_says_a_memory_move_its_gate_admits_is_within_it_and_asks_a_review_past_it() -> None:
    old, new = _baseline(), _baseline()
    category = next(iter(new["memory"]["breakdown"]))
    new["memory"]["breakdown"][category] += 128  # allocator slack: the gate passes it
    rows = {metric: (after, change) for metric, _, after, change in diff_rows(old, new, CLASS, Tolerance())}
    assert "memory changed" not in rows
    assert rows["memory moved"] == (
        "by 128 bytes at most",
        "within the memory gate (±1%, at least 65,536 bytes): rewritten for every class",
    )
    new["memory"]["peak_bytes"] += 10 * 1024 * 1024  # past both ±1% and 64 KiB
    rows = {metric: (after, change) for metric, _, after, change in diff_rows(old, new, CLASS, Tolerance())}
    assert rows["memory changed"][1] == "rewritten for every time class: review before merging"
    assert "memory moved" not in rows
    # Without a tolerance to judge by, any byte moved asks for a review.
    moved = _baseline()
    moved["memory"]["peak_bytes"] += 1
    assert "memory changed" in {row[0] for row in diff_rows(old, moved, CLASS)}


def test_step_times_compare_step_by_step_when_the_baseline_has_them() -> None:
    # Length-grouped batches: steps differ 10x, so the median is one step's time and jumps
    # with that step's noise; step by step, every step moved 2%.
    steps = [0.5, 5.0, 0.6, 4.0, 0.7, 3.0, 0.8, 2.0]
    base = build_baseline(
        case_id="c",
        hardware="cpu",
        time_class=CLASS,
        time_unit="calibrated",
        calibration="numpy-mix-v1",
        times=[1.4] * 3,
        time_steps=[[v * f for v in steps] for f in (1.0, 1.01, 1.0)],
        step_time_s=[0.1] * 3,
        peaks=[1] * 3,
        breakdowns=[{}] * 3,
        losses=[[1.0]] * 3,
        spec={},
        provenance={},
    )
    assert base["time"][CLASS]["steps"] == steps
    assert base["time"][CLASS]["spread"] == pytest.approx(0.01)
    now = [v * 1.02 for v in steps]
    tol = Tolerance(time_floor=0.15, time_k=1.5)
    check = check_time("c", base, _observed(time=2.0, time_steps=now), tol, "cpu")  # median "+43%"
    assert check.ok
    assert check.change == "+2.0%"
    slow = check_time("c", base, _observed(time=1.4, time_steps=[v * 1.25 for v in steps]), tol, "cpu")
    assert not slow.ok
    assert "(+25.0% step by step over 8 steps)" in slow.message


def test_a_run_of_other_attention_kernels_is_not_compared_at_all() -> None:
    # T5 on transformers 4.x has no SDPA path and runs eager: no figure of an SDPA baseline compares.
    base = _baseline(spec={"model": "tiny-t5", "attention": "sdpa"})
    checks = compare("tiny-t5-vanilla", base, _observed(attention="eager"), Tolerance(), hardware="cpu")
    assert [(c.metric, c.ok) for c in checks] == [("attention", False)]
    assert "baseline ran sdpa attention and this run eager" in checks[0].message
    assert "eager_attention variant" in checks[0].message
    # The same kernels, or a side that predates recording them, compare as before.
    for observed_attention, stored in (("sdpa", "sdpa"), ("eager", None), (None, "sdpa")):
        spec = {"model": "tiny-t5"} | ({"attention": stored} if stored else {})
        observed = _observed(attention=observed_attention)
        checks = compare("c", _baseline(spec=spec), observed, Tolerance(), hardware="cpu")
        assert [c.metric for c in checks][:2] == ["step time", "peak memory"]
        assert all(c.ok for c in checks)


def test_time_off_gates_memory_and_loss_but_not_time() -> None:
    slow = _observed(time=8.0)
    checks = compare("c", _baseline(), slow, Tolerance(), hardware="cpu", gate_time=False)
    time = next(c for c in checks if c.metric == "step time")
    assert time.ok
    assert not time.compared
    assert time.change == "not gated"
    heavy = _observed(time=8.0, peak_bytes=200 * MIB)
    assert not all(c.ok for c in compare("c", _baseline(), heavy, Tolerance(), hardware="cpu", gate_time=False))


def _weights(baseline_digest: str | None, run_digest: str | None) -> tuple[dict[str, Any], Observation]:
    base = _baseline()
    base["spec"]["initial_weights"] = baseline_digest
    return base, _observed(initial_weights=run_digest, losses=[2.5, 1.9, 1.4])


def test_other_initial_weights_under_a_curve_that_holds_change_nothing() -> None:
    base = _baseline()
    base["spec"]["initial_weights"] = "xxh3_128:aaaa"  # e.g. a buffer renamed by an upgrade, same values
    check = check_loss("c", base, _observed(initial_weights="xxh3_128:bbbb"), Tolerance())
    assert check.ok
    assert check.compared


def test_a_run_from_other_initial_weights_has_its_loss_not_compared_and_says_why() -> None:
    base, seen = _weights("xxh3_128:aaaa", "xxh3_128:bbbb")
    check = check_loss("tiny-bert-fp16", base, seen, Tolerance(), hardware="cpu")
    assert check.ok
    assert not check.compared
    assert check.change == "not compared"
    assert "other initial weights than the baseline's (xxh3_128:bbbb against xxh3_128:aaaa" in check.message
    assert "perfsuite baselines refresh" in check.message
    strict = check_loss("tiny-bert-fp16", base, seen, Tolerance(), fail_uncompared=True)
    assert not strict.ok
    assert not strict.compared
    # The whole gate: time and memory still compared, the loss not.
    checks = compare("tiny-bert-fp16", base, seen, Tolerance(), hardware="cpu")
    assert [(c.metric, c.compared) for c in checks][0] == ("step time", True)
    assert [c.compared for c in checks if c.metric == "loss"] == [False]


@pytest.mark.parametrize(
    ("baseline_digest", "run_digest"),
    [
        ("xxh3_128:aaaa", "xxh3_128:aaaa"),  # the same weights
        (None, "xxh3_128:bbbb"),  # a baseline recorded before digests
        ("xxh3_128:aaaa", None),  # a record from before digests
        ("sha256:aaaa", "xxh3_128:bbbb"),  # another algorithm: says nothing about the weights
    ],
)
def test_the_loss_is_compared_unless_both_digests_of_one_algorithm_differ(
    baseline_digest: str | None, run_digest: str | None
) -> None:
    base, seen = _weights(baseline_digest, run_digest)
    check = check_loss("c", base, seen, Tolerance())
    assert check.compared
    assert not check.ok


def test_two_curves_side_by_side_where_they_ended_and_how_far_apart() -> None:
    assert side_by_side([2.0, 1.5], [2.0, 1.5]) == "identical, final 1.5"
    assert side_by_side([2.0, 1.5], [2.0, 1.6]) == "final 1.5 → 1.6, max |Δ| 0.1 from step 1"
    assert side_by_side([2.0], [2.0, 1.5]) is None  # curves of two lengths: nothing to set side by side
    assert side_by_side([], []) is None
    # A step finite on one side only differs without bound, wherever it falls; two NaNs are alike.
    assert max_difference([1.0, 2.0], [1.0, math.nan]) == math.inf
    assert max_difference([math.nan, 2.0], [math.nan, 3.0]) == 1.0
    assert side_by_side([2.0, 1.5], [math.nan, 1.5]) == "final 1.5 → 1.5, max |Δ| inf from step 0"


def test_sizes_and_pairs_of_sizes_read_in_a_unit_that_shows_them() -> None:
    from perfsuite.core.units import format_byte_range, format_bytes

    assert [format_bytes(v) for v in (0, 512, 4096, 3 * 2**20)] == ["0.00 MiB", "512 B", "4.0 KiB", "3.00 MiB"]
    assert format_byte_range(2 * 2**20, 5 * 2**20) == "2.00 → 5.00 MiB"
    assert format_byte_range(4096, 8192) == "4.0 → 8.0 KiB"  # MiB would read 0.00 → 0.01
    assert format_byte_range(2**20, 2**20 + 2048) == "1,024.0 → 1,026.0 KiB"  # the unit of the change
    assert format_byte_range(4096, 4096) == "4.0 → 4.0 KiB"  # no change: the unit of the size
    assert format_byte_range(2**30, 2**30 + 500) == "1,024.00 → 1,024.00 MiB"  # not ten-digit byte counts


@pytest.mark.parametrize(
    ("reads", "verdict"),
    [
        pytest.param(["+20", "busy", "+2", "+3"], "+3.0%", id="a burst is no vote: one fail, two passes"),
        pytest.param(["+20", "busy", "+2", "+21"], "+21.0%", id="one fail, a burst, a pass, a fail"),
        pytest.param(["busy", "+2"], "+2.0%", id="a busy first run, then a quiet pass, as a first run"),
        pytest.param(["busy", "+20", "+21"], "+21.0%", id="a busy first run, then two fails"),
        pytest.param(["busy"] * 5, "machine busy", id="busy throughout: twice the budget, then not gated"),
        pytest.param(["+20", "+2", "+3"], "+3.0%", id="no burst: as before"),
    ],
)
def test_a_time_read_on_a_busy_machine_is_run_again_and_is_no_vote(reads: list[str], verdict: str) -> None:
    from perfsuite.core.check import Check
    from perfsuite.core.gates import Outcome
    from perfsuite.session import gating

    def checks(read: str) -> list[Check]:
        if read == "busy":
            return [Check("step time", True, "4", "4.4", "machine busy", "±15.0%", "busy", compared=False)]
        change = float(read) / 100
        ok = abs(change) <= 0.15
        return [Check("step time", ok, "4", "4.4", f"{change:+.1%}", "±15.0%", "" if ok else "slow", rel=change)]

    later = iter(reads[1:])
    outcome = Outcome(case="c", status="")
    outcome.checks = checks(reads[0])
    tol = Tolerance(time_retries=2, time_retry_pause_s=0)
    gating._retry_time(tol, outcome, checks, lambda: (None, next(later)))  # type: ignore[arg-type,return-value]
    assert outcome.time_attempts == [checks(read)[0].change for read in reads]  # every read taken, no more
    assert outcome.checks[0].change == verdict


def test_a_curve_from_other_weights_is_judged_where_it_starts_and_where_it_ends_against_the_seeds() -> None:
    """Six reference curves of 4 steps whose means are 1.0-1.5 in steps 0-1 and in steps 2-3 (mean 1.25, sd
    0.187): at 0.99 over both windows, each window's prediction interval is 1.25 ± t(0.9975, 5) · sd ·
    √(1 + 1/6). A curve inside both passes; one above in the later steps fails as a regression, one below
    in the first steps and inside after as lower (no regression); not finite fails; fewer than 3 curves,
    another length or curves alike are no interval."""
    import math
    import statistics

    from perfsuite.core.gates import is_regression
    from perfsuite.core.loss import check_against_seeds
    from perfsuite.core.stats import t_quantile

    reference = [[m] * 4 for m in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5)]
    half = t_quantile(0.9975, 5) * statistics.stdev([1.0, 1.1, 1.2, 1.3, 1.4, 1.5]) * math.sqrt(7 / 6)
    inside = check_against_seeds("c", reference, [1.25 + half - 1e-6] * 4, "weights a → weights b", 0.99)
    assert (inside.ok, inside.seeds, inside.compared) == (True, 6, True)
    assert inside.limit == pytest.approx(half / 1.25)
    assert inside.tolerance == "the base's 6 seeds' 99% intervals"
    assert inside.baseline == f"steps 0-1 1.25 ± {half:.2g}, steps 2-3 1.25 ± {half:.2g}"
    ends_higher = check_against_seeds("c", reference, [1.25, 1.25, 1.25 + half + 0.01, 1.25 + half + 0.01], "w", 0.99)
    assert not ends_higher.ok
    assert is_regression(ends_higher, [ends_higher])
    assert ends_higher.message.endswith("higher than the base's at another seed (steps 2-3)")
    starts_lower = check_against_seeds("c", reference, [0.2, 0.2, 1.25, 1.25], "w", 0.99)
    assert not starts_lower.ok
    assert starts_lower.rel is not None
    assert starts_lower.rel < 0
    assert not is_regression(starts_lower, [starts_lower])  # a better start: improved, said
    wider = check_against_seeds("c", reference, [1.25 + half + 0.01] * 4, "w", 0.9986)
    assert wider.ok
    assert wider.tolerance == "the base's 6 seeds' 99.86% intervals"
    assert not check_against_seeds("c", reference, [1.2, 1.2, 1.2, math.nan], "w", 0.99).ok
    with pytest.raises(ValueError, match="2 reference curves"):
        check_against_seeds("c", reference[:2], [1.2] * 4, "w", 0.99)
    with pytest.raises(ValueError, match="6 reference curves"):
        check_against_seeds("c", reference, [1.2] * 3, "w", 0.99)
    with pytest.raises(ValueError, match="alike: no spread"):
        check_against_seeds("c", [[1.0] * 4] * 6, [1.2] * 4, "w", 0.99)


@pytest.mark.parametrize(
    ("p", "df", "t"),
    [
        (0.995, 5, 4.032143),
        (0.975, 5, 2.570582),
        (0.975, 10, 2.228139),
        (0.9995, 5, 6.868827),
        (0.6, 3, 0.276671),
        (0.975, 1, 12.706205),
        (0.025, 5, -2.570582),
    ],
)
def test_t_quantiles_are_the_tables(p: float, df: int, t: float) -> None:
    """Student's t quantiles, as any statistics table (or scipy.stats.t.ppf) gives them."""
    from perfsuite.core.stats import t_quantile

    assert t_quantile(p, df) == pytest.approx(t, abs=2e-6)
