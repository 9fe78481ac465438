"""``perfsuite baselines classes``: per hardware directory of the project's baselines, how many cases
each time class holds a step time of, and this machine's class among them (:mod:`perfsuite.core.coverage`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfsuite.cli.common import fail, no_baselines_directory, project_baselines
from perfsuite.core.coverage import ClassCoverage, HardwareCoverage, coverage
from perfsuite.core.hardware import local_cpu_class

SHOWN = 4
"""How many untimed cases a class's line names."""


def add_parser(actions: Any) -> None:
    """``baselines classes``' arguments (none)."""
    actions.add_parser(
        "classes",
        help="how many cases each time class holds a step time of, and this machine's class",
        description="Reads the project's baselines and prints, per hardware directory (cpu, a GPU model) and time "
        "class, how many cases hold a step time there, how many a pool found too noisy to time there (untimed), "
        "and this machine's CPU class, so that whether a run here gates step time is seen before it runs. "
        "Exit 0 with none yet, 1 if a baseline cannot be read (each is named), 2 without a baselines directory.",
    )


def run(args: Any) -> int:  # noqa: ARG001 - the subcommand takes no arguments
    _, root = project_baselines()
    if not root.is_dir():
        return fail(no_baselines_directory(root))
    found = coverage(root)
    shown = Path(os.path.relpath(root, Path.cwd()))
    if not found:  # a new repository's, before its first refresh: an answer, not an error
        print(
            f"{shown.as_posix()}: no baseline yet, so a gate fails each case as missing (skips it under "
            "--perfsuite-missing=skip); `perfsuite baselines refresh` records them"
        )
        return 0
    here = local_cpu_class()
    for directory in found:
        for line in lines(directory, here if directory.hardware == "cpu" else None, shown):
            print(line)
    return 1 if any(d.unreadable for d in found) else 0


def lines(directory: HardwareCoverage, here: str | None, root: Path) -> list[str]:
    """One directory's lines: its header, a line per class (this machine's ``here`` first), then each
    baseline it could not read."""
    total = len(directory.cases)
    head = f"{(root / directory.hardware).as_posix()}: {total} baseline(s)"
    if directory.unreadable:
        head += f", {len(directory.unreadable)} unreadable (below)"
    classes = list(directory.classes)
    if here is not None:
        classes = [directory.of(here), *(c for c in classes if c.time_class != here)]
    names = [c.time_class + (" (this machine)" if c.time_class == here else "") for c in classes]
    width = max(map(len, names), default=0)
    rows = [f"  {name:<{width}}  {_counts(c, total)}" for name, c in zip(names, classes, strict=True)]
    return [head, *rows, *(f"  unreadable: {line}" for line in directory.unreadable)]


def _counts(found: ClassCoverage, total: int) -> str:
    text = f"{len(found.timed)} of {total} timed"
    if not found.timed and not found.untimed:
        return text + ": a gate here compares memory and loss only"
    if found.untimed:
        text += f", {len(found.untimed)} too noisy to time (untimed): {_names(found.untimed)}"
    rest = total - len(found.timed) - len(found.untimed)
    if rest:
        text += f", {rest} with no time"
    return text


def _names(cases: Sequence[str]) -> str:
    more = f" and {len(cases) - SHOWN} more" if len(cases) > SHOWN else ""
    return ", ".join(cases[:SHOWN]) + more
