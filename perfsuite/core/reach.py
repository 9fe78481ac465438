"""What the cases' steps ran of the packages that differ between two sides (``perfsuite ab``).

A comparison's verdict speaks of the cases it ran, and a bumped package whose code no case's step
calls comes out *same*: true of these cases, and nothing about the package. So each side's
worker watches its first pair's profile step (:mod:`perfsuite.worker.reach`, asked through
:data:`WATCH_ENV`) and counts the calls of those packages' code; :func:`reach` reads the records
back into one answer per package, and :func:`described` says it in a line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.core.pooled import differing
from perfsuite.core.record import PackageRun
from perfsuite.core.strategies import OPTIONAL_PACKAGES, STRATEGIES

WATCH_ENV = "PERFSUITE_WATCH"
"""Comma-separated distribution names whose calls a worker counts in its profile step (set by a side)."""


def to_watch(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> tuple[str, ...]:
    """The packages two sides' probes (name: version) hold at different versions, perfsuite itself
    left out (its code is the harness around every step)."""
    return tuple(name for name in differing(a, b) if name != "perfsuite")


@dataclass(frozen=True)
class Reach:
    """One watched package over a comparison's cases."""

    name: str
    versions: tuple[str | None, str | None]
    """Its version on the base and on the candidate (``None``: not installed there)."""
    watched: int
    """Cases whose step was watched to its end on both sides, or that ran the package's code."""
    ran: tuple[int, int]
    """Cases whose step ran its code, on the base and on the candidate."""
    either: int
    """Cases whose step ran its code on either side."""
    has_code: bool | None
    """Whether either side's copy ships code a step could show calling (``None``: neither lists its files)."""

    def strategies(self, device_type: str) -> tuple[str, ...]:
        """The built-in strategies that need it (an optional package's) and run on ``device_type``:
        where a case would run its code."""
        modules = {p.module for p in OPTIONAL_PACKAGES if _same_name(p.distribution, self.name)}
        return tuple(
            s.name
            for s in STRATEGIES.values()
            if modules & set(s.requires) and (device_type != "cpu" or s.gpu_only is None)
        )


def _same_name(a: str, b: str) -> bool:
    """Two distribution names for one project (PyPI's normalisation: case, ``-``, ``_`` and ``.`` alike)."""
    return a.lower().replace("_", "-").replace(".", "-") == b.lower().replace("_", "-").replace(".", "-")


def _runs(entries: Any) -> dict[str, PackageRun]:
    """A side's watched packages by name; what is not a list of them (an old or hand-made file) is none."""
    found: dict[str, PackageRun] = {}
    for item in entries if isinstance(entries, list) else ():
        try:
            run = PackageRun.from_json(item, "ran")
        except ValueError:
            continue
        found[run.name] = run
    return found


def reach(cases: Sequence[Mapping[str, Any]]) -> list[Reach]:
    """Per watched package, in the order the records name them: each case's ``ran`` (``{"a": [...],
    "b": [...]}``, each a :class:`~perfsuite.core.record.PackageRun` as JSON) counted."""
    sides = [(_runs((c.get("ran") or {}).get("a")), _runs((c.get("ran") or {}).get("b"))) for c in cases]
    names = list(dict.fromkeys(name for pair in sides for side in pair for name in side))
    out = []
    for name in names:
        runs = [(a.get(name), b.get(name)) for a, b in sides]
        called = [tuple(r is not None and r.python_calls + r.native_calls > 0 for r in pair) for pair in runs]
        complete = [all(r is not None and (r.complete or r.version is None) for r in pair) for pair in runs]
        versions = [next((r.version for r in (pair[i] for pair in runs) if r is not None), None) for i in (0, 1)]
        code = [r.has_code for pair in runs for r in pair if r is not None and r.has_code is not None]
        out.append(
            Reach(
                name,
                (versions[0], versions[1]),
                watched=sum(done or any(c) for done, c in zip(complete, called, strict=True)),
                ran=(sum(c[0] for c in called), sum(c[1] for c in called)),
                either=sum(any(c) for c in called),
                has_code=any(code) if code else None,
            )
        )
    return out


def described(found: Reach, cases: int, device_type: str = "cpu") -> str:
    """``found`` for a reader, out of ``cases`` compared on ``device_type``: where its code ran, or why
    the verdicts say nothing of it."""
    head = f"{found.name} {found.versions[0] or 'not installed'} → {found.versions[1] or 'not installed'}"
    if found.either:
        sides = f" (base {found.ran[0]}, candidate {found.ran[1]})" if found.ran[0] != found.ran[1] else ""
        return f"{head}: run in the step of {found.either} of {cases} case(s){sides}"
    if found.has_code is False:
        return f"{head}: ships no code a step shows calling (a native library: what calls it is not seen)"
    if not found.watched:
        return f"{head}: not watched (no case's profile step ran to its end on both sides)"
    using = found.strategies(device_type)
    hint = f"; the strategies that run it: {', '.join(using)}" if using else ""
    return f"{head}: run in no case's step (of {found.watched} watched): the verdicts say nothing of it{hint}"


def unreached(found: Sequence[Reach]) -> list[str]:
    """The watched packages no case's step ran, among those a step could show."""
    return [r.name for r in found if not r.either and r.watched and r.has_code is not False]
