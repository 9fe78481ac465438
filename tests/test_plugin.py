"""The pytest plugin end to end, through ``pytester``: each gate fails exactly the case it should.

Most tests feed chosen measurements through ``pytest_perfsuite_run_case`` (a conftest
in the test project), so a "10% faster baseline" is exactly 10% and nothing depends on
this machine's noise; the last test does the same with real training runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from team_repo import WIDGET

from perfsuite.worker.calibrate import NAME as CALIBRATION

MATRIX_TEST = (Path(__file__).parent / "test_matrix.py").read_text()

# A stand-in for the worker: deterministic records shaped like perfsuite.case.run_case's.
FAKE_RUNNER = """
import math
import os
import time

import pytest

from perfsuite.worker.calibrate import NAME as CALIBRATION

CALLS = {}
FACTOR = {"vanilla": 1.0, "fp16": 5.0, "grad_ckpt": 1.8, "adafactor": 1.0}


@pytest.hookimpl(tryfirst=True)
def pytest_perfsuite_run_case(config, spec, timeout_s):
    repeat = CALLS[spec] = CALLS.get(spec, -1) + 1
    sleepy, _, seconds = os.environ.get("FAKE_SLEEP", "").partition("=")  # "<case>=<seconds>"
    if sleepy == spec.id:
        if float(seconds) > timeout_s:  # as the worker's timeout would: killed, no result
            time.sleep(timeout_s)
            return {"model": spec.model, "strategy": spec.strategy, "status": "failed",
                    "error": f"timed out after {timeout_s:g} s; worker killed"}
        time.sleep(float(seconds))
    if os.environ.get("FAKE_INTERRUPT") == spec.id:
        raise KeyboardInterrupt
    if os.environ.get("FAKE_CRASH") == spec.id:
        return {"model": spec.model, "strategy": spec.strategy, "status": "failed",
                "error": "worker killed by signal SIGKILL"}
    jitter = float(os.environ.get("FAKE_JITTER", "0")) * ((repeat % 3) - 1) * (spec.strategy != "vanilla")
    # FAKE_SLOW="<case>=<factor>:<n>": that case's first n runs are <factor> slower.
    target, _, slow = os.environ.get("FAKE_SLOW", "").partition("=")
    factor, _, runs = slow.partition(":")
    if slow and target == spec.id and repeat < int(runs):
        jitter += float(factor)
    median = 0.1 * FACTOR.get(spec.strategy, 1.2) * (1 + jitter)
    calibration = 0.01  # the calibration workload's time: the gated figure is median / calibration
    mib = 2**20
    memory = 30 * mib if spec.strategy == "grad_ckpt" else 100 * mib
    loss = [2.0 - 0.05 * i for i in range(spec.warmup_steps + spec.steps)]
    if os.environ.get("FAKE_NAN") == spec.id:
        loss[3] = math.nan
    return {
        "model": spec.model, "strategy": spec.strategy, "status": "ok", "error": None,
        "device": "cpu", "device_name": "Fake CPU", "hardware": "cpu",
        "time_class": os.environ.get("FAKE_CLASS", "fake-1.2-avx2"),
        "precision": "fp16" if "fp16" in spec.strategy else "fp32",
        "batch_size": 16, "micro_batch_size": 16, "seq_len": 128,
        "step_time_s": {"median": median, "samples": [median] * spec.steps},
        "step_time_calibrated": {"median": median / calibration},
        "calibration": {"workload": CALIBRATION, "median_s": calibration},
        "peak_memory_bytes": memory,
        "memory_breakdown_bytes": {"activations": memory - 6 * mib, "parameters": 2 * mib, "optimizer_state": 4 * mib},
        "loss": loss,
    }
"""

CASES = "tiny-bert-vanilla or (tiny-bert-fp16 and not grad_ckpt) or tiny-bert-grad_ckpt"


def _write_project(root: Path) -> None:
    (root / "test_matrix.py").write_text(MATRIX_TEST)
    (root / "conftest.py").write_text(FAKE_RUNNER)
    (root / "pyproject.toml").write_text("[tool.perfsuite]\nbaselines = 'baselines'\n")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baselines for the three tiny-bert cases, recorded once per module by a real refresh
    (a refresh asks torch for the device, about 3 s a session), copied into each test's project."""
    root = tmp_path_factory.mktemp("recorded")
    _write_project(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-m",
            "cpu and not trainer",
            "-k",
            CASES,
            "--perfsuite-refresh",
            "--perfsuite-repeats=3",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((root / "baselines" / "cpu").glob("tiny-bert-*.json"))) == 3
    return root / "baselines"


@pytest.fixture
def project(pytester: pytest.Pytester, recorded: Path) -> pytest.Pytester:
    """A project with perfsuite's matrix test, the fake runner and baselines for three tiny-bert cases."""
    _write_project(pytester.path)
    shutil.copytree(recorded, pytester.path / "baselines")
    return pytester


def _baseline(pytester: pytest.Pytester, case: str) -> Path:
    return pytester.path / "baselines" / "cpu" / f"{case}.json"


def _time(data: dict[str, Any]) -> dict[str, Any]:
    entry = data["time"]["fake-1.2-avx2"]
    assert isinstance(entry, dict)
    return entry


def _edit(pytester: pytest.Pytester, case: str, change: Any) -> None:
    path = _baseline(pytester, case)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _files(pytester: pytest.Pytester) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (pytester.path / "baselines" / "cpu").iterdir()}


def _changed(pytester: pytest.Pytester, before: dict[str, bytes]) -> set[str]:
    after = _files(pytester)
    return {name for name in after if after[name] != before.get(name)}


def _assert_only_rewritten(pytester: pytest.Pytester, before: dict[str, bytes], case: str) -> None:
    """Only ``case``'s file (whose peak memory the test had set to 1 byte) and the pinned
    pytest-benchmark file were rewritten."""
    assert _changed(pytester, before) == {f"{case}.json", "pytest-benchmark.fake-1.2-avx2.json"}
    assert json.loads(_baseline(pytester, case).read_text())["memory"]["peak_bytes"] == 100 * 2**20


def _gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The project's pytest, in this process (the fake runner starts no worker): with Python's
    default warning filters, as the project's own pytest has them, not this suite's "error"; its
    test files imported by path, beside this suite's modules of the same names."""
    args = ("-W", "default", "--import-mode=importlib", "-m", "cpu and not trainer", "-k", CASES, *args)
    return pytester.runpytest(*args)


def test_refresh_writes_one_readable_file_per_selected_case(project: pytest.Pytester) -> None:
    written = sorted(p.name for p in (project.path / "baselines" / "cpu").iterdir())
    assert written == [
        "pytest-benchmark.fake-1.2-avx2.json",
        "tiny-bert-fp16.json",
        "tiny-bert-grad_ckpt.json",
        "tiny-bert-vanilla.json",
    ]
    data = json.loads(_baseline(project, "tiny-bert-fp16").read_text())
    assert data["schema_version"] == 2
    assert data["hardware"] == "cpu"
    assert data["time"]["fake-1.2-avx2"] == {
        "unit": "calibrated",
        "median": 50.0,
        "spread": 0.0,
        "repeats": [50.0, 50.0, 50.0],
        "steps": [],  # the fake runner reports no per-step samples
        "step_time_s_median": 0.5,
        "calibration": CALIBRATION,  # the real workload's name: --missing compares it
        "recorded": data["provenance"]["date"],
        "device": "Fake CPU",
    }
    assert data["loss"] == [2.0 - 0.05 * i for i in range(14)]  # 2 warm-up + 12 timed steps
    assert data["provenance"]["repeats"] == 3
    assert set(data["provenance"]["versions"]) >= {"torch", "transformers", "accelerate", "deepspeed"}
    pinned = json.loads((project.path / "baselines" / "cpu" / "pytest-benchmark.fake-1.2-avx2.json").read_text())
    rounds = {b["param"]: len(b["stats"]["data"]) for b in pinned["benchmarks"]}
    assert rounds == {"tiny-bert-vanilla": 36, "tiny-bert-fp16": 36, "tiny-bert-grad_ckpt": 36}  # 3 repeats × 12 steps
    assert "perfsuite" in pinned["machine_info"]


def test_unchanged_baselines_pass_twice(project: pytest.Pytester) -> None:
    for _ in range(2):
        result = _gate(project)
        result.assert_outcomes(passed=3)
        result.stdout.fnmatch_lines(["*perfsuite: baselines compared*", "*tiny-bert-fp16*passed*"])


def test_the_session_writes_the_report(project: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib", reason="the report extra: pip install 'perfsuite[report]'")
    _edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=int(d["memory"]["peak_bytes"] * 0.9)))
    result = _gate(project, "--perfsuite-report", "report")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["wrote report*report.html, report*summary.md"])
    page = (project.path / "report" / "report.html").read_text()
    for kind in ("loss", "memory", "pareto"):
        assert page.count(f'data-chart="{kind}"') == 1  # one table: tiny-bert
    summary = (project.path / "report" / "summary.md").read_text()
    assert summary.startswith("### perfsuite: 1 failed, 2 passed")
    assert "| tiny-bert-fp16 | failed |" in summary.partition("<details>")[0]


def test_baseline_10_percent_faster_fails_that_case_as_a_regression(project: pytest.Pytester) -> None:
    _edit(project, "tiny-bert-fp16", lambda d: _time(d).update(median=_time(d)["median"] * 0.9))
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16: step time 50.000× calibration vs baseline 45.000× calibration (+11.1%), tolerance ±5.0% "
            "= max(floor 5.0%, 3 × spread 0.0%), at most the ceiling 15%: slower than the baseline: a regression*",
            "FAILED *tiny-bert-fp16*",
        ]
    )


def _retrying(project: pytest.Pytester) -> None:
    project.makepyprojecttoml(
        "[tool.perfsuite]\nbaselines = 'baselines'\n"
        "[tool.perfsuite.tolerance]\ntime_retries = 2\ntime_retry_pause_s = 0\n"
    )


def test_a_slow_run_is_retried_and_passes_when_the_next_is_in_tolerance(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _retrying(project)
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.3:1")  # a neighbour's burst spoils one run
    result = _gate(project)
    result.assert_outcomes(passed=3)
    # One run of two each way: a third decides.
    result.stdout.fnmatch_lines(["*tiny-bert-fp16*passed*time run 3 times: +30.0% → +0.0% → +0.0%*"])


def test_a_regression_fails_in_every_retry_and_lists_each_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _retrying(project)
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.25:99")
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    # Two of the three possible runs out of tolerance: the majority, so no third run.
    result.stdout.fnmatch_lines(
        ["*slower than the baseline: a regression ?out of tolerance in 2 of 2 runs: +25.0%, +25.0%?*"]
    )


def test_runs_stop_once_a_majority_of_the_possible_runs_agree(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyprojecttoml(
        "[tool.perfsuite]\nbaselines = 'baselines'\n"
        "[tool.perfsuite.tolerance]\ntime_retries = 4\ntime_retry_pause_s = 0\n"
    )
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.3:3")  # 3 of 5 possible runs slow: no 4th or 5th
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*out of tolerance in 3 of 3 runs: +30.0%, +30.0%, +30.0%?*"])


def test_without_retries_one_slow_run_fails(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.3:1")
    _gate(project).assert_outcomes(passed=2, failed=1)


def test_an_unexpected_speed_up_fails_too_and_says_refresh(project: pytest.Pytester) -> None:
    _edit(project, "tiny-bert-grad_ckpt", lambda d: _time(d).update(median=_time(d)["median"] * 1.1))
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-grad_ckpt: step time *(-9.1%)*faster than the baseline*"
            "perfsuite baselines refresh -k tiny-bert-grad_ckpt*"
        ]
    )


def test_baseline_2_percent_smaller_in_memory_fails_that_case(project: pytest.Pytester) -> None:
    _edit(project, "tiny-bert-vanilla", lambda d: d["memory"].update(peak_bytes=int(d["memory"]["peak_bytes"] * 0.98)))
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*tiny-bert-vanilla: peak memory 100.00 MiB vs baseline 98.00 MiB (+2.04%, +2,097,152 bytes), tolerance*"]
    )


def test_one_changed_loss_value_fails_naming_the_first_diverging_step(project: pytest.Pytester) -> None:
    def change(data: dict[str, Any]) -> None:
        data["loss"][6] += 0.01

    _edit(project, "tiny-bert-grad_ckpt", change)
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*tiny-bert-grad_ckpt: loss diverges from the baseline at step 6 of 14*largest absolute difference 0.01*"]
    )


def test_a_nan_loss_never_passes(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NAN", "tiny-bert-vanilla")
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*tiny-bert-vanilla: loss is nan at step 3*a non-finite loss never passes*"])


def test_a_deleted_baseline_fails_with_the_refresh_command(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _baseline(project, "tiny-bert-fp16").unlink()
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*no baseline for tiny-bert-fp16 on cpu: *tiny-bert-fp16.json does not exist; "
            "record one with `perfsuite baselines refresh -k tiny-bert-fp16`*"
        ]
    )
    # Skipped before it runs: a run would crash here, and would fail the case.
    monkeypatch.setenv("FAKE_CRASH", "tiny-bert-fp16")
    skipped = _gate(project, "--perfsuite-missing=skip", "-rs")
    skipped.assert_outcomes(passed=2, skipped=1)
    skipped.stdout.fnmatch_lines(["SKIPPED*no baseline for tiny-bert-fp16 on cpu: *does not exist; record one with*"])


def test_a_gpu_gate_where_every_case_was_skipped_fails_saying_nothing_was_gated(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU machine with no baselines for its GPU, under --perfsuite-missing=skip: every case is
    skipped before it runs, and the session would pass having measured nothing."""
    from perfsuite.worker import device

    _write_project(pytester.path)
    monkeypatch.setattr(device, "cuda_usable", lambda: True)
    monkeypatch.setattr(device, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(device, "get_device", lambda kind="auto": device.Device("cuda", "NVIDIA H100 80GB HBM3"))
    gpu = ("-W", "default", "--import-mode=importlib", "-m", "gpu", "-k", "bert-base-uncased and not trainer")
    result = pytester.runpytest(*gpu, "--perfsuite-missing=skip", "--perfsuite-markdown", "summary.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes()["skipped"] > 1
    line = "perfsuite: nothing was gated: all * GPU case(s) were skipped (bert-base-uncased-*: no baseline for *)"
    result.stdout.fnmatch_lines([line])
    assert len([x for x in result.outlines if "nothing was gated" in x]) == 1
    assert "nothing was gated" in (pytester.path / "summary.md").read_text()
    # Without a GPU, --perfsuite-no-gpu=skip asks for the tier to be skipped: that passes, as before.
    monkeypatch.setattr(device, "cuda_usable", lambda: False)
    asked = pytester.runpytest(*gpu, "--perfsuite-no-gpu=skip")
    assert asked.ret == pytest.ExitCode.OK
    assert "nothing was gated" not in asked.stdout.str()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "corrupt baseline (not JSON*"),
        ('{"schema_version": 99, "case": "tiny-bert-fp16"}', "schema_version is 99, this perfsuite reads 2*"),
        ('{"schema_version": 2, "case": "tiny-bert-fp16", "time": []}', "corrupt baseline (`time` maps*"),
    ],
)
def test_a_corrupt_baseline_names_its_file(project: pytest.Pytester, content: str, problem: str) -> None:
    path = _baseline(project, "tiny-bert-fp16")
    path.write_text(content)
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([f"*{path}: {problem}"])


def test_a_crashed_case_fails_alone(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CRASH", "tiny-bert-grad_ckpt")
    result = _gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*tiny-bert-grad_ckpt: failed: worker killed by signal SIGKILL*"])


def _local_class() -> str:
    from perfsuite.core.hardware import local_cpu_class

    return local_cpu_class()


def test_benchmark_compare_reads_the_pinned_file(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # --benchmark-compare picks the file of this machine's class before any case runs; record that class's.
    monkeypatch.setenv("FAKE_CLASS", _local_class())
    project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh").assert_outcomes(
        passed=3
    )
    # In a process of its own too, as the refresh: the pinned file's machine_info has that
    # process's thread count, and this one's differs (pytest-benchmark would warn of it).
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--benchmark-compare", "--benchmark-compare-fail=median:5%"
    )
    result.assert_outcomes(passed=3)
    pinned = project.path / "baselines" / "cpu" / f"pytest-benchmark.{_local_class()}.json"
    output = result.stdout.str() + result.stderr.str()
    assert f"Comparing against benchmarks from: {pinned}" in output  # not "the latest saved run"


def test_a_noisy_refresh_is_refused_and_writes_nothing_for_that_case(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _baseline(project, "tiny-bert-fp16").read_text()
    monkeypatch.setenv("FAKE_JITTER", "0.3")  # repeats at 0.7×, 1×, 1.3× the step time
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-fp16 and not grad_ckpt", "--perfsuite-refresh"
    )
    result.assert_outcomes(failed=1)
    # Three repeats asked for a 90% gate. After two more, no 3 of the 5 lie within the 10% spread the
    # ceiling admits of one median (of 9 repeats, 2 would be set aside): the refresh stops there.
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16: not recorded: step time spread 30.0% over 5 repeats (the 1 farthest set aside), "
            "over max_refresh_spread 15%*the machine is too noisy to record this case's time now. It stopped at "
            "5 of at most 9 repeats: more could not have settled it*Next: run "
            "`perfsuite baselines refresh --missing -k tiny-bert-fp16` again when nothing else runs*"
        ]
    )
    assert _baseline(project, "tiny-bert-fp16").read_text() == before


def test_a_refresh_with_one_burst_takes_another_repeat_and_sets_the_burst_aside(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.5:1")  # the first run lands 50% slow (a neighbour's burst)
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-fp16 and not grad_ckpt", "--perfsuite-refresh"
    )
    result.assert_outcomes(passed=1)
    data = json.loads(_baseline(project, "tiny-bert-fp16").read_text())
    assert _time(data)["repeats"] == [75.0, 50.0, 50.0, 50.0]  # a fourth repeat, the burst set aside
    assert _time(data)["spread"] == 0.0
    assert data["provenance"]["repeats"] == 4
    # Held to three repeats, the same burst asks for a 75% gate: refused, the old file kept.
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "[tool.perfsuite.tolerance]\nrefresh_max_repeats = 3\n")
    before = _baseline(project, "tiny-bert-fp16").read_text()
    capped = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-fp16 and not grad_ckpt", "--perfsuite-refresh"
    )
    capped.assert_outcomes(failed=1)
    capped.stdout.fnmatch_lines(["*not recorded: step time spread 50.0% over 3 repeats, over max_refresh_spread*"])
    assert _baseline(project, "tiny-bert-fp16").read_text() == before


def test_an_interrupted_refresh_leaves_the_old_files(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p: p.read_bytes() for p in (project.path / "baselines" / "cpu").iterdir()}
    monkeypatch.setenv("FAKE_INTERRUPT", "tiny-bert-grad_ckpt")
    monkeypatch.setenv("FAKE_JITTER", "0.01")  # the other cases would otherwise record changed figures
    result = project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*interrupted: no baseline was written*"])
    after = {p: p.read_bytes() for p in (project.path / "baselines" / "cpu").iterdir()}
    assert after == before  # same files, same bytes, no temporary files left behind


def test_a_refresh_with_a_time_limit_writes_the_cases_it_finished_and_reports_the_rest(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(project, "tiny-bert-vanilla", lambda d: d["memory"].update(peak_bytes=1))
    before = _files(project)
    # The first case takes 3 s of a 5 s limit: 2 s left, less than that case, so no other starts.
    monkeypatch.setenv("FAKE_SLEEP", "tiny-bert-vanilla=3")
    result = project.runpytest_subprocess(
        "-m",
        "cpu and not trainer",
        "-k",
        CASES,
        "--perfsuite-refresh",
        "--perfsuite-repeats=1",
        "--perfsuite-refresh-time-limit=5",
    )
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16*not reached*tiny-bert-fp16: not reached: * s of the 5 s time limit left, less than*",
            "*wrote 2 file(s) under baselines/*",
            "2 case(s) not reached within the 5 s time limit; `perfsuite baselines refresh --missing`*",
        ]
    )
    _assert_only_rewritten(project, before, "tiny-bert-vanilla")


# Nightly: waits out a 6 s limit. Every push runs the limit's other two tests (above, below).
@pytest.mark.nightly
def test_a_case_still_running_at_the_time_limit_is_stopped_and_the_finished_ones_written(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit(project, "tiny-bert-vanilla", lambda d: d["memory"].update(peak_bytes=1))
    before = _files(project)
    # The second case would take 60 s; its run's timeout is cut to what is left of the 6 s.
    monkeypatch.setenv("FAKE_SLEEP", "tiny-bert-fp16=60")
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-repeats=1",
        "--perfsuite-refresh-time-limit=6",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16*not reached*tiny-bert-fp16: not reached: stopped at the 6 s time limit before*",
            "*tiny-bert-grad_ckpt*not reached*",
            "*wrote 2 file(s) under baselines/*",
        ]
    )
    assert float(result.stdout.lines[-1].rsplit(" in ", 1)[1].split("s")[0]) < 20  # not the 60 s
    _assert_only_rewritten(project, before, "tiny-bert-vanilla")


def test_a_first_case_longer_than_the_whole_limit_fails_saying_it_does_not_fit(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _files(project)
    monkeypatch.setenv("FAKE_SLEEP", "tiny-bert-vanilla=60")
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-repeats=1",
        "--perfsuite-refresh-time-limit=3",
    )  # fmt: skip
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*tiny-bert-vanilla: does not fit in the 3 s time limit: it had all of it*"])
    assert _changed(project, before) == set()


@pytest.mark.nightly  # four refresh sessions, one through the command line
def test_refresh_missing_takes_only_the_cases_without_a_complete_baseline_here(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Give all three this machine's time class, then take it from one and corrupt another.
    monkeypatch.setenv("FAKE_CLASS", _local_class())
    project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh").assert_outcomes(
        passed=3
    )
    _edit(project, "tiny-bert-vanilla", lambda d: d["time"].pop(_local_class()))
    _baseline(project, "tiny-bert-fp16").write_text("{")
    complete = _files(project)["tiny-bert-grad_ckpt.json"]
    result = project.run(
        sys.executable, "-m", "perfsuite", "baselines", "refresh", "--missing", "-k", CASES,
        "--tests", "test_matrix.py", "--device", "cpu", "--repeats", "1", "--", "-m", "cpu and not trainer",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["perfsuite: 1 selected case(s) already have complete baselines here*", "*2 passed*"])
    for case in ("tiny-bert-vanilla", "tiny-bert-fp16"):
        assert _local_class() in json.loads(_baseline(project, case).read_text())["time"]
    assert _files(project)["tiny-bert-grad_ckpt.json"] == complete  # left out, untouched
    # A deleted file is missing too; then all three are complete, and nothing is left to take.
    _baseline(project, "tiny-bert-grad_ckpt").unlink()
    missing = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-refresh-missing"
    )
    missing.assert_outcomes(passed=1)
    before = _files(project)
    again = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-refresh-missing"
    )
    assert again.ret == pytest.ExitCode.OK  # nothing to do is not "no tests collected"
    again.stdout.fnmatch_lines(["perfsuite: 3 selected case(s) already have complete baselines here*"])
    assert _changed(project, before) == set()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--perfsuite-refresh-missing"],
            "*--perfsuite-refresh-missing applies to a refresh: add --perfsuite-refresh*",
        ),
        (["--perfsuite-refresh-time-limit=60"], "*--perfsuite-refresh-time-limit applies to a refresh*"),
        (["--perfsuite-refresh", "--perfsuite-refresh-time-limit=0"], "*must be a positive number of seconds, not 0*"),
        (["--perfsuite-refresh", "--perfsuite-explain"], "*--perfsuite-explain explains a gate's failures; a refresh*"),
    ],
)
def test_a_refresh_scope_without_a_refresh_or_with_no_time_is_a_usage_error(
    project: pytest.Pytester, args: list[str], message: str
) -> None:
    result = _gate(project, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_tolerances_come_from_pyproject_per_case(project: pytest.Pytester) -> None:
    _edit(project, "tiny-bert-fp16", lambda d: _time(d).update(median=_time(d)["median"] * 0.9))
    project.makepyprojecttoml(
        "[tool.perfsuite]\nbaselines = 'baselines'\n"
        "[tool.perfsuite.overrides.'cpu/tiny-bert-fp16']\ntime_floor = 0.15\n"
    )
    _gate(project).assert_outcomes(passed=3)
    project.makepyprojecttoml("[tool.perfsuite.tolerance]\ntime_flor = 0.15\n")
    result = _gate(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown key(s) time_flor; valid: *time_floor*"])


def test_cli_refresh_rewrites_only_the_selected_files_and_prints_the_diff(project: pytest.Pytester) -> None:
    _edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=1))
    before = _files(project)
    result = project.run(
        sys.executable,
        "-m",
        "perfsuite",
        "baselines",
        "refresh",
        "-k",
        "tiny-bert-fp16 and not grad_ckpt and not trainer",
        "--repeats",
        "2",
        "--tests",
        "test_matrix.py",
        "--device",
        "cpu",
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16*refreshed*step time*50.000× calibration*50.000× calibration*+0.0%*",
            "*peak memory*0.00 MiB*100.00 MiB*",
            "wrote 2 file(s) under baselines/",
        ]
    )
    _assert_only_rewritten(project, before, "tiny-bert-fp16")


def test_a_baseline_from_another_cpu_class_gates_memory_and_loss_but_not_time(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    xeon = "intel-6.143-avx512-vnni-bf16-fp16-amx"
    monkeypatch.setenv("FAKE_CLASS", xeon)  # the baselines were recorded on fake-1.2-avx2
    result = _gate(project, "--perfsuite-markdown", "summary.md")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            f"perfsuite: passed: 3 passed; step time NOT gated for 3 of 3 *time class {xeon}; memory and loss were*",
            "*tiny-bert-fp16*passed*not compared*",
        ]
    )
    # One line says why for all of them; each case's whole message is in the markdown summary.
    assert "tiny-bert-fp16: step time not compared" not in result.stdout.str()
    assert (
        f"tiny-bert-fp16: step time not compared: the baseline has step times for fake-1.2-avx2, this machine is {xeon}"
    ) in (project.path / "summary.md").read_text()
    # memory is still gated across classes
    _edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=int(d["memory"]["peak_bytes"] * 0.98)))
    _gate(project).assert_outcomes(passed=2, failed=1)
    # a dedicated runner can insist on its class's times
    strict = _gate(project, "--perfsuite-uncompared-time=fail", "-k", "tiny-bert-vanilla")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines([f"*tiny-bert-vanilla: step time not compared*this machine is {xeon}*"])

    # a refresh there adds the class and leaves the recorded one untouched
    before = _time(json.loads(_baseline(project, "tiny-bert-vanilla").read_text()))
    project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-vanilla", "--perfsuite-refresh"
    ).assert_outcomes(passed=1)
    data = json.loads(_baseline(project, "tiny-bert-vanilla").read_text())
    assert sorted(data["time"]) == ["fake-1.2-avx2", xeon]
    assert data["time"]["fake-1.2-avx2"] == before


PROJECT = (
    '[tool.perfsuite]\nbaselines = "baselines"\n'
    + WIDGET
    + '[tool.perfsuite.matrix]\nbuiltin = false\n[[tool.perfsuite.matrix.cases]]\nmodels = ["widget"]\n'
    + 'strategies = ["vanilla", "grad_accum"]\n'
)


@pytest.mark.parametrize("form", ["--perfsuite-baselines={}", "--perfsuite-baselines {}", "--perfsuite-project {}"])
def test_a_project_is_found_from_the_working_directory_whatever_the_options_point_at(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """A baselines directory outside the repository, given either way, moves pytest's rootdir (an
    option's value it cannot tell from a path to test); the project is still the one around the
    working directory, or the one ``--perfsuite-project`` names, and the session's first line says
    which, with its case count: never perfsuite's built-in matrix in its place."""
    project = pytester.mkdir("repo")
    (project / "pyproject.toml").write_text(PROJECT)
    (project / "test_matrix.py").write_text(MATRIX_TEST)
    elsewhere = tmp_path_factory.mktemp("shared-baselines")
    if form.startswith("--perfsuite-project"):
        args = ["--perfsuite-project", str(project), str(project / "test_matrix.py")]  # run from outside it
        expected_root = project / "baselines"
    else:
        monkeypatch.chdir(project)  # pytest run in the repository, as its README says
        args = form.format(elsewhere).split(" ")
        expected_root = elsewhere
    result = pytester.runpytest_subprocess(*args, "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    assert "<Function test_case_matches_baseline[widget-vanilla]>" in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"perfsuite: project {project / 'pyproject.toml'}: 2 matrix cases (1 declared entry); "
            f"baselines {expected_root}",
            "*2 tests collected*",
        ]
    )
