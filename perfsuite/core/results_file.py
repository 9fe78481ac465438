"""A results file as it is read: from disk (:func:`read_results_json`: present, JSON, finite numbers
only) and file-wide and per outcome (:func:`check_file`, :func:`check_outcome`: every value a report,
a merge or the history reads, of the kind perfsuite writes). A wrong one is a :class:`ResultsError`
naming the file and the key. Its cases are read into a report's by :mod:`perfsuite.core.results`.
Pure: standard library and :mod:`perfsuite.core.typed_json`'s checks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.typed_json import Check, flag, json_object, list_of, number, shown, text

RUN_RESULTS_SCHEMA_VERSION = 1
"""``schema_version`` of ``perfsuite run --json``'s file."""
PYTEST_RESULTS_SCHEMA_VERSION = 2
"""``schema_version`` of ``pytest --perfsuite-json``'s file (and of ``perfsuite merge``'s)."""
SCHEMA_VERSIONS = {
    RUN_RESULTS_SCHEMA_VERSION: "perfsuite run --json",
    PYTEST_RESULTS_SCHEMA_VERSION: "pytest --perfsuite-json",
}
"""The ``schema_version`` values read here, and whose file each first was (a file is told by its cases)."""
PAGE_MARK = "<meta name='generator' content='perfsuite'>"
"""In the head of every page perfsuite writes (``report.html``): an earlier run's page left in a
checkout is told from a project's own file by it."""
SUMMARY_MARK = "<!-- perfsuite-ab "
"""How ``perfsuite ab``'s ``summary.md`` starts (its first line names the device, :func:`perfsuite.reports.ab.marker`);
without the report's extra, ab writes that summary alone."""
GATE_STATUSES = ("passed", "failed", "skipped", "missing", "refreshed", "refused", "not reached")
"""An outcome's ``status`` in ``pytest --perfsuite-json``'s file (:class:`perfsuite.core.gates.Outcome`)."""


class ResultsError(ValueError):
    """A results file that is missing, not JSON, or not one perfsuite writes; the message names it."""


_GATED = "`pytest --perfsuite-json`'s file (a 'cases' list of outcomes, each with 'case' and 'status')"
_RUN = "`perfsuite run --json`'s (a 'cases' list of records, each with 'model', 'strategy' and 'status')"
EXPECTED = f"expected {_GATED} or {_RUN}"
"""What a reader of results files says it expected (``perfsuite merge``, ``history record``)."""
EXPECTED_REPORT = f"expected {_GATED}, {_RUN} or `perfsuite ab --json`'s (a 'kind' of 'perfsuite-ab')"
"""What ``perfsuite report``, which also reads an ab file, says it expected."""


def read_results_json(path: Path, expected: str = EXPECTED, *, gate_only: bool = False) -> Any:
    """``path``'s JSON; a missing, unreadable, empty or non-JSON file raises :class:`ResultsError` naming it
    and saying what was ``expected`` (a missing one, what writes one: the gate alone where ``gate_only``)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        run = "" if gate_only else f" or `perfsuite run --json {path}`"
        raise ResultsError(
            f"{path}: no such results file; write one with `pytest --perfsuite-json {path}`{run}"
        ) from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: is a directory; {expected}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot be read ({exc})") from None
    if not text.strip():
        raise ResultsError(f"{path}: is empty; {expected}")
    try:
        data = json.loads(text)
        found = _unwritable(data, "")
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not a perfsuite results file (not JSON: {exc})") from None
    except RecursionError:  # json's parser, or the walk below, past Python's depth
        raise ResultsError(f"{path}: not a perfsuite results file (nested too deep)") from None
    if found is not None:
        raise ResultsError(
            f"{path}: {found[0] or 'the file'} is {_shown(found[1])}: not a number perfsuite writes "
            "(a results file holds finite numbers only)"
        )
    return data


def _unwritable(value: Any, where: str) -> tuple[str, Any] | None:
    """The key and value of the first number in ``value`` that no results file holds: NaN, an infinity,
    or an integer past a float's range (perfsuite writes its files without them: ``allow_nan=False``)."""
    if isinstance(value, dict):
        items: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return None if math.isfinite(value) else (where, value)
        except OverflowError:  # an integer no float holds
            return where, value
    else:
        return None
    return next((found for key, item in items if (found := _unwritable(item, key)) is not None), None)


def _shown(value: Any) -> str:
    """``value`` as an error shows it: its repr (cut at 60 characters) and its type."""
    return f"{shown(value)} ({type(value).__name__})"


_TEXT, _FLAG, _NUMBER, _OBJECT = text, flag, number, json_object
_LIST = list_of(lambda item, where: item)
# What a report, a merge and the history read of a file, and so check: its env, each outcome and each check.
_ENV = {"date": _TEXT, "commit": _TEXT, "dirty": _FLAG, "untracked": _FLAG, "python": _TEXT, "versions": _OBJECT}
_ENV |= {"host": _TEXT}
_OUTCOME = {"hardware": _TEXT, "message": _TEXT, "checks": _LIST, "records": _LIST, "baseline": _OBJECT}
_OUTCOME |= {"tolerance": _OBJECT}
_CHECK = {"metric": _TEXT, "ok": _FLAG, "compared": _FLAG, "change": _TEXT, "rel": _NUMBER, "limit": _NUMBER}
_CHECK |= {"baseline": _TEXT, "measured": _TEXT, "tolerance": _TEXT, "message": _TEXT}
_FIGURES = {"recorded": _TEXT, "time_class": _TEXT, "time": _OBJECT, "memory": _OBJECT, "loss": _LIST}


def _typed(data: Mapping[str, Any], kinds: Mapping[str, Check], where: str, required: Sequence[str] = ()) -> None:
    """Each key of ``kinds`` that ``data`` holds (and the ``required`` ones, which it must) passing its
    check (:mod:`perfsuite.core.typed_json`'s), or ``null`` where not required; a wrong one raises
    :class:`ResultsError` naming ``where`` and the key."""
    for key, check in kinds.items():
        value = data.get(key)
        if key in required and key not in data:
            raise ResultsError(f"{where.rstrip('. ').rstrip(':')} has no {key!r}: not a file perfsuite writes")
        if value is not None or key in required:
            try:
                check(value, key)
            except ValueError as exc:
                raise ResultsError(f"{where}{exc}") from None


def check_file(data: Mapping[str, Any], path: str) -> None:
    """The file-wide keys: a ``schema_version`` this perfsuite reads, and an ``env`` of the kinds it writes."""
    version = data.get("schema_version", RUN_RESULTS_SCHEMA_VERSION)  # absent from the earliest files
    if type(version) is not int or version not in SCHEMA_VERSIONS:
        understood = " and ".join(f"{v} (`{name}`)" for v, name in SCHEMA_VERSIONS.items())
        raise ResultsError(f"{path}: schema_version is {_shown(version)}; this perfsuite reads {understood}")
    _typed(data, {"env": _OBJECT, "refresh": _FLAG, "drift": _LIST}, f"{path}: ")
    _typed(data.get("env") or {}, _ENV, f"{path}: env.")


def check_outcome(outcome: Mapping[str, Any], path: str, index: int) -> None:
    """An outcome of ``pytest --perfsuite-json``'s file: its id, a status the gate gives, and checks and
    figures of the kinds it writes (its records are :func:`records_of`'s)."""
    _typed(outcome, {"case": _TEXT, "status": _TEXT}, f"{path}: cases[{index}]: ", required=("case", "status"))
    where = f"{path}: {outcome['case']}: "
    if not outcome["case"]:
        raise ResultsError(f"{path}: cases[{index}]: case is '', not a case id")
    if outcome["status"] not in GATE_STATUSES:
        raise ResultsError(f"{where}status is {outcome['status']!r}, not one of {', '.join(GATE_STATUSES)}")
    _typed(outcome, _OUTCOME, where)
    for i, check in enumerate(outcome.get("checks") or []):
        if not isinstance(check, dict):
            raise ResultsError(f"{where}checks[{i}] is {_shown(check)}, not an object")
        _typed(check, _CHECK, f"{where}checks[{i}].", required=("metric", "ok", "change"))
    figures = outcome.get("baseline") or {}
    _typed(figures, _FIGURES, f"{where}baseline.")
    _typed(figures.get("memory") or {}, {"peak_bytes": _NUMBER}, f"{where}baseline.memory.")
    if (tolerance := outcome.get("tolerance")) is not None:  # the loss chart's band needs both
        _typed(
            tolerance, {"loss_rtol": _NUMBER, "loss_atol": _NUMBER}, f"{where}tolerance.", ("loss_rtol", "loss_atol")
        )
    numbers = {f"baseline.loss[{i}]": v for i, v in enumerate(figures.get("loss") or [])}
    if (step := next((k for k, v in numbers.items() if v is None), None)) is not None:  # a curve has no gaps
        raise ResultsError(f"{where}{step} is null, not a number")
    numbers |= {f"tolerance.{k}": v for k, v in (tolerance or {}).items()}
    _typed(numbers, dict.fromkeys(numbers, _NUMBER), where)
