"""The session's drift (:mod:`perfsuite.core.drift`): estimated per group from the CPU cases run
before any was gated, and what the summary and the results file say of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perfsuite.core.baselines import BaselineError, load_baseline
from perfsuite.core.drift import Drift, drift_group, estimate
from perfsuite.core.gates import time_change
from perfsuite.core.hardware import local_cpu_class
from perfsuite.core.observation import observe
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.core.tolerance import resolve_tolerance


class SessionDrift:
    """Drift groups of one session, each estimated once, over the cases measured first."""

    def __init__(
        self,
        settings: Mapping[str, Any],
        baseline_path: Callable[[str, str], Any],
        time_unit: Callable[[str], str],
    ) -> None:
        self.settings = settings
        self.baseline_path = baseline_path
        self.time_unit = time_unit
        self.measured: list[tuple[CaseSpec, CaseRecord]] = []
        """The cases run before any was gated, with their first record: the drift is their median change."""
        self.groups: dict[str, tuple[Drift | None, float]] = {}
        """drift group → (the session's drift, the time_drift_limit of the cases it was estimated over)."""

    def gates_any(self, specs: Sequence[CaseSpec]) -> bool:
        """Whether any of ``specs`` is gated against the drift on this machine (a ``time_drift_limit``
        above 0 in its tolerance for this CPU's time class): else none of them needs running first."""
        time_class = local_cpu_class()
        return any(
            resolve_tolerance(
                self.settings, hardware="cpu", case_id=spec.id, precision="fp32", time_class=time_class
            ).time_drift_limit
            > 0
            for spec in specs
        )

    def of(self, record: CaseRecord) -> Drift | None:
        """The session's drift for ``record``'s group (``None`` when no case was run first)."""
        group = drift_group(record)
        if group not in self.groups:
            self.groups[group] = self._estimate(group)
        return self.groups[group][0]

    def _estimate(self, group: str) -> tuple[Drift | None, float]:
        changes: list[float] = []
        limits: set[float] = set()
        for spec, record in self.measured:
            if not record.ok or drift_group(record) != group:
                continue
            hardware = str(record.hardware)
            try:
                tolerance = resolve_tolerance(
                    self.settings,
                    hardware=hardware,
                    case_id=spec.id,
                    precision=str(record.precision),
                    time_class=record.time_class,
                )
                baseline = load_baseline(self.baseline_path(hardware, spec.id), case_id=spec.id, hardware=hardware)
                observed = observe(record, time_unit=self.time_unit(str(record.device)))
                change = time_change(baseline, observed, tolerance)  # a busy reading is no evidence of drift
            except (BaselineError, ValueError):
                continue  # its own test says why
            if tolerance.time_drift_limit > 0 and change is not None:
                changes.append(change)
                limits.add(tolerance.time_drift_limit)
        return estimate(group, changes), max(limits, default=0.0)

    def lines(self) -> list[str]:
        """One line per group whose drift was estimated, for the summary."""
        return [
            f"step-time drift ({group}): {drift.describe(limit)}"
            for group, (drift, limit) in sorted(self.groups.items())
            if drift is not None
        ]

    def as_json(self) -> list[dict[str, Any]]:
        return [
            {"group": group, "change": d.change, "cases": d.cases, "limit": limit, "applied": d.applies(limit)}
            for group, (d, limit) in sorted(self.groups.items())
            if d is not None
        ]
