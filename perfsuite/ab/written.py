"""``perfsuite ab``'s file: the comparison as JSON (:class:`~perfsuite.core.ab_file.AbFile` reads it
back), written to ``--json`` and, as pages, to ``--report``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfsuite.ab.options import AbOptions
from perfsuite.ab.rounds import CaseResult
from perfsuite.core.ab_file import KIND as AB_KIND
from perfsuite.core.ab_file import SCHEMA_VERSION as AB_SCHEMA_VERSION
from perfsuite.core.ab_file import VERDICTS
from perfsuite.core.changed_code import ChangedCode
from perfsuite.core.paired import Schedule
from perfsuite.core.provenance import now
from perfsuite.core.reach import strategies_using
from perfsuite.core.results import write_results
from perfsuite.core.spec import CaseSpec


def ab_payload(
    device_type: str,
    specs: Sequence[CaseSpec],
    schedule: Schedule,
    alpha: float,
    sides: dict[str, dict[str, Any]],
    results: Sequence[CaseResult],
    wall_s: float,
    changed: ChangedCode | None = None,
    loss_seeds: int = 0,
) -> dict[str, Any]:
    """``perfsuite ab --json``'s file (:class:`~perfsuite.core.ab_file.AbFile` reads it back)."""
    compared = {r.case for r in results if r.error is None}
    engines = list(dict.fromkeys(s.engine for s in specs if s.id in compared))
    return {
        "schema_version": AB_SCHEMA_VERSION,
        "kind": AB_KIND,
        "date": now(),
        "device_type": device_type,
        "engines": engines,
        "strategies_using": strategies_using(device_type, engines),  # the project's recipes too, for a re-render
        "wall_s": wall_s,
        "schedule": dataclasses.asdict(schedule),
        "alpha": alpha,
        "loss_seeds": loss_seeds,
        "sides": sides,
        "cases": [r.as_json() for r in results],
        "changed_code": changed.as_json() if changed is not None else None,
        "interrupted": sum(r.interrupted for r in results),
        "stopped": sum(r.stopped is not None for r in results),
        "verdicts": {v: sum(r.verdict == v for r in results) for v in VERDICTS},
    }


def write_ab(payload: dict[str, Any], options: AbOptions, say: Callable[[str], None]) -> None:
    """``payload`` as ``--json``'s file and ``--report``'s pages, each written said through ``say``."""
    from perfsuite.reports.ab import write_report

    def render(out: Path) -> list[Path]:
        try:
            return write_report(payload, out)
        except ImportError as exc:  # no matplotlib: the verdict and summary.md stand, the page is not written
            say(f"wrote {out / 'summary.md'}; no report.html: {exc}")
            return []

    write_results(payload, json_file=options.json, report_dir=options.report, render=render, say=say)
