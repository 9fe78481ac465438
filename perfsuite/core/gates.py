"""Gating one case against its baseline: the three checks. Pure: no torch, no pytest.

Tolerances come from :mod:`perfsuite.core.tolerance`; what a refresh refuses and shows,
from :mod:`perfsuite.core.refresh`.

- Step time: two-sided. A run slower than the tolerance is a regression; one faster is
  a failure too ("refresh the baseline"), so improvements are recorded instead of
  leaving slack that a later regression could hide in. Tolerance = max(floor, k × the
  spread recorded with the baseline), at most the ceiling: the smallest change the gate
  catches, which every summary shows per case. Compared
  only against the figure recorded for the same time class (CPU family and ISA, or
  GPU model); without one the time is *not compared*, said so, and not a failure
  unless asked.
- Memory: peak and every breakdown category, two-sided and tight: for one stack the
  allocations are deterministic.
- Kernels: a run whose attention implementation differs from the baseline's (T5 on
  transformers 4.x has no SDPA path and runs eager) is not compared at all: one
  failing check says so, since every figure would differ for that reason alone.
- Loss: one value per optimizer step, compared step by step with a tolerance chosen by
  the precision; a NaN never passes; a failure names the first step that diverged. A curve
  that diverged from a run that started from other weights than the baseline's (their
  digests differ: a new random generator, another ``_init_weights``) is *not compared*,
  said so, and not a failure unless asked (:mod:`perfsuite.core.loss`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.baselines import refresh_command
from perfsuite.core.check import BUSY, NOT_GATED, RECORDABLE, UNTIMED, Check
from perfsuite.core.drift import Drift
from perfsuite.core.kernels import check_kernels
from perfsuite.core.loss import check_loss
from perfsuite.core.observation import Observation, Waiting
from perfsuite.core.record import CaseRecord
from perfsuite.core.stats import paired_change
from perfsuite.core.tolerance import Tolerance
from perfsuite.core.units import format_byte_change, format_bytes, format_time
from perfsuite.core.untimed import untimed_on


@dataclasses.dataclass
class Outcome:
    """One matrix case's result, for the summary table and ``--perfsuite-json``."""

    case: str
    status: str
    """``passed``, ``failed``, ``skipped``, ``missing``, ``refreshed``, ``refused`` or ``not reached``
    (a refresh's time limit came first, or the session was interrupted)."""
    hardware: str | None = None
    checks: list[Check] = dataclasses.field(default_factory=list)
    diff: list[tuple[str, str, str, str]] = dataclasses.field(default_factory=list)
    message: str = ""
    records: list[CaseRecord] = dataclasses.field(default_factory=list)
    """The run records (one per repeat, then one per time retry)."""
    time_attempts: list[str] = dataclasses.field(default_factory=list)
    """The step-time change of each run when the time was retried (empty when it was not)."""
    baseline: dict[str, Any] | None = None
    """What the case was compared with (:func:`baseline_figures`), for reports and history."""
    tolerance: dict[str, Any] | None = None
    """The case's resolved :class:`Tolerance`, as a dict."""


def baseline_figures(baseline: Mapping[str, Any], time_class: str) -> dict[str, Any]:
    """The figures of a stored baseline that one comparison used: this time class's step time
    (``None`` when it has none), memory, the loss curve, and when and on what it was recorded."""
    provenance = baseline.get("provenance") or {}
    return {
        "recorded": provenance.get("date"),
        "commit": provenance.get("commit"),
        "versions": provenance.get("versions"),
        "time_class": time_class,
        "time": baseline["time"].get(time_class),
        "memory": baseline["memory"],
        "loss": list(baseline["loss"]),
    }


def only_time_failed(checks: Sequence[Check]) -> bool:
    """True when the step time is the only failing check: what a time retry can settle."""
    failing = [c for c in checks if not c.ok]
    return bool(failing) and all(c.metric == "step time" and c.compared for c in failing)


def category_change(name: str, before: float, after: float) -> str:
    """A breakdown category's change in a few words: ``buffers +12.5%``; a category of a few bytes
    (under the memory gate's absolute tolerance), against which a percentage says nothing, in its bytes:
    ``buffers +0.25 MiB``, ``buffers +4.0 KiB``."""
    label = name.replace("_", " ")
    if abs(before) < Tolerance().memory_atol_bytes:
        return f"{label} {format_byte_change(after - before)}"
    return f"{label} {(after - before) / before:+.1%}"


def rel_change(measured: float, baseline: float) -> float:
    if baseline == 0:
        return 0.0 if measured == 0 else math.inf
    return (measured - baseline) / baseline


def _not_compared(
    case_id: str, baseline: Mapping[str, Any], observed: Observation, hardware: str, *, fail: bool
) -> Check:
    recorded = ", ".join(baseline["time"]) or "none"
    message = (
        f"{case_id}: step time not compared: the baseline has step times for {recorded}, this machine is "
        f"{observed.time_class}, and times only compare within one class (memory and loss were gated); "
        f"record this class's with {refresh_command(case_id, hardware=hardware)}"
    )
    return Check(
        "step time",
        not fail,
        f"({recorded})",
        format_time(observed.time, observed.time_unit),
        "not compared",
        "—",
        message,
        compared=False,
    )


def _comparable_time(baseline: Mapping[str, Any], observed: Observation) -> Mapping[str, Any] | None:
    """The baseline's step time for ``observed``'s class, when it is in the same unit and calibration."""
    base_time = baseline["time"].get(observed.time_class)
    if base_time is None or base_time["unit"] != observed.time_unit:
        return None
    return base_time if base_time.get("calibration") == observed.calibration else None


def _raw_change(base_time: Mapping[str, Any], observed: Observation) -> tuple[float, int]:
    """The relative change and how many steps it was paired over (0: the medians)."""
    base_steps = base_time.get("steps") or []
    if len(base_steps) == len(observed.time_steps) > 0:
        # Step by step where both have them (the same batch each time); else the medians.
        return paired_change(observed.time_steps, base_steps), len(base_steps)
    return rel_change(observed.time, float(base_time["median"])), 0


def time_change(baseline: Mapping[str, Any], observed: Observation, tol: Tolerance | None = None) -> float | None:
    """The raw step-time change of ``observed`` against ``baseline`` (``None`` when they do not compare,
    or, given the case's ``tol``, where it was read on a busy machine): what a session's drift is the
    median of."""
    base_time = _comparable_time(baseline, observed)
    if base_time is None or (tol is not None and busy(observed.waited, tol.time_tolerance(base_time.get("spread")))):
        return None
    return _raw_change(base_time, observed)[0]


def check_time(
    case_id: str,
    baseline: Mapping[str, Any],
    observed: Observation,
    tol: Tolerance,
    hardware: str,
    *,
    fail_uncompared: bool = False,
    drift: Drift | None = None,
    gated: bool = True,
) -> Check:
    """The step-time gate against the figure recorded for ``observed``'s time class.

    With ``gated`` false (``--perfsuite-time=off``: two stacks' memory and loss compared,
    their times not) the check passes as *not gated*. Without a figure for the class, the
    check passes as *not compared* (``fail_uncompared`` makes it a
    failure, for a dedicated runner whose class must have baselines). With the session's
    ``drift`` and a tolerance whose ``time_drift_limit`` it is within, the change is
    judged against the drift (:mod:`perfsuite.core.drift`).
    """
    if not gated:
        return Check(
            "step time",
            True,
            "—",
            format_time(observed.time, observed.time_unit),
            NOT_GATED,
            "—",
            f"{case_id}: step time not gated (--perfsuite-time=off; memory and loss were gated)",
            compared=False,
        )
    base_time = baseline["time"].get(observed.time_class)
    if base_time is None and (withdrawn := untimed_on(baseline, observed.time_class)) is not None:
        why = withdrawn.why_ungated(tol.widest_spread, tol.spread_fits(withdrawn.spread), refresh_command(case_id))
        return Check(
            "step time",
            True,
            f"(none: sessions spread {withdrawn.spread:.1%})",
            format_time(observed.time, observed.time_unit),
            RECORDABLE if tol.spread_fits(withdrawn.spread) else UNTIMED,
            "—",
            f"{case_id}: step time not gated on {observed.time_class}: {why}; memory and loss were gated",
            compared=False,
        )
    if base_time is None:
        return _not_compared(case_id, baseline, observed, hardware, fail=fail_uncompared)
    if _comparable_time(baseline, observed) is None:
        return Check(
            "step time",
            False,
            base_time["unit"],
            observed.time_unit,
            "—",
            "—",
            f"{case_id}: step time: the baseline stores a {base_time['unit']!r} time "
            f"(calibration {base_time.get('calibration')}) but this run measured {observed.time_unit!r} "
            f"(calibration {observed.calibration}; see --perfsuite-time); "
            f"refresh with {refresh_command(case_id, hardware=hardware)}",
        )
    base, now = float(base_time["median"]), observed.time
    raw, paired = _raw_change(base_time, observed)
    applied = drift is not None and drift.applies(tol.time_drift_limit)
    rel = drift.gated(raw, tol.time_drift_limit) if drift is not None else raw
    spread = base_time.get("spread")
    limit = tol.time_tolerance(spread)
    if (blind := busy(observed.waited, limit)) is not None:
        return Check(
            "step time",
            True,
            format_time(base, observed.time_unit),
            format_time(now, observed.time_unit),
            BUSY,
            f"±{limit:.1%}",
            f"{case_id}: step time not gated ({raw:+.1%} read): {blind}: run it again when the machine is quiet, "
            "or compare side by side with `perfsuite ab`; memory and loss were gated",
            compared=False,
        )
    ok = abs(rel) <= limit
    how = f"±{limit:.1%} = max(floor {tol.time_floor:.1%}, {tol.time_k:g} × spread " + (
        f"{spread:.1%})" if spread is not None else "n/a)"
    )
    how += f", at most the ceiling {tol.ceiling:.0%}"
    if tol.wanted_tolerance(spread) > limit:
        how += f" (the baseline's spread asks for ±{tol.wanted_tolerance(spread):.1%}: re-record it where it fits)"
    message = ""
    if not ok:
        verdict = (
            "slower than the baseline: a regression"
            if rel > 0
            else "faster than the baseline: if the speed-up is expected, record it with "
            f"{refresh_command(case_id, hardware=hardware)}"
        )
        against = ""
        if drift is not None and tol.time_drift_limit > 0:
            against = f"; {rel:+.1%} against the session's drift" if applied else ""
            against += f" ({drift.describe(tol.time_drift_limit)})"
        message = (
            f"{case_id}: step time {format_time(now, observed.time_unit)} vs baseline "
            f"{format_time(base, observed.time_unit)} ({raw:+.1%}"
            + (f" step by step over {paired} steps" if paired else "")
            + f"{against}), tolerance {how}: {verdict}"
        )
    return Check(
        "step time",
        ok,
        format_time(base, observed.time_unit),
        format_time(now, observed.time_unit),
        f"{rel:+.1%}" + (f" (raw {raw:+.1%})" if f"{raw:+.1%}" != f"{rel:+.1%}" else ""),
        f"±{limit:.1%}",
        message,
        rel=rel,
        limit=limit,
        raw_rel=raw,
        drift=drift.change if drift is not None and applied else None,
    )


def busy(waited: Waiting | None, limit: float) -> str | None:
    """Why a step time that ``waited`` (:attr:`~perfsuite.core.observation.Observation.waited`) says nothing
    at ``limit``: where what it can move a step's time by (:attr:`~perfsuite.core.observation.Waiting.moves`)
    exceeds the limit itself (docs/baselines.md has the measurements). ``None`` where it is within."""
    if waited is None or waited.moves <= limit:
        return None
    return f"the machine was busy: {waited.describe(limit)}"


PEAK_MEMORY = "peak memory"
"""The metric of a case's peak memory check."""
BREAKDOWN_PREFIX = "memory: "
"""The metric of each breakdown category's check, before the category: ``memory: activations``."""


def failed_categories(checks: Sequence[Check]) -> list[str]:
    """The breakdown's categories whose check failed (the peak alone: none named)."""
    return [
        c.metric.removeprefix(BREAKDOWN_PREFIX) for c in checks if not c.ok and c.metric.startswith(BREAKDOWN_PREFIX)
    ]


MOMENT_CATEGORIES = frozenset({"gradients", "activations", "temporaries"})
"""The breakdown's categories whose size depends on the moment of the step the peak falls at (the
others, parameters, buffers, optimizer state and other, hold through a step)."""


def moved_with_the_peak(metric: str, checks: Sequence[Check], rel: float) -> bool:
    """Whether ``metric``, a change ``rel`` (infinite from 0), is a category of :data:`MOMENT_CATEGORIES`
    that moved against the peak memory where the peak fell or rose past its tolerance (the peak's check
    among ``checks``): the breakdown is taken at the moment of the peak, so such a category that grew
    where the peak fell (or shrank where it rose) is that moment moving, not more (or less) memory."""
    moment = metric.startswith(BREAKDOWN_PREFIX) and metric.removeprefix(BREAKDOWN_PREFIX) in MOMENT_CATEGORIES
    peak = next((c.rel for c in checks if c.metric == PEAK_MEMORY and not c.ok and c.rel is not None), None)
    return moment and peak is not None and rel != 0 and (rel > 0) != (peak > 0)


def is_regression(check: Check, checks: Sequence[Check]) -> bool:
    """Whether a failing ``check`` (one of ``checks``, a case's) is a regression: another loss (but not one
    from other initial weights lower than the base's at its other seeds), or a figure that grew (more
    memory, a slower step), but not a category that moved with the peak's moment (:attr:`Check.moment`)."""
    if check.ok:
        return False
    if check.metric == "loss":  # another curve; from other weights, one lower than the base's seeds' is not
        return not (check.seeds and check.rel is not None and check.rel < 0)
    if check.moment:
        return False
    return check.rel is None or check.rel > 0


def check_memory(case_id: str, baseline: Mapping[str, Any], observed: Observation, tol: Tolerance) -> list[Check]:
    memory = baseline["memory"]
    pairs: list[tuple[str, float | None, float | None]] = [(PEAK_MEMORY, memory["peak_bytes"], observed.peak_bytes)]
    categories = sorted(set(memory["breakdown"]) | set(observed.breakdown))
    pairs += [(f"{BREAKDOWN_PREFIX}{c}", memory["breakdown"].get(c), observed.breakdown.get(c)) for c in categories]
    checks: list[Check] = []
    for metric, base, now in pairs:
        if base is None or now is None:
            missing = "the baseline" if base is None else "this run"
            checks.append(
                Check(
                    metric,
                    False,
                    "—" if base is None else format_bytes(base),
                    "—" if now is None else format_bytes(now),
                    "—",
                    "—",
                    f"{case_id}: {metric}: {missing} has no such category; the breakdown changed shape",
                )
            )
            continue
        limit = tol.memory_limit(base)
        ok = abs(now - base) <= limit
        rel = rel_change(now, base)
        message, moment = "", not ok and moved_with_the_peak(metric, checks, rel)
        if not ok:
            if moment:
                more, way = ("more", "fell") if now > base else ("less", "rose")
                verdict = f"{more} than the baseline at the peak, which {way}: its moment moved; refresh it if expected"
            elif now < base:
                verdict = "less than the baseline: refresh it if expected"
            else:
                verdict = "more than the baseline: a regression"
            # Against a category of a few bytes a percentage says nothing: its bytes do.
            change = f"{rel:+.2%}, " if abs(base) >= tol.memory_atol_bytes else ""
            message = (
                f"{case_id}: {metric} {format_bytes(now)} vs baseline {format_bytes(base)} ({change}"
                f"{now - base:+,.0f} bytes), tolerance ±{format_bytes(limit)} "
                f"(max({tol.memory_rtol:.1%}, {tol.memory_atol_bytes:,} bytes)): {verdict}"
            )
        checks.append(
            Check(
                metric,
                ok,
                format_bytes(base),
                format_bytes(now),
                f"{rel:+.2%}",
                f"±{format_bytes(limit)}",
                message,
                rel=rel if math.isfinite(rel) else None,
                limit=limit / abs(base) if base else None,
                moment=moment,
            )
        )
    return checks


def compare(
    case_id: str,
    baseline: Mapping[str, Any],
    observed: Observation,
    tol: Tolerance,
    *,
    hardware: str,
    fail_uncompared: bool = False,
    drift: Drift | None = None,
    gate_time: bool = True,
) -> list[Check]:
    """Every gate of one case: step time (against the session's ``drift`` where it applies),
    peak memory and its breakdown, the loss curve; or one failing check when the run's
    attention kernels are not the baseline's (:func:`check_kernels`)."""
    kernels = check_kernels(case_id, baseline, observed, hardware)
    if kernels is not None:
        return [kernels]
    return [
        check_time(
            case_id, baseline, observed, tol, hardware, fail_uncompared=fail_uncompared, drift=drift, gated=gate_time
        ),
        *check_memory(case_id, baseline, observed, tol),
        check_loss(case_id, baseline, observed, tol, hardware=hardware, fail_uncompared=fail_uncompared),
    ]
