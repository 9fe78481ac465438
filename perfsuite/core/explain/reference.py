"""``--perfsuite-explain``'s choices and words, for a failure against a stored baseline.

A baseline holds figures (step time, peak, breakdown, loss curve, the initial weights' digest) and
the versions it was recorded on, not a profile, an inventory or gradients: the diffs that explain a
cause need a run of a reference stack. Where the baseline's versions differ from this environment's,
they are that reference (:func:`reference_pins`, an overlay of them run beside this stack). Where
they do not, one run of this stack says what it can alone (:func:`alone_lines`): the tensors of a
category that moved, largest first and those the size of the change named; the step's heaviest
entries; where the loss curve leaves the baseline's and whether the initial weights differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfsuite.core.explain import gradients, profile
from perfsuite.core.explain.records import ExplainRecord, TensorEntry
from perfsuite.core.explain.tensors import CATEGORY_KINDS
from perfsuite.core.gates import BREAKDOWN_PREFIX, PEAK_MEMORY
from perfsuite.core.units import format_byte_change, format_bytes

SKIPPED = {"perfsuite"}
"""Versions a reference does not pin: perfsuite measures, it is not measured."""
SHOWN = 5


def reference_pins(then: Mapping[str, str | None], now: Mapping[str, str | None]) -> list[str]:
    """``name==version`` of each library recorded with the baseline (``then``) at another version than
    this environment's (``now``); a library absent on either side is left to the environment."""
    return [
        f"{name}=={version}"
        for name, version in then.items()
        if name not in SKIPPED and version and now.get(name) and now.get(name) != version
    ]


def aspects_failed(metrics: Sequence[str]) -> tuple[str, ...]:
    """What failing checks ask to explain, by their metrics (``step time``, ``peak memory``,
    ``memory: buffers``, ``loss``)."""
    within_step = any(
        m.startswith(BREAKDOWN_PREFIX) and m.removeprefix(BREAKDOWN_PREFIX) not in CATEGORY_KINDS for m in metrics
    )
    wanted = {
        "time": "step time" in metrics or within_step,  # the step's ops say what a within-step category holds
        "memory": any(m == PEAK_MEMORY or m.startswith(BREAKDOWN_PREFIX) for m in metrics),
        "loss": "loss" in metrics,
    }
    return tuple(a for a, on in wanted.items() if on)


def _tensor(entry: TensorEntry) -> str:
    name = entry.name or "(unnamed)"
    return f"{entry.kind.replace('_', ' ')} {name} {entry.dtype} {tuple(entry.shape)} {format_bytes(entry.nbytes)}"


def alone_lines(
    run: ExplainRecord,
    what: Sequence[str],
    *,
    moved: Mapping[str, int],
    loss_then: Sequence[float],
    loss_now: Sequence[float],
    weights_then: str | None,
    loss_tolerance: tuple[float, float],
) -> list[str]:
    """What one instrumented run of this stack says of a failure, without a reference (``moved``: each
    breakdown category's change against the baseline, bytes), the loss first, then memory, then time."""
    out = []
    if "loss" in what:
        rtol, atol = loss_tolerance
        step = gradients.first_apart(loss_then, loss_now, rtol=rtol, atol=atol)
        weights = (
            "the same initial weights"
            if weights_then in (None, run.initial_weights)
            else f"other initial weights ({run.initial_weights} against {weights_then})"
        )
        where = "the curves hold" if step is None else f"parts from the baseline's at step {step}"
        out.append(f"loss: {where}, from {weights}; gradients need a reference run to compare with")
    for category, change in moved.items():
        kind, size = CATEGORY_KINDS.get(category), format_byte_change(change)
        if kind is None:
            out.append(f"memory: {category} {size}: not in the inventory (they live within a step)")
            continue
        held = sorted((t for t in run.tensors if t.kind == kind), key=lambda t: -t.nbytes)
        sized = [t for t in held if change > 0 and abs(t.nbytes - change) <= max(64 * 1024, 0.01 * change)]
        if sized:
            out.append(f"memory: {category} {size}, the size of " + "; ".join(map(_tensor, sized)))
        else:
            largest = "; ".join(map(_tensor, held[:SHOWN])) or "none"
            out.append(f"memory: {category} {size}; its largest tensors now: {largest}")
    if "time" in what and run.profile is not None:
        ops = sorted(profile.tables(run.profile)["op"].items(), key=lambda kv: -kv[1].us)[:SHOWN]
        heaviest = "; ".join(f"{key} {row.us / 1e3:,.2f} ms/step ({row.calls:,.0f} calls)" for key, row in ops)
        out.append(f"time: this stack's heaviest ops: {heaviest} (a baseline keeps no profile to diff)")
    return out
