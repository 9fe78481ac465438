"""Where a run's wall time went: the worker's start and each phase of its cases
(``phases_s`` in every record, :data:`perfsuite.core.spec.PHASES`), summed over the cases.

A tier's wall time is mostly not its timed steps: building the model, the profiling steps and
a fresh worker's start come first. This line says how much of each, so that whoever trims a
tier (or plans a GPU job's time limit) trims what is large.
"""

from __future__ import annotations

from collections.abc import Iterable

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import PHASES


def wall_time_line(records: Iterable[CaseRecord]) -> str | None:
    """One line: the ok cases' summed wall time, split into worker start, each phase and the
    rest (``None`` when no ok case has phases, e.g. records from before they were kept)."""
    ok = [r for r in records if r.ok and r.phases_s and r.wall_s is not None]
    if not ok:
        return None
    wall = sum(float(r.wall_s or 0.0) for r in ok)
    parts = {"worker start": sum(float(r.worker_startup_s or 0.0) for r in ok)}
    for name, label in PHASES.items():
        parts[label] = sum(float(r.phases_s.get(name, 0.0)) for r in ok)
    parts["other"] = max(0.0, wall - sum(parts.values()))
    shown = ", ".join(f"{label} {seconds:.1f} s ({seconds / wall:.0%})" for label, seconds in parts.items() if seconds)
    return f"where the time went, {len(ok)} ok run{'' if len(ok) == 1 else 's'}, {wall:.1f} s in workers: {shown}"
