"""A refresh's decisions: what it refuses to record, and the old → new rows it shows for review.
Pure: no torch, no pytest."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from perfsuite.core.baselines import set_aside
from perfsuite.core.gates import rel_change
from perfsuite.core.tolerance import Tolerance
from perfsuite.core.units import format_bytes, format_time


def refusals(new: Mapping[str, Any], tol: Tolerance, time_class: str, *, gate_time: bool = True) -> list[str]:
    """Why a freshly built baseline must not be recorded (empty when it may); its step time's
    spread only when that time will be gated (not under ``--perfsuite-time=off``)."""
    reasons = []
    time = new["time"][time_class]
    if gate_time and not tol.spread_fits(time["spread"]):
        reasons.append(too_noisy(new, time_class, tol))
    memory_spread = new["memory"]["spread"]
    if memory_spread is not None and memory_spread * new["memory"]["peak_bytes"] > tol.memory_limit(
        new["memory"]["peak_bytes"]
    ):
        reasons.append(f"peak memory differs by {memory_spread:.2%} between repeats; it should be deterministic")
    loss_diff = new.get("loss_repeat_max_abs_diff")
    if loss_diff is not None and loss_diff > tol.loss_atol + tol.loss_rtol * min(abs(v) for v in new["loss"]):
        reasons.append(f"loss curves differ by up to {loss_diff:.3g} between repeats (tolerance {tol.loss_rtol:g} rel)")
    return reasons


def too_noisy(new: Mapping[str, Any], time_class: str, tol: Tolerance) -> str:
    """Why a step time is not recorded (its spread asks for a gate wider than the ceiling, or is over
    ``max_refresh_spread``), and the two ways on: again when the machine is quieter, or a wider gate
    asked for knowingly."""
    time = new["time"][time_class]
    spread, repeats = time["spread"], time["repeats"]
    aside = set_aside(len(repeats))
    wanted = tol.wanted_tolerance(spread)
    over = (
        f"over max_refresh_spread {tol.max_refresh_spread:.0%}"
        if spread > tol.max_refresh_spread
        else f"so its gate would be ±{wanted:.1%} ({tol.time_k:g} × spread), wider than its ceiling ±{tol.ceiling:.0%}"
    )
    ceiling = tol.ceiling_admitting(spread)
    case, hardware = new["case"], new["hardware"]
    return (
        f"step time spread {spread:.1%} over {len(repeats)} repeats"
        + (f" (the {aside} farthest set aside)" if aside else "")
        + f", {over} (repeats: {', '.join(f'{t:.4g}' for t in repeats)}): the machine is too noisy to record "
        "this case's time now."
        + (
            f" It stopped at {len(repeats)} of at most {tol.refresh_max_repeats} repeats: more could not have "
            "settled it, or the time limit left no room for them."
            if len(repeats) < tol.refresh_max_repeats
            else ""
        )
        + f" Next: run `perfsuite baselines refresh --missing -k '[{case}]'` again when "
        "nothing else runs on the machine (the cases that fit are written), or compare side by side with "
        f'`perfsuite ab`, or accept a wider gate knowingly: [tool.perfsuite.overrides."{hardware}/{case}"] '
        f"time_ceiling = {ceiling:g}"
        + (f", max_refresh_spread = {math.ceil(spread * 100) / 100:g}" if spread > tol.max_refresh_spread else "")
        + f" (its gate then catches only changes of {ceiling:.0%} or more)"
    )


def diff_rows(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], time_class: str, tol: Tolerance | None = None
) -> list[tuple[str, str, str, str]]:
    """``(metric, old, new, change)`` for a refresh's old → new table.

    The step time is this time class's; memory and loss are shared by every class, so a
    change there is called out: it rewrites what the other classes are gated on too. A memory
    move the gate's memory tolerance ``tol`` admits (a few bytes of allocator slack) is said to be
    within it; one past it, or any loss change, asks for a review.
    """
    entry = new["time"][time_class]
    unit = entry["unit"]
    old_entry = None if old is None else old["time"].get(time_class)
    if old_entry is not None and old_entry["unit"] != unit:
        old_entry = None

    rows: list[tuple[str, str, str, str]] = []

    def add(metric: str, before: float | None, after: float, fmt: Any) -> None:
        change = "new" if before is None else f"{rel_change(after, before):+.1%}"
        rows.append((metric, "—" if before is None else fmt(before), fmt(after), change))

    add(
        f"step time [{time_class}]",
        None if old_entry is None else float(old_entry["median"]),
        float(entry["median"]),
        lambda v: format_time(v, unit),
    )
    spread = entry["spread"]
    rows.append(("time spread", _spread(old_entry), "—" if spread is None else f"{spread:.1%}", ""))
    if old is not None:
        others = [c for c in old["time"] if c != time_class]
        if others:
            rows.append(("step time, other classes", ", ".join(others), "kept", ""))
    add("peak memory", None if old is None else old["memory"]["peak_bytes"], new["memory"]["peak_bytes"], format_bytes)
    for category, value in new["memory"]["breakdown"].items():
        before = None if old is None else old["memory"]["breakdown"].get(category)
        add(f"memory: {category}", before, value, format_bytes)
    old_loss = None if old is None else old["loss"][-1]
    add(f"final loss ({len(new['loss'])} steps)", old_loss, new["loss"][-1], lambda v: f"{v:.6g}")
    if old is not None:
        loss_changed = len(old["loss"]) != len(new["loss"]) or any(
            a != b for a, b in zip(old["loss"], new["loss"], strict=False)
        )
        moved = _memory_moves(old["memory"], new["memory"])
        admitted = tol is not None and all(abs(after - before) <= tol.memory_limit(before) for before, after in moved)
        changed = [name for name, flag in (("memory", moved and not admitted), ("loss", loss_changed)) if flag]
        if changed:
            rows.append(
                (f"{' and '.join(changed)} changed", "", "", "rewritten for every time class: review before merging")
            )
        if moved and admitted and tol is not None:
            largest = max(abs(after - before) for before, after in moved)
            within = f"within the memory gate (±{tol.memory_rtol:.0%}, at least {tol.memory_atol_bytes:,} bytes)"
            rows.append(("memory moved", "", f"by {largest:,} bytes at most", f"{within}: rewritten for every class"))
    return rows


def _memory_moves(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(old, new) bytes of the peak and each breakdown category that differ between two baselines."""
    pairs = [(old["peak_bytes"], new["peak_bytes"])]
    for category in sorted(set(old["breakdown"]) | set(new["breakdown"])):
        pairs.append((old["breakdown"].get(category, 0), new["breakdown"].get(category, 0)))
    return [(int(before), int(after)) for before, after in pairs if before != after]


def _spread(entry: Mapping[str, Any] | None) -> str:
    if entry is None or entry.get("spread") is None:
        return "—"
    return f"{entry['spread']:.1%}"
