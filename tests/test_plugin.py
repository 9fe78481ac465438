"""The pytest plugin end to end, through ``pytester``: each gate fails exactly the case it should.

Most tests feed chosen measurements through ``pytest_perfsuite_run_case`` (a conftest
in the test project), so a "10% faster baseline" is exactly 10% and nothing depends on
this machine's noise; the last test does the same with real training runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from plugin_project import (
    CASES,
    MATRIX_TEST,
    baseline,
    edit,
    gate,
    local_class,
    scale_median,
    time_entry,
    write_project,
)
from team_repo import WIDGET


def test_unchanged_baselines_pass_twice(project: pytest.Pytester) -> None:
    for _ in range(2):
        result = gate(project)
        result.assert_outcomes(passed=3)
        result.stdout.fnmatch_lines(["*perfsuite: baselines compared*", "*tiny-bert-fp16*passed*"])


def test_the_session_writes_the_report(project: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib", reason="the report extra: pip install 'perfsuite[report]'")
    edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=int(d["memory"]["peak_bytes"] * 0.9)))
    result = gate(project, "--perfsuite-report", "report")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["wrote report*report.html, report*summary.md"])
    page = (project.path / "report" / "report.html").read_text()
    for kind in ("loss", "memory", "pareto"):
        assert page.count(f'data-chart="{kind}"') == 1  # one table: tiny-bert
    summary = (project.path / "report" / "summary.md").read_text()
    assert summary.startswith("### perfsuite: 1 failed, 2 passed")
    assert "| tiny-bert-fp16 | failed |" in summary.partition("<details>")[0]


def test_baseline_10_percent_faster_fails_that_case_as_a_regression(project: pytest.Pytester) -> None:
    edit(project, "tiny-bert-fp16", lambda d: scale_median(d, 0.9))
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-fp16: step time 50.000× calibration vs baseline 45.000× calibration (+11.1%), tolerance ±5.0% "
            "= max(floor 5.0%, 3 × spread 0.0%), at most the ceiling 15%: slower than the baseline: a regression*",
            "FAILED *tiny-bert-fp16*",
        ]
    )


def test_without_pytest_benchmark_the_matrix_test_is_gated_all_the_same(project: pytest.Pytester) -> None:
    """``-p no:benchmark``: the matrix test's ``benchmark`` is ``None``, and perfsuite's gates stand (a
    faster baseline fails its case); a refresh writes the baselines, saying no pinned file was written."""
    edit(project, "tiny-bert-fp16", lambda d: scale_median(d, 0.9))
    result = gate(project, "-p", "no:benchmark")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*tiny-bert-fp16: step time *(+11.1%)*a regression*", "FAILED *tiny-bert-fp16*"])
    pinned = project.path / "baselines" / "cpu" / "pytest-benchmark.fake-1.2-avx2.json"
    before = pinned.read_bytes()
    refreshed = gate(project, "-p", "no:benchmark", "--perfsuite-refresh", "--perfsuite-repeats=1")
    refreshed.assert_outcomes(passed=3)
    refreshed.stdout.fnmatch_lines(
        [
            "wrote 3 file(s) under baselines/, and no pinned pytest-benchmark file: no case ran with "
            "pytest-benchmark's `benchmark`"
        ]
    )
    assert pinned.read_bytes() == before


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
    result = gate(project)
    result.assert_outcomes(passed=3)
    # One run of two each way: a third decides.
    result.stdout.fnmatch_lines(["*tiny-bert-fp16*passed*time run 3 times: +30.0% → +0.0% → +0.0%*"])


def test_a_regression_fails_in_every_retry_and_lists_each_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _retrying(project)
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.25:99")
    result = gate(project)
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
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*out of tolerance in 3 of 3 runs: +30.0%, +30.0%, +30.0%?*"])


def test_without_retries_one_slow_run_fails(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SLOW", "tiny-bert-fp16=0.3:1")
    gate(project).assert_outcomes(passed=2, failed=1)


def test_an_unexpected_speed_up_fails_too_and_says_refresh(project: pytest.Pytester) -> None:
    edit(project, "tiny-bert-grad_ckpt", lambda d: scale_median(d, 1.1))
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*tiny-bert-grad_ckpt: step time *(-9.1%)*faster than the baseline*"
            "perfsuite baselines refresh -k '[[]tiny-bert-grad_ckpt]'*"
        ]
    )


def test_baseline_2_percent_smaller_in_memory_fails_that_case(project: pytest.Pytester) -> None:
    edit(project, "tiny-bert-vanilla", lambda d: d["memory"].update(peak_bytes=int(d["memory"]["peak_bytes"] * 0.98)))
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*tiny-bert-vanilla: peak memory 100.00 MiB vs baseline 98.00 MiB (+2.04%, +2,097,152 bytes), tolerance*"]
    )


def test_one_changed_loss_value_fails_naming_the_first_diverging_step(project: pytest.Pytester) -> None:
    def change(data: dict[str, Any]) -> None:
        data["loss"][6] += 0.01

    edit(project, "tiny-bert-grad_ckpt", change)
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*tiny-bert-grad_ckpt: loss diverges from the baseline at step 6 (of 0-13)*largest absolute difference 0.01*"]
    )


def test_a_nan_loss_never_passes(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NAN", "tiny-bert-vanilla")
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*tiny-bert-vanilla: loss is nan at step 3*a non-finite loss never passes*"])


def test_a_deleted_baseline_fails_with_the_refresh_command(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    baseline(project, "tiny-bert-fp16").unlink()
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*no baseline for tiny-bert-fp16 on cpu: *tiny-bert-fp16.json does not exist; "
            "record one with `perfsuite baselines refresh -k '[[]tiny-bert-fp16]'`*"
        ]
    )
    said = result.stdout.str()
    # Said once as the failure. The table's note column and the short summary, both cut or wrapped
    # to the terminal's width, are not counted.
    lines = said.splitlines()
    assert sum(line.startswith("no baseline for tiny-bert-fp16 on cpu: ") for line in lines) == 1, said
    assert "During handling of the above exception" not in said
    # Skipped before it runs: a run would crash here, and would fail the case.
    monkeypatch.setenv("FAKE_CRASH", "tiny-bert-fp16")
    skipped = gate(project, "--perfsuite-missing=skip", "-rs")
    skipped.assert_outcomes(passed=2, skipped=1)
    skipped.stdout.fnmatch_lines(["SKIPPED*no baseline for tiny-bert-fp16 on cpu: *does not exist; record one with*"])
    # The summary's first line counts it: a run that passes with part of its cases ungated says so.
    skipped.stdout.fnmatch_lines(["perfsuite: passed: 2 passed, 1 NOT gated (no baseline here, skipped: *--missing*"])


def test_a_cpu_gate_where_every_case_was_skipped_fails_saying_nothing_was_gated(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No baseline here for any selected case, under --perfsuite-missing=skip: every case is
    skipped before it runs. The session measured nothing, so it fails saying so, in one process
    and under pytest-xdist (where the worker that ran the cases tells the controller)."""
    for path in (project.path / "baselines" / "cpu").glob("tiny-bert-*.json"):
        path.unlink()
    line = (
        "perfsuite: nothing was gated: all 3 case(s) were skipped (tiny-bert-*: no baseline for tiny-bert-* on cpu: *)"
    )
    result = gate(project, "--perfsuite-missing=skip")
    result.assert_outcomes(skipped=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([line])
    # Cases that ran and skipped themselves gate nothing either; the markdown summary (a CI job's
    # summary) says so first, not only its "passed: N skipped".
    for path in (project.path / "baselines" / "cpu").glob("*.json"):
        path.unlink()
    monkeypatch.setenv("FAKE_SKIP", "tiny-bert-vanilla,tiny-bert-fp16,tiny-bert-grad_ckpt")
    ran = gate(project, "--perfsuite-markdown", "summary.md")
    assert ran.ret == pytest.ExitCode.TESTS_FAILED
    assert (project.path / "summary.md").read_text().startswith("**perfsuite: nothing was gated: all 3 case(s)")
    monkeypatch.delenv("FAKE_SKIP")
    spread = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-missing=skip", "-n", "2"
    )
    spread.assert_outcomes(skipped=3)
    assert spread.ret == pytest.ExitCode.TESTS_FAILED
    spread.stdout.fnmatch_lines([line])


def test_a_gpu_gate_where_every_case_was_skipped_fails_saying_nothing_was_gated(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU machine with no baselines for its GPU, under --perfsuite-missing=skip: every case is
    skipped before it runs, and the session would pass having measured nothing."""
    from perfsuite.worker import device

    write_project(pytester.path)
    monkeypatch.setattr(device, "cuda_usable", lambda: True)
    monkeypatch.setattr(device, "cuda_device_count", lambda: 1)
    monkeypatch.setattr(device, "get_device", lambda kind="auto": device.Device("cuda", "NVIDIA H100 80GB HBM3"))
    gpu = ("-W", "default", "--import-mode=importlib", "-m", "gpu", "-k", "bert-base-uncased and not trainer")
    result = pytester.runpytest(*gpu, "--perfsuite-missing=skip", "--perfsuite-markdown", "summary.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes()["skipped"] > 1
    line = "perfsuite: nothing was gated: all * case(s) were skipped (bert-base-uncased-*: no baseline for *)"
    result.stdout.fnmatch_lines([line])
    assert len([x for x in result.outlines if "nothing was gated" in x]) == 1
    assert "nothing was gated" in (pytester.path / "summary.md").read_text()
    # A collection runs no case: it gates nothing, so it neither fails for that nor writes a summary
    # over the last run's (`perfsuite baselines refresh` collects a selection first).
    collected = pytester.runpytest(*gpu, "--collect-only", "-q", "--perfsuite-markdown", "collected.md")
    assert collected.ret == pytest.ExitCode.OK, collected.stdout.str()
    assert "nothing was gated" not in collected.stdout.str()
    assert not (pytester.path / "collected.md").exists()
    # Without a GPU, --perfsuite-no-gpu=skip asks for the tier to be skipped: that passes, as before.
    monkeypatch.setattr(device, "cuda_usable", lambda: False)
    asked = pytester.runpytest(*gpu, "--perfsuite-no-gpu=skip")
    assert asked.ret == pytest.ExitCode.OK
    assert "nothing was gated" not in asked.stdout.str()


def test_a_gpu_case_wider_than_the_gpus_selected_is_skipped_saying_so_and_a_count_of_0_is_refused(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--perfsuite-gpus picks the GPUs every run holds: a case on more ranks than it selects does not
    run on the others; 0 selects nothing, which is no selection at all."""
    import importlib

    device = importlib.import_module("perfsuite.worker.device")  # the module the run imports, not a stale one

    write_project(pytester.path)
    monkeypatch.setattr(device, "cuda_usable", lambda: True)
    monkeypatch.setenv("PERFSUITE_GPUS", "2")  # a faked machine's GPUs (perfsuite.worker.pool)
    monkeypatch.setattr(device, "get_device", lambda kind="auto": device.Device("cuda", "NVIDIA H100 80GB HBM3"))
    gpu = ("-W", "default", "--import-mode=importlib", "-m", "gpu", "-k", "bert-base-uncased-ddp-ws2", "-rs")
    narrow = pytester.runpytest(*gpu, "--perfsuite-gpus", "1")
    narrow.stdout.fnmatch_lines(["SKIPPED*needs 2 GPUs; --perfsuite-gpus selects 1 (0)"])
    none = pytester.runpytest(*gpu, "--perfsuite-gpus", "0")
    assert none.ret == pytest.ExitCode.USAGE_ERROR
    none.stderr.fnmatch_lines(["ERROR: --perfsuite-gpus: 0 GPUs asked for: a count is 1 or more*"])


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "corrupt baseline (not JSON*"),
        ('{"schema_version": 99, "case": "tiny-bert-fp16"}', "schema_version is 99, this perfsuite reads 2*"),
        ('{"schema_version": 2, "case": "tiny-bert-fp16", "time": []}', "corrupt baseline (`time` maps*"),
    ],
)
def test_a_corrupt_baseline_names_its_file(project: pytest.Pytester, content: str, problem: str) -> None:
    path = baseline(project, "tiny-bert-fp16")
    path.write_text(content)
    result = gate(project)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([f"*{path}: {problem}"])


def test_a_crashed_case_fails_alone(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_CRASH", "tiny-bert-grad_ckpt")
    # Where warnings are errors (this suite's own setting), the case that never reached its timing fails
    # once, for its crash, not again for pytest-benchmark's warning of a fixture it never called.
    result = gate(project, "-W", "error:Benchmark fixture was not used")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*tiny-bert-grad_ckpt: failed: worker killed by signal SIGKILL*"])


def test_benchmark_compare_reads_the_pinned_file(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # --benchmark-compare picks the file of this machine's class before any case runs; record that class's.
    monkeypatch.setenv("FAKE_CLASS", local_class())
    refresh = project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh")
    refresh.assert_outcomes(passed=3)
    # pytest-benchmark's own line names no temporary file the refresh then removes.
    said = refresh.stdout.lines + refresh.stderr.lines
    assert (
        "Wrote benchmark data in: a scratch file, which perfsuite merges into each time class's pinned "
        in "\n".join(said)
    )
    # In a process of its own too, as the refresh: the pinned file's machine_info has that
    # process's thread count, and this one's differs (pytest-benchmark would warn of it).
    result = project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", CASES, "--benchmark-compare", "--benchmark-compare-fail=median:5%"
    )
    result.assert_outcomes(passed=3)
    pinned = project.path / "baselines" / "cpu" / f"pytest-benchmark.{local_class()}.json"
    output = result.stdout.str() + result.stderr.str()
    assert f"Comparing against benchmarks from: {pinned}" in output  # not "the latest saved run"


@pytest.mark.nightly  # each step a pytest of its own; every push reads a good pinned file (above)
def test_a_pinned_file_that_cannot_be_read_or_is_gone_is_one_line(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned file that cannot be read: the compare refuses in one line before any case runs; a refresh
    writes the baselines it measured, leaves the file as it was, says so and fails. No file: one line."""
    monkeypatch.setenv("FAKE_CLASS", local_class())
    pinned = project.path / "baselines" / "cpu" / f"pytest-benchmark.{local_class()}.json"
    pinned.write_text('{"benchmarks": [{"param": "tiny-bert-vanilla"}]}')
    refused = project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--benchmark-compare")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--benchmark-compare: *corrupt pinned pytest-benchmark file*delete it and refresh"])
    edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=1))  # so that its rewrite shows
    refresh = project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh")
    assert refresh.ret == pytest.ExitCode.TESTS_FAILED
    refresh.stdout.fnmatch_lines(
        ["perfsuite: *corrupt pinned pytest-benchmark file*: not updated (the baselines were written)"]
    )
    assert "Traceback" not in refresh.stdout.str() + refresh.stderr.str()
    assert pinned.read_text() == '{"benchmarks": [{"param": "tiny-bert-vanilla"}]}'
    assert json.loads(baseline(project, "tiny-bert-fp16").read_text())["memory"]["peak_bytes"] == 100 * 2**20
    pinned.unlink()
    gone = project.runpytest_subprocess("-m", "cpu and not trainer", "-k", CASES, "--benchmark-compare")
    gone.stderr.fnmatch_lines(["*--benchmark-compare: no pinned pytest-benchmark file *; record one with*"])


def test_tolerances_come_from_pyproject_per_case(project: pytest.Pytester) -> None:
    edit(project, "tiny-bert-fp16", lambda d: scale_median(d, 0.9))
    project.makepyprojecttoml(
        "[tool.perfsuite]\nbaselines = 'baselines'\n"
        "[tool.perfsuite.overrides.'cpu/tiny-bert-fp16']\ntime_floor = 0.15\n"
    )
    gate(project).assert_outcomes(passed=3)
    project.makepyprojecttoml("[tool.perfsuite.tolerance]\ntime_flor = 0.15\n")
    result = gate(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown key(s) time_flor; valid: *time_floor*"])


def test_a_baseline_from_another_cpu_class_gates_memory_and_loss_but_not_time(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    xeon = "intel-6.143-avx512-vnni-bf16-fp16-amx"
    monkeypatch.setenv("FAKE_CLASS", xeon)  # the baselines were recorded on fake-1.2-avx2
    result = gate(project, "--perfsuite-markdown", "summary.md")
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
    edit(project, "tiny-bert-fp16", lambda d: d["memory"].update(peak_bytes=int(d["memory"]["peak_bytes"] * 0.98)))
    gate(project).assert_outcomes(passed=2, failed=1)
    # a dedicated runner can insist on its class's times
    for option in ("--perfsuite-uncompared=fail", "--perfsuite-uncompared-time=fail"):  # its first name too
        strict = gate(project, option, "-k", "tiny-bert-vanilla")
        strict.assert_outcomes(failed=1)
        strict.stdout.fnmatch_lines([f"*tiny-bert-vanilla: step time not compared*this machine is {xeon}*"])

    # a refresh there adds the class and leaves the recorded one untouched
    before = time_entry(json.loads(baseline(project, "tiny-bert-vanilla").read_text()))
    project.runpytest_subprocess(
        "-m", "cpu and not trainer", "-k", "tiny-bert-vanilla", "--perfsuite-refresh"
    ).assert_outcomes(passed=1)
    data = json.loads(baseline(project, "tiny-bert-vanilla").read_text())
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


def test_a_matrix_of_no_case_fails_saying_nothing_is_gated(pytester: pytest.Pytester) -> None:
    """A project that declares no case yet (`perfsuite init` without --example): its CI job would pass
    having gated nothing under pytest's skip of an empty parameter set. It fails saying why, in the CPU
    tier (`-m cpu` selects it); a refresh says there is nothing to refresh; the unit tests alone run as before."""
    from perfsuite.cli.scaffold import template
    from perfsuite.session.scope import EMPTY_MATRIX

    pytester.makepyfile(test_perfsuite=template("test_perfsuite.py"))
    pytester.makefile(".toml", pyproject="[tool.perfsuite.matrix]\nbuiltin = false\n")
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    for selected in ([], ["-m", "cpu"]):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *selected)
        result.assert_outcomes(failed=1, passed=0 if selected else 1)
        assert EMPTY_MATRIX in result.stdout.str()
        assert "warning" not in result.stdout.str()
    unit = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not cpu and not gpu")
    unit.assert_outcomes(passed=1, deselected=1)
    refresh = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "cpu", "--perfsuite-refresh")
    assert refresh.ret == pytest.ExitCode.NO_TESTS_COLLECTED
