"""Options that ``perfsuite`` and the pytest plugin both take, defined once.

Each is the keyword arguments of ``argparse``'s ``add_argument``, which pytest's
``addoption`` takes too: ``perfsuite run --gpus`` and ``pytest --perfsuite-gpus`` mean the
same thing with the same default and help. No torch, no pytest.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.core.scopes import SCOPES


def at_least(minimum: int) -> Callable[[str], int]:
    """An option's type: an integer no smaller than ``minimum`` (a zero step count is an error, not "the default")."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number

    parse.__name__ = f"integer >= {minimum}"
    return parse


def positive_seconds(value: str) -> float:
    """An option's type: a number of seconds above zero."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    if number > MAX_SECONDS:  # inf included: a deadline the clock cannot hold
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} seconds (a week), got {value}")
    return number


MAX_SECONDS = 7 * 24 * 3600.0
"""The longest time limit an option takes."""


def existing_dir(value: str) -> Path:
    """An option's type: a directory that exists."""
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: {'not a directory' if path.exists() else 'no such directory'}")
    return path


def not_a_file(value: str) -> Path:
    """An option's type: a directory to write into, existing or not (then made), but not a file; checked
    before anything runs, so that no measured result is lost to a path it cannot be written to."""
    path = Path(value)
    try:
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{value}: is a file, expected a directory")
        writable(path)
    except OSError as exc:  # a directory on the way that cannot be searched
        raise argparse.ArgumentTypeError(f"{value}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value}: {exc}") from None
    return path


def report_without_charts(command: str, report: Path | None, instead: str) -> str | None:
    """The line said before anything runs where ``--report`` cannot draw ``report.html`` here (no
    matplotlib), so that it is not learnt at the end; ``instead``: what is written without it."""
    if report is None or importlib.util.find_spec("matplotlib") is not None:
        return None
    return (
        f"perfsuite {command}: --report {report}: report.html's charts need matplotlib, which is not installed "
        f"here (pip install 'perfsuite[report]'); {instead}"
    )


def output_file(value: str) -> Path:
    """An option's type: a file to write (its directory is made), not a directory; checked as
    :func:`not_a_file` checks its directory."""
    path = Path(value)
    try:
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{value}: is a directory, expected a file to write")
        writable(path.parent)
    except OSError as exc:  # a directory on the way that cannot be searched
        raise argparse.ArgumentTypeError(f"{value}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value}: {exc}") from None
    return path


def writable(directory: Path) -> None:
    """Raise a ``ValueError`` saying why nothing can be written in ``directory``: its nearest existing
    ancestor (itself when it exists) must be a directory in which a file can be made (tried, and gone
    at once); an ``OSError`` where a directory on the way cannot be searched."""
    for existing in (directory, *directory.parents):
        if not existing.exists():
            continue
        if not existing.is_dir():
            raise ValueError(f"{existing} is not a directory")
        try:
            with tempfile.TemporaryFile(dir=existing, prefix=".perfsuite-"):
                pass
        except OSError as exc:
            raise ValueError(f"cannot write in {existing}: {exc.strerror}") from None
        return


def gpu_selection(value: str) -> str:
    """An option's type: ``all``, a count of GPUs, or comma-separated GPU ids (checked against the
    machine's when the cases run on a GPU)."""
    parts = [part.strip() for part in value.split(",")]
    if value.strip() == "all" or (parts and all(part.isdigit() for part in parts)):
        return value
    raise argparse.ArgumentTypeError(f"expected all, a count or GPU ids (0,2), got {value!r}")


def night(value: str) -> str:
    """An option's type: a date, ``YYYY-MM-DD``."""
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {value!r}") from None
    return value


def cpu_lanes(text: str) -> str | int:
    """``--perfsuite-lanes``: ``auto`` or a whole number of at least 1."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected auto or a whole number of at least 1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if int(text) > cores:
        raise argparse.ArgumentTypeError(f"{text} lanes, each on a core of its own, and this process may use {cores}")
    return int(text)


GPUS: dict[str, Any] = {
    "type": gpu_selection,
    "default": "all",
    "metavar": "GPUS",
    "help": "GPUs the cases share: all (default), a count, or ids (0,2); with more than one, single-GPU cases run "
    "side by side, one per GPU, and a case on N ranks gets N (perfsuite.worker.pool)",
}
SCOPE: dict[str, Any] = {
    "choices": SCOPES,
    "help": "only the cases of this scope and the smaller ones: push (a pull request's: on a GPU, bert-base-uncased's "
    "seed strategies), nightly (every full-size model's), weekly (the whole matrix); default: every selected case "
    "(perfsuite.core.scopes)",
}
REPEATS: dict[str, Any] = {
    "type": at_least(1),
    "default": 3,
    "metavar": "N",
    "help": "runs per case when refreshing; their spread sets the time tolerance (default 3)",
}


def fraction(text: str) -> float:
    """A share in [0, 1) (``0.03``: 3%), for ``--floor``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} must lie in [0, 1) (0.03 is 3%)")
    return value


def loss_seeds(text: str) -> int:
    """``--loss-seeds``: 0 (another curve from other initial weights is a regression) or 2 to 10 other seeds."""
    number = at_least(0)(text)
    if number == 1 or number > 10:
        raise argparse.ArgumentTypeError(f"must be 0, or 2 to 10 (a prediction interval needs 3 curves), got {number}")
    return number


def positive_fraction(text: str) -> float:
    """A share in (0, 1), for ``--alpha``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} must lie in (0, 1) (0.05 is 5%)" if value else "must be above 0")
    return value


def add_plugin_options(group: Any) -> None:
    """The pytest plugin's ``--perfsuite-*`` options, in its group (``pytest --help`` lists them)."""
    group.addoption(
        "--perfsuite-project",
        metavar="PATH",
        help="the project's pyproject.toml, or its directory (default: pytest's config file if it is a "
        "pyproject.toml, else the nearest one at or above the working directory, else above the rootdir)",
    )
    group.addoption(
        "--perfsuite-baselines",
        metavar="DIR",
        help="baseline directory, relative to the working directory (default: [tool.perfsuite] baselines, "
        "relative to the project's pyproject.toml, else 'baselines' beside it)",
    )
    group.addoption(
        "--perfsuite-no-gpu",
        choices=("fail", "skip"),
        default="fail",
        help="when the GPU tier is selected (-m gpu) and torch sees no CUDA GPU: fail at once, saying so "
        "(default), or skip its tests",
    )
    group.addoption(
        "--perfsuite-missing",
        choices=("fail", "skip"),
        default="fail",
        help="what a case without a baseline does: fail after running, naming the refresh command (default), "
        "or skip without running",
    )
    group.addoption(
        "--perfsuite-time",
        choices=("auto", "calibrated", "absolute", "off"),
        default="auto",
        help="compare step time against the calibration workload run around each step, or in seconds "
        "(default auto: calibrated on CPU, where shared machines drift by tens of percent; seconds on a GPU); "
        "off: measure it but gate memory and loss only (another stack against these baselines)",
    )
    group.addoption(
        "--perfsuite-uncompared",
        "--perfsuite-uncompared-time",  # its first name, from when it judged only the step time
        dest="perfsuite_uncompared",
        choices=("note", "fail"),
        default="note",
        help="a check this run cannot compare with its baseline: a step time where the baseline has none for this "
        "machine's time class (CPU family and ISA, or GPU model), a loss from other initial weights than the "
        "baseline's. note: gate the rest and note it as not compared (default); fail: fail the case (a dedicated "
        "runner). --perfsuite-uncompared-time is the same option",
    )
    group.addoption(
        "--perfsuite-refresh",
        action="store_true",
        help="record new baselines for the selected cases instead of comparing (written at the end of the run)",
    )
    group.addoption("--perfsuite-repeats", **REPEATS)
    group.addoption(
        "--perfsuite-refresh-missing",
        action="store_true",
        help="with --perfsuite-refresh: only the cases whose baseline here is missing, unreadable or has no step "
        "time the gate would compare (this machine's time class, unit and calibration)",
    )
    group.addoption(
        "--perfsuite-refresh-time-limit",
        metavar="SECONDS",
        type=float,
        help="with --perfsuite-refresh: start no case once the time left is less than the longest case so far; "
        "the cases finished are written, the rest reported as not reached",
    )
    group.addoption(
        "--perfsuite-shard",
        metavar="I/N",
        help="run shard I of N of the matrix (whole models, balanced by case count; perfsuite.core.shards): "
        "the nightly workflow's machines each run one",
    )
    group.addoption("--perfsuite-gpus", **GPUS)
    group.addoption(
        "--perfsuite-lanes",
        metavar="N",
        type=cpu_lanes,
        default="auto",
        help="CPU cases measured side by side before the tests, each on a core of its own: 1 runs them one at a "
        "time; default auto: 2 where the machine has 2 cores for them (perfsuite.session.runs.LANES)",
    )
    group.addoption("--perfsuite-scope", **SCOPE)
    group.addoption(
        "--perfsuite-json", metavar="PATH", type=output_file, help="write every case's records and checks here"
    )
    group.addoption(
        "--perfsuite-markdown", metavar="PATH", type=output_file, help="write the summary table as markdown"
    )
    group.addoption(
        "--perfsuite-report",
        metavar="DIR",
        type=not_a_file,
        help="write report.html (charts; needs perfsuite[report]) and summary.md for the gated cases there",
    )
    group.addoption(
        "--perfsuite-explain",
        action="store_true",
        help="explain each failure against its baseline in its message: against the baseline's stack rebuilt as "
        "an overlay where its versions differ from this environment's, else from one instrumented run of this "
        "stack (docs/explain.md)",
    )
