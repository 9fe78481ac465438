"""A refresh through the pytest plugin, end to end: what it writes, what it refuses, how it stops at a time
limit or an interrupt, and `perfsuite baselines refresh` around it (the project of ``plugin_project``)."""

from __future__ import annotations

import json
import sys

import pytest
from plugin_project import (
    CASES,
    assert_only_rewritten,
    baseline,
    baseline_files,
    changed,
    edit,
    gate,
    local_class,
    time_entry,
)

from perfsuite.worker.calibrate import NAME as CALIBRATION


def test_refresh_writes_one_readable_file_per_selected_case(project: pytest.Pytester) -> None:
    written = sorted(p.name for p in (project.path / "baselines" / "cpu").iterdir())
    assert written == [
        "pytest-benchmark.fake-1.2-avx2.json",
        "tiny-bert-fp16.json",
        "tiny-bert-grad_ckpt.json",
        "tiny-bert-vanilla.json",
    ]
    data = json.loads(baseline(project, "tiny-bert-fp16").read_text())
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


def test_a_noisy_refresh_is_refused_and_writes_nothing_for_that_case(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = baseline(project, "tiny-bert-fp16").read_text()
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
            "`perfsuite baselines refresh --missing -k '[[]tiny-bert-fp16]'` again when nothing else runs*"
        ]
    )
    assert baseline(project, "tiny-bert-fp16").read_text() == before


def test_a_refresh_with_one_burst_takes_another_repeat_and_sets_the_burst_aside(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.5:1")  # the first run lands 50% slow (a neighbour's burst)
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-fp16 and not grad_ckpt", "--perfsuite-refresh"
    )
    result.assert_outcomes(passed=1)
    data = json.loads(baseline(project, "tiny-bert-fp16").read_text())
    assert time_entry(data)["repeats"] == [75.0, 50.0, 50.0, 50.0]  # a fourth repeat, the burst set aside
    assert time_entry(data)["spread"] == 0.0
    assert data["provenance"]["repeats"] == 4
    # Held to three repeats, the same burst asks for a 75% gate: refused, the old file kept.
    pyproject = project.path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "[tool.perfsuite.tolerance]\nrefresh_max_repeats = 3\n")
    before = baseline(project, "tiny-bert-fp16").read_text()
    capped = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-fp16 and not grad_ckpt", "--perfsuite-refresh"
    )
    capped.assert_outcomes(failed=1)
    capped.stdout.fnmatch_lines(["*not recorded: step time spread 50.0% over 3 repeats, over max_refresh_spread*"])
    assert baseline(project, "tiny-bert-fp16").read_text() == before


def test_an_interrupted_refresh_leaves_the_old_files(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p: p.read_bytes() for p in (project.path / "baselines" / "cpu").iterdir()}
    monkeypatch.setenv("FAKE_INTERRUPT", "tiny-bert-grad_ckpt")
    monkeypatch.setenv("FAKE_JITTER", "0.01")  # the other cases would otherwise record changed figures
    result = project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*interrupted: no baseline was written*"])
    after = {p: p.read_bytes() for p in (project.path / "baselines" / "cpu").iterdir()}
    assert after == before  # same files, same bytes, no temporary files left behind


def _limited_refresh(project: pytest.Pytester, seconds: int) -> pytest.RunResult:
    """A refresh of the three cases, one repeat each, with a time limit of ``seconds``."""
    return project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-repeats=1",
        f"--perfsuite-refresh-time-limit={seconds}",
    )  # fmt: skip


def test_a_refresh_with_a_time_limit_writes_the_cases_it_finished_and_reports_the_rest(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    edit(project, "tiny-bert-vanilla", lambda d: d["memory"].update(peak_bytes=1))
    before = baseline_files(project)
    # The first case takes 3 s of a 5 s limit: 2 s left, less than that case, so no other starts.
    monkeypatch.setenv("FAKE_SLEEP", "tiny-bert-vanilla=3")
    result = _limited_refresh(project, 5)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16*not reached*tiny-bert-fp16: not reached: * s of the 5 s time limit left, less than*",
            "*wrote 2 file(s) under baselines/*",
            "2 case(s) not reached within the 5 s time limit; `perfsuite baselines refresh --missing`*",
        ]
    )
    assert_only_rewritten(project, before, "tiny-bert-vanilla")


# Nightly: waits out a 6 s limit. Every push runs the limit's other two tests (above, below).
@pytest.mark.nightly
def test_a_case_still_running_at_the_time_limit_is_stopped_and_the_finished_ones_written(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    edit(project, "tiny-bert-vanilla", lambda d: d["memory"].update(peak_bytes=1))
    before = baseline_files(project)
    # The second case would take 60 s; its run's timeout is cut to what is left of the 6 s.
    monkeypatch.setenv("FAKE_SLEEP", "tiny-bert-fp16=60")
    result = _limited_refresh(project, 6)
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
    assert_only_rewritten(project, before, "tiny-bert-vanilla")


def test_a_first_case_longer_than_the_whole_limit_fails_saying_it_does_not_fit(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = baseline_files(project)
    monkeypatch.setenv("FAKE_SLEEP", "tiny-bert-vanilla=60")
    result = _limited_refresh(project, 3)
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*tiny-bert-vanilla: does not fit in the 3 s time limit: it had all of it*"])
    assert changed(project, before) == set()


@pytest.mark.nightly  # four refresh sessions, one through the command line
def test_refresh_missing_takes_only_the_cases_without_a_complete_baseline_here(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Give all three this machine's time class, then take it from one and corrupt another.
    monkeypatch.setenv("FAKE_CLASS", local_class())
    project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh").assert_outcomes(
        passed=3
    )
    edit(project, "tiny-bert-vanilla", lambda d: d["time"].pop(local_class()))
    baseline(project, "tiny-bert-fp16").write_text("{")
    complete = baseline_files(project)["tiny-bert-grad_ckpt.json"]
    result = project.run(
        sys.executable, "-m", "perfsuite", "baselines", "refresh", "--missing", "-k", CASES,
        "--tests", "test_matrix.py", "--device", "cpu", "--repeats", "1", "--", "-m", "cpu and not trainer",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["perfsuite: 1 selected case(s) already have complete baselines here*", "*2 passed*"])
    for case in ("tiny-bert-vanilla", "tiny-bert-fp16"):
        assert local_class() in json.loads(baseline(project, case).read_text())["time"]
    assert baseline_files(project)["tiny-bert-grad_ckpt.json"] == complete  # left out, untouched
    # A deleted file is missing too; then all three are complete, and nothing is left to take.
    baseline(project, "tiny-bert-grad_ckpt").unlink()
    missing = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-refresh-missing"
    )
    missing.assert_outcomes(passed=1)
    before = baseline_files(project)
    again = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh", "--perfsuite-refresh-missing"
    )
    assert again.ret == pytest.ExitCode.OK  # nothing to do is not "no tests collected"
    again.stdout.fnmatch_lines(["perfsuite: 3 selected case(s) already have complete baselines here*"])
    assert changed(project, before) == set()


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
    result = gate(project, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_cli_refresh_rewrites_only_the_selected_files_and_prints_the_diff(project: pytest.Pytester) -> None:
    edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=1))
    before = baseline_files(project)
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
            "*peak memory*1 B*100.00 MiB*",
            "wrote 2 file(s) under baselines/: 1 baseline(s) and 1 pinned pytest-benchmark file(s), which "
            "`pytest --benchmark-compare` reads",
        ]
    )
    assert_only_rewritten(project, before, "tiny-bert-fp16")
