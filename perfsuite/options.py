"""Options that ``perfsuite`` and the pytest plugin both take, defined once.

Each is the keyword arguments of ``argparse``'s ``add_argument``, which pytest's
``addoption`` takes too: ``perfsuite run --gpus`` and ``pytest --perfsuite-gpus`` mean the
same thing with the same default and help. No torch, no pytest.
"""

from __future__ import annotations

import argparse
import datetime
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
    return number


def existing_dir(value: str) -> Path:
    """An option's type: a directory that exists."""
    path = Path(value)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: {'not a directory' if path.exists() else 'no such directory'}")
    return path


def not_a_file(value: str) -> Path:
    """An option's type: a directory to write into, existing or not, but not a file."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: is a file, expected a directory")
    return path


def output_file(value: str) -> Path:
    """An option's type: a file to write (its directory is made), not a directory."""
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: is a directory, expected a file to write")
    return path


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


GPUS: dict[str, Any] = {
    "type": gpu_selection,
    "default": "all",
    "metavar": "GPUS",
    "help": "GPUs the cases share: all (default), a count, or ids (0,2); with more than one, single-GPU cases run "
    "side by side, one per GPU, and a case on N ranks gets N (perfsuite.pool)",
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


def positive_fraction(text: str) -> float:
    """A share in (0, 1), for ``--alpha``."""
    value = fraction(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be above 0")
    return value
