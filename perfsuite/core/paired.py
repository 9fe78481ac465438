"""Paired statistics for side-by-side comparisons (``perfsuite ab``). Pure: no numpy, no torch.

One *pair* is a run of each side of one case, next to each other in time, their order
alternating from pair to pair (AB, BA, AB, ...), so a drift of the machine cancels
between pairs. Its difference is ``d = log(time_B / time_A)``. Over the pairs:

- the estimate is the Hodges-Lehmann estimator (the median of the Walsh averages
  ``(d_i + d_j) / 2``, ``i <= j``): the median change, robust to a pair that a
  neighbour's burst spoiled;
- its interval the Wilcoxon signed-rank one (exact for up to :data:`EXACT_UP_TO` pairs,
  normal beyond), which assumes only that ``d`` is symmetric about its centre. Too few
  pairs for the confidence asked give an unbounded interval: *undecided*, never a guess;
- the verdict (:func:`decide`): *slower* when the interval lies above 0 and the estimate
  is at least the floor; *faster* the mirror; *same* when the whole interval lies within
  ± the floor; *undecided* otherwise, which asks for more pairs (:func:`next_pairs`).

The two kinds of verdict are two tests with two error rates. *Slower* and *faster* are
false alarms when wrong: their confidence is corrected for the number of cases compared
(Bonferroni, :func:`case_confidence`), so a 50-case comparison is no likelier to raise
one than a single case. *Same* is a miss when wrong, and is an equivalence test (two
one-sided tests, each at 2.5%, :data:`SAME_CONFIDENCE`): a case whose change is exactly
the floor is called *same* at most 2.5% of the time at one look, and a larger change
far less often. It needs no correction for a false alarm, so an unchanged case can leave
after 7 pairs, where a verdict of *slower* over 35 cases needs 12. The repeated looks of
the sequential schedule are not corrected for in the formula; the false alarms and the
misses they leave are measured with A/A and injected-slowdown comparisons (docs/ab.md),
the only honest calibration on a shared machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist, median
from typing import Literal

Verdict = Literal["slower", "faster", "same", "undecided"]
EXACT_UP_TO = 40
SAME_CONFIDENCE = 0.95
"""The confidence of a verdict of *same*: a miss, not a false alarm, when wrong (the module's docstring)."""


@dataclass(frozen=True)
class Paired:
    """One case's paired time comparison, as ratios ``B / A``."""

    ratio: float
    low: float
    """The interval's ends (0 and infinity when there are too few pairs for the confidence)."""
    high: float
    pairs: int
    confidence: float
    verdict: Verdict


def log_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``log(b_i / a_i)`` for each pair (positive: B slower)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} times of A but {len(b)} of B: a pair needs one of each")
    return [math.log(y / x) for x, y in zip(a, b, strict=True)]


def walsh_averages(d: Sequence[float]) -> list[float]:
    return sorted((d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d)))


def hodges_lehmann(d: Sequence[float]) -> float:
    """The Hodges-Lehmann estimate of the centre of ``d`` (the median of its Walsh averages)."""
    if not d:
        raise ValueError("no pairs")
    return median(walsh_averages(d))


@cache
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """How many of the 2**n sign patterns give each signed-rank sum W+ = 0 .. n(n+1)/2."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for w, c in enumerate(counts):
            grown[w + rank] += c
        counts = grown
    return tuple(counts)


def _critical(n: int, alpha: float) -> int:
    """The largest ``c`` with P(W+ <= c - 1) <= alpha / 2 (0 when not even W+ = 0 is that rare)."""
    if n > EXACT_UP_TO:
        z = NormalDist().inv_cdf(1 - alpha / 2)
        mean, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        return max(0, math.floor(mean - z * sd))
    counts, total, below = _signed_rank_counts(n), 2**n, 0
    c = 0
    while c < len(counts) and (below + counts[c]) / total <= alpha / 2:
        below += counts[c]
        c += 1
    return c


def signed_rank_interval(d: Sequence[float], confidence: float) -> tuple[float, float]:
    """The Wilcoxon signed-rank interval for the centre of ``d`` at ``confidence`` (in ``d``'s units).

    ``(-inf, inf)`` when ``d`` has too few values to reach the confidence at all.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} must lie between 0 and 1")
    c = _critical(len(d), 1 - confidence)
    if c < 1:
        return -math.inf, math.inf
    averages = walsh_averages(d)
    return averages[c - 1], averages[len(averages) - c]


def min_pairs(confidence: float) -> int:
    """The fewest pairs whose interval can be bounded at ``confidence`` (all differences one sign)."""
    n = 1
    while 2.0 ** (1 - n) > 1 - confidence:
        n += 1
    return n


def case_confidence(cases: int, alpha: float = 0.05) -> float:
    """Each case's confidence so that ``cases`` of them make a false alarm no likelier than ``alpha``."""
    if cases < 1:
        raise ValueError("at least one case")
    return 1 - alpha / cases


def decide(d: Sequence[float], *, floor: float, confidence: float, same_confidence: float | None = None) -> Paired:
    """The verdict on log ratios ``d`` (:func:`log_ratios`) against a relative ``floor`` (0.03: 3%).

    *Slower* and *faster* at ``confidence``; *same* at ``same_confidence`` (default: the same).
    The interval returned is the one the verdict rests on (``Paired.confidence`` says which):
    ``same_confidence``'s for *same*, ``confidence``'s otherwise.
    """
    if floor < 0:
        raise ValueError(f"floor {floor} must not be negative")
    same_confidence = confidence if same_confidence is None else same_confidence
    centre = hodges_lehmann(d)
    low, high = signed_rank_interval(d, confidence)
    bound = math.log1p(floor)
    verdict: Verdict = "undecided"
    if low > 0 and centre >= bound:
        verdict = "slower"
    elif high < 0 and centre <= -bound:
        verdict = "faster"
    else:
        near = signed_rank_interval(d, same_confidence) if same_confidence != confidence else (low, high)
        if -bound < near[0] and near[1] < bound:
            verdict, (low, high), confidence = "same", near, same_confidence
    return Paired(
        ratio=math.exp(centre),
        low=math.exp(low),
        high=math.exp(high),
        pairs=len(d),
        confidence=confidence,
        verdict=verdict,
    )


def next_pairs(done: int, verdict: Verdict, *, first: int, step: int, cap: int) -> int:
    """How many more pairs to run: ``first`` to begin, ``step`` more while undecided, none at ``cap``."""
    if done < first:
        return first - done
    if verdict != "undecided" or done >= cap:
        return 0
    return min(step, cap - done)
