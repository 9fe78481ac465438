"""A differential flame graph's boxes, laid out: both sides' stacks merged, each frame as wide as
the two sides' mean time in it per step, coloured later by the change (red: B spends more there).

Both sides' profiles are averaged per step. Widths follow the mean of the sides rather than B alone
(as Brendan Gregg's ``difffolded.pl`` draws them), so a frame that vanished stays visible. torch's
module-call plumbing (``Module._call_impl``, ``Module._wrapped_call_impl``, the hooks' ``inner``) is left out of
the picture, each module's own frame (``nn.Module: BertLayer_0``) standing for it; the tables keep
every frame. A frame is coloured only where its change exceeds its own bar (the tables' rule, per
frame: a frame's time and below it varies more than any one entry's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfsuite.core.explain.frames import python_parts
from perfsuite.core.explain.profile import MIN_THRESHOLD_US, NOISE_FACTOR
from perfsuite.core.explain.records import StepProfile

_PLUMBING = {
    ("torch/nn/modules/module.py", name)
    for bare in ("_call_impl", "_wrapped_call_impl", "_call_impl.inner")
    for name in (f"Module.{bare}", bare.rpartition(".")[2])  # qualified, or as a profile without names has it
}
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
    noise_us: float | None = None
    """The frame's own bar: :data:`~perfsuite.core.explain.profile.NOISE_FACTOR` times the larger change of
    its time between one side's two profiles (``None`` with one profile per side: no change is coloured)."""

    @property
    def moved(self) -> bool:
        """Whether B's time here differs from A's beyond the frame's own bar."""
        return self.noise_us is not None and abs(self.us_b - self.us_a) > self.noise_us


def _kept(name: str) -> bool:
    parts = python_parts(name)
    return parts is None or (parts[0], parts[2]) not in _PLUMBING


def _inclusive(profile: StepProfile) -> dict[tuple[str, ...], float]:
    """Each stack prefix's time per step (µs) in ``profile``."""
    totals: dict[tuple[str, ...], float] = {}
    scale = 1.0 / max(profile.steps, 1)
    for row in profile.stacks:
        names = tuple(n for n in (profile.frames[i] for i in row.path) if _kept(n))
        for depth in range(1, len(names) + 1):
            prefix = names[:depth]
            totals[prefix] = totals.get(prefix, 0.0) + row.self_us * scale
    return totals


def _side(profiles: Sequence[StepProfile]) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """Each prefix's mean time over ``profiles`` and its spread (largest less smallest)."""
    each = [_inclusive(p) for p in profiles]
    keys = set().union(*each)
    mean = {k: sum(t.get(k, 0.0) for t in each) / len(each) for k in keys}
    spread = {k: max(t.get(k, 0.0) for t in each) - min(t.get(k, 0.0) for t in each) for k in keys}
    return mean, spread


def boxes(a: Sequence[StepProfile], b: Sequence[StepProfile]) -> list[Box]:
    """The flame graph's boxes, outermost first (depth 0 at the bottom), children left to right by name."""
    (side_a, spread_a), (side_b, spread_b) = _side(a), _side(b)
    repeated = len(a) > 1 and len(b) > 1
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
                noise = None
                if repeated:
                    own = max(spread_a.get(prefix, 0.0), spread_b.get(prefix, 0.0))
                    noise = max(NOISE_FACTOR * own, MIN_THRESHOLD_US)
                us_a, us_b = side_a.get(prefix, 0.0), side_b.get(prefix, 0.0)
                drawn.append(Box(len(prefix) - 1, start, share, prefix[-1], us_a, us_b, noise))
                place(prefix, start)
            start += share

    place((), 0.0)
    return drawn
