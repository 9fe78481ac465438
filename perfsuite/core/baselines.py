"""Baseline files: where they live, reading them strictly, building and writing them. Pure: no torch, no pytest.

One JSON file per case, ``baselines/<hardware>/<case-id>.json``, small enough to read in
a pull-request diff. The hardware key names the device only (``cpu``, or a GPU model
such as ``nvidia-h100-80gb-hbm3``): library versions stay out of the key because a
version change is exactly what the suite exists to catch; they go into ``provenance``.

Memory and the loss curve are one per file; step times are kept per *time class*
(:mod:`perfsuite.core.hardware`): ``"time": {"amd-25.1-avx2": {...}, "intel-6.143-...": {...}}``,
because which kernels torch runs, and so every time figure, depends on the CPU's
features while memory and loss do not. A refresh on a new class adds its entry and
leaves the others; a class too noisy to gate holds none (:mod:`perfsuite.core.untimed`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core import untimed
from perfsuite.core.hardware import hardware_key
from perfsuite.core.stats import paired_change

__all__ = ["hardware_key"]  # re-exported: where a baseline file lives

BASELINE_SCHEMA_VERSION = 2

TIME_UNITS = ("calibrated", "s")
"""``calibrated``: the median over timed steps of step time ÷ the calibration workload's time
around that step (CPU: cancels machine drift, see :mod:`perfsuite.worker.calibrate`).
``s``: median seconds per optimizer step (GPU)."""


class BaselineError(Exception):
    """A baseline file is missing, unreadable or of another schema; the message names the file and the fix."""


class MissingBaseline(BaselineError):
    """No baseline file for a case."""


def refresh_command(case_id: str | None = None, *, hardware: str = "cpu") -> str:
    """The command that (re)writes baselines, ``case_id``'s alone (``-k '[id]'``: a bare id matches others)."""
    command = "`perfsuite baselines refresh" + (f" -k '[{case_id}]'" if case_id else "") + "`"
    return command if hardware == "cpu" else f"{command} (on a machine with that GPU)"


def baseline_path(root: Path, hardware: str, case_id: str) -> Path:
    return root / hardware / f"{case_id}.json"


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON so that an interrupted write leaves the old file (or none), never half a file."""
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=False, allow_nan=False) + "\n")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) so that an interrupted write leaves the old file (or none), never half a file."""
    write_texts_atomic({path: text})


def write_texts_atomic(texts: Mapping[Path, str]) -> None:
    """Write each file of ``texts`` (path: its UTF-8 text) so that they appear together: each is written
    in full beside its place first, and only once all are written are they moved into place, so a
    failure while writing leaves the old files (or none). The moves are renames, one after another: a
    process killed between two of them (not an error) can still leave a new file beside an old one."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, text in texts.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            staged.append((Path(tmp), path))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            Path(tmp).chmod(0o666 & ~_umask())  # mkstemp's 0600 would make a report or baseline private
        for tmp_path, path in staged:
            tmp_path.replace(path)
    except BaseException:
        for tmp_path, _ in staged:
            tmp_path.unlink(missing_ok=True)
        raise


def _require(condition: bool, path: Path, what: str, case_id: str, hardware: str) -> None:
    if not condition:
        raise BaselineError(
            f"{path}: {what}; rewrite it with {refresh_command(case_id, hardware=hardware)} "
            "(or restore it with `git checkout`)"
        )


def missing_message(path: Path, *, case_id: str, hardware: str) -> str:
    """What a case without a baseline file says: the file, and the command that records it."""
    return (
        f"no baseline for {case_id} on {hardware}: {path} does not exist; "
        f"record one with {refresh_command(case_id, hardware=hardware)}"
    )


def load_baseline(path: Path, *, case_id: str, hardware: str) -> dict[str, Any]:
    """Read and validate one baseline; any problem raises :class:`BaselineError` naming ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingBaseline(missing_message(path, case_id=case_id, hardware=hardware)) from None
    except (OSError, ValueError) as exc:  # a directory, unreadable, not UTF-8, a NUL in the name
        why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (getattr(exc, "strerror", None) or str(exc))
        raise BaselineError(f"{path}: cannot read the baseline ({why})") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        shown = str(exc) if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise BaselineError(
            f"{path}: corrupt baseline (not JSON: {shown}); rewrite it with "
            f"{refresh_command(case_id, hardware=hardware)} (or restore it with `git checkout`)"
        ) from None
    ok = isinstance(data, dict)
    _require(ok, path, "corrupt baseline (not a JSON object)", case_id, hardware)
    version = data.get("schema_version")
    _require(
        version == BASELINE_SCHEMA_VERSION,
        path,
        f"schema_version is {version!r}, this perfsuite reads {BASELINE_SCHEMA_VERSION}",
        case_id,
        hardware,
    )
    _require(
        data.get("case") == case_id,
        path,
        f"it is the baseline of {data.get('case')!r}, not {case_id}",
        case_id,
        hardware,
    )
    time, memory, loss = data.get("time"), data.get("memory"), data.get("loss")
    _require(
        isinstance(time, dict)
        and all(
            isinstance(entry, dict)
            and entry.get("unit") in TIME_UNITS
            and finite_number(entry.get("median"), above=0)
            and _median_of_repeats(entry)
            and (entry.get("spread") is None or finite_number(entry.get("spread"), at_least=0))
            and isinstance(entry.get("steps") or [], list)
            and all(finite_number(step, above=0) for step in entry.get("steps") or [])
            for entry in time.values()
        ),
        path,
        "corrupt baseline (`time` maps each time class to its unit, a median above 0 (its repeats' median, "
        "where it lists them: an edit by hand or a merge that moved one and not the other is refused), a "
        "spread of 0 or more and the steps' times, each above 0)",
        case_id,
        hardware,
    )
    why = untimed.problem(data) if isinstance(time, dict) else None
    _require(why is None, path, f"corrupt baseline ({why})", case_id, hardware)
    _require(
        isinstance(memory, dict)
        and finite_number(memory.get("peak_bytes"), at_least=0)
        and isinstance(memory.get("breakdown"), dict)
        and all(finite_number(v, at_least=0) for v in memory["breakdown"].values()),
        path,
        "corrupt baseline (`memory` needs peak_bytes and a breakdown of bytes, none below 0)",
        case_id,
        hardware,
    )
    _require(
        isinstance(data.get("spec") or {}, dict),
        path,
        "corrupt baseline (`spec`, the case it was recorded from, is not an object)",
        case_id,
        hardware,
    )
    _require(
        isinstance(loss, list) and len(loss) > 0 and all(finite_number(v) for v in loss),
        path,
        "corrupt baseline (`loss` must be a non-empty list of finite numbers, one per step)",
        case_id,
        hardware,
    )
    return dict(data)


def incomplete(
    path: Path, *, case_id: str, hardware: str, time_class: str, unit: str, calibration: str | None
) -> str | None:
    """Why ``refresh --missing`` takes ``case_id`` on: no baseline, an unreadable one, or one
    without a step time the gate would compare (this time class's, in ``unit``, against this
    ``calibration`` workload); ``None`` when the gate would compare all three metrics."""
    try:
        data = load_baseline(path, case_id=case_id, hardware=hardware)
    except MissingBaseline:
        return "no baseline"
    except BaselineError:
        return "unreadable baseline"
    entry = data["time"].get(time_class)
    if entry is None:  # none where a pool found the class's sessions too noisy to gate: nothing to record
        return None if untimed.untimed_on(data, time_class) else f"no step time for {time_class}"
    if entry["unit"] != unit or (unit == "calibrated" and entry.get("calibration") != calibration):
        return f"its {time_class} step time is {entry['unit']} ({entry.get('calibration')}), not {unit} ({calibration})"
    return None


def _median_of_repeats(entry: Mapping[str, Any]) -> bool:
    """Whether a time class's ``median`` is its ``repeats``' median, where it lists them as numbers."""
    repeats = entry.get("repeats")
    if not isinstance(repeats, list) or not repeats or not all(finite_number(r, above=0) for r in repeats):
        return True  # an older file, or repeats not recorded: nothing to hold the median to
    return math.isclose(statistics.median(repeats), entry["median"], rel_tol=1e-9)


def finite_number(value: object, *, above: float | None = None, at_least: float | None = None) -> bool:
    """A finite number (not a bool), more than ``above`` and no less than ``at_least`` where given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer past a float's range
        return False
    return finite and (above is None or value > above) and (at_least is None or value >= at_least)


def relative_spread(values: Sequence[float]) -> float | None:
    """Largest deviation from the median, relative to it (``None`` for a single value)."""
    if len(values) < 2:
        return None
    median = statistics.median(values)
    if median == 0:
        return 0.0 if all(v == 0 for v in values) else math.inf
    return max(abs(v - median) for v in values) / abs(median)


def set_aside(n: int) -> int:
    """How many of ``n`` repeats a time spread sets aside as outliers: a third of the others, rounded
    down (none of 3, one of 4-6, two of 7-9)."""
    return (n - 1) // 3


def robust_spread(deviations: Sequence[float]) -> float | None:
    """The spread of N repeats, from each one's relative deviation: the largest ``|deviation|`` once the
    :func:`set_aside` largest are left out (``None`` for a single repeat).

    Of three repeats (a refresh's default) it is the largest, as it always was. A refresh that takes
    more repeats does so because one or two landed far off (a neighbour's burst): those are set aside,
    as the gate's retries let a minority of runs disagree, so that the spread says how far a typical run
    lands, and is not the worst of more tries.
    """
    if len(deviations) < 2:
        return None
    ordered = sorted(abs(d) for d in deviations)
    return ordered[len(ordered) - 1 - set_aside(len(ordered))]


def repeat_deviations(times: Sequence[float], time_steps: Sequence[Sequence[float]] = ()) -> list[float]:
    """Each repeat's relative deviation from the baseline the other repeats make, as a later run is
    gated against the baseline: its paired change from their per-step medians where steps are given
    (:func:`perfsuite.core.stats.paired_change`), else its change from their median.

    Leaving the repeat out matters step by step: of three repeats, each is itself the per-step median
    at about a third of the steps, and counted against itself those ratios of exactly 1 pull the
    median of its ratios to 1, so a spread read that way collapses toward 0 however far apart the
    repeats land."""
    if len(times) < 2:
        return [0.0 for _ in times]
    if step_medians(time_steps):
        return [
            paired_change(repeat, step_medians([s for j, s in enumerate(time_steps) if j != i]))
            for i, repeat in enumerate(time_steps)
        ]
    deviations = []
    for i, value in enumerate(times):
        median = statistics.median([t for j, t in enumerate(times) if j != i])
        deviations.append((value - median) / median if median else (0.0 if value == 0 else math.inf))
    return deviations


def step_medians(time_steps: Sequence[Sequence[float]]) -> list[float]:
    """Each step's median over repeats (``[]`` for none): what a baseline keeps and a run is paired with."""
    return [statistics.median(values) for values in zip(*time_steps, strict=True)]


def time_spread(times: Sequence[float], time_steps: Sequence[Sequence[float]] = ()) -> float | None:
    """The step-time spread of a refresh's repeats: :func:`robust_spread` of their
    :func:`repeat_deviations` (the largest, once outliers of more than three repeats are set aside)."""
    if len(times) < 2:
        return None
    return robust_spread(repeat_deviations(times, time_steps))


def cannot_fit(deviations: Sequence[float], widest: float, most_repeats: int) -> bool:
    """Whether no further repeats, up to ``most_repeats`` in all, could bring the spread of repeats
    with these ``deviations`` within ``widest``.

    Of ``most_repeats``, :func:`set_aside` sets ``k`` aside, and the rest must lie within ``widest`` of
    the others' median, which further repeats settle near the final median ``m``: so at least
    ``len(deviations) - k`` of these repeats must lie in one band from ``m(1 - widest)`` to
    ``m(1 + widest)``, the largest at most ``(1 + widest) / (1 - widest)`` times the smallest. When not
    that many do, more repeats cannot change the verdict. Each repeat is placed at ``1 + deviation``,
    against medians that move as repeats come in, so the band is taken :data:`FIT_WINDOW_MARGIN` wider.
    """
    needed = len(deviations) - set_aside(most_repeats)
    wide = widest * FIT_WINDOW_MARGIN
    if needed < 2 or wide >= 1:
        return False
    ratio = (1 + wide) / (1 - wide)
    ordered = sorted(1 + d for d in deviations)
    return not any(low > 0 and high <= low * ratio for low, high in zip(ordered, ordered[needed - 1 :], strict=False))


FIT_WINDOW_MARGIN = 1.5
"""How much wider :func:`cannot_fit` takes the band than the widest spread, for the medians' drift. An
estimate, not a proof: in 20,000 simulated refreshes through the refresh's own loop
(``tests/test_baselines.py``) it gave up on no case that more repeats would have recorded, where 1.25
gave up on two."""


def build_baseline(
    *,
    case_id: str,
    hardware: str,
    time_class: str,
    time_unit: str,
    calibration: str | None,
    times: Sequence[float],
    step_time_s: Sequence[float],
    peaks: Sequence[int],
    breakdowns: Sequence[Mapping[str, int]],
    losses: Sequence[Sequence[float]],
    spec: Mapping[str, Any],
    provenance: Mapping[str, Any],
    time_steps: Sequence[Sequence[float]] = (),
) -> dict[str, Any]:
    """One baseline from N repeated runs of a case: medians, and the spread each gate's tolerance builds on.

    ``times`` are the compared values (calibrated or seconds), one per repeat, filed under
    ``time_class``; ``time_steps`` the same per timed step, one list per repeat: the
    baseline keeps each step's median over repeats, which later runs are compared with step by
    step, and the spread is :func:`time_spread`'s. ``step_time_s`` the absolute medians, kept for a
    reader. The loss curve stored is the first repeat's (repeats on one stack agree to the last
    bits; :func:`refusals` checks that).
    """
    if time_unit not in TIME_UNITS:
        raise ValueError(f"time unit {time_unit!r}; valid: {', '.join(TIME_UNITS)}")
    if not (len(times) == len(step_time_s) == len(peaks) == len(breakdowns) == len(losses) >= 1):
        raise ValueError("every repeat needs a time, a peak, a breakdown and a loss curve")
    steps = step_medians(time_steps)
    categories = sorted(breakdowns[0])
    breakdown = {c: int(statistics.median(b.get(c, 0) for b in breakdowns)) for c in categories}
    memory_values = [float(p) for p in peaks]
    return {
        "schema_version": BASELINE_SCHEMA_VERSION,
        "case": case_id,
        "hardware": hardware,
        "spec": dict(spec),
        "time": {
            time_class: {
                "unit": time_unit,
                "median": statistics.median(times),
                "spread": time_spread(times, time_steps),
                "repeats": list(times),
                "steps": steps,
                "step_time_s_median": statistics.median(step_time_s),
                "calibration": calibration,
                "recorded": provenance.get("date"),
                "device": provenance.get("device"),
            }
        },
        "memory": {
            "peak_bytes": int(statistics.median(peaks)),
            "spread": relative_spread(memory_values),
            "breakdown": breakdown,
        },
        "loss": [float(v) for v in losses[0]],
        "loss_repeat_max_abs_diff": max(
            (abs(a - b) for other in losses[1:] for a, b in zip(losses[0], other, strict=False)), default=None
        ),
        "provenance": dict(provenance),
    }


def with_other_classes(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """``new``, keeping the step times ``old`` recorded for other time classes untouched."""
    merged = dict(new)
    if old is not None:
        merged["time"] = {**{c: e for c, e in old["time"].items() if c not in new["time"]}, **new["time"]}
        merged["time"] = dict(sorted(merged["time"].items()))
    return merged
