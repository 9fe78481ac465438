"""Reading a results file into the cases a report draws. Pure: no torch, no matplotlib.

Two files hold results:

- ``pytest --perfsuite-json PATH``: every matrix case gated against its baseline, with
  the baseline's figures, the tolerance and the checks (what the gate saw);
- ``perfsuite run --json PATH``: every case's run record, no gate. Given the baselines
  directory, the report compares them itself (:func:`gate_runs`), as pytest would.

Either is data anyone can write: every value a report, a merge or the history reads is checked
as the file is read (:mod:`perfsuite.core.results_file`; records by :mod:`perfsuite.core.record`),
and a wrong one is a :class:`ResultsError` naming the file and the key, never a traceback deep
inside a report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.ab_file import is_ab
from perfsuite.core.baselines import BaselineError, MissingBaseline, baseline_path, load_baseline, write_json_atomic
from perfsuite.core.check import NOT_GATED, TimeCheck
from perfsuite.core.drift import drift_group, estimate
from perfsuite.core.gates import baseline_figures, compare, time_change
from perfsuite.core.observation import Observation, observe
from perfsuite.core.record import CaseRecord, records_of
from perfsuite.core.results_file import EXPECTED, ResultsError, check_file, check_outcome, read_results_json
from perfsuite.core.tolerance import Tolerance, resolve_tolerance


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
    baselines: Path | None = None
    """A ``perfsuite run`` file's: the baselines directory :func:`gate_runs` compared its cases with
    (where one does not exist, none was); ``None`` when none was given."""

    def counts(self) -> str:
        """``"1 failed, 30 passed"``: how many cases ended in each status."""
        counts: dict[str, int] = {}
        for case in self.cases:
            counts[case.status] = counts.get(case.status, 0) + 1
        return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no case"

    def run_compared(self) -> str | None:
        """For a ``perfsuite run`` file any of whose cases ran: how many were compared with their baselines
        (:func:`gate_runs`), which are outside their tolerance, which had none, and that a run does not
        gate on them; ``None`` for a gate's file, or a run none of whose cases ran."""
        if self.kind != "run" or not any(c.ran for c in self.cases):
            return None
        # A case that ran and failed without checks: its baseline could not be read (the gate fails it too).
        compared = [c for c in self.cases if c.checks or (c.ran and c.status == "failed")]
        if not compared:
            return (
                f"perfsuite run compared none of its {len(self.cases)} case(s) with a baseline "
                f"({self._why_none()}): nothing in it is gated"
            )
        out = [c.id for c in compared if c.status == "failed"]
        said = f"{len(out)} outside their tolerance ({_named(out)})" if out else "all within their tolerance"
        left = [c.id for c in self.cases if c.ran and c not in compared]
        if left:
            said += f"; {len(left)} compared with none ({_named(left)}: no baseline, or a figure it needs missing)"
        return (
            f"perfsuite run compared {len(compared)} of {len(self.cases)} case(s) with their baselines as the gate "
            f"would: {said}; its exit code does not count them (pytest gates)"
        )

    def _why_none(self) -> str:
        if self.baselines is None:
            return "no baselines directory given (`perfsuite report --baselines DIR`) or found from here"
        if not self.baselines.is_dir():
            return f"no baselines directory at {self.baselines}"
        return f"none has a baseline in {self.baselines} for its hardware, or each run lacks a figure the gate needs"

    def time_checks(self) -> list[TimeCheck]:
        """Per case whose step time was checked, what :func:`perfsuite.reports.tables.verdict` counts."""
        checks = []
        for case in self.cases:
            check = case.check("step time")
            if check is None or check.get("change") == NOT_GATED:
                continue
            compared, limit = bool(check.get("compared", True)), check.get("limit")
            time_class = case.record.time_class if case.record is not None else None
            limit = float(limit) if compared and isinstance(limit, (int, float)) else None
            change = check.get("change")
            checks.append(TimeCheck.of(compared, time_class, limit, str(change)))
        return checks

    def by_table(self) -> dict[str, list[ReportCase]]:
        tables: dict[str, list[ReportCase]] = {}
        for case in self.cases:
            tables.setdefault(case.table, []).append(case)
        return tables


def _named(ids: Sequence[str]) -> str:
    """The first five of ``ids``, and how many more."""
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


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
    case_id = record.case_id
    return ReportCase(
        id=case_id,
        model=model,
        strategy=strategy,
        engine=engine,
        status=record.status,
        record=record,
        message=record.error or "",
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


def load_results(path: Path, *, gate_only: bool = False) -> Results:
    """Read ``path`` (either kind of results file; a missing one's hint names only the gate's where
    ``gate_only``); a problem raises :class:`ResultsError` naming it."""
    return parse_results(read_results_json(path, gate_only=gate_only), str(path))


def parse_results(data: Any, path: str, expected: str = EXPECTED) -> Results:
    """A results file's content (``path`` names it in errors and in the report; ``expected``: what a
    file that is none says was expected)."""
    if is_ab(data):  # perfsuite report reads it before here: any other reader is the wrong command
        raise ResultsError(f"{path}: a `perfsuite ab --json` file, which `perfsuite report` reads; {expected}")
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise ResultsError(f"{path}: not a perfsuite results file (no 'cases' list); {expected}")
    cases = data["cases"]
    if not all(isinstance(c, dict) for c in cases):
        raise ResultsError(f"{path}: not a perfsuite results file (a case is not an object); {expected}")
    gate = any("checks" in c for c in cases) or "refresh" in data
    needed = ("case", "status") if gate else ("model", "strategy", "status")
    for i, case in enumerate(cases):
        missing = [key for key in needed if key not in case]
        if missing:
            raise ResultsError(
                f"{path}: case {i} has no {', '.join(repr(k) for k in missing)}: not a perfsuite results file; "
                f"{expected}"
            )
    check_file(data, path)
    for i, case in enumerate(cases if gate else []):
        check_outcome(case, path, i)
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
    results.baselines = baselines
    if not baselines.is_dir():  # a project before its first refresh: said once, by Results.run_compared
        return
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
        change = time_change(base, observed, tolerance)
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
