"""Ctrl-C and SIGTERM (a CI job's timeout or cancel) in the middle of a run: each command stops its
worker at once, keeps and writes what finished, says it was interrupted, exits with the signal's
code, prints no traceback and leaves no process behind (worker, forkserver, resource tracker).

Each command starts in a session of its own, as a CI job's or a terminal's is, so what it left
behind is every process of that session still alive once it exited.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfsuite.session.scope import GO_ON

pytestmark = pytest.mark.cpu

MATRIX_TEST = (Path(__file__).parent / "test_matrix.py").read_text()

# Real workers, each case cut to two timed steps: the session's own timing is not under test.
SHORT_CASES = """
import dataclasses

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_perfsuite_run_case(config, spec, timeout_s, env):
    from perfsuite.worker.process import run_isolated

    return run_isolated(dataclasses.replace(spec, steps=2, warmup_steps=0), timeout_s=timeout_s, env=env)
"""


def _session_processes(sid: int) -> list[str]:
    """The live processes of session ``sid`` (a zombie has ended; its reaping is not the command's)."""
    listed = subprocess.run(["ps", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True, check=True)
    alive = []
    for line in listed.stdout.splitlines():
        pid, session, stat, *args = line.split(None, 3)
        if int(session) == sid and not stat.startswith("Z"):
            alive.append(f"{pid} {stat} {' '.join(args)}")
    return alive


def _interrupt(
    argv: list[str], tmp_path: Path, *, ready: str, sig: signal.Signals = signal.SIGTERM, group: bool = False
) -> tuple[int, float, str, str]:
    """Start ``argv`` in a session of its own, send ``sig`` once ``ready`` is in its output (to the
    process, or with ``group`` to its process group, as a terminal's Ctrl-C does), and return its exit
    code, the seconds it took to exit, its stdout and its stderr, once no process of its session is left."""
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, cwd=tmp_path, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while ready not in out.read_text() + err.read_text():
            assert proc.poll() is None, f"ended before {ready!r}:\n{out.read_text()}{err.read_text()}"
            assert time.monotonic() < deadline, f"no {ready!r} in 300 s"
            time.sleep(0.1)
        signalled = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        code = proc.wait(60)
        took = time.monotonic() - signalled
        until = time.monotonic() + 10
        while _session_processes(proc.pid) and time.monotonic() < until:
            time.sleep(0.1)
        assert _session_processes(proc.pid) == []
    finally:
        for line in _session_processes(proc.pid):  # never a run left going after a failed check
            os.kill(int(line.split()[0]), signal.SIGKILL)
    return code, took, out.read_text(), err.read_text()


@pytest.mark.parametrize(
    ("sig", "group"),
    [
        pytest.param(signal.SIGTERM, False, id="sigterm"),
        pytest.param(signal.SIGINT, True, id="ctrl-c", marks=[pytest.mark.slow, pytest.mark.nightly]),
    ],
)
def test_run_writes_the_cases_that_finished_and_exits_with_the_signal(
    tmp_path: Path, sig: signal.Signals, group: bool
) -> None:
    argv = [sys.executable, "-m", "perfsuite", "run", "--models", "tiny-bert"]
    argv += ["--strategies", "vanilla,grad_ckpt,bf16,adafactor", "--steps", "2", "--warmup", "0", "--threads", "1"]
    argv += ["--json", "out.json"]
    code, took, out, err = _interrupt(argv, tmp_path, ready="tiny-bert-vanilla: ok", sig=sig, group=group)
    assert code == 128 + sig, out + err
    assert took < 10  # not the case in flight finishing: its worker is killed at once
    assert "Traceback" not in out + err
    assert "1 of 4 cases finished: 1 ok, 0 skipped, 0 failed in " in out
    assert f"perfsuite run: interrupted by {sig.name} after 1 of 4 cases; --json marks the other 3 interrupted" in out
    assert "│ vanilla " in out  # the table: what finished
    assert "│ grad_ckpt " not in out
    payload = json.loads((tmp_path / "out.json").read_text())
    assert payload["interrupted"] == sig.name
    cases = {case["strategy"]: case for case in payload["cases"]}
    assert list(cases) == ["vanilla", "grad_ckpt", "bf16", "adafactor"]
    assert cases["vanilla"]["status"] == "ok"
    assert cases["vanilla"]["step_time_s"]["median"] > 0
    assert (cases["grad_ckpt"]["status"], cases["grad_ckpt"]["error"]) == (
        "skipped",
        "interrupted while it ran; its worker was stopped",
    )
    for name in ("bf16", "adafactor"):
        assert (cases[name]["status"], cases[name]["error"], cases[name]["interrupted"]) == (
            "skipped",
            "interrupted before it ran",
            True,
        )


@pytest.mark.slow
@pytest.mark.nightly
def test_overhead_writes_the_rounds_that_finished(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "perfsuite", "overhead", "--models", "tiny-bert", "--cases", "vanilla,bf16"]
    argv += ["--pairs", "0", "--rounds", "4", "--steps", "2", "--threads", "1", "--json", "overhead.json"]
    code, _, out, err = _interrupt(argv, tmp_path, ready="round 1/4")
    assert code == 143, out + err
    assert "Traceback" not in out + err
    assert "perfsuite overhead: interrupted by SIGTERM after 0 of 2 cases" in out
    payload = json.loads((tmp_path / "overhead.json").read_text())
    assert payload["interrupted"] == "SIGTERM"
    vanilla, bf16 = payload["cases"]
    assert len(vanilla["ratios"]) >= 1
    assert vanilla["error"] == f"interrupted after {len(vanilla['ratios'])} of 4 rounds"
    assert (bf16["ratios"], bf16["error"]) == ([], "interrupted before it ran")


def _project(root: Path) -> None:
    (root / "test_matrix.py").write_text(MATRIX_TEST)
    (root / "conftest.py").write_text(SHORT_CASES)
    (root / "pyproject.toml").write_text("[tool.perfsuite]\nbaselines = 'baselines'\n")


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [pytest.param((), id="one-process"), pytest.param(("-n", "2"), id="xdist")])
def test_the_sessions_up_front_runs_are_in_its_json(tmp_path: Path, xdist: tuple[str, ...]) -> None:
    """The CPU cases run once each before any is gated (where the session's drift gates them): an
    interrupt there keeps those runs. Under pytest-xdist the signal reaches the controller alone (a
    ``kill`` of pytest's process): it passes it on to its workers and prints the summary the
    interrupted worker sent, as one process would."""
    _project(tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + '[tool.perfsuite.overrides."cpu/*"]\ntime_drift_limit = 0.15\n')
    cases = "tiny-bert-vanilla or tiny-bert-bf16 or tiny-bert-adafactor or tiny-bert-grad_ckpt or tiny-bert-fp16"
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "cpu and not trainer and not distributed"]
    argv += ["-k", cases, "--perfsuite-json", "results.json", *xdist]
    code, _, out, err = _interrupt(argv, tmp_path, ready="[1/")
    assert code == pytest.ExitCode.INTERRUPTED, out + err
    assert "Traceback" not in out + err
    assert "perfsuite: INTERRUPTED: " in out  # the verdict line: not a pass
    assert out.count("perfsuite: INTERRUPTED: ") == 1
    assert "nothing was gated" not in out  # an interrupt says so itself
    assert "crashed while running" not in out  # the test in flight is not a crash
    assert "Benchmark fixture was not used" not in out
    outcomes = json.loads((tmp_path / "results.json").read_text())["cases"]
    assert len(outcomes) >= 5
    assert all(o["status"] == "not reached" for o in outcomes)
    # The cases run side by side: those that finished are kept (the lane beside the first may finish
    # too before the signal lands), the run in flight dropped, and the summary counts what was kept.
    kept = [o for o in outcomes if o["records"]]
    assert kept
    assert f"perfsuite: interrupted by SIGTERM: {len(kept)} of {len(outcomes)} case(s) measured, 0 gated" in out
    for o in kept:
        assert o["message"] == f"{o['case']}: interrupted before it was gated; its run is kept"
        assert [r["status"] for r in o["records"]] == ["ok"]  # never the run the interrupt killed
    assert all(o["message"].endswith("interrupted before it ran") for o in outcomes if not o["records"])
    assert len(kept) < len(outcomes)


@pytest.mark.slow
@pytest.mark.nightly
def test_an_interrupted_refresh_writes_nothing_and_names_what_had_finished(tmp_path: Path) -> None:
    _project(tmp_path)
    argv = [sys.executable, "-m", "perfsuite", "baselines", "refresh", "--tests", "test_matrix.py", "--repeats", "1"]
    argv += ["-k", "(tiny-bert-vanilla or tiny-bert-bf16 or tiny-bert-adafactor) and not trainer", "--", "-v"]
    code, _, out, err = _interrupt(argv, tmp_path, ready="PASSED")
    assert code == 143, out + err
    assert "Traceback" not in out + err
    assert "interrupted by SIGTERM: no baseline was written (a refresh writes all or nothing)" in out
    assert "finished before the interrupt, 1 of 3 case(s): tiny-bert-vanilla" in out
    assert GO_ON in out
    assert not (tmp_path / "baselines").exists()


class _Collection:
    """A refresh's quiet collection of its selection, which hears SIGTERM while it runs."""

    started: list[list[str]] = []

    def __init__(self, argv: list[str], **kwargs: object) -> None:
        self.started.append(argv)
        self.killed = False

    def wait(self, timeout: float | None = None) -> int:
        if not self.killed:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts this
        return -signal.SIGKILL

    def kill(self) -> None:
        self.killed = True


class _Unheard(Exception):
    """SIGTERM reached the test's own handler: the command under test set none."""


@pytest.fixture
def sigterm_fails_the_test() -> Iterator[None]:
    """SIGTERM sent to this process fails the test rather than ending the whole pytest run, should
    the command under test not handle it."""

    def unheard(signum: int, frame: object) -> None:
        raise _Unheard

    previous = signal.signal(signal.SIGTERM, unheard)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("sigterm_fails_the_test")
def test_a_refresh_stopped_while_it_collects_its_selection_starts_no_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfsuite.cli import main

    monkeypatch.chdir(Path(__file__).parents[1])  # the repository's matrix test
    monkeypatch.setattr(subprocess, "Popen", _Collection)
    _Collection.started = []
    assert main(["baselines", "refresh", "--device", "cpu", "-k", "tiny-bert"]) == 128 + signal.SIGTERM
    (collection,) = _Collection.started  # stopped, and no refresh session after it
    assert "--collect-only" in collection
    assert capsys.readouterr().err == "perfsuite baselines refresh: interrupted by SIGTERM before any case ran\n"


@pytest.mark.usefixtures("sigterm_fails_the_test")
def test_bisect_stopped_by_sigterm_exits_143_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfsuite.cli import bisect, main

    def heard(args: object, stopped: object) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
        return 0

    monkeypatch.setattr(bisect, "_run", heard)
    code = main(["bisect", "transformers", "--good", "1", "--bad", "2", "--case", "tiny-bert-vanilla"])
    assert code == 128 + signal.SIGTERM
    assert capsys.readouterr().err == "perfsuite bisect: interrupted by SIGTERM\n"
