"""Reading a results file into the cases a report draws. Pure: no torch, no matplotlib.

Two files hold results:

- ``pytest --perfsuite-json PATH``: every matrix case gated against its baseline, with
  the baseline's figures, the tolerance and the checks (what the gate saw);
- ``perfsuite run --json PATH``: every case's run record, no gate. Given the baselines
  directory, the report compares them itself (:func:`gate_runs`), as pytest would.

Either is data anyone can write: every value a report, a merge or the history reads is checked
here as the file is read (records by :mod:`perfsuite.core.record`), and a wrong one is a
:class:`ResultsError` naming the file and the key, never a traceback deep inside a report.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import BaselineError, MissingBaseline, baseline_path, load_baseline, write_json_atomic
from perfsuite.core.check import UNTIMED, TimeCheck
from perfsuite.core.drift import drift_group, estimate
from perfsuite.core.gates import baseline_figures, compare, time_change
from perfsuite.core.observation import Observation, observe
from perfsuite.core.record import CaseRecord, records_of
from perfsuite.core.tolerance import Tolerance, resolve_tolerance

RUN_RESULTS_SCHEMA_VERSION = 1
"""``schema_version`` of ``perfsuite run --json``'s file."""
PYTEST_RESULTS_SCHEMA_VERSION = 2
"""``schema_version`` of ``pytest --perfsuite-json``'s file (and of ``perfsuite merge``'s)."""
SCHEMA_VERSIONS = {
    RUN_RESULTS_SCHEMA_VERSION: "perfsuite run --json",
    PYTEST_RESULTS_SCHEMA_VERSION: "pytest --perfsuite-json",
}
"""The ``schema_version`` values read here, and whose file each first was (a file is told by its cases)."""
GATE_STATUSES = ("passed", "failed", "skipped", "missing", "refreshed", "refused", "not reached")
"""An outcome's ``status`` in ``pytest --perfsuite-json``'s file (:class:`perfsuite.core.gates.Outcome`)."""


class ResultsError(ValueError):
    """A results file that is missing, not JSON, or not one perfsuite writes; the message names it."""


@dataclasses.dataclass
class ReportCase:
    """One case as a report shows it."""

    id: str
    model: str
    strategy: str
    engine: str
    status: str
    """pytest: passed, failed, skipped, missing, refreshed; a ``perfsuite run``: ok, failed, skipped."""
    record: CaseRecord | None
    """The first run's record (``None`` when the case never ran)."""
    baseline: dict[str, Any] | None = None
    """What it was (or would be) compared with: :func:`perfsuite.core.gates.baseline_figures`."""
    tolerance: dict[str, Any] | None = None
    checks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    message: str = ""

    @property
    def ran(self) -> bool:
        return self.record is not None and self.record.ok

    @property
    def table(self) -> str:
        """The table (and chart panel) it belongs to: its model, and its engine beyond the loop."""
        return self.model if self.engine == "loop" else f"{self.model} · {self.engine}"

    def check(self, metric: str) -> dict[str, Any] | None:
        return next((c for c in self.checks if c["metric"] == metric), None)

    @property
    def failed_metrics(self) -> list[str]:
        return [c["metric"] for c in self.checks if not c["ok"]]


@dataclasses.dataclass
class Results:
    """A whole results file: where it came from and its cases."""

    path: str
    kind: str
    """``gate`` (pytest's file) or ``run`` (``perfsuite run``'s)."""
    env: dict[str, Any]
    cases: list[ReportCase]

    def counts(self) -> str:
        """``"1 failed, 30 passed"``: how many cases ended in each status."""
        counts: dict[str, int] = {}
        for case in self.cases:
            counts[case.status] = counts.get(case.status, 0) + 1
        return ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))

    def time_checks(self) -> list[TimeCheck]:
        """Per case whose step time was checked, what :func:`perfsuite.reports.tables.verdict` counts."""
        checks = []
        for case in self.cases:
            check = case.check("step time")
            if check is None or check.get("change") == "not gated":
                continue
            compared, limit = bool(check.get("compared", True)), check.get("limit")
            time_class = case.record.time_class if case.record is not None else None
            limit = float(limit) if compared and isinstance(limit, (int, float)) else None
            checks.append(TimeCheck(compared, time_class, limit, check.get("change") == UNTIMED))
        return checks

    def by_table(self) -> dict[str, list[ReportCase]]:
        tables: dict[str, list[ReportCase]] = {}
        for case in self.cases:
            tables.setdefault(case.table, []).append(case)
        return tables


def _identity(record: CaseRecord | None, case_id: str) -> tuple[str, str, str]:
    if record and record.model and record.strategy:
        return record.model, record.strategy, record.engine or "loop"
    engine = "trainer" if case_id.endswith("-trainer") else "loop"
    stem = case_id.removesuffix("-trainer")
    model, _, strategy = stem.rpartition("-")
    return model or stem, strategy, engine


def _case_from_outcome(outcome: Mapping[str, Any], where: str) -> ReportCase:
    records = records_of(outcome.get("records") or [], f"{where}: {outcome['case']}'s records")
    record = next((r for r in records if r.ok), records[0] if records else None)
    model, strategy, engine = _identity(record, outcome["case"])
    return ReportCase(
        id=outcome["case"],
        model=model,
        strategy=strategy,
        engine=engine,
        status=outcome["status"],
        record=record,
        baseline=outcome.get("baseline"),
        tolerance=outcome.get("tolerance"),
        checks=list(outcome.get("checks") or []),
        message=outcome.get("message") or "",
    )


def _case_from_record(record: CaseRecord) -> ReportCase:
    model, strategy, engine = _identity(record, "")
    case_id = f"{model}-{strategy}" + ("" if engine == "loop" else f"-{engine}")
    return ReportCase(
        id=case_id,
        model=model,
        strategy=strategy,
        engine=engine,
        status=record.status,
        record=record,
        message=record.error or "",
    )


EXPECTED = (
    "expected `pytest --perfsuite-json`'s file (a 'cases' list of outcomes, each with 'case' and 'status') or "
    "`perfsuite run --json`'s (a 'cases' list of records, each with 'model', 'strategy' and 'status')"
)


def write_results(
    payload: Mapping[str, Any],
    *,
    json_file: Path | None,
    report_dir: Path | None = None,
    render: Callable[[Path], Sequence[Path]] | None = None,
    say: Callable[[str], None] | None = print,
) -> None:
    """The one writer of a command's results files (``perfsuite run``, ``ab`` and ``bisect``): ``payload``
    as ``--json``'s file, atomically, then ``--report``'s files into ``report_dir`` as ``render`` writes
    them there (a report is the shows' to draw; a ``render`` that cannot draw one says why and returns
    what it wrote). Each file written is said through ``say`` (``None``: nothing is said)."""
    if json_file is not None:
        write_json_atomic(json_file, payload)
        if say is not None:
            say(f"wrote {json_file}")
    if report_dir is not None and render is not None:
        for path in render(report_dir):
            if say is not None:
                say(f"wrote {path}")


def read_results_json(path: Path) -> Any:
    """``path``'s JSON; a missing, unreadable, empty or non-JSON file raises :class:`ResultsError` naming it."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ResultsError(
            f"{path}: no such results file; write one with `pytest --perfsuite-json {path}` "
            f"or `perfsuite run --json {path}`"
        ) from None
    except IsADirectoryError:
        raise ResultsError(f"{path}: is a directory; {EXPECTED}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot be read ({exc})") from None
    if not text.strip():
        raise ResultsError(f"{path}: is empty; {EXPECTED}")
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
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return f"{shown} ({type(value).__name__})"


_TEXT, _FLAG, _NUMBER, _OBJECT, _LIST = "a string", "true or false", "a number", "an object", "a list"
_KINDS: dict[str, Callable[[Any], bool]] = {
    _TEXT: lambda v: isinstance(v, str),
    _FLAG: lambda v: isinstance(v, bool),
    _NUMBER: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    _OBJECT: lambda v: isinstance(v, dict),
    _LIST: lambda v: isinstance(v, list),
}
# What a report, a merge and the history read of a file, and so check: its env, each outcome and each check.
_ENV = {"date": _TEXT, "commit": _TEXT, "dirty": _FLAG, "untracked": _FLAG, "python": _TEXT, "versions": _OBJECT}
_ENV |= {"host": _TEXT}
_OUTCOME = {"hardware": _TEXT, "message": _TEXT, "checks": _LIST, "records": _LIST, "baseline": _OBJECT}
_OUTCOME |= {"tolerance": _OBJECT}
_CHECK = {"metric": _TEXT, "ok": _FLAG, "compared": _FLAG, "change": _TEXT, "rel": _NUMBER, "limit": _NUMBER}
_CHECK |= {"baseline": _TEXT, "measured": _TEXT, "tolerance": _TEXT, "message": _TEXT}
_FIGURES = {"recorded": _TEXT, "time_class": _TEXT, "time": _OBJECT, "memory": _OBJECT, "loss": _LIST}


def _typed(data: Mapping[str, Any], kinds: Mapping[str, str], where: str, required: Sequence[str] = ()) -> None:
    """Each key of ``kinds`` that ``data`` holds (and the ``required`` ones, which it must) of its kind, or
    ``null`` where not required; a wrong one raises :class:`ResultsError` naming ``where`` and the key."""
    for key, kind in kinds.items():
        value = data.get(key)
        if key in required and key not in data:
            raise ResultsError(f"{where.rstrip('. ').rstrip(':')} has no {key!r}: not a file perfsuite writes")
        if (value is not None or key in required) and not _KINDS[kind](value):
            raise ResultsError(f"{where}{key} is {_shown(value)}, not {kind}")


def _check_file(data: Mapping[str, Any], path: str) -> None:
    """The file-wide keys: a ``schema_version`` this perfsuite reads, and an ``env`` of the kinds it writes."""
    version = data.get("schema_version", RUN_RESULTS_SCHEMA_VERSION)  # absent from the earliest files
    if type(version) is not int or version not in SCHEMA_VERSIONS:
        understood = " and ".join(f"{v} (`{name}`)" for v, name in SCHEMA_VERSIONS.items())
        raise ResultsError(f"{path}: schema_version is {_shown(version)}; this perfsuite reads {understood}")
    _typed(data, {"env": _OBJECT, "refresh": _FLAG, "drift": _LIST}, f"{path}: ")
    _typed(data.get("env") or {}, _ENV, f"{path}: env.")


def _check_outcome(outcome: Mapping[str, Any], path: str, index: int) -> None:
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
    numbers = {f"baseline.loss[{i}]": v for i, v in enumerate(figures.get("loss") or [])}
    numbers |= {f"tolerance.{k}": v for k, v in (outcome.get("tolerance") or {}).items()}
    for key, value in numbers.items():
        if not _KINDS[_NUMBER](value):
            raise ResultsError(f"{where}{key} is {_shown(value)}, not a number")


def load_results(path: Path) -> Results:
    """Read ``path`` (either kind of results file); a problem raises :class:`ResultsError` naming it."""
    return parse_results(read_results_json(path), str(path))


def parse_results(data: Any, path: str) -> Results:
    """A results file's content (``path`` names it in errors and in the report)."""
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ResultsError(f"{path}: not a perfsuite results file (no 'cases' list); {EXPECTED}")
    cases = data["cases"]
    if not all(isinstance(c, dict) for c in cases):
        raise ResultsError(f"{path}: not a perfsuite results file (a case is not an object); {EXPECTED}")
    gate = any("checks" in c for c in cases) or "refresh" in data
    needed = ("case", "status") if gate else ("model", "strategy", "status")
    for i, case in enumerate(cases):
        missing = [key for key in needed if key not in case]
        if missing:
            raise ResultsError(
                f"{path}: case {i} has no {', '.join(repr(k) for k in missing)}: not a perfsuite results file; "
                f"{EXPECTED}"
            )
    _check_file(data, path)
    for i, case in enumerate(cases if gate else []):
        _check_outcome(case, path, i)
    try:
        if gate:
            parsed = [_case_from_outcome(c, path) for c in cases]
        else:
            parsed = [_case_from_record(r) for r in records_of(cases, f"{path}: cases")]
    except ResultsError:
        raise
    except ValueError as exc:  # a record's value of the wrong type: its key named
        raise ResultsError(str(exc)) from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise ResultsError(f"{path}: a case lacks a field perfsuite writes ({exc!r})") from None
    return Results(path=str(path), kind="gate" if gate else "run", env=dict(data.get("env") or {}), cases=parsed)


def gate_runs(results: Results, baselines: Path, settings: Mapping[str, Any] | None = None) -> None:
    """Compare the cases of a ``perfsuite run`` file with ``baselines`` as the pytest gate does,
    a CPU case's step time against the run's drift (:mod:`perfsuite.core.drift`).

    A case without a baseline, or whose run lacks a figure the gate needs (``--no-profile``), keeps no checks
    and says why in its message; nothing fails. A case whose baseline cannot be read fails, as its gate would.
    """
    ready: list[tuple[ReportCase, dict[str, Any], Observation, Tolerance, str]] = []
    for case in results.cases:
        if not case.ran or case.checks:
            continue
        record = case.record
        assert record is not None
        hardware = str(record.hardware)
        try:
            stored = load_baseline(baseline_path(baselines, hardware, case.id), case_id=case.id, hardware=hardware)
        except MissingBaseline as exc:
            case.message = str(exc)
            continue
        except BaselineError as exc:  # as its gate would: the case fails, naming the file
            case.status, case.message = "failed", str(exc)
            continue
        try:
            observed = observe(record, time_unit="calibrated" if record.device == "cpu" else "s")
        except ValueError as exc:  # a run without a figure the gate needs (--no-profile: no peak): noted
            case.message = f"not compared with its baseline: {exc}"
            continue
        precision, time_class = str(record.precision or "fp32"), observed.time_class
        tolerance: Tolerance = resolve_tolerance(
            settings or {}, hardware=hardware, case_id=case.id, precision=precision, time_class=time_class
        )
        ready.append((case, stored, observed, tolerance, hardware))

    def group(case: ReportCase) -> str:
        assert case.record is not None  # a case that ran
        return drift_group(case.record)

    changes: dict[str, list[float]] = {}
    for case, base, observed, tolerance, _ in ready:
        change = time_change(base, observed)
        if tolerance.time_drift_limit > 0 and change is not None:
            changes.setdefault(group(case), []).append(change)
    drifts = {name: estimate(name, values) for name, values in changes.items()}
    for case, stored, observed, tolerance, hardware in ready:
        checks = compare(case.id, stored, observed, tolerance, hardware=hardware, drift=drifts.get(group(case)))
        case.baseline = baseline_figures(stored, observed.time_class)
        case.tolerance = dataclasses.asdict(tolerance)
        case.checks = [dataclasses.asdict(c) for c in checks]
        case.status = "passed" if all(c.ok for c in checks) else "failed"
        case.message = "\n".join(c.message for c in checks if not c.ok)


def regressions_first(cases: Sequence[ReportCase]) -> list[ReportCase]:
    """Failures first (then missing baselines), then the rest, each group in its original order."""
    rank = {"failed": 0, "missing": 1, "refused": 1}
    return sorted(cases, key=lambda c: rank.get(c.status, 2))
