"""The session's drift: the median step-time change of its CPU cases, which each case is gated against.

Unit tests of the pure rule (perfsuite/core/drift.py, perfsuite/core/gates.py), then the whole
plugin on the committed CPU baselines replayed as runs (tests/replay.py): a host that
reads every case 12% fast, as the CI host that failed tiny-bert-grad_ckpt and
tiny-bert-lora did, gives no false alarm and still fails the case that moved against the
rest; every case 25% slower is beyond the drift a machine has and fails every case.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from replay import BASELINES, record_of

from perfsuite.core.drift import MIN_CASES, Drift, estimate, group_of
from perfsuite.core.gates import check_time
from perfsuite.core.observation import Observation
from perfsuite.core.tolerance import Tolerance

HERE = Path(__file__).parent
CPU = Tolerance(time_floor=0.15, time_k=0.0, time_drift_limit=0.15)


def test_the_drift_is_the_median_change_of_the_cases() -> None:
    drift = estimate("amd-25.1-avx2", [-0.12, -0.10, 0.30, -0.09, -0.11, -0.50])
    assert drift is not None
    assert drift.change == pytest.approx(-0.105)
    assert drift.cases == 6
    assert estimate("amd-25.1-avx2", []) is None


def test_cases_drift_together_by_time_class_and_the_dtype_their_matmuls_ran_in() -> None:
    assert group_of("amd-25.1-avx2", {"float16": 78, "float32": 24}, "fp16") == "amd-25.1-avx2/float16"
    # the Trainer's fp16 on a CPU: asked for fp16, every matmul in fp32 (tests/test_trainer_engine.py)
    assert group_of("amd-25.1-avx2", {"float32": 102}, "fp16") == "amd-25.1-avx2/float32"
    assert group_of("amd-25.1-avx2", None, "bf16") == "amd-25.1-avx2/bf16"


def test_a_case_is_gated_against_the_drift_within_its_limit() -> None:
    drift = Drift(group="c", change=-0.12, cases=30)
    assert drift.applies(0.15)
    assert drift.gated(-0.19, 0.15) == pytest.approx(0.81 / 0.88 - 1)  # -8%: no false alarm
    assert drift.gated(0.056, 0.15) == pytest.approx(1.056 / 0.88 - 1)  # +20%: the regression it hid
    assert not drift.applies(0.0)  # a GPU's and multi-rank cases' tolerance: their own change
    assert drift.gated(-0.19, 0.0) == -0.19


def test_a_drift_beyond_the_limit_is_the_stack_and_gates_nothing_away() -> None:
    drift = Drift(group="c", change=0.30, cases=30)
    assert not drift.applies(0.15)
    assert drift.gated(0.31, 0.15) == 0.31
    assert "beyond the ±15% a machine drifts" in drift.describe(0.15)


def test_too_few_cases_make_no_drift() -> None:
    drift = Drift(group="c", change=-0.12, cases=MIN_CASES - 1)
    assert not drift.applies(0.15)
    assert drift.gated(-0.19, 0.15) == -0.19
    assert "too few" in drift.describe(0.15)


def _baseline(steps: list[float]) -> dict[str, Any]:
    return {
        "case": "x",
        "time": {"c": {"unit": "calibrated", "calibration": "w", "median": 10.0, "steps": steps, "spread": 0.0}},
    }


def _observed(factor: float) -> Observation:
    return Observation(
        time=10.0 * factor,
        time_unit="calibrated",
        time_class="c",
        calibration="w",
        time_steps=[10.0 * factor] * 4,
        step_time_s=0.1,
        peak_bytes=1,
        breakdown={},
        losses=[1.0],
    )


def test_the_time_check_names_the_raw_change_and_the_drift() -> None:
    base = _baseline([10.0] * 4)
    drift = Drift(group="c", change=-0.12, cases=30)
    hidden = check_time("x", base, _observed(1.056), CPU, "cpu", drift=drift)
    assert not hidden.ok
    assert hidden.rel == pytest.approx(0.2)
    assert hidden.raw_rel == pytest.approx(0.056)
    assert hidden.drift == -0.12
    assert "(+5.6% step by step over 4 steps; +20.0% against the session's drift" in hidden.message
    assert "slower than the baseline: a regression" in hidden.message
    assert hidden.change == "+20.0% (raw +5.6%)"
    assert check_time("x", base, _observed(0.81), CPU, "cpu", drift=drift).ok
    assert not check_time("x", base, _observed(0.81), CPU, "cpu").ok  # without it: the false alarm
    beyond = check_time("x", base, _observed(1.3), CPU, "cpu", drift=Drift(group="c", change=0.3, cases=30))
    assert not beyond.ok
    assert beyond.drift is None
    assert "every case moved" in beyond.message


# -- the plugin, on the committed baselines replayed ---------------------------------------

RUNNER = f"""
import json, os, sys
from pathlib import Path

sys.path.insert(0, {str(HERE)!r})
from replay import record_of, slower


def pytest_perfsuite_run_case(config, spec, timeout_s):
    baseline = json.loads((Path({str(BASELINES)!r}) / "cpu" / f"{{spec.id}}.json").read_text())
    record = record_of(baseline, next(iter(baseline["time"])))
    factors = dict(item.split("=") for item in os.environ["REPLAY"].split(";"))
    slower(float(factors.get(spec.id, factors["*"])))(record)
    Path(os.environ["REPLAY_LOG"]).open("a").write(spec.id + "\\n")
    return record
"""
REPLAYED_CLASS = next(iter(json.loads((BASELINES / "cpu" / "tiny-bert-vanilla.json").read_text())["time"]))
"""The CPU time class the replayed records carry: a floor of that class's own reaches their gate."""
PYPROJECT = f"""
[tool.perfsuite.overrides."cpu/*"]
time_floor = 0.15
time_k = 0.0
time_drift_limit = {{limit}}
[tool.perfsuite.overrides."{REPLAYED_CLASS}/tiny-bert-dynamic_padding"]
time_floor = 0.22
"""
CASES = ("vanilla", "fp16", "bf16", "grad_accum", "grad_ckpt", "adafactor", "dynamic_padding", "lora", "fp16+grad_ckpt")
ARGS = (
    "-m",
    "cpu and not trainer and not distributed",
    "-k",
    " or ".join(f"tiny-bert-{c}" for c in CASES),
    f"--perfsuite-baselines={BASELINES}",
    "-p",
    "no:cacheprovider",
)


def _project(pytester: pytest.Pytester, limit: float, replay: str) -> None:
    pytester.makepyfile(test_matrix=(HERE / "test_matrix.py").read_text())
    pytester.makeconftest(RUNNER)
    pytester.makepyprojecttoml(PYPROJECT.format(limit=limit))
    pytester._monkeypatch.setenv("REPLAY", replay)
    pytester._monkeypatch.setenv("REPLAY_LOG", str(pytester.path / "runs.log"))


def _failed(result: pytest.RunResult) -> set[str]:
    found = re.findall(r"FAILED test_matrix.py::test_case_matches_baseline\[tiny-bert-([\w+]+)\]", result.stdout.str())
    return set(found)


@pytest.mark.parametrize("limit", [0.15, 0.0], ids=["against-the-drift", "each-on-its-own"])
def test_a_fast_host_neither_fails_the_cases_nor_hides_a_regression(pytester: pytest.Pytester, limit: float) -> None:
    # Every case 12% fast; lora 8% faster than the rest (-19% raw), adafactor 20% slower (+5.6% raw).
    _project(pytester, limit, "*=0.88;tiny-bert-lora=0.81;tiny-bert-adafactor=1.056")
    result = pytester.runpytest_subprocess(*ARGS, "--perfsuite-json=out.json")
    out = result.stdout.str()
    runs = (pytester.path / "runs.log").read_text().split()
    assert sorted(runs) == sorted(f"tiny-bert-{c}" for c in CASES)  # each ran once
    # Before any was gated where the drift gates them; in their tests where nothing does.
    assert (f"perfsuite: running {len(CASES)} CPU case(s) first" in out) is bool(limit)
    assert ("the session's drift" in out) is bool(limit)
    if limit:
        assert _failed(result) == {"adafactor"}
        assert re.search(r"tiny-bert-adafactor: step time .*\(\+5\.6% .*; \+20\.0% against the session's drift", out)
        assert re.search(r"step-time drift \(amd-[^)]*/fp32\): the median step-time change of this session's 6 ", out)
        # fp16 and bf16 drift apart from fp32 on another host: too few here, each on its own (-12%)
        assert re.search(r"step-time drift \(amd-[^)]*/fp16\): .* 2 amd-[^ ]* case\(s\) is -12.0%: too few", out)
        drifts = {d["group"].split("/")[1]: d for d in json.loads((pytester.path / "out.json").read_text())["drift"]}
        assert drifts["fp32"]["change"] == pytest.approx(-0.12, abs=1e-6)
        assert drifts["fp32"]["applied"]
        assert not drifts["fp16"]["applied"]
        cases = json.loads((pytester.path / "out.json").read_text())["cases"]
        floors = {case["case"]: case["tolerance"]["time_floor"] for case in cases}
        assert floors["tiny-bert-dynamic_padding"] == 0.22  # its time class's own floor
        assert floors["tiny-bert-grad_accum"] == 0.15
    else:  # the gate before the drift: a false alarm on lora and the regression passed
        assert _failed(result) == {"lora"}


def test_every_case_slower_is_the_stack_not_the_host(pytester: pytest.Pytester) -> None:
    _project(pytester, 0.15, "*=1.25")
    result = pytester.runpytest_subprocess(*ARGS)
    assert _failed(result) == set(CASES)
    out = result.stdout.str()
    assert out.count("slower than the baseline: a regression") >= len(CASES)
    assert "beyond the ±15% a machine drifts, so every case moved" in out


def test_a_few_cases_run_in_their_tests_without_a_drift(pytester: pytest.Pytester) -> None:
    _project(pytester, 0.15, "*=0.80")
    result = pytester.runpytest_subprocess(*ARGS[:3], "tiny-bert-vanilla or tiny-bert-bf16", *ARGS[4:])
    assert _failed(result) == {"vanilla", "bf16"}  # -20% each, on its own
    assert "CPU case(s) first" not in result.stdout.str()


def test_a_class_whose_table_turns_the_drift_off_runs_its_cases_in_their_tests(pytester: pytest.Pytester) -> None:
    """Which cases run first follows this machine's time class, as their gates do."""
    from perfsuite.core.hardware import local_cpu_class

    _project(pytester, 0.15, "*=1.0")
    pyproject = pytester.path / "pyproject.toml"
    table = f'\n[tool.perfsuite.overrides."{local_cpu_class()}/*"]\ntime_drift_limit = 0.0\n'
    pyproject.write_text(pyproject.read_text() + table)
    result = pytester.runpytest_subprocess(*ARGS)
    assert result.ret == 0, result.stdout.str()
    assert sorted((pytester.path / "runs.log").read_text().split()) == sorted(f"tiny-bert-{c}" for c in CASES)
    assert "CPU case(s) first" not in result.stdout.str()


def test_replayed_records_are_what_the_baselines_hold() -> None:
    baseline = json.loads((BASELINES / "cpu" / "tiny-bert-vanilla.json").read_text())
    record = record_of(baseline, next(iter(baseline["time"])))
    assert record["step_time_calibrated"]["median"] == baseline["time"][record["time_class"]]["median"]


def test_a_run_file_compared_outside_pytest_takes_its_time_classs_own_floor() -> None:
    """``perfsuite report`` compares a ``perfsuite run`` file itself (``gate_runs``), with the same tables."""
    from perfsuite.core.results import gate_runs, parse_results

    baseline = json.loads((BASELINES / "cpu" / "tiny-bert-vanilla.json").read_text())
    results = parse_results({"cases": [record_of(baseline, REPLAYED_CLASS)]}, "run.json")
    tables = {"cpu/*": {"time_floor": 0.15}, f"{REPLAYED_CLASS}/*": {"time_floor": 0.2}}
    gate_runs(results, BASELINES, {"overrides": tables})
    (case,) = results.cases
    assert case.tolerance is not None
    assert case.tolerance["time_floor"] == 0.2


def test_a_run_file_says_which_cases_are_outside_their_baselines_an_unreadable_one_included(tmp_path: Path) -> None:
    """What ``perfsuite run --report`` prints and its summary says (``Results.run_compared``): the cases
    compared, those outside their tolerance (a baseline that cannot be read fails, as in the gate)."""
    from perfsuite.core.results import gate_runs, parse_results

    baseline = json.loads((BASELINES / "cpu" / "tiny-bert-vanilla.json").read_text())
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "tiny-bert-vanilla.json").write_text(json.dumps(baseline))
    unchanged = parse_results({"cases": [record_of(baseline, REPLAYED_CLASS)]}, "run.json")
    gate_runs(unchanged, tmp_path)
    said = unchanged.run_compared()
    assert said is not None
    assert said.startswith("perfsuite run compared 1 of 1 case(s) with their baselines as the gate would: all within")
    (tmp_path / "cpu" / "tiny-bert-vanilla.json").write_text("{")
    unreadable = parse_results({"cases": [record_of(baseline, REPLAYED_CLASS)]}, "run.json")
    gate_runs(unreadable, tmp_path)
    assert "1 outside their tolerance (tiny-bert-vanilla)" in str(unreadable.run_compared())
    # None compared is said, and why: no directory given or found, none there, or no baseline in it.
    uncompared = parse_results({"cases": [record_of(baseline, REPLAYED_CLASS)]}, "run.json")
    assert str(uncompared.run_compared()).startswith(
        "perfsuite run compared none of its 1 case(s) with a baseline (no baselines directory given "
    )
    gate_runs(uncompared, tmp_path / "nowhere")
    assert f"(no baselines directory at {tmp_path / 'nowhere'}): nothing in it is gated" in str(
        uncompared.run_compared()
    )
    (tmp_path / "empty").mkdir()
    gate_runs(uncompared, tmp_path / "empty")
    assert f"(none has a baseline in {tmp_path / 'empty'} for its hardware," in str(uncompared.run_compared())
    other = record_of(baseline, REPLAYED_CLASS) | {"model": "tiny-t5"}  # no baseline in tmp_path
    both = parse_results({"cases": [record_of(baseline, REPLAYED_CLASS), other]}, "run.json")
    gate_runs(both, tmp_path)
    assert "1 outside their tolerance (tiny-bert-vanilla); 1 compared with none (tiny-t5-vanilla: no baseline" in str(
        both.run_compared()
    )
