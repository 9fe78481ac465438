"""perfsuite under pytest-xdist (perfsuite/session/parallel.py): the session's tests in one worker, its
timed runs and the tests marked ``alone`` with nothing else running, one summary, and the sessions
that need one process refused in one line."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from plugin_project import CASES, FAKE_RUNNER, MATRIX_TEST

from perfsuite.session.parallel import MachineLock

# The fake runner, each run logged with its process and its time, and long enough to overlap a test.
_FAKE = "@pytest.hookimpl(tryfirst=True)\ndef pytest_perfsuite_run_case(config, spec, timeout_s):"
assert _FAKE in FAKE_RUNNER
LOGGED_RUNNER = (
    FAKE_RUNNER.replace(_FAKE, "def fake_run(config, spec, timeout_s):")
    + """

def _log(what, start):
    with open(os.environ["PARALLEL_LOG"], "a") as log:
        log.write(f"{what} {os.getpid()} {start} {time.monotonic()}\\n")


@pytest.hookimpl(tryfirst=True)
def pytest_perfsuite_run_case(config, spec, timeout_s):
    start = time.monotonic()
    time.sleep(0.3)
    try:
        return fake_run(config, spec, timeout_s)
    finally:
        _log("run", start)
"""
)

PLAIN_TESTS = """
import time

import pytest

from conftest import _log


@pytest.mark.parametrize("n", range(6))
def test_plain(n):
    start = time.monotonic()
    time.sleep(0.25)
    _log("test", start)


@pytest.mark.alone
def test_alone():
    start = time.monotonic()
    time.sleep(0.25)
    _log("alone", start)
"""


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@pytest.fixture
def xdist_project(pytester: pytest.Pytester, recorded: Path) -> pytest.Pytester:
    import shutil

    (pytester.path / "test_matrix.py").write_text(MATRIX_TEST)
    (pytester.path / "test_plain.py").write_text(PLAIN_TESTS)
    (pytester.path / "conftest.py").write_text(LOGGED_RUNNER)
    (pytester.path / "pyproject.toml").write_text("[tool.perfsuite]\nbaselines = 'baselines'\n")
    shutil.copytree(recorded, pytester.path / "baselines")
    return pytester


def test_timed_runs_and_tests_marked_alone_run_with_nothing_beside_them(
    xdist_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = xdist_project.path / "log.txt"
    monkeypatch.setenv("PARALLEL_LOG", str(log))
    out = xdist_project.path / "results.json"
    result = xdist_project.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "-m", "not trainer", "-k", f"{CASES} or test_plain or test_alone",
        "--perfsuite-json", str(out),
    )  # fmt: skip
    result.assert_outcomes(passed=10)
    entries = [line.split() for line in log.read_text().splitlines()]
    spans = {kind: [(float(a), float(b)) for k, _, a, b in entries if k == kind] for kind in ("run", "test", "alone")}
    assert (len(spans["run"]), len(spans["test"]), len(spans["alone"])) == (3, 6, 1)
    assert len({pid for kind, pid, _, _ in entries if kind == "run"}) == 1  # the session's tests in one worker
    assert len({pid for _, pid, _, _ in entries}) == 2  # the others beside them
    for span in spans["run"] + spans["alone"]:
        others = [s for s in spans["test"] + spans["alone"] + spans["run"] if s != span]
        assert not any(_overlap(span, other) for other in others), (span, spans)
    # One summary, from the worker that gated the cases, printed by the controller; its JSON, whole.
    assert sum(1 for line in result.outlines if line.strip("= ") == "perfsuite") == 1
    assert sorted(case["case"] for case in json.loads(out.read_text())["cases"]) == [
        "tiny-bert-fp16",
        "tiny-bert-grad_ckpt",
        "tiny-bert-vanilla",
    ]


def test_a_session_that_ran_no_matrix_case_writes_a_results_file_saying_so(
    xdist_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not no file, which `perfsuite report` would ask to be written by the command just run, nor an
    earlier session's left in place: under xdist the controller writes it, its workers ran no case."""
    monkeypatch.setenv("PARALLEL_LOG", str(xdist_project.path / "log.txt"))
    out = xdist_project.path / "results.json"
    out.write_text(json.dumps({"cases": [{"case": "tiny-bert-vanilla", "status": "passed"}]}))  # an earlier run's
    result = xdist_project.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "-k", "test_plain and not alone", "--perfsuite-json", str(out)
    )  # fmt: skip
    result.assert_outcomes(passed=6)
    assert json.loads(out.read_text())["cases"] == []
    assert f"perfsuite: no matrix case ran in this session: {out} lists none" in result.outlines


def test_the_cases_measured_first_show_their_progress_though_xdist_hides_what_workers_print(
    xdist_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLEL_LOG", str(xdist_project.path / "log.txt"))
    pyproject = xdist_project.path / "pyproject.toml"  # gated against the session's drift: run first
    pyproject.write_text(pyproject.read_text() + '[tool.perfsuite.overrides."cpu/*"]\ntime_drift_limit = 0.15\n')
    cases = ("vanilla", "bf16", "grad_accum", "grad_ckpt", "adafactor")
    selected = " or ".join(f"tiny-bert-{strategy}" for strategy in cases)
    result = xdist_project.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "-m", "not trainer", "-k", f"({selected}) and not fp16 and not lora"
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=3)  # the three without a baseline fail for want of one
    lines = [line for line in result.errlines if line.startswith("perfsuite: ")]
    assert lines[0] == "perfsuite: running 5 CPU case(s) first; their median change is the session's drift"
    assert sorted(line.split("]")[0] for line in lines[1:]) == [f"perfsuite: [{i}/5" for i in range(1, 6)]


def test_a_refresh_asks_for_one_process_and_refuses_several(
    xdist_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARALLEL_LOG", str(xdist_project.path / "log.txt"))
    refused = xdist_project.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--perfsuite-refresh")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        ["*a refresh takes its repeats one at a time on the whole machine: run it in one process (without -n, or -n 0)"]
    )
    alone = xdist_project.runpytest_subprocess(
        "-n", "auto", "-p", "no:cacheprovider", "-m", "not trainer", "-k", "tiny-bert-vanilla", "--perfsuite-refresh"
    )
    alone.assert_outcomes(passed=1)
    assert not any("workers" in line for line in alone.outlines)  # xdist's "created: N/N workers": none


def test_a_turn_alone_waits_for_the_tests_in_flight_and_holds_new_ones_back(tmp_path: Path) -> None:
    """Three processes' locks (each its own open files, as flock sees separate processes): a test in
    flight, a timed run asking for the machine, and a test asking to start after it."""
    first, run, second = (MachineLock(tmp_path) for _ in range(3))
    times: dict[str, float] = {}

    def timed_run() -> None:
        with run.alone():
            times["run start"] = time.monotonic()
            time.sleep(0.3)
            times["run end"] = time.monotonic()

    def later_test() -> None:
        with second.shared():
            times["second start"] = time.monotonic()

    with first.shared():
        asking = threading.Thread(target=timed_run)
        asking.start()
        time.sleep(0.2)  # the run waits for this test
        later = threading.Thread(target=later_test)
        later.start()
        time.sleep(0.2)  # and the later test waits behind the run
        assert times == {}
        times["first end"] = time.monotonic()
    asking.join(5)
    later.join(5)
    for lock in (first, run, second):
        lock.close()
    assert times["first end"] <= times["run start"] < times["run end"] <= times["second start"]


def test_an_interrupt_before_any_worker_started_stops_the_controller_at_once(tmp_path: Path) -> None:
    """The controller passes an interrupt on only to workers that can end interrupted and report:
    with none started, or at a second signal, it is pytest's own interrupt, at once."""
    import signal
    import subprocess
    import sys
    from types import SimpleNamespace

    from perfsuite.session.parallel import Controller

    controller = Controller(SimpleNamespace(getoption=lambda name: "load"))  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        controller._pass_on(signal.SIGTERM, None)
    worker = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])  # ends on the signal
    (controller.directory / f"worker.{worker.pid}").touch()
    try:
        controller._pass_on(signal.SIGTERM, None)  # passed on: the session goes on to hear the workers end
        assert worker.wait(30) == -signal.SIGTERM  # the worker heard it
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            controller._pass_on(signal.SIGINT, None)  # a second one: at once
    finally:
        controller.pytest_unconfigure()


def test_a_worker_takes_an_interrupt_heard_twice_for_one_and_never_ignores_a_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker hears an interrupt twice (its process group's and the controller's): one interrupt.
    A later one is an interrupt again, the processes its tests start see the signals at their
    defaults, and its handlers go back when it ends."""
    import signal
    import subprocess
    import sys
    from types import SimpleNamespace

    from perfsuite.session import parallel

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    worker = parallel.Worker(SimpleNamespace(workerinput={"perfsuite_lock_dir": str(tmp_path)}))  # type: ignore[arg-type]
    try:
        assert signal.getsignal(signal.SIGTERM) == worker._interrupt
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            worker._interrupt(signal.SIGTERM, None)
        worker._interrupt(signal.SIGINT, None)  # the same interrupt, heard again: nothing
        monkeypatch.setattr("time.monotonic", lambda: 1e9)
        with pytest.raises(KeyboardInterrupt, match="SIGINT"):
            worker._interrupt(signal.SIGINT, None)  # a new one, later
        child = "import signal; print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)"
        said = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout
        assert said.strip() == "True"
    finally:
        worker.pytest_unconfigure()
    assert {sig: signal.getsignal(sig) for sig in before} == before
