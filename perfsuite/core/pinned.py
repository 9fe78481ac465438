"""The pinned pytest-benchmark files: one next to each hardware's baselines per time class, what
``--benchmark-compare`` reads in place of "the latest saved run". A refresh merges the entries of the
cases it recorded into its class's file; a pool that withdraws a class's time of a case removes the
case's entry. Read strictly: a baselines directory is anyone's data. Pure: no torch, no pytest.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import BaselineError

PREFIX = "pytest-benchmark"
FILE = f"{PREFIX}.json"
"""A GPU's file (its hardware directory names its class); a CPU class's is ``pytest-benchmark.CLASS.json``."""


def pinned_path(root: Path, hardware: str, time_class: str) -> Path:
    """Where the class's file lives: one per time class (times only compare within one)."""
    if time_class == hardware:  # a GPU: the directory already names the class
        return root / hardware / FILE
    return root / hardware / f"{PREFIX}.{time_class}.json"


def is_pinned(name: str) -> bool:
    """Whether a file name in a baselines directory is a pinned file (no case's baseline)."""
    return name.startswith(PREFIX)


def read_pinned(path: Path) -> dict[str, Any]:
    """The file's JSON, ``{}`` where there is none; :class:`BaselineError` naming what is wrong with it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(path, str(exc)) from None
    if not isinstance(data, dict):
        raise _corrupt(path, "not a JSON object")
    entries = data.get("benchmarks", [])
    if not isinstance(entries, list) or not all(
        isinstance(entry, dict) and isinstance(entry.get("fullname"), str) for entry in entries
    ):
        raise _corrupt(path, "'benchmarks' is not a list of entries, each with its fullname")
    return data


def compare_problem(path: Path) -> str | None:
    """Why ``--benchmark-compare`` cannot compare with ``path``: no file there, or what is wrong with it;
    ``None`` where it can."""
    if not path.is_file():
        return f"no pinned pytest-benchmark file {path}; record one with `perfsuite baselines refresh`"
    try:
        read_pinned(path)
    except BaselineError as exc:
        return str(exc)
    return None


def merged(pinned: dict[str, Any], output: dict[str, Any], fresh: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A refresh's file: its pytest-benchmark ``output`` (machine, commit) with ``fresh`` entries in place of
    the ``pinned`` entries of the same names, the others kept, in name order."""
    names = {entry["fullname"] for entry in fresh}
    kept = [entry for entry in pinned.get("benchmarks", []) if entry["fullname"] not in names]
    return {**output, "benchmarks": sorted([*kept, *fresh], key=lambda entry: entry["fullname"])}


def without(pinned: dict[str, Any], cases: Collection[str]) -> dict[str, Any] | None:
    """``pinned`` without the entries of ``cases`` (case ids, pytest-benchmark's ``param``); ``None``
    where it holds none of them."""
    entries = pinned.get("benchmarks", [])
    kept = [entry for entry in entries if entry.get("param") not in cases]
    return None if len(kept) == len(entries) else {**pinned, "benchmarks": kept}


def _corrupt(path: Path, why: str) -> BaselineError:
    return BaselineError(f"{path}: corrupt pinned pytest-benchmark file ({why}); delete it and refresh")
