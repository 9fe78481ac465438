"""``pytest --perfsuite-explain``: a case that failed against its stored baseline, explained.

A baseline keeps figures, the versions they were recorded on and the commit, not a profile, an
inventory or gradients (:mod:`perfsuite.core.explain.reference`). The baseline's side is rebuilt
where it differs from this one: its versions as an overlay (``perfsuite ab``'s,
:mod:`perfsuite.ab.envs`), the project's code as the commit that holds the baseline's file written
out (``perfsuite ab --base-ref``'s, :mod:`perfsuite.ab.own`; this side then runs in a copy of the
working tree). Both run the case instrumented, A B A B, as ``perfsuite ab --explain`` does: the
failure gets the profile's diff, the tensors that differ and the gradients' ratios. Where neither
differs (the machine changed), or the code's commit is not known, there is no reference to run:
one instrumented run of this stack says what it can alone, with a line saying which. Explanation
runs go straight to a worker: a ``pytest_perfsuite_run_case`` hook that changes how a case runs is
not applied to them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfsuite.core.check import Check
from perfsuite.core.explain.explanation import PROFILED_STEPS
from perfsuite.core.explain.records import ExplainAsk, ExplainRecord
from perfsuite.core.explain.reference import alone_lines, aspects_failed, reference_pins
from perfsuite.core.gates import failed_categories
from perfsuite.core.provenance import files_differ, git, library_versions, said_files
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance


@dataclass(frozen=True)
class Failure:
    """A case's failure against its stored baseline, as gated."""

    spec: CaseSpec
    baseline: Mapping[str, Any]
    record: CaseRecord
    """The run gated (the last, where the time was retried)."""
    checks: Sequence[Check]
    tolerance: Tolerance
    path: Path | None = None
    """The baseline's file."""
    project: Path | None = None
    """The project's directory (its ``pyproject.toml``'s), whose code the case runs."""

    @property
    def what(self) -> tuple[str, ...]:
        """What to explain: each aspect whose check failed, and the loss where it was not compared
        (other initial weights: which tensors started otherwise is its cause)."""
        return aspects_failed([c.metric for c in self.checks if not c.ok or (c.metric == "loss" and not c.compared)])


def explain_failure(failure: Failure, *, timeout_s: float) -> list[str]:
    """The lines that explain ``failure``'s failing checks."""
    if not failure.what:
        return []
    pins = reference_pins((failure.baseline.get("provenance") or {}).get("versions") or {}, library_versions())
    ref, where = _reference(failure.baseline, failure.path, failure.project)
    changed = _code_changes(ref, failure.path, failure.project) if ref is not None else None
    if pins or changed:
        return _against_reference(failure, pins, ref if changed else None, where, timeout_s, changed or [])
    if changed == []:
        head = (
            f"explain: nothing the baseline records differs: this stack's versions, and this code ({where}, "
            f"{_short(ref)}); the change is the machine's, or something a baseline does not record; one "
            "instrumented run of this stack shows:"
        )
        return [head, *_alone(failure, timeout_s)]
    head = (
        "explain: the baseline was recorded on this stack's versions, and the code it ran is not known here, so "
        "there is no reference to run; one instrumented run of this stack shows:"
    )
    return [head, *_alone(failure, timeout_s), _hint(failure.spec, failure.baseline, failure.path, failure.project)]


def _short(ref: str | None) -> str:
    return ref[:12] if ref is not None else "REF"


def _top(directory: Path | None) -> Path | None:
    """The top of the git work tree around ``directory``; ``None`` outside one (or without git)."""
    found = git(directory, "rev-parse", "--show-toplevel") if directory is not None else None
    return Path(found) if found else None


def _project(path: Path | None, project: Path | None) -> Path | None:
    """The project's directory: as the session knows it, else where its baseline's file is."""
    return project if project is not None else path.parent if path is not None else None


def _code_changes(ref: str, path: Path | None, project: Path | None) -> list[str] | None:
    """The files of the project's repository that differ from ``ref``'s, the baselines aside: tracked ones
    changed, and ones git does not ignore added (:func:`perfsuite.core.provenance.files_differ`); ``None``
    where git cannot tell."""
    top = _top(_project(path, project))
    if top is None:
        return None
    names = files_differ(top, ref)
    if names is None:
        return None
    baselines = Path(os.path.relpath(path.parent.parent.resolve(), top.resolve())).as_posix() if path else None
    return [name for name in names if not (baselines and name.startswith(f"{baselines}/"))]


def _hint(spec: CaseSpec, baseline: Mapping[str, Any], path: Path | None, project: Path | None = None) -> str:
    """The ``perfsuite ab`` command that diffs the case against the code its baseline was recorded on."""
    ref, where = _reference(baseline, path, project)
    shape = f" --engine {spec.engine}" if spec.engine != "loop" else ""
    shape += f" --world-size {spec.world_size}" if spec.world_size > 1 else ""
    shape += f" --device {spec.device}" if spec.device != "auto" else ""
    return (
        f"explain: to diff this code against {where}: perfsuite ab --base-ref {_short(ref)} "
        f"--models {spec.model} --strategies {spec.strategy}{shape} --explain"
    )


def _reference(baseline: Mapping[str, Any], path: Path | None, project: Path | None) -> tuple[str | None, str]:
    """The commit whose code the baseline was recorded on (``None``: not known here), and how it was found.

    The commit recorded, where the repository has it and nothing else ran: no tracked file changed and
    no file git neither tracks nor ignores (the baselines aside). Else the commit that last changed the
    baseline's file, where the file is committed as it is in the project's repository: the change that
    recorded it was committed with (or after) the code it ran, which the commit recorded may lack
    (changes not committed, or files git did not track yet). In a shallow clone, a commit at the edge
    of its history is no answer (the file's change may be older). Else the commit recorded, where its
    tracked files were clean and nothing says files were untracked (a baseline from before perfsuite
    recorded them)."""
    provenance = baseline.get("provenance") or {}
    dirty = ", the baseline recorded on uncommitted changes" if provenance.get("dirty") else ""
    top = _top(_project(path, project))
    commit = provenance.get("commit")
    clean = isinstance(commit, str) and bool(commit) and provenance.get("dirty") is False
    known = clean and (top is None or git(top, "cat-file", "-e", f"{commit}^{{commit}}") is not None)
    if known and provenance.get("untracked") is False:
        return str(commit), "the commit its baseline was recorded at"
    shallow = False
    if path is not None and top is not None and _top(path.parent) == top:
        committed = git(path.parent, "log", "-1", "--format=%H", "--", path.name)
        shallow = bool(committed) and _at_the_edge(top, str(committed))
        if committed and not shallow and git(path.parent, "status", "--porcelain", "--", path.name) == "":
            untracked = ", new files not yet tracked" if provenance.get("untracked") else ""
            return committed, f"the commit that last changed its baseline file{dirty}{untracked}"
    if known and provenance.get("untracked") is None:
        return str(commit), "the commit its baseline was recorded at"
    if shallow:
        return None, "a commit where it passed (this clone's history is shallow: fetch it whole to find it)"
    if (dirty or provenance.get("untracked")) and top is not None:
        what = "uncommitted changes" if dirty else "files git did not track"
        now = "and its file as it is now is not committed"
        return None, f"a commit where it passed (the baseline was recorded on {what}, {now})"
    return None, "a commit where it passed"


def _at_the_edge(top: Path, commit: str) -> bool:
    """Whether ``commit`` is where a shallow clone's history is cut (``git log`` stops there)."""
    if git(top, "rev-parse", "--is-shallow-repository") != "true":
        return False
    listed = git(top, "rev-parse", "--git-path", "shallow")
    edge = Path(top, listed) if listed else None
    return edge is not None and edge.is_file() and commit in edge.read_text().split()


def _moved(failure: Failure) -> dict[str, int]:
    """Each breakdown category whose check failed, with its change in bytes."""
    then = (failure.baseline.get("memory") or {}).get("breakdown") or {}
    now = failure.record.memory_breakdown_bytes or {}
    failed = failed_categories(failure.checks)
    return {c: int(now.get(c, 0)) - int(then.get(c, 0)) for c in failed}


def _alone(failure: Failure, timeout_s: float) -> list[str]:
    from perfsuite.worker.explain import explain_case
    from perfsuite.worker.process import run_in_worker

    what = failure.what
    ask = ExplainAsk(profile_steps=PROFILED_STEPS if "time" in what else 0, inventory="memory" in what)
    target = functools.partial(explain_case, ask=ask.as_json())
    done = run_in_worker(failure.spec, timeout_s=timeout_s, target=target)  # an explanation's answer, not a record
    if done.get("status") != "ok":
        return [f"explain: the instrumented run failed: {done.get('error') or done.get('status')}"]
    try:
        found = ExplainRecord.from_json(done.get("explain"), "the instrumented run's record")
    except ValueError as exc:
        return [f"explain: {exc}"]
    tolerance = failure.tolerance
    return alone_lines(
        found,
        what,
        moved=_moved(failure),
        loss_then=list(failure.baseline.get("loss") or []),
        loss_now=list(failure.record.loss),
        weights_then=(failure.baseline.get("spec") or {}).get("initial_weights"),
        loss_tolerance=(tolerance.loss_rtol, tolerance.loss_atol),
    )


def _against_reference(
    failure: Failure, pins: Sequence[str], ref: str | None, where: str, timeout_s: float, files: Sequence[str] = ()
) -> list[str]:
    """The failure explained as ``perfsuite ab --explain`` would: the baseline's side as A (its versions
    an overlay, ``pins``; its code the commit ``ref``, which ``where`` says how was found, ``files`` what
    differs from it), this one as B."""
    from contextlib import nullcontext

    from perfsuite.ab.commits import GitError
    from perfsuite.ab.envs import EnvError, make_env
    from perfsuite.ab.explain import explain_case
    from perfsuite.ab.own import trees
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.ab.sides import Side
    from perfsuite.core.preloads import preload_environ

    rebuilt = ", ".join(pins)
    said = [f"code at {_short(ref)}"] if ref else []
    said += [f"stack rebuilt ({rebuilt})"] if pins else []
    baseline_side = f"the baseline's {' and '.join(said)}"
    start = _project(failure.path, failure.project)
    try:
        with trees([ref, None], "--perfsuite-explain", start=start) if ref else nullcontext(None) as code:
            sides: list[Side] = []
            try:  # the servers stop before their trees are removed
                for index, (name, env) in enumerate(((baseline_side, rebuilt or "current"), ("this side", "current"))):
                    made = make_env(env, name="base" if index == 0 else "candidate")
                    made = code[index].env(made) if code is not None else made
                    sides.append(Side(name, made, server_env=preload_environ([failure.spec])))  # not the session's
                memory = failure.baseline.get("memory") or {}
                result = CaseResult(
                    case=failure.spec.id,
                    checks=list(failure.checks),
                    loss_a=list(failure.baseline.get("loss") or []),
                    loss_b=list(failure.record.loss),
                    breakdown_a=dict(memory.get("breakdown") or {}),
                    breakdown_b=dict(failure.record.memory_breakdown_bytes or {}),
                )
                found = explain_case(
                    sides, failure.spec, result, failure.what, timeout_s=timeout_s, tolerance=failure.tolerance
                )
            finally:
                for side in sides:
                    side.close()
    except (EnvError, GitError) as exc:
        return [f"explain: {baseline_side} cannot be rebuilt here: {exc}"]
    whose = f" ({where})" if ref else ""
    differ = [f"explain: the code differs from it in {said_files(files)}"] if ref and files else []
    return [f"explain: against {baseline_side}{whose}, run beside this one:", *differ, *found.lines()]
