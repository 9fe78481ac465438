"""``perfsuite bisect``: the first release of a package, between a good and a bad one, that changes
one case's time, memory or loss, found by binary search with ``perfsuite ab`` against the good end.

The search (:func:`search`) only needs a judge that calls a version ``good``, ``bad`` or
``cannot`` (it did not install, import or run): a version that cannot be tested is stepped
around, never taken for either, and when every version left between the last good and
the first bad is untestable the answer is that range, said so.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from packaging.version import InvalidVersion, Version

Judgement = Literal["good", "bad", "cannot"]


class BisectError(ValueError):
    """Bad arguments: versions in the wrong order, unknown to the index, or none between them."""


@dataclass
class Step:
    version: str
    judgement: Judgement
    evidence: str


@dataclass
class Found:
    first_bad: str | None
    """The first bad version; ``None`` when untestable versions leave a range (:attr:`candidates`)."""
    last_good: str
    candidates: list[str]
    """The versions one of which is the first bad one (just ``[first_bad]`` when found)."""
    steps: list[Step] = field(default_factory=list)

    @property
    def known_bad(self) -> str:
        """The first version judged bad: :attr:`first_bad` when found, else the last of the range (the
        untestable versions before it are the others the change may be in)."""
        return self.candidates[-1]

    @property
    def untested(self) -> list[str]:
        """The versions before :attr:`known_bad` that could not be tested (none when found)."""
        return self.candidates[:-1]


def index_versions(package: str) -> list[str]:
    """The versions the configured package index serves for ``package`` (``pip index versions``)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package, "--pre"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    match = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or match is None:
        # pip's own reason is its last ERROR line; its warnings (an index location it skipped) are not ours to show
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR:")]
        why = errors[-1] if errors else lines[-1] if lines else "none listed"  # "No module named pip" has no ERROR
        raise BisectError(f"{package}: the package index lists no releases ({why})")
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


def check_order(good: str, bad: str) -> tuple[Version, Version]:
    """Both versions parsed, the good one the older (a bisection looks for the first release that
    differs from the good end; for the release that fixed something, pass the broken one as good)."""
    for option, value in (("--good", good), ("--bad", bad)):
        try:
            Version(value)
        except InvalidVersion:
            raise BisectError(f"{option} {value!r} is not a version (a release such as 4.57.6)") from None
    lo, hi = Version(good), Version(bad)
    if lo == hi:
        raise BisectError(f"--good and --bad are both {good}")
    if lo > hi:
        raise BisectError(f"--good {good} is newer than --bad {bad}: versions in the wrong order (good is the older)")
    return lo, hi


def between(available: Sequence[str], good: str, bad: str, *, pre: bool = False) -> list[str]:
    """``good``, the releases after it and before ``bad``, and ``bad``, in release order."""
    lo, hi = check_order(good, bad)
    known = {}
    for text in available:
        try:
            known[Version(text)] = text
        except InvalidVersion:
            continue
    for end, text in ((lo, good), (hi, bad)):
        if end not in known:
            raise BisectError(f"{text} is not a release the package index serves (it has {len(known)})")
    inner = sorted(v for v in known if lo < v < hi and (pre or not v.is_prerelease))
    if not inner:
        raise BisectError(f"no release between {good} and {bad}: {bad} is the first bad one if they differ")
    return [known[lo], *(known[v] for v in inner), known[hi]]


def search(versions: Sequence[str], judge: Callable[[str], tuple[Judgement, str]]) -> Found:
    """Binary search of ``versions`` (the good end first, the bad end last, both already judged)."""
    lo, hi = 0, len(versions) - 1
    steps: list[Step] = []
    untestable: set[int] = set()
    while hi - lo > 1:
        open_ = [i for i in range(lo + 1, hi) if i not in untestable]
        if not open_:
            break
        middle = (lo + hi) / 2
        index = min(open_, key=lambda i: (abs(i - middle), i))
        judgement, evidence = judge(versions[index])
        steps.append(Step(versions[index], judgement, evidence))
        if judgement == "cannot":
            untestable.add(index)
        elif judgement == "good":
            lo = index
        else:
            hi = index
    candidates = list(versions[lo + 1 : hi + 1])
    return Found(
        first_bad=versions[hi] if len(candidates) == 1 else None,
        last_good=versions[lo],
        candidates=candidates,
        steps=steps,
    )
