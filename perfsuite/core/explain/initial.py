"""Which tensors a model started from differently: each parameter's initial statistics, A against B.
Pure: no torch.

Where two runs' initial-weight digests differ (another random generator, another ``_init_weights``),
the loss curves part for that reason; this says how many tensors started from other values (each
one's digest), and which were drawn otherwise: those whose initial standard deviation or mean moved,
or that exist on one side only, furthest first (``h.0.attn.c_proj.weight std 0.00447
→ 0.02 ×4.47``, GPT-2's residual projections scaled by 1/√(2·n_layer) on one side and not the other).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SAME_STD = 0.01
"""An initial standard deviation within 1% of the other side's is the same draw's."""
SHOWN = 4
"""Tensors named in a line; the count says how many more moved."""


@dataclass(frozen=True)
class ParamStat:
    """One parameter as the model was built: its size, mean and standard deviation."""

    name: str
    numel: int
    mean: float
    std: float
    digest: str = ""
    """XXH3-64 of its initial values (empty in a record made before they were kept): a re-drawn tensor
    differs in value wherever its statistics stay alike."""


@dataclass(frozen=True)
class Moved:
    """A parameter whose initial statistics differ between the sides (``None``: absent on that side)."""

    name: str
    a: ParamStat | None
    b: ParamStat | None

    @property
    def ratio(self) -> float:
        """B's initial standard deviation over A's (infinite where A's is 0 and B's not, 1 where absent)."""
        if self.a is None or self.b is None:
            return 1.0
        if self.a.std == 0:
            return 1.0 if self.b.std == 0 else math.inf
        return self.b.std / self.a.std

    def describe(self) -> str:
        if self.a is None:
            return f"{self.name} new"
        if self.b is None:
            return f"{self.name} gone"
        if self.a.numel != self.b.numel:
            return f"{self.name} {self.a.numel:,} → {self.b.numel:,} elements"
        if abs(math.log(self.ratio) if 0 < self.ratio < math.inf else math.inf) > math.log1p(SAME_STD):
            return f"{self.name} std {self.a.std:.3g} → {self.b.std:.3g} ×{self.ratio:.3g}"
        return f"{self.name} mean {self.a.mean:.3g} → {self.b.mean:.3g}"


def moved(a: Sequence[ParamStat], b: Sequence[ParamStat]) -> tuple[Moved, ...]:
    """The parameters whose initial statistics differ, furthest first."""
    by_a, by_b = {s.name: s for s in a}, {s.name: s for s in b}
    found = []
    for name in dict.fromkeys([*by_a, *by_b]):
        x, y = by_a.get(name), by_b.get(name)
        if x is None or y is None or x.numel != y.numel:
            found.append(Moved(name, x, y))
            continue
        spread = max(x.std, y.std, 1e-12)
        std_moved = abs(y.std - x.std) > SAME_STD * max(x.std, 1e-12)
        mean_moved = abs(y.mean - x.mean) > SAME_STD * spread and abs(y.mean - x.mean) > 1e-6
        if std_moved or mean_moved:
            found.append(Moved(name, x, y))

    def distance(m: Moved) -> float:
        if m.a is None or m.b is None or m.a.numel != m.b.numel:
            return math.inf
        r = m.ratio
        return abs(math.log(r)) if 0 < r < math.inf else math.inf

    return tuple(sorted(found, key=lambda m: -distance(m)))


def values_differ(a: Sequence[ParamStat], b: Sequence[ParamStat]) -> int | None:
    """How many parameters started from other values (or exist on one side only); ``None`` where a side's
    record kept no digests."""
    if any(not s.digest for s in (*a, *b)):
        return None
    by_a, by_b = {s.name: s.digest for s in a}, {s.name: s.digest for s in b}
    return sum(by_a.get(name) != by_b.get(name) for name in dict.fromkeys([*by_a, *by_b]))


def describe(found: Sequence[Moved], total: int, differ: int | None = None) -> str:
    """``52 of 52 tensors started from other values, 9 of them from other statistics: h.0.attn.c_proj.weight
    std 0.00447 → 0.02 ×4.47, ...`` (``differ``: :func:`values_differ`; ``None``: the statistics alone)."""
    named = ", ".join(m.describe() for m in found[:SHOWN])
    more = f", and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    if differ is None:
        if not found:
            return "every tensor's initial statistics alike (the draw itself differs)"
        return f"{len(found)} of {total} tensors started from other statistics: {named}{more}"
    if not differ and not found:
        return (
            f"each of the {total} parameters started from the same values (the weights differ in a buffer or a dtype)"
        )
    values = f"{differ} of {total} tensors started from other values"
    if not found:
        return f"{values}, each with the same statistics (another draw of the same initialisation)"
    return f"{values}, {len(found)} of them from other statistics: {named}{more}"
