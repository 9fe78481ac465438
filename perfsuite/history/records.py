"""One small record per night, appended to a history directory, and the series read back from it.

Layout (the ``perf-history`` branch holds exactly this)::

    <machine>/<night>_<commit7>.json

``<machine>`` is the hardware and its time class (``nvidia-h100-80gb-hbm3``,
``cpu-amd-25.1-avx2``): the nights of one machine form its series. The record's
``fingerprint`` is that machine plus the versions of the stack; a change of it (an
upgrade) or of a case's baseline (a refresh) starts a new segment of that case's series
(:func:`perfsuite.history.judge.segments`). Records are never rewritten: a second record
for the same night and commit is refused unless it is identical.

Pure: no torch, no pytest.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import finite_number, write_text_atomic
from perfsuite.core.results import Results
from perfsuite.history.judge import Judgement, Night, Rules, judge

RECORD_VERSION = 1
METRICS = ("step time", "peak memory", "loss")
"""The series kept per case: the three gates. Memory and loss are deterministic."""
STACK = ("torch", "transformers", "accelerate", "deepspeed", "bitsandbytes", "datasets", "perfsuite")


class HistoryError(ValueError):
    """A history directory or record perfsuite cannot use; the message names the file."""


_MACHINE = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*")
"""A machine's directory name: lower-case letters and digits, single dots or dashes between them
(so never ``..``, a leading dot or a separator)."""
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


def _slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+(?:\.[a-z0-9]+)*", text.lower())) or "unknown"


def machine_of(results: Results) -> str:
    """The machine a results file ran on, as a directory name: hardware and CPU time class."""
    records = [c.record for c in results.cases if c.ran and c.record]
    if not records:
        raise HistoryError(f"{results.path}: no case ran, so there is nothing to record")
    hardware = str(records[0].hardware)
    time_class = str(records[0].time_class or "")
    return _slug(hardware if not time_class or time_class == hardware else f"{hardware}-{time_class}")


def fingerprint(results: Results) -> dict[str, Any]:
    """What decides the numbers: the machine, its device and driver, and the stack's versions."""
    record = next(c.record for c in results.cases if c.ran and c.record)
    versions = results.env.get("versions") or {}
    return {
        "machine": machine_of(results),
        "device": record.device_name,
        "driver": (results.env.get("driver") or record.extra.get("driver")),  # perfsuite keeps it in env
        "cuda": results.env.get("cuda"),
        "python": results.env.get("python"),
        "versions": {name: versions.get(name) for name in STACK},
    }


def fingerprint_id(facts: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:10]
    return f"{facts['machine']}@{digest}"


def night_record(results: Results, *, night: str | None = None) -> dict[str, Any]:
    """The record of one nightly run: per case, each gate's value ÷ baseline and its tolerance."""
    if results.kind != "gate":
        raise HistoryError(
            f"{results.path}: a history record needs the gate's results (`pytest --perfsuite-json`), "
            "not `perfsuite run --json`"
        )
    facts = fingerprint(results)
    date = night or str(results.env.get("date") or datetime.datetime.now(datetime.timezone.utc).isoformat())[:10]
    cases: dict[str, Any] = {}
    for case in results.cases:
        entry: dict[str, Any] = {"status": case.status, "baseline": (case.baseline or {}).get("recorded")}
        metrics = {}
        for metric in METRICS:
            check = case.check(metric)
            if check and check.get("compared", True) and check.get("rel") is not None and check.get("limit"):
                metrics[metric] = {
                    "value": round(1 + float(check["rel"]), 6),
                    "tolerance": float(f"{float(check['limit']):.6g}"),  # a tiny limit stays above 0
                    "ok": bool(check["ok"]),
                }
        entry["metrics"] = metrics
        if case.ran and case.record:
            entry["step_time_s"] = case.record.timed().median
            entry["peak_bytes"] = case.record.peak_memory_bytes
            losses = case.record.loss
            entry["final_loss"] = losses[-1] if losses else None
        cases[case.id] = entry
    return {
        "schema_version": RECORD_VERSION,
        "night": date,
        "commit": results.env.get("commit"),
        "fingerprint": facts,
        "fingerprint_id": fingerprint_id(facts),
        "cases": cases,
    }


def _is_night(value: Any) -> bool:
    """Whether ``value`` is a date as a record's night: ``YYYY-MM-DD``."""
    try:
        return isinstance(value, str) and datetime.date.fromisoformat(value).isoformat() == value
    except ValueError:
        return False


def record_path(record: Mapping[str, Any], directory: Path) -> Path:
    """Where ``record`` goes under ``directory``: ``<machine>/<night>_<commit7>.json``, each part checked,
    since a results file (and so a record) is data anyone can write."""
    machine, night, commit = str(record["fingerprint"]["machine"]), str(record["night"]), record.get("commit")
    if not _MACHINE.fullmatch(machine):
        raise HistoryError(f"machine {machine!r} is not a directory name (letters, digits, single . or - between)")
    if not _is_night(night):
        raise HistoryError(f"night {night!r} is not a date (YYYY-MM-DD)")
    if commit and not _COMMIT.fullmatch(str(commit)):
        raise HistoryError(f"commit {commit!r} is not a git commit (7 to 40 lower-case hex digits)")
    path = Path(directory) / machine / f"{night}_{str(commit or 'nocommit')[:7]}.json"
    if not path.resolve().is_relative_to(Path(directory).resolve()):  # a machine directory linked elsewhere
        raise HistoryError(f"{path} resolves outside {directory}")
    return path


def write_record(record: Mapping[str, Any], directory: Path) -> tuple[Path, bool]:
    """Append ``record`` under ``directory``: its path, and whether it was written (``False``: the same
    record was there already); refuse to overwrite a different record of the same night and commit."""
    path = record_path(record, directory)
    if path.exists():
        if read_record(path) == json.loads(json.dumps(record)):
            return path, False
        raise HistoryError(
            f"{path} exists with other figures; history is append-only: a rerun of the same night and "
            "commit is kept only under another night (`--night YYYY-MM-DD`) or commit"
        )
    # One compact line: a few KB a night even for a hundred cases (git compresses the rest).
    write_text_atomic(path, json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")
    return path, True


def load_records(directory: Path) -> list[dict[str, Any]]:
    """Every record under ``directory`` (:func:`read_record`: each one checked), oldest night first."""
    records = [read_record(path) for path in sorted(Path(directory).glob("*/*.json"))]
    return sorted(records, key=lambda r: (r["night"], r.get("commit") or ""))


_RESTORE = "restore it from the perf-history branch"


def read_record(path: Path) -> dict[str, Any]:
    """The record at ``path``, every value the history reads checked: a file that cannot be read, is not
    JSON or is not a record of this version raises :class:`HistoryError` naming it and the key."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        raise HistoryError(f"{path}: a directory where a night's record belongs; {_RESTORE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path}: cannot be read ({exc}); {_RESTORE}") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HistoryError(f"{path}: not JSON ({exc}); {_RESTORE}") from None
    if not isinstance(data, dict) or data.get("schema_version") != RECORD_VERSION:
        raise HistoryError(f"{path}: not a perfsuite history record of version {RECORD_VERSION}")
    problem = _problem(data)
    if problem is not None:
        raise HistoryError(f"{path}: {problem}; {_RESTORE}")
    return data


def _problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with a record's values, as :func:`night_record` writes them (``None``: nothing)."""

    def wrong(key: str, value: Any, expected: str) -> str:
        return f"{key} is {value!r:.80}, not {expected}" if value is not None else f"no {key!r}: {expected} is needed"

    night, commit, fingerprint, cases = (record.get(k) for k in ("night", "commit", "fingerprint", "cases"))
    if not _is_night(night):
        return wrong("night", night, "a date (YYYY-MM-DD)")
    if not isinstance(commit, (str, type(None))):
        return wrong("commit", commit, "a git commit")
    if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get("machine"), str):
        return wrong("fingerprint", fingerprint, "an object naming its machine")
    if not isinstance(record.get("fingerprint_id"), str):
        return wrong("fingerprint_id", record.get("fingerprint_id"), "a string")
    if not isinstance(cases, dict):
        return wrong("cases", cases, "an object of each case's figures")
    for case_id, entry in cases.items():
        if not isinstance(entry, dict):
            return wrong(f"cases.{case_id}", entry, "an object of its figures")
        if not isinstance(entry.get("metrics", {}), dict):
            return wrong(f"cases.{case_id}.metrics", entry["metrics"], "an object of each metric's figure")
        if not isinstance(entry.get("baseline"), (str, type(None))):
            return wrong(f"cases.{case_id}.baseline", entry["baseline"], "the baseline's date")
        for metric, figure in entry.get("metrics", {}).items():
            if metric not in METRICS:
                return f"cases.{case_id}.metrics has {metric!r}, not one of {', '.join(METRICS)}"
            if not _is_figure(figure):
                key = f"cases.{case_id}.metrics.{metric}"
                return wrong(key, figure, "a finite value with a tolerance of 0 or more")
    return None


def _is_figure(figure: Any) -> bool:
    """Whether ``figure`` is one metric's figure of a night: a finite value ÷ baseline and the gate's
    tolerance, 0 or more (the judge compares with it and divides by nothing)."""
    if not isinstance(figure, dict):
        return False
    value, tolerance = figure.get("value"), figure.get("tolerance")
    return finite_number(value) and finite_number(tolerance, at_least=0)


SeriesKey = tuple[str, str, str]
"""(machine, case, metric)."""


def series(records: Iterable[Mapping[str, Any]]) -> dict[SeriesKey, tuple[list[Night], float]]:
    """Each (machine, case, metric)'s nights, oldest first, with the latest tolerance."""
    found: dict[SeriesKey, tuple[list[Night], float]] = {}
    for record in records:
        machine = record["fingerprint"]["machine"]
        for case_id, entry in record["cases"].items():
            for metric, figure in entry.get("metrics", {}).items():
                key = (machine, case_id, metric)
                nights, _ = found.get(key, ([], 0.0))
                nights.append(
                    Night(
                        record["night"], float(figure["value"]), record["fingerprint_id"], entry.get("baseline") or ""
                    )
                )
                found[key] = (nights, float(figure["tolerance"]))
    return found


def rules_for(metric: str, tolerance: float) -> Rules:
    """The judging rules of a metric: memory and loss are deterministic, the step time needs persistence."""
    return Rules(tolerance=tolerance, deterministic=metric != "step time")


def commits_by_night(records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each night's commit, for the tracking issues' tables."""
    return {str(r["night"]): str(r.get("commit") or "") for r in records}


def judge_all(records: Iterable[Mapping[str, Any]]) -> dict[SeriesKey, Judgement]:
    """Every series' verdict tonight, under its metric's rules and its latest tolerance."""
    return {key: judge(nights, rules_for(key[2], tolerance)) for key, (nights, tolerance) in series(records).items()}
