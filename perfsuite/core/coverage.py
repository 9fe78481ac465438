"""Which time classes hold a step time of which cases, per hardware directory of a project's baselines:
what ``perfsuite baselines classes`` prints, so that a machine's class can be seen to gate time (or not)
before a run. Pure: no torch, no pytest."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfsuite.core.baselines import BaselineError, load_baseline
from perfsuite.core.pinned import is_pinned
from perfsuite.core.untimed import KEY as UNTIMED


@dataclass(frozen=True)
class ClassCoverage:
    """One time class of one hardware directory."""

    time_class: str
    timed: tuple[str, ...]
    """The cases whose baseline holds a step time for the class."""
    untimed: tuple[str, ...]
    """The cases whose baseline keeps none there, its pooled sessions too noisy (:mod:`perfsuite.core.untimed`)."""


@dataclass(frozen=True)
class HardwareCoverage:
    """One hardware directory (``cpu``, or a GPU model): its cases and, per time class, which are timed."""

    hardware: str
    cases: tuple[str, ...]
    classes: tuple[ClassCoverage, ...]
    unreadable: tuple[str, ...] = field(default=())
    """A line per baseline file that could not be read (:class:`~perfsuite.core.baselines.BaselineError`)."""

    def of(self, time_class: str) -> ClassCoverage:
        """The class's coverage; a class no baseline names has none timed."""
        return next((c for c in self.classes if c.time_class == time_class), ClassCoverage(time_class, (), ()))


def coverage(root: Path) -> list[HardwareCoverage]:
    """Every hardware directory under ``root`` that holds baselines, sorted, each class sorted."""
    found = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):  # a link: counted twice
        files = sorted(p for p in directory.glob("*.json") if not is_pinned(p.name))
        if files:
            found.append(_directory(directory.name, files))
    return found


def _directory(hardware: str, files: Sequence[Path]) -> HardwareCoverage:
    cases: list[str] = []
    timed: dict[str, list[str]] = {}
    untimed: dict[str, list[str]] = {}
    unreadable: list[str] = []
    for path in files:
        try:
            data = load_baseline(path, case_id=path.stem, hardware=hardware)
        except BaselineError as exc:
            unreadable.append(str(exc))
            continue
        cases.append(path.stem)
        for time_class in data["time"]:
            timed.setdefault(time_class, []).append(path.stem)
        for time_class in data.get(UNTIMED, {}):
            untimed.setdefault(time_class, []).append(path.stem)
    classes = tuple(
        ClassCoverage(c, tuple(timed.get(c, ())), tuple(untimed.get(c, ()))) for c in sorted({*timed, *untimed})
    )
    return HardwareCoverage(hardware, tuple(cases), classes, tuple(unreadable))
