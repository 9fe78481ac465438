"""Where the bytes went: two sides' tensor inventories diffed by name, for the memory categories
that moved, with the arithmetic when there is one (``+17.6 MiB = 4.4 M elements × 4 B: one float32
copy of the parameters``).

Parameters, gradients, optimizer states and buffers are matched by name; a tensor outside the model
and the optimizer by where a module holds it, else by dtype and shape. Activations and temporaries
live only inside a step and have no names: a move there is said so, for the profile to explain.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from perfsuite.core.explain import modules as by_module
from perfsuite.core.explain.modules import ModuleShare
from perfsuite.core.explain.records import AllocationSite, TensorEntry
from perfsuite.core.units import format_byte_change, format_bytes

CATEGORY_KINDS = {
    "parameters": "parameter",
    "gradients": "gradient",
    "optimizer_state": "optimizer_state",
    "buffers": "buffer",
    "other": "other",
}
"""The memory breakdown's categories that the inventory lists, and the inventory's kind for each."""
SHOWN = 12
"""Tensors named per category (the JSON keeps them all)."""


@dataclass(frozen=True)
class TensorChange:
    """A tensor of one side only, or of both with another dtype or shape."""

    kind: str
    name: str
    a: TensorEntry | None
    b: TensorEntry | None

    def __post_init__(self) -> None:
        if self.a is None and self.b is None:
            raise ValueError(f"{self.name}: a tensor change of neither side")

    @property
    def delta(self) -> int:
        return (self.b.nbytes if self.b else 0) - (self.a.nbytes if self.a else 0)


@dataclass(frozen=True)
class CategoryCause:
    """One memory category: its bytes on each side (the breakdown's) and the tensors that differ."""

    category: str
    bytes_a: int | None
    bytes_b: int | None
    changes: tuple[TensorChange, ...] = ()
    arithmetic: str = ""
    """The change as elements × bytes, where the tensors that differ make it one product."""
    counted_under: str = ""
    """(``other``) The category whose move at the peak its tensors that differ make: made within the
    step (activations or temporaries there) and kept after it, where the inventory finds them."""
    kept: tuple[str, ...] = ()
    """(activations, temporaries) The tensors ``other`` lists that make this category's move: made
    within the step and kept after it."""
    modules: tuple[ModuleShare, ...] = ()
    """(activations) The modules whose own forward code kept more or fewer bytes (MemTracker's view)."""
    twice: tuple[str, ...] = ()
    """(activations) ``other``'s new tensors, kept after the step, whose bytes both categories moved by at
    the peak: the last step's copy alive there (``other``) while the step makes its next."""


@dataclass(frozen=True)
class MemoryCause:
    categories: tuple[CategoryCause, ...]
    sites: tuple[tuple[str, int, int], ...] = ()
    """On a GPU: allocation sites whose live bytes differ, ``(frame, bytes A, bytes B)``, largest change first."""


def _keyed(entries: Iterable[TensorEntry], kind: str) -> dict[str, TensorEntry]:
    """``kind``'s tensors by name; unnamed ones by dtype and shape, numbered within each."""
    found: dict[str, TensorEntry] = {}
    seen: Counter[str] = Counter()
    for entry in entries:
        if entry.kind != kind:
            continue
        key = entry.name
        if not key:
            shape = "×".join(map(str, entry.shape)) or "scalar"
            key = f"(unnamed {entry.dtype} {shape})"
            seen[key] += 1
            key = f"{key} #{seen[key]}" if seen[key] > 1 else key
        found[key] = entry
    return found


def changes(a: Sequence[TensorEntry], b: Sequence[TensorEntry], kind: str) -> list[TensorChange]:
    """``kind``'s tensors that differ between the sides, largest change first."""
    side_a, side_b = _keyed(a, kind), _keyed(b, kind)
    found = []
    for name in dict.fromkeys([*side_a, *side_b]):
        x, y = side_a.get(name), side_b.get(name)
        if x is None or y is None or (x.dtype, x.shape, x.nbytes) != (y.dtype, y.shape, y.nbytes):
            found.append(TensorChange(kind, name, x, y))
    return sorted(found, key=lambda c: (-abs(c.delta), c.name))


def arithmetic(found: Sequence[TensorChange], num_parameters: int) -> str:
    """The net change as elements × element size when every tensor that differs has one element
    size, naming a whole copy (or two) of the parameters when that is what it comes to."""
    net = sum(c.delta for c in found)
    if not found or net == 0:
        return ""
    sizes = {_element_size(e) for c in found for e in (c.a, c.b) if e is not None}
    dtypes = {e.dtype for c in found for e in (c.b or c.a,) if e is not None}
    if len(sizes) != 1 or 0 in sizes:
        return ""
    size = sizes.pop()
    elements, left = divmod(abs(net), size)
    if left:
        return ""
    dtype = dtypes.pop() if len(dtypes) == 1 else "mixed"
    said = f"{_signed(net)} = {_millions(elements)} elements × {size} B ({dtype})"
    copies = elements / num_parameters if num_parameters else 0
    if copies and math.isclose(copies, round(copies)) and 1 <= round(copies) <= 4:
        k = round(copies)
        times = "" if k == 1 else f"{k} × "
        what = f"one {dtype} copy" if k == 1 else f"{k} {dtype} copies"
        params = _millions(num_parameters)
        return f"{_signed(net)} = {times}{params} parameters × {size} B: {what} of the parameters"
    return said


def _element_size(entry: TensorEntry) -> int:
    count = math.prod(entry.shape)
    return entry.nbytes // count if count else 0


def _millions(n: int) -> str:
    return f"{n / 1e6:.3g} M" if n >= 100_000 else f"{n:,}"


def memory_cause(
    breakdown_a: Mapping[str, int],
    breakdown_b: Mapping[str, int],
    tensors_a: Sequence[TensorEntry],
    tensors_b: Sequence[TensorEntry],
    *,
    moved: Iterable[str],
    num_parameters: int,
    sites_a: Sequence[AllocationSite] = (),
    sites_b: Sequence[AllocationSite] = (),
    kept_a: Mapping[str, int] | None = None,
    kept_b: Mapping[str, int] | None = None,
) -> MemoryCause:
    """The tensors behind each category in ``moved``, those first (and any tensor of a listed kind that differs);
    for activations, the modules whose forwards kept what moved (``kept_*``: the activation bytes each
    module's forward left alive, where both sides have them)."""
    categories = []
    asked = list(dict.fromkeys(moved))
    for category, kind in CATEGORY_KINDS.items():
        found = changes(tensors_a, tensors_b, kind)
        if category not in asked and not found:
            continue
        categories.append(
            CategoryCause(
                category,
                breakdown_a.get(category),
                breakdown_b.get(category),
                tuple(found),
                arithmetic(found, num_parameters),
            )
        )
    shares = by_module.changes(kept_a, kept_b) if kept_a and kept_b else ()
    categories += [
        CategoryCause(c, breakdown_a.get(c), breakdown_b.get(c), modules=shares if c == "activations" else ())
        for c in asked
        if c not in CATEGORY_KINDS
    ]
    # The categories that moved first (what the check failed on), then those whose tensors differ only.
    categories = sorted(_kept_from_the_step(categories), key=lambda c: c.category not in asked)
    by_site_a = {s.frame: s.bytes for s in sites_a}
    by_site_b = {s.frame: s.bytes for s in sites_b}
    sites = sorted(
        ((f, by_site_a.get(f, 0), by_site_b.get(f, 0)) for f in {*by_site_a, *by_site_b}),
        key=lambda s: -abs(s[2] - s[1]),
    )
    return MemoryCause(tuple(categories), tuple(s for s in sites if s[1] != s[2]))


def _moved(category: CategoryCause) -> int | None:
    if category.bytes_a is None or category.bytes_b is None:
        return None
    return category.bytes_b - category.bytes_a


def _agree(x: int, y: int) -> bool:
    """Two byte counts of one change, from the peak's split and from the live tensors: alike within a
    rounding (64 KiB, or 1%)."""
    return abs(x - y) <= max(64 * 1024, 0.01 * max(abs(x), abs(y)))


def _kept_from_the_step(categories: list[CategoryCause]) -> list[CategoryCause]:
    """Where ``other``'s tensors that differ (alive after the step) did not move ``other`` at the peak but
    make the move of activations or temporaries there, each is said to be the other's: a tensor made
    within the step and kept after it (``self.last = logits.softmax(-1)``) counts at the peak where it
    was made, and after the step as ``other``. Where they moved ``other`` at the peak too (the last step's
    copy alive there) and the activations by as much again, the activations say so (``twice``)."""
    by_name = {c.category: c for c in categories}
    other = by_name.get("other")
    moved = _moved(other) if other is not None else None
    if other is None or not other.changes or moved is None:
        return categories
    net = sum(c.delta for c in other.changes)
    names = tuple(c.name for c in other.changes if c.delta > 0)
    acts = by_name.get("activations")
    acts_moved = _moved(acts) if acts is not None else None
    if _agree(net, moved) and net > 0 and acts is not None and acts_moved is not None:
        if acts_moved >= net - max(64 * 1024, 0.01 * net):  # as much again in the step's activations
            by_name["activations"] = dataclasses.replace(acts, twice=names)
        return [by_name[c.category] for c in categories]
    if _agree(net, moved) or net - moved <= 0:  # a tensor no longer kept is not said so here
        return categories
    for name in ("activations", "temporaries"):
        within = by_name.get(name)
        step_moved = _moved(within) if within is not None else None
        if within is not None and step_moved is not None and _agree(net - moved, step_moved):
            by_name[name] = dataclasses.replace(within, kept=names)
            by_name["other"] = dataclasses.replace(other, counted_under=name)
            break
    return [by_name[c.category] for c in categories]


def describe_change(change: TensorChange) -> str:
    """``new buffer injected_cache (float32 (13107200,), 50.00 MiB)``, ``gone ...``, or a change of dtype or shape."""
    a, b = change.a, change.b
    label = change.kind.replace("_", " ")
    if a is None and b is not None:
        return f"new {label} {change.name} ({b.dtype} {_shape(b)}, {format_bytes(b.nbytes)})"
    if b is None and a is not None:
        return f"gone {label} {change.name} ({a.dtype} {_shape(a)}, {format_bytes(a.nbytes)})"
    assert a is not None
    assert b is not None
    return f"{label} {change.name}: {a.dtype} {_shape(a)} → {b.dtype} {_shape(b)} ({_signed(change.delta)})"


def describe(category: CategoryCause) -> str:
    """One category's move in a line: its bytes (with the arithmetic where there is one), then the tensors."""
    name = category.category.replace("_", " ")
    moved = _moved(category)
    head = name if moved is None else f"{name} {_signed(moved)}"
    if category.kept:
        kept = ", ".join(category.kept[:SHOWN])
        return f"{head}: made within the step and kept after it, where other lists it: {kept}"
    if category.twice:
        twice = (
            f"; as much again as other's new {', '.join(category.twice[:SHOWN])}, which the step makes and keeps: "
            "at the peak the last step's copy (under other) and this step's (here) can both be alive"
        )
        said = by_module.describe(category.modules) if category.modules else "not in the inventory"
        return f"{head}: {said}{twice}"
    if category.modules:
        return f"{head}: {by_module.describe(category.modules)}"
    if category.category == "temporaries":
        return (
            f"{head} at the peak: what an op makes and frees within itself, counted at the moment of the peak, so "
            "they move with the peak's moment as well as with the ops that make them (the step's ops, under time, "
            "say what ran)"
        )
    if category.category not in CATEGORY_KINDS:
        return f"{head}: not in the inventory (they live within a step); the step's ops, under time, say what ran"
    if not category.changes:
        return f"{head}: no tensor differs by name, dtype or shape"
    net = sum(c.delta for c in category.changes)
    if category.arithmetic:
        same = moved is not None and _agree(net, moved)
        head = (
            f"{name} {category.arithmetic}"
            if same  # the breakdown's peak and the live tensors' sum can part: both are said, each for what it is
            else f"{head} at the peak (the tensors that differ, taken together: {category.arithmetic})"
        )
    if category.counted_under and moved is not None:
        total = category.arithmetic or _signed(net)
        under = category.counted_under.replace("_", " ")
        head = (
            f"{name} {_signed(moved)} at the peak; its tensors that differ ({total}) were made within the step, "
            f"counted there under {under}, and kept after it"
        )
    named = "; ".join(describe_change(c) for c in category.changes[:SHOWN])
    more = f"; and {len(category.changes) - SHOWN} more" if len(category.changes) > SHOWN else ""
    return f"{head}: {named}{more}"


def _shape(entry: TensorEntry) -> str:
    return "(" + ", ".join(map(str, entry.shape)) + ("," if len(entry.shape) == 1 else "") + ")"


def _signed(n: int) -> str:
    return format_byte_change(n)
