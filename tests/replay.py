"""The committed CPU baselines replayed as a gated results file, for report and history tests.

Each baseline holds what a refresh measured for one case of the tiny CPU matrix: its
step times, memory breakdown and loss curve. Replayed as a run (optionally changed), they
give the report and the history real figures of the whole matrix without training again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.declaration import read_pyproject
from perfsuite.core.gates import baseline_figures, compare
from perfsuite.core.observation import observe
from perfsuite.core.record import CaseRecord
from perfsuite.core.tolerance import resolve_tolerance

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "baselines"


def record_of(baseline: Mapping[str, Any], time_class: str) -> dict[str, Any]:
    """The run record a refresh's first repeat would have written for this baseline."""
    spec = baseline["spec"]
    time = baseline["time"][time_class]
    engine = "trainer" if baseline["case"].endswith("-trainer") else "loop"
    calibration_s = time["step_time_s_median"] / time["median"]
    return {
        "model": spec["model"],
        "strategy": spec["strategy"],
        "engine": engine,
        "status": "ok",
        "error": None,
        "device": "cpu",
        "device_name": time.get("device") or "CPU",
        "hardware": baseline["hardware"],
        "time_class": time_class,
        "precision": spec["precision"],
        "batch_size": spec["batch_size"],
        "micro_batch_size": spec["micro_batch_size"],
        "seq_len": spec["seq_len"],
        "step_time_s": {"median": time["step_time_s_median"], "samples": [s * calibration_s for s in time["steps"]]},
        "step_time_calibrated": {"median": time["median"], "samples": list(time["steps"])},
        "calibration": {"workload": time["calibration"], "median_s": calibration_s},
        "peak_memory_bytes": baseline["memory"]["peak_bytes"],
        "memory_breakdown_bytes": dict(baseline["memory"]["breakdown"]),
        "loss": list(baseline["loss"]),
    }


Change = Callable[[dict[str, Any]], None]


def slower(factor: float) -> Change:
    def change(record: dict[str, Any]) -> None:
        for key in ("step_time_s", "step_time_calibrated"):
            record[key]["median"] *= factor
            record[key]["samples"] = [s * factor for s in record[key]["samples"]]

    return change


def every_push_cases() -> set[str]:
    """The ids of the CPU-tier matrix cases ``python -m pytest`` runs (those not marked nightly)."""
    from perfsuite.core import registry
    from perfsuite.core.models import get_model_spec

    return {
        f"{c.model}-{c.strategy}" + ("" if c.engine == "loop" else f"-{c.engine}")
        for c in registry.matrix_cases()
        if get_model_spec(c.model).tiny and "nightly" not in c.markers
    }


def replay(
    changes: Mapping[str, Change] | None = None,
    *,
    date: str = "2026-11-20T02:00:00+00:00",
    commit: str = "0" * 40,
    only: set[str] | None = None,
) -> dict[str, Any]:
    """A ``--perfsuite-json`` file of every committed CPU baseline with a time for this class,
    each gated against its own baseline after ``changes[case_id]`` is applied to its record
    (only the cases in ``only`` when given)."""
    changes = changes or {}
    settings = read_pyproject(ROOT / "pyproject.toml")
    cases = []
    versions: dict[str, Any] = {}
    for path in sorted((BASELINES / "cpu").glob("*.json")):
        if path.name.startswith("pytest-benchmark"):
            continue
        if only is not None and path.stem not in only:
            continue
        baseline = json.loads(path.read_text())
        time_class = next(iter(baseline["time"]))
        record = record_of(baseline, time_class)
        if baseline["case"] in changes:
            changes[baseline["case"]](record)
        versions = baseline["provenance"]["versions"]
        tolerance = resolve_tolerance(settings, hardware="cpu", case_id=baseline["case"], precision=record["precision"])
        checks = compare(
            baseline["case"],
            baseline,
            observe(CaseRecord.from_json(record, baseline["case"]), time_unit="calibrated"),
            tolerance,
            hardware="cpu",
        )
        failed = [c for c in checks if not c.ok]
        cases.append(
            {
                "case": baseline["case"],
                "status": "failed" if failed else "passed",
                "hardware": "cpu",
                "message": "\n".join(c.message for c in failed),
                "checks": [dataclasses.asdict(c) for c in checks],
                "diff": [],
                "records": [record],
                "time_attempts": [],
                "baseline": baseline_figures(baseline, time_class),
                "tolerance": dataclasses.asdict(tolerance),
            }
        )
    return {
        "schema_version": 1,
        "refresh": False,
        "env": {"date": date, "commit": commit, "python": "3.11.7", "versions": versions},
        "cases": cases,
    }
