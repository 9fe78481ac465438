"""What a run's record says, in the terms a baseline stores: its step time (calibrated or in seconds),
its peak memory and breakdown, its losses. Pure: no torch, no pytest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from perfsuite.core.record import CaseRecord


@dataclass(frozen=True)
class Waiting:
    """How much a run's timed steps were kept from the CPU (:class:`perfsuite.worker.cpu_threads.Contention`)."""

    share: float
    ranks: bool = False
    """False: of the time its steps (or, apart, its calibration workload) were runnable, the larger
    share they waited for a CPU. True, a multi-rank case's (its ranks wait for each other's cores by
    design): the share of the cores' time other processes took while its steps were timed."""

    RANKS_MOVED = 2.0
    """How far, for each point of the cores' share other processes take, a multi-rank case's steps move:
    every rank waits for the one kept from its core. Beside bursts of load on a 2-core EPYC, 24% and 29%
    of the cores moved the CPU tier's ranks +15% and +51% (docs/baselines.md)."""

    @property
    def moves(self) -> float:
        """How far such a wait can move a step's time, as measured: its share, or a multi-rank case's
        :data:`RANKS_MOVED` times its share."""
        return self.share * (self.RANKS_MOVED if self.ranks else 1.0)

    def describe(self, limit: float) -> str:
        """Why it exceeds a gate of ±``limit``, said."""
        if self.ranks:
            return (
                f"other processes took {self.share:.0%} of the cores' time while its ranks were timed, and such a "
                f"load can move their steps by up to {self.moves:.0%} ({self.RANKS_MOVED:g} times as much), more "
                f"than its tolerance ±{limit:.1%}"
            )
        return (
            f"its steps or calibration waited for a CPU {self.share:.0%} of the time they were runnable, more "
            f"than its tolerance ±{limit:.1%}, and such waiting moves a step's time by as much"
        )


@dataclass(frozen=True, kw_only=True)
class Observation:
    """What one run of a case measured, in the units its baseline stores."""

    time: float
    """Step time: seconds, or calibrated (÷ the calibration workload's time around each step)."""
    time_unit: str
    time_class: str
    """Whose recorded times this one may be compared with (:mod:`perfsuite.core.hardware`)."""
    calibration: str | None
    """The calibration workload's name, for ``calibrated`` times."""
    time_steps: Sequence[float]
    """The same per timed step, compared step by step with the baseline's."""
    step_time_s: float
    """The absolute median, for the reader."""
    peak_bytes: int
    breakdown: Mapping[str, int]
    losses: Sequence[float]
    attention: str | None = None
    """The attention implementation that ran (``None`` for records that predate it)."""
    initial_weights: str | None = None
    """The digest of the weights the run started from (``None`` for records that predate it)."""
    waited: Waiting | None = None
    """How much its timed steps were kept from the CPU; ``None`` where not read: a record that predates
    it, or a GPU's (whose time is its kernels')."""


def _peak(record: CaseRecord) -> int:
    if record.peak_memory_bytes is None:
        raise ValueError(
            f"{record.case_id}: no peak memory was measured ({record.memory_breakdown_error or 'no breakdown'})"
        )
    return int(record.peak_memory_bytes)


def observe(record: CaseRecord, *, time_unit: str) -> Observation:
    """An :class:`Observation` from a run record, its time in ``time_unit``."""
    timed = record.timed()
    median = float(timed.median)
    calibration = record.calibration.workload if record.calibration is not None else None
    if time_unit == "calibrated":
        calibrated = record.step_time_calibrated
        if not calibrated:
            raise ValueError(
                f"{record.case_id}: no calibrated step time (a CPU run that did not calibrate); "
                "pytest's --perfsuite-time=absolute gates seconds instead"
            )
        time = float(calibrated.median)
        steps = [float(v) for v in calibrated.samples]
    else:
        time = median
        steps = [float(v) for v in timed.samples]
    return Observation(
        time=time,
        time_unit=time_unit,
        time_class=str(record.time_class),
        calibration=calibration if time_unit == "calibrated" else None,
        time_steps=steps,
        step_time_s=median,
        peak_bytes=_peak(record),
        breakdown=dict(record.memory_breakdown_bytes or {}),
        losses=list(record.loss),
        attention=record.applied.get("attention_implementation"),
        initial_weights=record.initial_weights,
        waited=waited(record),
    )


def waited(record: CaseRecord) -> Waiting | None:
    """:attr:`Observation.waited` of ``record``."""
    shares = (record.timed_threads or {}).get("contention") if record.device == "cpu" else None
    if not isinstance(shares, Mapping):
        return None
    ranks = (record.world_size or 1) > 1
    keys = ("others",) if ranks else ("steps", "calibration")
    found = [float(v) for k in keys if isinstance(v := shares.get(k), (int, float)) and not isinstance(v, bool)]
    return Waiting(max(found), ranks=ranks) if found else None
