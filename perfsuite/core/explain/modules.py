"""Activations by module: which module's forward keeps the bytes that moved.

Activations have no names (they live within a step), but MemTracker follows every module's forward:
its snapshots before and after a module's forward give the activation bytes that forward left alive
(what it saved for the backward and its outputs), children's included. A module's **own** share is
that less its direct submodules' shares: the bytes kept by code in its own ``forward``. Two sides'
own shares are diffed by module name, shares of repeated modules (``layer.0`` … ``layer.11``) summed
under one pattern (``layer.*``), and the largest changes said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
SHOWN = 3
"""Modules named per explanation (the JSON keeps every one that clears :data:`SMALLEST`)."""
SMALLEST = 0.05
"""A module is named where its own share moved by at least this fraction of the largest move."""
MiB = 2**20


@dataclass(frozen=True)
class ModuleShare:
    """The activation bytes kept by one module's own forward code (or a pattern's modules', summed)."""

    module: str
    """MemTracker's name for it: the root model's class, then the submodules' attribute path
    (``BertForSequenceClassification.bert.encoder.layer.*.attention.self``)."""
    bytes_a: int
    bytes_b: int
    modules: int = 1
    """How many modules the pattern stands for."""

    @property
    def delta(self) -> int:
        return self.bytes_b - self.bytes_a


def own_shares(kept: Mapping[str, int]) -> dict[str, int]:
    """Each module's own share of the activation bytes its forward kept (``kept``: by module, children's
    included): less what its direct submodules kept (those one or more levels below it with no
    followed module between, as the layers of a ``ModuleList``, which is never called)."""
    own = dict(kept)
    for name, size in kept.items():
        parent = name.rpartition(".")[0]
        while parent and parent not in kept:  # a container never called (a ModuleList) is passed over
            parent = parent.rpartition(".")[0]
        if parent:
            own[parent] -= size
    return own


def changes(kept_a: Mapping[str, int], kept_b: Mapping[str, int]) -> tuple[ModuleShare, ...]:
    """The modules whose own share moved between the sides, by pattern, the largest move first; those
    under :data:`SMALLEST` of it left out."""
    sums: dict[str, list[int]] = {}
    for side, kept in enumerate((kept_a, kept_b)):
        for name, size in own_shares(kept).items():
            entry = sums.setdefault(_INDEX.sub("*", name), [0, 0, 0, 0])
            entry[side] += size
            entry[2 + side] += 1
    found = [
        ModuleShare(pattern, a, b, max(count_a, count_b))
        for pattern, (a, b, count_a, count_b) in sums.items()
        if a != b
    ]
    if not found:
        return ()
    largest = max(abs(f.delta) for f in found)
    named = [f for f in found if abs(f.delta) >= SMALLEST * largest]
    return tuple(sorted(named, key=lambda f: (-abs(f.delta), f.module)))


def describe(shares: tuple[ModuleShare, ...]) -> str:
    """``kept by the forward of AcmeLM.head +1.00 MiB (0.50 → 1.50 MiB, its own code)``, a few modules."""
    said = []
    for share in shares[:SHOWN]:
        whose = "its own code" if share.modules == 1 else f"{share.modules} modules' own code"
        if min(share.bytes_a, share.bytes_b) >= 0:  # a share below zero (its code freed a child's) reads oddly
            whose = f"{share.bytes_a / MiB:,.2f} → {share.bytes_b / MiB:,.2f} MiB, {whose}"
        said.append(f"{share.module} {share.delta / MiB:+,.2f} MiB ({whose})")
    more = f"; and {len(shares) - SHOWN} more" if len(shares) > SHOWN else ""
    return "kept by the forward of " + "; ".join(said) + more
