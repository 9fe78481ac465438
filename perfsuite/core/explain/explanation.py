"""A case's explanation: what was explained and why, the cause of each, said in a few lines.

``perfsuite ab`` explains a case's **time** when its time verdict is not *same* (slower, faster,
undecided) or its activations or temporaries moved (the step's ops say what ran), its **memory**
when the peak or a breakdown category moved, its **loss** when the curves part; ``--explain``
explains all three for every case, ``--no-explain`` nothing. What each needs from the explanation
runs: time, two profiles of each side (A B A B); memory, one inventory of each; loss, the
gradients of each side's steps up to where the curves part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.core.explain import gradients, profile, profile_lines, tensors
from perfsuite.core.explain.flame import Box, boxes
from perfsuite.core.explain.gradients import LossCause
from perfsuite.core.explain.profile import LEVEL_NAMES, ProfileDiff
from perfsuite.core.explain.records import ExplainAsk, ExplainRecord
from perfsuite.core.explain.tensors import MemoryCause
from perfsuite.core.typed_json import read_as
from perfsuite.core.units import format_byte_range

ASPECTS = ("time", "memory", "loss")
EXPLAIN = ("auto", "all", "none")
"""``perfsuite ab``'s choice: explain what a verdict found (``auto``), everything, or nothing."""
PROFILED_STEPS = 3
SHOWN_PER_LEVEL = 3
"""Changes per level in the summary's lines (the report's tables show them all)."""


def aspects(
    explain: str, *, time_verdict: str | None, memory_moved: bool, loss_parted: bool, step_ops: bool = False
) -> tuple[str, ...]:
    """What to explain of one case (see the module's docstring); ``()`` for nothing. ``step_ops``: a
    category that lives within a step moved, which only the step's ops (the time's profile) say."""
    if explain == "none":
        return ()
    if explain == "all":
        return ASPECTS
    wanted = {"time": time_verdict not in (None, "same") or step_ops, "memory": memory_moved, "loss": loss_parted}
    return tuple(a for a in ASPECTS if wanted[a])


def asks(
    wanted: Sequence[str], *, loss_step: int | None, traces: tuple[str | None, str | None]
) -> list[tuple[int, ExplainAsk]]:
    """The explanation runs, in order, as ``(side, ask)``: A B A B when the time is explained (the
    first of each side with everything else asked, and its trace), else A B."""
    first = [
        ExplainAsk(
            profile_steps=PROFILED_STEPS if "time" in wanted else 0,
            trace=trace if "time" in wanted else None,
            grads_until=loss_step if "loss" in wanted and loss_step is not None else -1,
            inventory="memory" in wanted,
        )
        for trace in traces
    ]
    runs = [(0, first[0]), (1, first[1])]
    if "time" in wanted:
        runs += [(0, ExplainAsk(profile_steps=PROFILED_STEPS)), (1, ExplainAsk(profile_steps=PROFILED_STEPS))]
    return runs


@dataclass(frozen=True)
class Explanation:
    case: str
    aspects: tuple[str, ...]
    """What was explained (of :data:`ASPECTS`)."""
    time: ProfileDiff | None = None
    flame: tuple[Box, ...] = ()
    memory: MemoryCause | None = None
    loss: LossCause | None = None
    errors: tuple[str, ...] = ()
    """Why something asked could not be explained (a side's explanation run failed: its error)."""
    wall_s: float = 0.0

    def as_json(self) -> dict[str, object]:
        import dataclasses

        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "an explanation") -> Explanation:
        """:meth:`as_json`'s object (read from a results file: untrusted); a ``ValueError`` names the
        key of a wrong value."""
        return read_as(cls, data, where)

    def lines(self) -> list[str]:
        """The cause, a line per finding, as a person would write it in a bug report: the loss, then
        memory per category, then time per level (a loss or memory is explained only where its check
        failed; a time also where its verdict is undecided, so it comes last)."""
        out = [f"could not explain: {error}" for error in self.errors]
        if self.loss is not None:
            out.append(f"loss: {gradients.describe(self.loss)}")
        if self.memory is not None:
            out += [f"memory: {tensors.describe(c)}" for c in self.memory.categories]
            out += [f"memory: allocated at {f}: {format_byte_range(a, b)}" for f, a, b in self.memory.sites[:3]]
        if self.time is not None:
            out += time_lines(self.time)
        return out


def time_lines(diff: ProfileDiff) -> list[str]:
    """A line per change (the first few of each level that changed), then the profiled step and the bar
    a time change had to clear."""
    said = []
    for level in profile.LEVELS:
        shown = diff.level(level)[:SHOWN_PER_LEVEL]
        said += [f"time, {LEVEL_NAMES[level]}: {profile_lines.describe(c)}" for c in shown]
    step = (
        f"profiled step {diff.step_us_a / 1e3:,.1f} → {diff.step_us_b / 1e3:,.1f} ms "
        "(under the profiler: not the verdict's time)"
    )
    if diff.thresholds:
        bars = ", ".join(f"{LEVEL_NAMES[k]} {v / 1e3:.2f}" for k, v in diff.thresholds.items())
        largest = "the largest change between two profiles of one side"
        bar = f"a time is shown beyond {diff.noise_factor:g} × {largest}: {bars} ms/step"
    else:
        bar = "one profile per side: no time change measured against the profiles' noise"
    what = "no op, Python function or GPU activity" if "device" in diff.thresholds else "no op or Python function"
    if not said:
        return [f"time: {what} differs beyond the profiles' noise ({step}; {bar})"]
    if all(profile_lines.set_up_only(c) for level in profile.LEVELS for c in diff.level(level)):
        # Said plainly: a reader of a "why" whose every item is the sides' set-up finds no cause in it.
        return [*said, f"time: {what} of the code compared differs beyond the import machinery's ({step}; {bar})"]
    return [*said, f"time: {step}; {bar}"]


def explain(
    case: str,
    wanted: Sequence[str],
    runs: Iterable[tuple[int, ExplainRecord]],
    *,
    loss: tuple[Sequence[float], Sequence[float]],
    breakdowns: tuple[Mapping[str, int], Mapping[str, int]],
    moved: Iterable[str],
    loss_tolerance: tuple[float, float],
    errors: Sequence[str] = (),
    wall_s: float = 0.0,
) -> Explanation:
    """The explanation of ``case`` from its explanation runs (``(side, record)``, in the order they
    ran), the compared runs' loss curves and memory breakdowns (A's, B's), the categories that moved
    and the loss tolerance (``rtol``, ``atol``)."""
    by_side: tuple[list[ExplainRecord], list[ExplainRecord]] = ([], [])
    for side, record in runs:
        by_side[side].append(record)
    a, b = by_side
    if not a or not b:
        return Explanation(
            case, tuple(wanted), errors=tuple(errors) or ("a side has no explanation run",), wall_s=wall_s
        )
    diff = flame = None
    profiles_a = [r.profile for r in a if r.profile is not None]
    profiles_b = [r.profile for r in b if r.profile is not None]
    if "time" in wanted and profiles_a and profiles_b:
        diff = profile.diff(profiles_a, profiles_b)
        flame = tuple(boxes(profiles_a, profiles_b))
    memory = None
    if "memory" in wanted:
        memory = tensors.memory_cause(
            breakdowns[0],
            breakdowns[1],
            a[0].tensors,
            b[0].tensors,
            moved=moved,
            num_parameters=a[0].num_parameters,
            sites_a=a[0].allocation_sites,
            sites_b=b[0].allocation_sites,
            kept_a=a[0].forward_activations,
            kept_b=b[0].forward_activations,
        )
    cause = None
    if "loss" in wanted:
        rtol, atol = loss_tolerance
        cause = gradients.loss_cause(loss[0], loss[1], a[0], b[0], rtol=rtol, atol=atol)
    return Explanation(case, tuple(wanted), diff, flame or (), memory, cause, tuple(errors), wall_s)
