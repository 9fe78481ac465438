"""``perfsuite baselines refresh``: the matrix test of this machine's tier with ``--perfsuite-refresh``;
``baselines pool`` is :mod:`perfsuite.cli.pooling`'s, ``baselines classes`` :mod:`perfsuite.cli.classes`'."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfsuite.cli import classes, pooling
from perfsuite.cli.common import load_project, project_baselines
from perfsuite.cli.interrupt import terminate_as_interrupt
from perfsuite.cli.options import REPEATS, SCOPE, output_file, positive_seconds
from perfsuite.core.declaration import find_pyproject, read_pyproject

STOP_S = 30
"""Seconds an interrupted refresh's session has to stop its worker and say what had finished."""


def add_parser(sub: Any) -> None:
    """The subcommand's arguments."""
    baselines = sub.add_parser("baselines", help="manage the stored baselines")
    actions = baselines.add_subparsers(dest="action", required=True)
    refresh = actions.add_parser(
        "refresh",
        help="re-measure the selected cases N times and rewrite their baselines",
        description="Runs the matrix test of this machine's tier with --perfsuite-refresh: each selected case "
        "N times, refusing a case whose repeats spread too wide, printing old -> new per metric, and writing "
        "each file atomically at the end (an interrupted refresh writes nothing and names the cases that had "
        "finished; one with --time-limit stops itself and writes what it finished). Arguments after -- go to pytest.",
    )
    refresh.add_argument("-k", dest="expression", metavar="EXPR", help="select cases like pytest -k (e.g. tiny-bert)")
    refresh.add_argument("--repeats", **REPEATS)
    refresh.add_argument("--scope", **SCOPE)
    refresh.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="tier to refresh: cpu (tiny models) or cuda (full-size); default: cuda when a GPU is visible",
    )
    refresh.add_argument(
        "--missing",
        action="store_true",
        help="only the selected cases whose baseline here is missing, unreadable or has no step time the gate "
        "would compare (this machine's time class, unit and calibration)",
    )
    refresh.add_argument(
        "--time-limit",
        type=positive_seconds,
        metavar="SECONDS",
        help="start no case once the time left is less than the longest case so far; what finished is written, "
        "and --missing goes on from there (a CI job's time limit)",
    )
    refresh.add_argument("--markdown", type=output_file, help="also write the old -> new table as markdown (a PR body)")
    refresh.add_argument(
        "--tests",
        type=Path,
        help="the matrix test (default: [tool.perfsuite] tests, else tests/test_matrix.py, from the project's root)",
    )
    refresh.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    pooling.add_parser(actions)
    classes.add_parser(actions)


_UNDER_PYTEST = {"pytest": "pytest", "pytest_benchmark": "pytest-benchmark"}
"""What a refresh's session imports (module → its name on PyPI), from ``perfsuite[pytest]``."""
_USAGE_ERROR = 4  # pytest.ExitCode.USAGE_ERROR: pytest has said what it refused
_NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


def run(args: Any) -> int:
    if args.action == "pool":
        return pooling.run(args)
    if args.action == "classes":
        return classes.run(args)
    return _refresh(args)


def _refresh(args: Any) -> int:
    from perfsuite.worker.device import asked_device_type

    absent = [name for module, name in _UNDER_PYTEST.items() if importlib.util.find_spec(module) is None]
    if absent:  # the session below would end on "No module named pytest", exit 1
        print(
            f"perfsuite: error: a refresh runs the matrix test under pytest, and {' and '.join(absent)} "
            f"{'is' if len(absent) == 1 else 'are'} not installed here: pip install 'perfsuite[pytest]'",
            file=sys.stderr,
        )
        return 2
    project_baselines()  # [tool.perfsuite] checked here: a mistake is one line, before pytest starts
    load_project()  # and its models, matrix and engines
    where = ""
    if args.tests is None:  # the project's, from its root, wherever in it this runs
        pyproject = find_pyproject(Path.cwd())
        configured = read_pyproject(pyproject).get("tests") if pyproject is not None else None
        where = " ([tool.perfsuite] tests in pyproject.toml)" if configured else ""
        root = pyproject.parent if pyproject is not None else Path.cwd()
        args.tests = Path(os.path.relpath(root / (configured or "tests/test_matrix.py")))
    if not args.tests.is_file():
        print(
            f"perfsuite: error: no matrix test at {args.tests}{where}; run this from the repository's root, "
            "pass --tests, or write one with `perfsuite init`",
            file=sys.stderr,
        )
        return 2
    if args.repeats < 1:
        print("perfsuite: error: --repeats must be at least 1", file=sys.stderr)
        return 2
    try:
        device = asked_device_type(args.device)
    except ValueError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    selection = [str(args.tests), "-m", "cpu" if device == "cpu" else "gpu", "-p", "no:cacheprovider"]
    if args.expression:
        selection += ["-k", args.expression]
    if args.scope:
        selection.append(f"--perfsuite-scope={args.scope}")
    argv = [*selection, "--perfsuite-refresh", f"--perfsuite-repeats={args.repeats}"]
    if args.missing:
        argv.append("--perfsuite-refresh-missing")
    if args.time_limit is not None:
        argv.append(f"--perfsuite-refresh-time-limit={args.time_limit:g}")
    if args.markdown:
        argv += ["--perfsuite-markdown", str(args.markdown)]
    # A fresh interpreter: pytest must import perfsuite itself (to load the plugin and
    # rewrite its asserts), which it cannot do in a process that already imported it.
    with terminate_as_interrupt() as interrupt:
        try:
            if (args.expression or args.scope or args.pytest_args) and _selects_nothing(
                [*selection, *args.pytest_args]
            ):
                return _refresh_exit_code(_NO_TESTS_COLLECTED, args, device)  # one line, before pytest's header
        except KeyboardInterrupt:
            print(f"perfsuite baselines refresh: interrupted by {interrupt.name} before any case ran", file=sys.stderr)
            return interrupt.exit_code
        child = subprocess.Popen([sys.executable, "-m", "pytest", *argv, *args.pytest_args])
        try:
            return _refresh_exit_code(child.wait(), args, device)
        except KeyboardInterrupt:
            # The session stops itself on the signal (the plugin turns it into pytest's interrupt) and
            # says which cases had finished; a signal sent to this process alone reaches it from here.
            child.send_signal(interrupt.signum or signal.SIGINT)
            try:
                child.wait(STOP_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            return interrupt.exit_code


def _selects_nothing(selection: list[str]) -> bool:
    """Whether pytest collects no case for this selection (a few seconds, its output not shown)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", *selection]
    collect = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return collect.wait() == _NO_TESTS_COLLECTED
    except KeyboardInterrupt:  # its answer is nobody's now
        collect.kill()
        collect.wait()
        raise


def _refresh_exit_code(code: int, args: Any, device: str) -> int:
    """The refresh session's exit code, where a selection of nothing (pytest's "no tests ran") and
    arguments pytest refuses are bad input: exit 2, with one line of ours or pytest's own message."""
    if code == _USAGE_ERROR:
        return 2
    if code == _NO_TESTS_COLLECTED:
        asked = [f"-k {args.expression!r}"] if args.expression else []
        asked += [f"--scope {args.scope}"] if args.scope else []
        asked += [f"-- {' '.join(args.pytest_args)}"] if args.pytest_args else []
        tier = "the CPU tier" if device == "cpu" else "the GPU tier"
        which = f"{' '.join(asked)} selects no case of {tier}" if asked else f"{args.tests} has no case of {tier}"
        print(f"perfsuite: error: nothing to refresh: {which}", file=sys.stderr)
        return 2
    return code
