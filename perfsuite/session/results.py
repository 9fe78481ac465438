"""What ``pytest --perfsuite-json`` writes: the session's env and drift, every matrix case's status,
checks and run records (read back by :mod:`perfsuite.core.results`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.gates import Outcome
from perfsuite.core.provenance import run_facts
from perfsuite.core.results_file import PYTEST_RESULTS_SCHEMA_VERSION


def results_json(
    *,
    repository: Path,
    baselines: Path | None = None,
    refresh: bool,
    drift: list[dict[str, Any]],
    outcomes: Sequence[Outcome],
) -> dict[str, Any]:
    """The results file of a session: its cases' ``outcomes``, the ``drift`` groups it gated against; its
    repository's facts with the ``baselines`` directory aside (a refresh's own writes are no code)."""
    return {
        "schema_version": PYTEST_RESULTS_SCHEMA_VERSION,
        "refresh": refresh,
        "env": run_facts(repository, aside=baselines),
        "drift": drift,
        "cases": [
            {
                "case": o.case,
                "status": o.status,
                "hardware": o.hardware,
                "message": o.message,
                "checks": [dataclasses.asdict(c) for c in o.checks],
                "diff": [dict(zip(("metric", "old", "new", "change"), row, strict=True)) for row in o.diff],
                "records": [r.to_json() for r in o.records],
                "time_attempts": o.time_attempts,
                "baseline": o.baseline,
                "tolerance": o.tolerance,
            }
            for o in outcomes
        ],
    }


def write_without_cases(config: Any, state: Any) -> str | None:
    """``--perfsuite-json`` of a session in which no matrix case ran (unit tests, a ``-k`` matching
    none): a file that says so rather than none, which a script reads next (never an earlier
    session's left in place); what to say (``None``: not asked, a refresh, or an xdist worker).
    Under xdist the controller writes it only where no worker did (one that ran cases writes its own)."""
    from perfsuite.core.baselines import write_json_atomic
    from perfsuite.session.parallel import CONTROLLER, is_worker

    path = config.getoption("perfsuite_json")
    controller = config.pluginmanager.get_plugin(CONTROLLER)
    if path is None or state.refresh or is_worker(config) or getattr(controller, "results_written", False):
        return None
    write_json_atomic(path, state.results_json())
    return f"perfsuite: no matrix case ran in this session: {path} lists none"
