"""A differential flame graph's boxes, laid out: both sides' stacks merged, each frame as wide as
the two sides' mean time in it per step, coloured later by the change (red: B spends more there).

Both sides' profiles are averaged per step. Widths follow the mean of the sides rather than B alone
(as Brendan Gregg's ``difffolded.pl`` draws them), so a frame that vanished stays visible. torch's
module-call plumbing (``_call_impl``, ``_wrapped_call_impl``, the hooks' ``inner``) is left out of
the picture, each module's own frame (``nn.Module: BertLayer_0``) standing for it; the tables keep
every frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfsuite.core.explain.frames import python_parts
from perfsuite.core.explain.records import StepProfile

_PLUMBING = {("torch/nn/modules/module.py", name) for name in ("_call_impl", "_wrapped_call_impl", "inner")}
MIN_SHARE = 0.004
"""A frame narrower than this share of the step is not drawn (nor is anything below it)."""
MAX_DEPTH = 60


@dataclass(frozen=True)
class Box:
    depth: int
    start: float
    """Its left edge, as a share of the step (0 to 1)."""
    width: float
    name: str
    us_a: float
    """Side A's time in this frame and below it, per step (µs)."""
    us_b: float


def _kept(name: str) -> bool:
    parts = python_parts(name)
    return parts is None or (parts[0], parts[2]) not in _PLUMBING


def _inclusive(profiles: Sequence[StepProfile]) -> dict[tuple[str, ...], float]:
    """Each stack prefix's time per step (µs), averaged over ``profiles``."""
    totals: dict[tuple[str, ...], float] = {}
    for profile in profiles:
        scale = 1.0 / (max(profile.steps, 1) * len(profiles))
        for row in profile.stacks:
            names = tuple(n for n in (profile.frames[i] for i in row.path) if _kept(n))
            for depth in range(1, len(names) + 1):
                prefix = names[:depth]
                totals[prefix] = totals.get(prefix, 0.0) + row.self_us * scale
    return totals


def boxes(a: Sequence[StepProfile], b: Sequence[StepProfile]) -> list[Box]:
    """The flame graph's boxes, outermost first (depth 0 at the bottom), children left to right by name."""
    side_a, side_b = _inclusive(a), _inclusive(b)
    width = {p: (side_a.get(p, 0.0) + side_b.get(p, 0.0)) / 2 for p in {*side_a, *side_b}}
    total = sum(w for p, w in width.items() if len(p) == 1)
    if total <= 0:
        return []
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for prefix in width:
        children.setdefault(prefix[:-1], []).append(prefix)
    drawn: list[Box] = []

    def place(parent: tuple[str, ...], start: float) -> None:
        for prefix in sorted(children.get(parent, ()), key=lambda p: p[-1]):
            share = width[prefix] / total
            if share >= MIN_SHARE and len(prefix) <= MAX_DEPTH:
                drawn.append(
                    Box(len(prefix) - 1, start, share, prefix[-1], side_a.get(prefix, 0.0), side_b.get(prefix, 0.0))
                )
                place(prefix, start)
            start += share

    place((), 0.0)
    return drawn
