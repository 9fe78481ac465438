"""Gating one case against its baseline: tolerances, the three checks, and refresh refusals. Pure: no torch, no pytest.

- Step time: two-sided. A run slower than the tolerance is a regression; one faster is
  a failure too ("refresh the baseline"), so improvements are recorded instead of
  leaving slack that a later regression could hide in. Tolerance = max(floor, k × the
  spread recorded with the baseline): the smallest change the gate detects. Compared
  only against the figure recorded for the same time class (CPU family and ISA, or
  GPU model); without one the time is *not compared*, said so, and not a failure
  unless asked.
- Memory: peak and every breakdown category, two-sided and tight: for one stack the
  allocations are deterministic.
- Loss: one value per optimizer step, compared step by step with a tolerance chosen by
  the precision; a NaN never passes; a failure names the first step that diverged.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.baselines import refresh_command
from perfsuite.drift import Drift
from perfsuite.stats import paired_change


class ConfigError(ValueError):
    """``[tool.perfsuite]`` has a key or value this version does not understand."""


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """How far a measurement may sit from its baseline and still pass."""

    time_floor: float = 0.05
    """Smallest relative step-time tolerance, either way (a GPU's 5%)."""
    time_k: float = 3.0
    """Multiple of the baseline's recorded relative spread (largest deviation of N repeats from their median)."""
    memory_rtol: float = 0.01
    """Relative tolerance on peak memory and each breakdown category."""
    memory_atol_bytes: int = 64 * 1024
    """Absolute slack for small categories (a few KiB of bookkeeping)."""
    loss_rtol: float = 1e-3
    """Relative tolerance per loss value."""
    loss_atol: float = 1e-4
    """Absolute tolerance per loss value."""
    max_refresh_spread: float = 0.15
    """A refresh refuses to record a step time whose repeats spread wider than this."""
    time_retries: int = 0
    """When only the step time fails, run the case again (a fresh worker) up to this many
    times, stopping once most of the ``time_retries + 1`` runs agree; the majority decides.
    A regression is slow in most runs, while a busy neighbour on a shared machine rarely
    spoils two of three."""
    time_retry_pause_s: float = 5.0
    """Seconds to wait before a time retry, so that a burst of a neighbour's load can pass."""
    time_drift_limit: float = 0.0
    """Gate the step time against the session's drift (:mod:`perfsuite.drift`: the median
    change of its cases) while that drift is within this limit; 0 gates each case on its
    own change (a GPU, and multi-rank CPU cases, which do not drift with the rest)."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ConfigError(f"tolerance {field.name} must be a non-negative number, got {value!r}")

    def time_tolerance(self, spread: float | None) -> float:
        return max(self.time_floor, self.time_k * spread) if spread is not None else self.time_floor


# Per-step loss tolerance by the precision the matmuls run in. Repeats on one stack agree
# to the last bit; these absorb a different CPU's kernels (AVX2 vs AVX-512 sum in another
# order) or a GPU's non-deterministic reductions, which Adam carries into later steps.
LOSS_TOLERANCE = {
    "fp32": {"loss_rtol": 1e-3, "loss_atol": 1e-4},
    "bf16": {"loss_rtol": 2e-2, "loss_atol": 1e-3},
    "fp16": {"loss_rtol": 1e-2, "loss_atol": 1e-3},
}
_FIELDS = {f.name for f in dataclasses.fields(Tolerance)}


def _apply(values: dict[str, Any], table: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FIELDS))}")
    values.update(table)


def resolve_tolerance(config: Mapping[str, Any], *, hardware: str, case_id: str, precision: str) -> Tolerance:
    """The tolerance of one case: built-in defaults, the precision's loss tolerance, then ``pyproject.toml``.

    ``[tool.perfsuite.tolerance]`` sets defaults for every case;
    ``[tool.perfsuite.tolerance.loss.<precision>]`` the loss tolerance of a precision;
    ``[tool.perfsuite.overrides."<hardware>/<case-id glob>"]`` any field for matching
    cases, later tables winning (e.g. ``"cpu/*"``, ``"*/tiny-gpt2-fp16"``).
    """
    values: dict[str, Any] = dict(LOSS_TOLERANCE.get(precision, LOSS_TOLERANCE["fp32"]))
    table = dict(config.get("tolerance", {}))
    loss_tables = table.pop("loss", {})
    _apply(values, table, "[tool.perfsuite.tolerance]")
    unknown = sorted(set(loss_tables) - set(LOSS_TOLERANCE))
    if unknown:
        raise ConfigError(f"[tool.perfsuite.tolerance.loss]: unknown precision(s) {', '.join(unknown)}")
    for key, value in loss_tables.get(precision, {}).items():
        if key not in ("rtol", "atol"):
            raise ConfigError(f"[tool.perfsuite.tolerance.loss.{precision}]: unknown key {key}; valid: atol, rtol")
        values[f"loss_{key}"] = value
    for pattern, override in config.get("overrides", {}).items():
        if fnmatch.fnmatchcase(f"{hardware}/{case_id}", pattern):
            _apply(values, override, f'[tool.perfsuite.overrides."{pattern}"]')
    return Tolerance(**values)


def validate_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for any unknown key or bad value, before a case runs."""
    for precision in (*LOSS_TOLERANCE, *config.get("tolerance", {}).get("loss", {})):
        resolve_tolerance(config, hardware="", case_id="", precision=precision)
    for pattern, override in config.get("overrides", {}).items():
        values: dict[str, Any] = {}
        _apply(values, override, f'[tool.perfsuite.overrides."{pattern}"]')
        Tolerance(**values)


@dataclass(frozen=True, kw_only=True)
class Observation:
    """What one run of a case measured, in the units its baseline stores."""

    time: float
    """Step time: seconds, or calibrated (÷ the calibration workload's time around each step)."""
    time_unit: str
    time_class: str
    """Whose recorded times this one may be compared with (:mod:`perfsuite.hardware`)."""
    calibration: str | None
    """The calibration workload's name, for ``calibrated`` times."""
    time_steps: Sequence[float]
    """The same per timed step, compared step by step with the baseline's."""
    step_time_s: float
    """The absolute median, for the reader."""
    peak_bytes: int
    breakdown: Mapping[str, int]
    losses: Sequence[float]


def _peak(record: Mapping[str, Any]) -> int:
    peak = record.get("peak_memory_bytes")
    if peak is None:
        raise ValueError(
            f"{record['model']}-{record['strategy']}: no peak memory was measured "
            f"({record.get('memory_breakdown_error') or 'no breakdown'})"
        )
    return int(peak)


def observe(record: Mapping[str, Any], *, time_unit: str) -> Observation:
    """An :class:`Observation` from a run record, its time in ``time_unit``."""
    median = float(record["step_time_s"]["median"])
    calibration = (record.get("calibration") or {}).get("workload")
    if time_unit == "calibrated":
        calibrated = record.get("step_time_calibrated")
        if not calibrated:
            raise ValueError(
                f"{record['model']}-{record['strategy']}: no calibrated step time (only CPU runs are calibrated); "
                "use --perfsuite-time=absolute"
            )
        time = float(calibrated["median"])
        steps = [float(v) for v in calibrated.get("samples", [])]
    else:
        time = median
        steps = [float(v) for v in record["step_time_s"].get("samples", [])]
    return Observation(
        time=time,
        time_unit=time_unit,
        time_class=str(record["time_class"]),
        calibration=calibration if time_unit == "calibrated" else None,
        time_steps=steps,
        step_time_s=median,
        peak_bytes=_peak(record),
        breakdown=dict(record.get("memory_breakdown_bytes") or {}),
        losses=list(record["loss"]),
    )


@dataclass(frozen=True)
class Check:
    """One metric of one case against its baseline."""

    metric: str
    ok: bool
    baseline: str
    measured: str
    change: str
    tolerance: str
    message: str
    """Empty when ``ok`` and compared; otherwise the whole explanation, naming the case."""
    compared: bool = True
    """False when there was nothing to compare with (no step time recorded for this time class)."""
    rel: float | None = None
    """The signed relative change the gate judged (the loss: at its worst step), for reports and history."""
    limit: float | None = None
    """The relative tolerance it was judged against: a compared check passes exactly when ``|rel| <= limit``."""
    raw_rel: float | None = None
    """Step time: the change against the baseline alone, before the session's drift is taken out."""
    drift: float | None = None
    """Step time: the session's drift it was gated against (``None`` when it was gated on its own change)."""


@dataclasses.dataclass
class Outcome:
    """One matrix case's result, for the summary table and ``--perfsuite-json``."""

    case: str
    status: str
    """``passed``, ``failed``, ``skipped``, ``missing``, ``refreshed`` or ``refused``."""
    hardware: str | None = None
    checks: list[Check] = dataclasses.field(default_factory=list)
    diff: list[tuple[str, str, str, str]] = dataclasses.field(default_factory=list)
    message: str = ""
    records: list[dict[str, Any]] = dataclasses.field(default_factory=list)
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


def _fmt_time(value: float, unit: str) -> str:
    return f"{value:.3f}× calibration" if unit == "calibrated" else f"{value * 1e3:,.2f} ms"


def _fmt_bytes(value: float) -> str:
    return f"{value / 2**20:,.2f} MiB"


def _rel(measured: float, baseline: float) -> float:
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
        _fmt_time(observed.time, observed.time_unit),
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
    return _rel(observed.time, float(base_time["median"])), 0


def time_change(baseline: Mapping[str, Any], observed: Observation) -> float | None:
    """The raw step-time change of ``observed`` against ``baseline`` (``None`` when they do not compare):
    what a session's drift is the median of."""
    base_time = _comparable_time(baseline, observed)
    return None if base_time is None else _raw_change(base_time, observed)[0]


def check_time(
    case_id: str,
    baseline: Mapping[str, Any],
    observed: Observation,
    tol: Tolerance,
    hardware: str,
    *,
    fail_uncompared: bool = False,
    drift: Drift | None = None,
) -> Check:
    """The step-time gate against the figure recorded for ``observed``'s time class.

    Without one, the check passes as *not compared* (``fail_uncompared`` makes it a
    failure, for a dedicated runner whose class must have baselines). With the session's
    ``drift`` and a tolerance whose ``time_drift_limit`` it is within, the change is
    judged against the drift (:mod:`perfsuite.drift`).
    """
    base_time = baseline["time"].get(observed.time_class)
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
    limit = tol.time_tolerance(base_time.get("spread"))
    ok = abs(rel) <= limit
    spread = base_time.get("spread")
    how = f"±{limit:.1%} = max(floor {tol.time_floor:.1%}, {tol.time_k:g} × spread " + (
        f"{spread:.1%})" if spread is not None else "n/a)"
    )
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
            f"{case_id}: step time {_fmt_time(now, observed.time_unit)} vs baseline "
            f"{_fmt_time(base, observed.time_unit)} ({raw:+.1%}"
            + (f" step by step over {paired} steps" if paired else "")
            + f"{against}), tolerance {how}: {verdict}"
        )
    return Check(
        "step time",
        ok,
        _fmt_time(base, observed.time_unit),
        _fmt_time(now, observed.time_unit),
        f"{rel:+.1%}" + (f" (raw {raw:+.1%})" if f"{raw:+.1%}" != f"{rel:+.1%}" else ""),
        f"±{limit:.1%}",
        message,
        rel=rel,
        limit=limit,
        raw_rel=raw,
        drift=drift.change if drift is not None and applied else None,
    )


def check_memory(case_id: str, baseline: Mapping[str, Any], observed: Observation, tol: Tolerance) -> list[Check]:
    memory = baseline["memory"]
    pairs: list[tuple[str, float | None, float | None]] = [("peak memory", memory["peak_bytes"], observed.peak_bytes)]
    categories = sorted(set(memory["breakdown"]) | set(observed.breakdown))
    pairs += [(f"memory: {c}", memory["breakdown"].get(c), observed.breakdown.get(c)) for c in categories]
    checks = []
    for metric, base, now in pairs:
        if base is None or now is None:
            missing = "the baseline" if base is None else "this run"
            checks.append(
                Check(
                    metric,
                    False,
                    "—" if base is None else _fmt_bytes(base),
                    "—" if now is None else _fmt_bytes(now),
                    "—",
                    "—",
                    f"{case_id}: {metric}: {missing} has no such category; the breakdown changed shape",
                )
            )
            continue
        limit = max(tol.memory_rtol * abs(base), tol.memory_atol_bytes)
        ok = abs(now - base) <= limit
        rel = _rel(now, base)
        message = ""
        if not ok:
            verdict = (
                "more than the baseline: a regression"
                if now > base
                else "less than the baseline: refresh it if expected"
            )
            message = (
                f"{case_id}: {metric} {_fmt_bytes(now)} vs baseline {_fmt_bytes(base)} ({rel:+.2%}, "
                f"{now - base:+,.0f} bytes), tolerance ±{_fmt_bytes(limit)} "
                f"(max({tol.memory_rtol:.1%}, {tol.memory_atol_bytes:,} bytes)): {verdict}"
            )
        checks.append(
            Check(
                metric,
                ok,
                _fmt_bytes(base),
                _fmt_bytes(now),
                f"{rel:+.2%}",
                f"±{_fmt_bytes(limit)}",
                message,
                rel=rel if math.isfinite(rel) else None,
                limit=limit / abs(base) if base else None,
            )
        )
    return checks


def check_loss(case_id: str, baseline: Mapping[str, Any], observed: Observation, tol: Tolerance) -> Check:
    base, now = list(baseline["loss"]), list(observed.losses)
    how = f"rtol {tol.loss_rtol:g}, atol {tol.loss_atol:g} per step"
    summary = f"{len(now)} steps"
    if len(base) != len(now):
        return Check(
            "loss",
            False,
            f"{len(base)} steps",
            summary,
            "—",
            how,
            f"{case_id}: loss: the baseline has {len(base)} steps and this run {len(now)}; "
            "the case's step count changed, so refresh its baseline",
        )
    bad = next((i for i, v in enumerate(now) if not math.isfinite(v)), None)
    if bad is not None:
        return Check(
            "loss",
            False,
            f"{base[bad]:.6g} at step {bad}",
            f"{now[bad]} at step {bad}",
            "—",
            how,
            f"{case_id}: loss is {now[bad]} at step {bad} (baseline {base[bad]:.6g}): a non-finite loss never passes",
        )
    diffs = [abs(n - b) for n, b in zip(now, base, strict=True)]
    rels = [d / abs(b) if b else (0.0 if d == 0 else math.inf) for d, b in zip(diffs, base, strict=True)]
    first = next(
        (i for i, (d, b) in enumerate(zip(diffs, base, strict=True)) if d > tol.loss_atol + tol.loss_rtol * abs(b)),
        None,
    )
    worst = max(range(len(diffs)), key=diffs.__getitem__)
    change = f"max |Δ| {diffs[worst]:.2g} (rel {max(rels):.2g})"
    # For reports and history: the step that used most of its tolerance, as a relative change and limit.
    allowed = [tol.loss_atol + tol.loss_rtol * abs(b) for b in base]
    tightest = max(
        range(len(diffs)),
        key=lambda i: diffs[i] / allowed[i] if allowed[i] else (math.inf if diffs[i] else 0.0),
    )
    scale = abs(base[tightest]) or 1.0
    numbers = {"rel": (now[tightest] - base[tightest]) / scale, "limit": allowed[tightest] / scale}
    if first is None:
        return Check("loss", True, f"final {base[-1]:.6g}", f"final {now[-1]:.6g}", change, how, "", **numbers)
    return Check(
        "loss",
        False,
        f"{base[first]:.6g} at step {first}",
        f"{now[first]:.6g} at step {first}",
        change,
        how,
        f"{case_id}: loss diverges from the baseline at step {first} of {len(now)}: {now[first]!r} vs {base[first]!r}; "
        f"largest absolute difference {diffs[worst]:.3g} (step {worst}), largest relative {max(rels):.3g}; "
        f"tolerance {how}",
        **numbers,
    )


def compare(
    case_id: str,
    baseline: Mapping[str, Any],
    observed: Observation,
    tol: Tolerance,
    *,
    hardware: str,
    fail_uncompared: bool = False,
    drift: Drift | None = None,
) -> list[Check]:
    """Every gate of one case: step time (against the session's ``drift`` where it applies),
    peak memory and its breakdown, the loss curve."""
    return [
        check_time(case_id, baseline, observed, tol, hardware, fail_uncompared=fail_uncompared, drift=drift),
        *check_memory(case_id, baseline, observed, tol),
        check_loss(case_id, baseline, observed, tol),
    ]


def refusals(new: Mapping[str, Any], tol: Tolerance, time_class: str) -> list[str]:
    """Why a freshly built baseline must not be recorded (empty when it may)."""
    reasons = []
    time = new["time"][time_class]
    spread = time["spread"]
    if spread is not None and spread > tol.max_refresh_spread:
        reasons.append(
            f"step time spread {spread:.1%} over {len(time['repeats'])} repeats exceeds "
            f"{tol.max_refresh_spread:.0%} (repeats: {', '.join(f'{t:.4g}' for t in time['repeats'])}); "
            "the machine is too noisy to record a baseline now"
        )
    memory_spread = new["memory"]["spread"]
    if memory_spread is not None and memory_spread * new["memory"]["peak_bytes"] > max(
        tol.memory_rtol * new["memory"]["peak_bytes"], tol.memory_atol_bytes
    ):
        reasons.append(f"peak memory differs by {memory_spread:.2%} between repeats; it should be deterministic")
    loss_diff = new.get("loss_repeat_max_abs_diff")
    if loss_diff is not None and loss_diff > tol.loss_atol + tol.loss_rtol * min(abs(v) for v in new["loss"]):
        reasons.append(f"loss curves differ by up to {loss_diff:.3g} between repeats (tolerance {tol.loss_rtol:g} rel)")
    return reasons


def diff_rows(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], time_class: str
) -> list[tuple[str, str, str, str]]:
    """``(metric, old, new, change)`` for a refresh's old → new table.

    The step time is this time class's; memory and loss are shared by every class, so a
    change there is called out: it rewrites what the other classes are gated on too.
    """
    entry = new["time"][time_class]
    unit = entry["unit"]
    old_entry = None if old is None else old["time"].get(time_class)
    if old_entry is not None and old_entry["unit"] != unit:
        old_entry = None

    rows: list[tuple[str, str, str, str]] = []

    def add(metric: str, before: float | None, after: float, fmt: Any) -> None:
        change = "new" if before is None else f"{_rel(after, before):+.1%}"
        rows.append((metric, "—" if before is None else fmt(before), fmt(after), change))

    add(
        f"step time [{time_class}]",
        None if old_entry is None else float(old_entry["median"]),
        float(entry["median"]),
        lambda v: _fmt_time(v, unit),
    )
    spread = entry["spread"]
    rows.append(("time spread", _spread(old_entry), "—" if spread is None else f"{spread:.1%}", ""))
    if old is not None:
        others = [c for c in old["time"] if c != time_class]
        if others:
            rows.append(("step time, other classes", ", ".join(others), "kept", ""))
    add("peak memory", None if old is None else old["memory"]["peak_bytes"], new["memory"]["peak_bytes"], _fmt_bytes)
    for category, value in new["memory"]["breakdown"].items():
        before = None if old is None else old["memory"]["breakdown"].get(category)
        add(f"memory: {category}", before, value, _fmt_bytes)
    old_loss = None if old is None else old["loss"][-1]
    add(f"final loss ({len(new['loss'])} steps)", old_loss, new["loss"][-1], lambda v: f"{v:.6g}")
    if old is not None:
        loss_changed = len(old["loss"]) != len(new["loss"]) or any(
            a != b for a, b in zip(old["loss"], new["loss"], strict=False)
        )
        memory_changed = (
            old["memory"]["peak_bytes"] != new["memory"]["peak_bytes"]
            or old["memory"]["breakdown"] != new["memory"]["breakdown"]
        )
        changed = [name for name, flag in (("memory", memory_changed), ("loss", loss_changed)) if flag]
        if changed:
            rows.append(
                (f"{' and '.join(changed)} changed", "", "", "rewritten for every time class: review before merging")
            )
    return rows


def _spread(entry: Mapping[str, Any] | None) -> str:
    if entry is None or entry.get("spread") is None:
        return "—"
    return f"{entry['spread']:.1%}"
