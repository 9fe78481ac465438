"""Cases the candidate's code declares and the base's does not (a pull request that adds a model, recipe
or engine; or a newer perfsuite's): each side asked before anything runs which of the cases it lacks
(:meth:`perfsuite.ab.sides.Side.undeclared`), and each such case, *new*, run once on the candidate for
its figures, with nothing to compare them with."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from perfsuite.ab.envs import EnvError
from perfsuite.ab.pairs import failure, step_times
from perfsuite.ab.rounds import CaseResult, spec_fields
from perfsuite.ab.sides import Side
from perfsuite.core.observation import observe
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec


def added_cases(specs: Sequence[CaseSpec], sides: tuple[Side, Side]) -> dict[str, str]:
    """Per case the candidate's code declares and the base's does not (comparing the project's own code,
    or two perfsuites: a pull request that adds a model, recipe or engine), the name the base lacks."""
    fields = [spec_fields(spec, profile=False) for spec in specs]
    base, candidate = (side.undeclared(fields) for side in sides)
    return {spec.id: name for spec, name, other in zip(specs, base, candidate, strict=True) if name and not other}


def run_added(
    specs: Sequence[CaseSpec],
    new: Mapping[str, str],
    side: Side,
    *,
    timeout_s: float,
    stopped: str | None = None,
    told: Callable[[CaseResult], None] = lambda result: None,
) -> list[CaseResult]:
    """Each case only the candidate (``side``) declares (``new``: per case, what the base does not), run
    once on it, its first pair's run (profiled), for its step time, memory and loss; nothing to compare
    them with; ``told`` hears of each. A run that fails (an exception, a timeout, a killed worker) is
    *regressed*, saying how: only the candidate's code runs the case, so the failure is its own; one
    whose server stopped answering is *cannot test* and ``stopped`` (the rest are not run, and the
    comparison exits as for any side that stopped answering); one the suite would skip, *skipped*. Once the
    comparison was stopped (``stopped``: ``interrupted``, by Ctrl-C or SIGTERM, here too; or why a side
    stopped answering), the rest are not run, said so."""
    results = []
    for spec in (spec for spec in specs if spec.id in new):
        result = CaseResult(case=spec.id, new=new[spec.id])
        results.append(result)
        try:
            if stopped is None:
                _run_alone(result, spec, side, timeout_s)
                stopped = result.stopped  # its server died: the rest are not run, and the comparison says so
            elif stopped == "interrupted":
                result.error, result.interrupted = "interrupted before its run", True
            else:
                result.error, result.stopped = f"not run: {stopped}", stopped
            told(result)
        except KeyboardInterrupt:  # heard once: the rest are not run
            stopped = "interrupted"
            if result.error is None and not result.steps_b:
                result.error, result.interrupted = "interrupted before its run", True
    return results


def _run_alone(result: CaseResult, spec: CaseSpec, side: Side, timeout_s: float) -> None:
    try:
        record: CaseRecord | None = side.run(spec_fields(spec, profile=True), timeout_s)
        error = None
    except EnvError as exc:  # its server died: this side's error, not a traceback; a side that stopped answering
        record, error = None, str(exc)
        result.stopped = failure(side, None, error)
    if record is None or not record.ok:
        result.skipped = record is not None and record.status == "skipped"
        result.error = (record.error if result.skipped and record else None) or failure(side, record, error)
        result.candidate_failed = record is not None and not result.skipped  # its own run, not its server
        return
    seen = observe(record, time_unit="s")
    result.memory_b, result.breakdown_b, result.loss_b = seen.peak_bytes, dict(seen.breakdown), list(seen.losses)
    result.steps_b = [step_times(record)]  # its reach is not counted: what differs ran on one side only
