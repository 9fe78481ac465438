"""A refresh's staging: each case's new baseline built from its repeats, refused or staged, and every
staged file written at the end of the session (atomically), with the pinned pytest-benchmark files."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import (
    BaselineError,
    build_baseline,
    cannot_fit,
    load_baseline,
    repeat_deviations,
    time_spread,
    with_other_classes,
    write_json_atomic,
)
from perfsuite.core.gates import Outcome, busy
from perfsuite.core.observation import Observation
from perfsuite.core.pinned import is_pinned, merged, pinned_path, read_pinned
from perfsuite.core.provenance import run_facts
from perfsuite.core.record import CaseRecord
from perfsuite.core.refresh import diff_rows, refusals
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import Tolerance
from perfsuite.core.untimed import Untimed, kept, lifted, untimed_on
from perfsuite.session.scope import RefreshBudget


class RefreshStager:
    """New baselines held until the session ends, so that an interrupted refresh writes nothing."""

    def __init__(self, root: Path, repository: Path, repeats: int, *, gate_time: bool = True) -> None:
        self.root = root
        self.gate_time = gate_time
        """False under ``--perfsuite-time=off``: a noisy step time does not refuse the refresh."""
        self.repository = repository
        self.repeats = repeats
        self.staged: dict[Path, dict[str, Any]] = {}
        self.staged_benchmarks: dict[str, tuple[str, str]] = {}
        """pytest node id → (hardware, time class): the cases whose pinned pytest-benchmark entry a refresh replaces."""
        self.written: list[Path] = []
        self.unwritten: list[str] = []
        """Why a pinned file was left as it was (it could not be read): a line each; the session then fails."""
        self.untimed_kept: set[str] = set()
        """The cases whose time a refresh did not record (:meth:`untimed`): their pinned entries are not written."""

    def stage(
        self,
        spec: CaseSpec,
        runs: list[CaseRecord],
        observations: list[Observation],
        path: Path,
        hardware: str,
        outcome: Outcome,
        tolerance: Tolerance,
    ) -> str | None:
        """Stage ``spec``'s new baseline; the reasons it is refused, joined, or ``None`` when staged."""
        first = runs[0]
        time_class = observations[0].time_class
        new = build_baseline(
            case_id=spec.id,
            hardware=hardware,
            time_class=time_class,
            time_unit=observations[0].time_unit,
            calibration=observations[0].calibration,
            times=[o.time for o in observations],
            time_steps=[o.time_steps for o in observations],
            step_time_s=[o.step_time_s for o in observations],
            peaks=[o.peak_bytes for o in observations],
            breakdowns=[o.breakdown for o in observations],
            losses=[o.losses for o in observations],
            spec={
                "model": spec.model,
                "strategy": spec.strategy,
                "precision": first.precision,
                "steps": spec.steps,
                "warmup_steps": spec.warmup_steps,
                "batch_size": first.batch_size,
                "micro_batch_size": first.micro_batch_size,
                "seq_len": first.seq_len,
                "seed": spec.seed,
                "device": first.device,
                "threads": first.threads,
                "world_size": first.world_size or 1,
                "attention": observations[0].attention,
                "initial_weights": observations[0].initial_weights,
            },
            provenance=self._provenance(first, len(runs)),
        )
        try:
            old: dict[str, Any] | None = load_baseline(path, case_id=spec.id, hardware=hardware)
        except BaselineError:
            old = None
        outcome.diff = diff_rows(old, new, time_class, tolerance)
        noisy = self.untimed(old, time_class, tolerance)
        if noisy is not None:  # a pool found this class too noisy to gate: one refresh does not outweigh it
            metric, _, measured, _ = outcome.diff[0]  # the step time's row, then its spread's (diff_rows)
            outcome.diff[0] = (metric, "none kept", f"{measured}, not kept", f"too noisy here: {noisy.describe()}")
            outcome.diff.pop(1)
            self.untimed_kept.add(spec.id)
        elif old is not None and untimed_on(old, time_class) is not None:  # its gate now allows the pool's spread
            old = lifted(old, time_class)
        reasons = refusals(new, tolerance, time_class, gate_time=self.gate_time and noisy is None)
        waited = max((o.waited for o in observations if o.waited is not None), default=None, key=lambda w: w.moves)
        limit = tolerance.time_tolerance(new["time"][time_class]["spread"])
        if self.gate_time and noisy is None and (blind := busy(waited, limit)) is not None:
            reasons.append(f"{blind}: refresh it again when the machine is quiet")  # later runs are gated against it
        if reasons:
            outcome.status = "refused"
            return "; ".join(reasons)
        self.staged[path] = kept(with_other_classes(new, old), old)
        outcome.status = "refreshed"
        return None

    @staticmethod
    def untimed(old: dict[str, Any] | None, time_class: str, tolerance: Tolerance) -> Untimed | None:
        """Why ``old`` keeps no time for ``time_class`` where the case's gate still does not allow its
        pooled sessions' spread (``None``: a refresh records the class's time as usual)."""
        noisy = None if old is None else untimed_on(old, time_class)
        return noisy if noisy is not None and not tolerance.spread_fits(noisy.spread) else None

    def records_time(self, path: Path, case_id: str, hardware: str, time_class: str, tolerance: Tolerance) -> bool:
        """Whether a refresh of the case records its time on ``time_class`` (else it takes no more repeats)."""
        try:
            old: dict[str, Any] | None = load_baseline(path, case_id=case_id, hardware=hardware)
        except BaselineError:
            old = None
        return self.untimed(old, time_class, tolerance) is None

    def _provenance(self, record: CaseRecord, repeats: int) -> dict[str, Any]:
        facts = run_facts(self.repository, aside=self.root)
        return {
            "date": facts["date"],
            "commit": facts["commit"],
            "dirty": facts["dirty"],
            "untracked": facts["untracked"],
            "repeats": repeats,
            "host": facts["host"],
            "device": record.device_name,
            "python": facts["python"],
            "versions": facts["versions"],
        }

    def written_line(self) -> str:
        """``wrote 3 file(s) under baselines/: 2 baseline(s) and 1 pinned pytest-benchmark file(s), which ...``."""
        pinned = sum(is_pinned(path.name) for path in self.written)
        said = f"wrote {len(self.written)} file(s) under {self.root.name}/"
        if not pinned and self.written and not self.staged_benchmarks:  # -p no:benchmark, or check(spec) alone
            return f"{said}, and no pinned pytest-benchmark file: no case ran with pytest-benchmark's `benchmark`"
        if not pinned:
            return said
        return (
            f"{said}: {len(self.written) - pinned} baseline(s) and {pinned} pinned pytest-benchmark file(s), "
            "which `pytest --benchmark-compare` reads"
        )

    def write(self, benchmark_json: dict[str, Any] | None) -> None:
        """Write every staged baseline (each atomically), then merge the pinned pytest-benchmark files."""
        for path, payload in sorted(self.staged.items()):
            write_json_atomic(path, payload)
            self.written.append(path)
        if benchmark_json is None or not self.staged_benchmarks:
            return
        by_class: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for bench in benchmark_json["benchmarks"]:
            key = self.staged_benchmarks.get(bench["fullname"])
            if key is not None and bench.get("param") not in self.untimed_kept:
                by_class.setdefault(key, []).append(bench)
        for (hardware, time_class), fresh in by_class.items():
            path = pinned_path(self.root, hardware, time_class)
            try:
                pinned = read_pinned(path)
            except BaselineError as exc:  # the baselines stand: what was measured is kept
                self.unwritten.append(f"{exc}: not updated (the baselines were written)")
                continue
            write_json_atomic(path, merged(pinned, benchmark_json, fresh))
            self.written.append(path)


def repeat_while_too_wide(
    observations: list[Observation],
    tolerance: Tolerance,
    repeat: Callable[[int], Observation | None],
    budget: RefreshBudget | None,
    started: float,
) -> None:
    """A refresh's further repeats of a case while its step times spread so wide that its gate would be
    wider than the tolerance's ceiling (:meth:`Tolerance.spread_fits`): ``repeat(n)`` makes the ``n``-th
    run, up to ``refresh_max_repeats``, while a time limit leaves room for two more, and while more
    repeats could still fit (:func:`~perfsuite.core.baselines.cannot_fit`); each new observation is
    appended to ``observations``."""
    while len(observations) < tolerance.refresh_max_repeats:
        times, steps = [o.time for o in observations], [o.time_steps for o in observations]
        if tolerance.spread_fits(time_spread(times, steps)) or cannot_fit(
            repeat_deviations(times, steps), tolerance.widest_spread, tolerance.refresh_max_repeats
        ):
            return
        per_run = (time.monotonic() - started) / len(observations)
        if budget is not None and not budget.has(2 * per_run):
            return
        observed = repeat(len(observations) + 1)
        if observed is None:
            return
        observations.append(observed)
