"""What ``perfsuite ab`` and ``perfsuite bisect`` were asked, as the command read it: frozen objects that
:mod:`perfsuite.cli` builds once from its parsed arguments and hands down, so that nothing below the
command reads the command line or sees a field change on the way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from perfsuite.ab.pairs import Choice

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from perfsuite.ab.own import Tree
    from perfsuite.ab.pins import Upgrade
    from perfsuite.core.changed_code import ChangedCode


@dataclass(frozen=True, kw_only=True)
class PairOptions:
    """How a case is compared side by side, for both commands."""

    device_type: str
    """Where the cases run: ``cpu`` or ``cuda``."""
    floor: float = 0.03
    """The smallest time change called (``--floor``)."""
    alpha: float = 0.05
    """The false-alarm rate (``--alpha``): over every case of a comparison, per comparison of a bisection."""
    pairs: int | None = None
    """Pairs before the first verdict (``--pairs``; ``None``: the schedule's own)."""
    max_pairs: int | None = None
    """The cap while undecided (``--max-pairs``; ``None``: the default)."""
    held: tuple[Requirement, ...] = ()
    """Requirements laid over this environment on every side (``--with``)."""
    json: Path | None = None
    """Where ``--json`` writes (``None``: nowhere)."""


@dataclass(frozen=True, kw_only=True)
class AbOptions(PairOptions):
    """``perfsuite ab``'s: the two sides and how their cases run."""

    base: str
    """The base side as ``--base`` names it (or ``--pins`` made it): an interpreter, an environment, pins."""
    candidate: str
    mode: Choice = "auto"
    jobs: int = 1
    """At most this many cases at once (``--jobs``)."""
    report: Path | None = None
    """Where ``--report`` writes report.html and summary.md (``None``: nowhere)."""
    loss_seeds: int = 0
    """``--loss-seeds``: other seeds the base runs a case at where its sides start from other initial
    weights, the candidate's loss judged against them (0: another curve is a regression)."""
    upgrade: Upgrade | None = None
    """``--pins``: the commits and what moved between them (``None`` without)."""
    trees: tuple[Tree, Tree] | None = None
    """``--base-ref`` / ``--own``: each side's copy of the project, once written out (``None`` without)."""
    changed: ChangedCode | None = None
    """``--base-ref`` / ``--own``: the project's Python files that differ between the sides' code and the
    functions the change touches, watched in each case's build, first step and profile step
    (:mod:`perfsuite.core.reach`)."""


@dataclass(frozen=True, kw_only=True)
class BisectOptions(PairOptions):
    """``perfsuite bisect``'s: what is searched and by which metric."""

    package: str | None
    """The package whose releases (or, with ``--repo``, commits) are searched; ``None`` with ``--own``."""
    metric: str = "time"
    """What changed: ``time``, ``memory`` or ``loss``."""
    timeout: float | None = None
    """Seconds before a run is killed (``None``: 600)."""
    explain: bool = True
    """Explain the answer: the first bad point against the last good, instrumented (``--no-explain``: not)."""
    loss_seeds: int = 0
    """``--loss-seeds``: as :attr:`AbOptions.loss_seeds`, the good end run at other seeds where a point
    starts from other initial weights (0: another curve is a change)."""
