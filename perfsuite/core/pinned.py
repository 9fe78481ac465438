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


def compare_problem(path: Path, time_class: str) -> str | None:
    """Why ``--benchmark-compare`` cannot compare with ``path``, the pinned file of ``time_class``: no
    file there, or what is wrong with it; ``None`` where it can. Where the class's step times were
    pooled from sessions, no refresh is suggested: it would replace them with one session's."""
    if not path.is_file():
        sessions = pooled_sessions(path.parent, time_class)
        if sessions:
            return (
                f"no pinned pytest-benchmark file {path}: this time class's step times were pooled from "
                f"{max(sessions)} sessions (`perfsuite baselines pool`), which records no pytest-benchmark rounds; "
                "perfsuite's own gate compares them, so run without --benchmark-compare (a `perfsuite baselines "
                "refresh` would write the file, but replace the pooled times with one session's)"
            )
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


def pooled_sessions(directory: Path, time_class: str) -> list[int]:
    """How many sessions each of ``directory``'s baselines pooled its ``time_class`` time from (those
    pooled only: a pool lists its sessions; a file that is not a readable baseline is skipped, the
    gate reports it)."""
    counts = []
    for path in sorted(directory.glob("*.json")):
        if is_pinned(path.name):
            continue
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))["time"][time_class]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("sessions"), list) and entry["sessions"]:
            counts.append(len(entry["sessions"]))
    return counts
