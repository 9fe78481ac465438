"""``perfsuite ab``'s explanations: after the verdicts, each case whose verdict calls for one (or
every case with ``--explain``) is run again on each side, instrumented (:mod:`perfsuite.worker.explain`,
through each side's server), A B A B, and the runs' records diffed into its cause
(:mod:`perfsuite.core.explain`). Nothing runs for a case with nothing to explain."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from perfsuite.ab.envs import EnvError
from perfsuite.ab.rounds import CaseResult, spec_fields
from perfsuite.core.explain.explanation import Explanation, asks, aspects, explain
from perfsuite.core.explain.gradients import first_apart
from perfsuite.core.explain.records import ExplainRecord
from perfsuite.core.explain.reference import aspects_failed
from perfsuite.core.gates import failed_categories
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance


class Explaining(Protocol):
    """A side as an explanation sees it (:class:`perfsuite.ab.sides.Side`)."""

    name: str

    def explain(self, spec: dict[str, Any], ask: dict[str, Any], timeout_s: float) -> dict[str, Any]: ...


def traces_dir(report: str | None, json_file: str | None) -> Path | None:
    """Where the profiles' Chrome traces are kept: ``traces/`` in ``--report``'s directory, else beside
    ``--json``'s file (``ab.json`` → ``ab-traces/``); ``None``: not kept."""
    if report:
        return Path(report) / "traces"
    if json_file:
        path = Path(json_file)
        return path.with_name(f"{path.stem}-traces")
    return None


def wanted(result: CaseResult, choice: str) -> tuple[str, ...]:
    """What to explain of ``result`` (:func:`perfsuite.core.explain.explanation.aspects`)."""
    if result.error is not None or result.interrupted or result.new is not None:  # new: no base to explain against
        return ()
    failed = aspects_failed([c.metric for c in result.checks if not c.ok])
    return aspects(
        choice,
        time_verdict=result.time.verdict if result.time is not None else None,
        memory_moved="memory" in failed,
        loss_parted="loss" in failed,
        step_ops="time" in failed,
    )


def explain_case(
    sides: Sequence[Explaining],
    spec: CaseSpec,
    result: CaseResult,
    what: Sequence[str],
    *,
    timeout_s: float,
    traces: Path | None = None,
    tolerance: Tolerance | None = None,
) -> Explanation:
    """``result``'s cause: its explanation runs, one side after the other, diffed."""
    tol = tolerance or Tolerance()
    started = time.monotonic()
    loss_step = first_apart(result.loss_a, result.loss_b, rtol=tol.loss_rtol, atol=tol.loss_atol)
    files: tuple[str | None, str | None] = (None, None)
    if traces is not None:
        traces.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^\w.+-]", "_", result.case)
        files = (str(traces / f"{stem}-base.pt.trace.json.gz"), str(traces / f"{stem}-candidate.pt.trace.json.gz"))
    fields = spec_fields(spec, profile=False)
    runs: list[tuple[int, ExplainRecord]] = []
    errors: list[str] = []
    for side, ask in asks(what, loss_step=loss_step, traces=files):
        try:
            record = sides[side].explain(fields, ask.as_json(), timeout_s)
        except EnvError as exc:
            errors.append(str(exc))
            break
        if record.get("status") != "ok":
            errors.append(f"{sides[side].name}: {record.get('error') or record.get('status')}")
            break
        try:
            runs.append((side, ExplainRecord.from_json(record.get("explain"), f"{sides[side].name}'s explanation run")))
        except ValueError as exc:  # a side's answer (its own perfsuite wrote it) that does not read
            errors.append(str(exc))
            break
    return explain(
        result.case,
        what,
        runs,
        loss=(result.loss_a, result.loss_b),
        breakdowns=(result.breakdown_a, result.breakdown_b),
        moved=failed_categories(result.checks),
        loss_tolerance=(tol.loss_rtol, tol.loss_atol),
        errors=errors,
        wall_s=time.monotonic() - started,
    )


def explain_results(
    sides: Sequence[Explaining],
    specs: Sequence[CaseSpec],
    results: Sequence[CaseResult],
    *,
    choice: str,
    timeout_s: float,
    traces: Path | None,
    say: Callable[[str], None],
) -> int:
    """Each result's explanation, where it calls for one, set on it and said; how many were explained.
    Ctrl-C or SIGTERM stops the explanations (the verdicts stand)."""
    by_id = {spec.id: spec for spec in specs}
    done = 0
    try:
        for result in results:
            what = wanted(result, choice)
            if not what:
                continue
            say(f"  {result.case}: explaining its {', '.join(what)} (instrumented runs, A B A B)")
            explained = explain_case(sides, by_id[result.case], result, what, timeout_s=timeout_s, traces=traces)
            result.explanation = explained
            done += 1
            for line in explained.lines():
                say(f"    {line}")
            say(f"    (explained in {explained.wall_s:.0f} s)")
    except KeyboardInterrupt:  # anywhere in the loop: the command says the verdicts stand and writes them
        say("perfsuite ab: interrupted while explaining; the rest unexplained")
    return done
