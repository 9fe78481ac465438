"""perfsuite under pytest-xdist (``pytest -n N``): the tests spread over N processes, the session's
cases stay in one of them, and every timed run has the machine to itself.

- Every test that reads the session's runs (the matrix, a strategy's claims: the ``perfsuite_case``
  parameter or the ``perfsuite`` fixture) goes to one worker as one unit of work, under
  ``--dist load`` (``-n``'s default) and ``loadgroup``: one process makes each case's runs once, knows
  the session's drift and owns the summary, as without xdist. The workers name those tests in a
  file, and the controller's scheduler reads it (xdist's own ``xdist_group`` works by renaming test
  ids, which pytest 9.2 no longer allows: pytest-dev/pytest-xdist#1386). Under another ``--dist``,
  a test that reads the session fails saying so.
- Each test holds the machine *shared*; a timed run (the CPU cases measured before the gate, a gate's
  retry) and a test marked ``alone`` hold it *alone*: no new test starts anywhere, and the run starts
  once every test in flight has finished. A run made beside other tests (a claim's: its memory and
  loss) is never reused where time is gated.
- The worker that owns the session sends its summary to the controller, which prints it where pytest
  prints its own; that worker writes ``--perfsuite-json``, ``--perfsuite-report`` and
  ``--perfsuite-markdown``.
- SIGTERM or Ctrl-C stops the session as it does without xdist: the controller passes the signal
  on to every worker and waits for them to end interrupted (each turns one signal into pytest's
  interrupt), so the summary it prints is the interrupted session's, table included; a second
  signal, or a minute without them, stops it at once.
- A refresh, an explanation, the GPU tier and pytest-benchmark's files need one process: with
  ``-n auto`` or ``logical`` perfsuite asks for none, with an explicit ``-n`` it refuses in one line.
"""

from __future__ import annotations

import _thread
import contextlib
import fcntl
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from perfsuite.session.scope import gpu_tier_selected

GROUP = "perfsuite"
"""The xdist group of every test that reads the session's runs."""

ALONE = "alone"
"""The marker of a test that times something itself: under xdist nothing else runs meanwhile."""

_LOCK_DIR = "perfsuite_lock_dir"
_GROUPED = "perfsuite_grouped"
_SESSION_TESTS = "session-tests"
_SUMMARY = "perfsuite_summary"
_PID = "worker."
WAIT_FOR_WORKERS_S = 60.0
"""How long the controller waits, after passing an interrupt on, for its workers to end."""
_FAILED = "perfsuite_failed"
_WROTE = "perfsuite_wrote_results"
CONTROLLER = "perfsuite-xdist-controller"
"""The controller's plugin name."""
_BENCHMARK_FILES = ("benchmark_compare", "benchmark_json", "benchmark_save", "benchmark_autosave")


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is one of pytest-xdist's workers."""
    return hasattr(config, "workerinput")


def distributing(config: pytest.Config) -> bool:
    """Whether this pytest run spreads its tests over xdist workers (this process a worker or their controller)."""
    return is_worker(config) or str(config.getoption("dist", "no")) != "no"


def one_process_only(config: pytest.Config) -> str | None:
    """Why this session must run in one process, or ``None`` when its tests may spread over workers."""
    if config.getoption("perfsuite_refresh"):
        return "a refresh takes its repeats one at a time on the whole machine"
    if config.getoption("perfsuite_explain"):
        return "--perfsuite-explain profiles a failed case's runs on the whole machine"
    if gpu_tier_selected(config):
        return "the GPU tier shares the GPUs between its cases itself (--perfsuite-gpus)"
    asked = [f"--{name.replace('_', '-')}" for name in _BENCHMARK_FILES if config.getoption(name, None)]
    if asked:
        return f"pytest-benchmark records nothing under pytest-xdist ({', '.join(asked)})"
    return None


def check(config: pytest.Config) -> None:
    """Stop a distributed run that needs one process (one line, exit 4), and have pytest-benchmark, which
    records nothing under xdist, stand aside quietly instead of warning."""
    if not distributing(config):
        return
    why = one_process_only(config)
    if why is not None:
        raise pytest.UsageError(f"{why}: run it in one process (without -n, or -n 0)")
    if hasattr(config.option, "benchmark_disable"):
        config.option.benchmark_disable = True


class MachineLock:
    """One machine's turns between the processes of one xdist run: tests hold it shared, a timed run
    alone. ``flock`` on two files: the gate, held alone by a run waiting for its turn, so that no test
    starts meanwhile; and the machine, shared by tests, held alone by the run."""

    def __init__(self, directory: Path) -> None:
        self._gate: IO[str] = (directory / "gate").open("a")
        self._machine: IO[str] = (directory / "machine").open("a")
        self._shared = False  # this process's test holds the machine shared
        self._alone = threading.Lock()  # one thread of this process at a time asks for the turn (never nested)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        fcntl.flock(self._machine, fcntl.LOCK_SH)
        fcntl.flock(self._gate, fcntl.LOCK_UN)
        self._shared = True
        try:
            yield
        finally:
            self._shared = False
            fcntl.flock(self._machine, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        with self._alone:
            held = self._shared
            if held:  # this test's own share first: two tests that each wait for the other to end would never start
                fcntl.flock(self._machine, fcntl.LOCK_UN)
            fcntl.flock(self._gate, fcntl.LOCK_EX)
            fcntl.flock(self._machine, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._machine, fcntl.LOCK_SH if held else fcntl.LOCK_UN)
                fcntl.flock(self._gate, fcntl.LOCK_UN)

    def close(self) -> None:
        self._gate.close()
        self._machine.close()


def reads_the_session(item: pytest.Item) -> bool:
    """Whether ``item`` reads the session's runs: a matrix case, or a test taking the ``perfsuite`` fixture."""
    return "perfsuite" in getattr(item, "fixturenames", ()) or "perfsuite_case" in getattr(
        getattr(item, "callspec", None), "params", {}
    )


class Controller:
    """The xdist controller's side: the lock's folder for the workers, and the summary of the worker
    that owned the session, printed where pytest prints its own."""

    def __init__(self, config: pytest.Config) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="perfsuite-xdist-"))
        self.dist = str(config.getoption("dist"))
        self.summaries: dict[str, list[tuple[str, str]]] = {}  # worker id → its summary
        self.failed = False
        self.results_written = False  # a worker wrote --perfsuite-json: the cases it ran
        self._heard: int | None = None  # the signal passed on to the workers
        self._handlers: dict[int, Any] = {}  # the handlers the signals had before the session
        self._timer: threading.Timer | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_LOCK_DIR] = str(self.directory)
        node.workerinput[_GROUPED] = self.dist in ("load", "loadgroup")

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if self.dist not in ("load", "loadgroup"):
            return None
        from xdist.scheduler import LoadGroupScheduling

        directory = self.directory

        class SessionTogether(LoadGroupScheduling):  # type: ignore[misc]
            """``loadgroup``'s units of work, the tests that read the session's runs one of them."""

            session_tests: frozenset[str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self.session_tests is None:
                    path = directory / _SESSION_TESTS
                    self.session_tests = frozenset(path.read_text().splitlines()) if path.is_file() else frozenset()
                return GROUP if nodeid in self.session_tests else str(super()._split_scope(nodeid))

        return SessionTogether(config, log)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        summary = output.get(_SUMMARY)
        if isinstance(summary, list) and summary:  # once a worker (an interrupted one's node goes down twice)
            self.summaries[str(getattr(node.gateway, "id", node))] = [(str(kind), str(text)) for kind, text in summary]
        self.failed = self.failed or output.get(_FAILED) is True
        self.results_written = self.results_written or output.get(_WROTE) is True

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """The test a worker was running when it heard the interrupt passed on is not a crash: it is
        reported skipped, saying so (without xdist an interrupted test is not reported at all)."""
        if self._heard is not None:
            report.outcome = "skipped"
            why = f"interrupted by {signal.Signals(self._heard).name} while it ran"
            report.longrepr = (crashitem.split("::")[0], 0, f"Skipped: {why}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A worker's session that failed with no test failing (its gate gated nothing) fails this one.
        The workers are down: an interrupt's wait for them is over."""
        if self._timer is not None:
            self._timer.cancel()
        if self.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for summary in self.summaries.values():
            replay(summary, terminalreporter)

    def pytest_sessionstart(self) -> None:
        self._handlers = _take_signals(self._pass_on)

    def _pass_on(self, signum: int, frame: object) -> None:
        """The first SIGTERM or SIGINT goes on to every worker, and the session waits for them to end
        interrupted, their summaries sent. A second one, one with no worker started yet, or a
        minute without the workers ending, interrupts the controller at once."""
        workers = self.worker_pids()
        if self._heard is not None or not workers:
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self._heard = signum
        for pid in workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        self._timer = threading.Timer(WAIT_FOR_WORKERS_S, _thread.interrupt_main)
        self._timer.daemon = True
        self._timer.start()

    def worker_pids(self) -> list[int]:
        """The process ids of this session's workers alive now: each names itself in the shared folder,
        and is this process's child (a worker killed outright leaves its name, and its pid may be
        another process's by now)."""
        pids = [int(path.name[len(_PID) :]) for path in self.directory.glob(f"{_PID}*")]
        return [pid for pid in pids if _parent(pid) == os.getpid()]

    def pytest_unconfigure(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        _give_back(self._handlers)
        shutil.rmtree(self.directory, ignore_errors=True)


def _take_signals(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """``handler`` for SIGTERM and SIGINT; the handlers they had (none off the main thread, where
    Python lets no handler be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in handlers:
        signal.signal(sig, handler)
    return handlers


def _give_back(handlers: dict[int, Any]) -> None:
    """Put back the handlers :func:`_take_signals` found."""
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _parent(pid: int) -> int | None:
    """The parent of process ``pid`` (``None`` where there is no such process, or it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command's name, which may hold spaces
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


REPEAT_S = 5.0
"""How long a worker takes a second SIGTERM or SIGINT for the first heard again (the process group's
and the controller's), not a new interrupt."""


class Worker:
    """An xdist worker's side: the session's tests grouped, each test's turn on the machine."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        workerinput: dict[str, Any] = config.workerinput  # type: ignore[attr-defined]
        self.directory = Path(workerinput[_LOCK_DIR]) if _LOCK_DIR in workerinput else None
        self.grouped = bool(workerinput.get(_GROUPED))
        self.lock = MachineLock(self.directory) if self.directory is not None else None
        self._own_line = False  # the terminal's cursor is at the start of a line this worker began
        self._handlers: dict[int, Any] = {}
        self._heard_at = -REPEAT_S
        if self.directory is not None and (handlers := _take_signals(self._interrupt)):
            self._handlers = handlers
            (self.directory / f"{_PID}{os.getpid()}").touch()

    def _interrupt(self, signum: int, frame: object) -> None:
        """SIGTERM, as SIGINT, is pytest's interrupt; the same one heard again within :data:`REPEAT_S`
        (through the process group and from the controller) is not a second. A handler, never
        ``SIG_IGN``: the processes a test starts later do not inherit an ignored signal."""
        now = time.monotonic()
        if now - self._heard_at < REPEAT_S:
            return
        self._heard_at = now
        raise KeyboardInterrupt(signal.Signals(signum).name)

    @pytest.hookimpl(tryfirst=True)  # before xdist sends the controller the collected ids
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.directory is None:
            return
        ids = "".join(f"{item.nodeid}\n" for item in session.items if reads_the_session(item))
        staged = self.directory / f"{_SESSION_TESTS}.{os.getpid()}"
        staged.write_text(ids)
        staged.replace(self.directory / _SESSION_TESTS)  # every worker collects the same: any one's will do

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if reads_the_session(item) and not self.grouped:
            pytest.fail(
                "perfsuite's cases share one session: under pytest-xdist run them with --dist load or loadgroup",
                pytrace=False,
            )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        if self.lock is None:
            return (yield)
        with self.lock.alone() if item.get_closest_marker(ALONE) else self.lock.shared():
            return (yield)

    def pytest_runtest_logreport(self) -> None:
        self._own_line = False  # the controller prints this test's outcome after whatever was shown

    def show(self, line: str) -> None:
        """Print ``line`` on the terminal now, as the session's progress: xdist shows nothing a worker
        writes, and the CPU cases measured first take a minute or more. A worker's stderr is the
        terminal's (or the CI log's); pytest's capture is suspended meanwhile."""
        capture = self.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            sys.stderr.write(("" if self._own_line else "\n") + line + "\n")
            sys.stderr.flush()
        self._own_line = True

    def alone(self) -> contextlib.AbstractContextManager[None]:
        """The machine to this process alone, for a timed run."""
        return self.lock.alone() if self.lock is not None else contextlib.nullcontext()

    def send_summary(self, summary: list[tuple[str, str]], exitstatus: int, *, wrote_results: bool) -> None:
        """Send the controller this worker's summary, whether its session failed, and whether it
        wrote ``--perfsuite-json`` (the controller writes one saying no case ran where none did)."""
        output = self.config.workeroutput  # type: ignore[attr-defined]
        if summary:
            output[_SUMMARY] = summary
        output[_FAILED] = exitstatus == pytest.ExitCode.TESTS_FAILED
        output[_WROTE] = wrote_results

    @pytest.hookimpl(trylast=True)  # after the session has put back the handlers it found (these)
    def pytest_unconfigure(self) -> None:
        if self.lock is not None:
            self.lock.close()
        if self.directory is not None:
            (self.directory / f"{_PID}{os.getpid()}").unlink(missing_ok=True)
        _give_back(self._handlers)


class Recorder:
    """A stand-in for pytest's terminal reporter that keeps what was written, to print elsewhere."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str]] = []

    def section(self, title: str) -> None:
        self.written.append(("section", title))

    def write(self, text: str) -> None:
        self.written.append(("write", text))

    def write_line(self, line: str) -> None:
        self.written.append(("line", line))


def replay(written: list[tuple[str, str]], terminalreporter: Any) -> None:
    """Write what a :class:`Recorder` kept onto pytest's terminal reporter."""
    actions: dict[str, Callable[[str], None]] = {
        "section": terminalreporter.section,
        "write": terminalreporter.write,
        "line": terminalreporter.write_line,
    }
    for kind, text in written:
        actions.get(kind, terminalreporter.write_line)(text)
