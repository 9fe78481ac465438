"""Activations by module: which module's forward keeps the bytes that moved.

Activations have no names (they live within a step), but MemTracker follows every module's forward:
its snapshots before and after a module's forward give the activation bytes that forward left alive
(what it saved for the backward and its outputs), children's included. A module's **own** share is
that less its direct submodules' shares: the bytes kept by code in its own ``forward``. Two sides'
own shares are diffed by module name, the moves of repeated modules (``layer.0`` … ``layer.11``)
summed under one pattern (``layer.*``; one that moved alone keeps its name), and the largest said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from perfsuite.core.units import format_byte_change, format_byte_range

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
SHOWN = 3
"""Modules named per explanation (the JSON keeps every one that clears :data:`SMALLEST`)."""
SMALLEST = 0.05
"""A module is named where its own share moved by at least this fraction of the largest move."""


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
    """The modules whose own share moved between the sides, the largest move first: repeated modules
    whose shares moved summed under their pattern (one alone keeps its name); those under
    :data:`SMALLEST` of the largest move left out."""
    own_a, own_b = own_shares(kept_a), own_shares(kept_b)
    members: dict[str, list[tuple[str, int, int]]] = {}
    for name in sorted({*own_a, *own_b}):
        a, b = own_a.get(name, 0), own_b.get(name, 0)
        if a != b:
            members.setdefault(_INDEX.sub("*", name), []).append((name, a, b))
    found = [
        ModuleShare(
            pattern if len(moved) > 1 else moved[0][0], sum(m[1] for m in moved), sum(m[2] for m in moved), len(moved)
        )
        for pattern, moved in members.items()
    ]
    found = [f for f in found if f.delta]
    if not found:
        return ()
    largest = max(abs(f.delta) for f in found)
    named = [f for f in found if abs(f.delta) >= SMALLEST * largest]
    return tuple(sorted(named, key=lambda f: (-abs(f.delta), f.module)))


def describe(shares: tuple[ModuleShare, ...]) -> str:
    """``kept by the forward of AcmeLM.head +1.00 MiB (0.50 → 1.50 MiB, its own code)``, a few modules;
    a side's share below zero (its code freed more than it kept: a child's output it consumed) is
    left out, as it reads oddly, and the change said alone."""
    said = []
    for share in shares[:SHOWN]:
        whose = "its own code" if share.modules == 1 else f"{share.modules} modules' own code"
        if min(share.bytes_a, share.bytes_b) >= 0:
            whose = f"{format_byte_range(share.bytes_a, share.bytes_b)}, {whose}"
        said.append(f"{share.module} {format_byte_change(share.delta)} ({whose})")
    more = f"; and {len(shares) - SHOWN} more" if len(shares) > SHOWN else ""
    return "kept by the forward of " + "; ".join(said) + more
