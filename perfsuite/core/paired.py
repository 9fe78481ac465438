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

An alternative alarm rule is kept for measurement, off by default (``spread``): *slower*
and *faster* on the pairs within ``spread`` times the median ``|d|`` of 0 only
(:func:`near_zero`), so that a pair a stall put 30% off cannot widen the interval. It is
exact too, but on a 2-core EPYC's own pairs it changed nothing (benchmarks/results.md), so
the shipped rule is the plain one the A/A comparisons measured.

The two kinds of verdict are two tests with two error rates. *Slower* and *faster* are
false alarms when wrong: a case may be called so at a few *alarm looks* only
(:func:`alarm_looks`, three by default), and each look's confidence is corrected for the
number of cases times the number of those looks (Bonferroni), so a 50-case comparison that
looks three times is no likelier to raise a false alarm than ``alpha``. *Same* is a miss
when wrong, and is an equivalence test (two one-sided tests, each at 2.5%,
:data:`SAME_CONFIDENCE`), allowed at every look: a case whose change is exactly the floor
is called *same* at most 2.5% of the time at one look, and a larger change far less
often. It needs no correction for a false alarm; ``perfsuite ab`` still makes no look before the
first alarm look (:func:`perfsuite.ab.comparison.schedule_for`), because 7 pairs, the fewest
that can bound a 95% interval, twice made a wrong *same*. The misses the repeated looks for
*same* leave are measured by simulation (``benchmarks/ab/simulate.py``) and with injected
slowdowns on this machine (docs/ab-sensitivity.md).
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
SPREAD = 4.0
"""The spread benchmarks/ab try for the alarm rule that leaves far pairs out (:func:`near_zero`; off by default)."""
ALARM_LOOKS = 3
"""How many looks may call *slower* or *faster*: the first that can, one halfway, the last."""


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
    left_out: int = 0
    """Pairs left out of a *slower* or *faster* interval for being far from 0 (:func:`near_zero`)."""

    def said(self) -> str:
        """``1.010 [0.982, 1.044]``, or ``1.010 (too few pairs to bound it)``."""
        return bounded(self.ratio, self.low, self.high)


def bounded(ratio: float, low: float | None, high: float | None) -> str:
    """A ratio with its interval for a reader; ``low`` 0 or ``None`` and ``high`` infinite or ``None``
    (as a results file writes it) are too few pairs to bound it."""
    low_open, high_open = low is None or low <= 0, high is None or math.isinf(high)
    if low_open and high_open:
        return f"{ratio:.3f} (too few pairs to bound it)"
    return f"{ratio:.3f} [{'0' if low_open else f'{low:.3f}'}, {'∞' if high_open else f'{high:.3f}'}]"


def log_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``log(b_i / a_i)`` for each pair (positive: B slower)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} times of A but {len(b)} of B: a pair needs one of each")
    return [math.log(y / x) for x, y in zip(a, b, strict=True)]


def walsh_averages(d: Sequence[float]) -> list[float]:
    """Every ``(d_i + d_j) / 2`` with ``i <= j``, sorted."""
    d = list(d)
    averages = [(x + y) / 2 for i, x in enumerate(d) for y in d[i:]]
    averages.sort()
    return averages


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


@cache
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


def signed_rank_interval(
    d: Sequence[float], confidence: float, averages: Sequence[float] | None = None
) -> tuple[float, float]:
    """The Wilcoxon signed-rank interval for the centre of ``d`` at ``confidence`` (in ``d``'s units);
    ``averages``: ``d``'s :func:`walsh_averages`, where the caller has them already.

    ``(-inf, inf)`` when ``d`` has too few values to reach the confidence at all.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} must lie between 0 and 1")
    c = _critical(len(d), 1 - confidence)
    if c < 1:
        return -math.inf, math.inf
    averages = walsh_averages(d) if averages is None else averages
    return averages[c - 1], averages[len(averages) - c]


def near_zero(d: Sequence[float], spread: float = SPREAD) -> list[float]:
    """The pairs within ``spread`` times the median ``|d|`` of zero: what *slower* and *faster* are
    decided on when :func:`decide` is given a ``spread``.

    Which pairs those are depends only on their sizes ``|d|``. When nothing changed and ``d``
    is symmetric about 0, the signs of ``d`` are independent of the sizes, so the signed-rank
    test of the pairs kept is exact (its false-alarm rate is as asked), however many are left
    out; and a pair a stall on one side put 30% off no longer decides the interval.
    """
    scale = median(abs(x) for x in d)
    return [x for x in d if abs(x) <= spread * scale] if scale > 0 else list(d)


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


def alarm_looks(looks: Sequence[int], *, cases: int, alpha: float) -> tuple[float, tuple[int, ...]]:
    """Which of ``looks`` (pair counts, ascending) may call *slower* or *faster*, and at what confidence.

    Up to :data:`ALARM_LOOKS` of them: the first at which an interval at the corrected
    confidence can be bounded with a pair to spare, the last, and one halfway. The
    confidence is Bonferroni over ``cases`` × the looks chosen, so over every case and
    every look a false alarm is no likelier than ``alpha``. Fewer looks are taken where
    fewer fit (a short ``--max-pairs``); with none, the last look alone.
    """
    if not looks:
        raise ValueError("no looks")
    for count in range(ALARM_LOOKS, 0, -1):
        confidence = case_confidence(cases * count, alpha)
        eligible = [n for n in looks if n > min_pairs(confidence)]
        if len(eligible) >= count:
            picks = {1: (-1,), 2: (0, -1), 3: (0, len(eligible) // 2, -1)}[count]
            return confidence, tuple(sorted({eligible[i] for i in picks}))
    return case_confidence(cases, alpha), (looks[-1],)


def decide(
    d: Sequence[float],
    *,
    floor: float,
    confidence: float,
    same_confidence: float | None = None,
    alarm: bool = True,
    spread: float | None = None,
) -> Paired:
    """The verdict on log ratios ``d`` (:func:`log_ratios`) against a relative ``floor`` (0.03: 3%).

    *Slower* and *faster* at ``confidence``, and only where ``alarm`` (an alarm look of
    :func:`alarm_looks`), on the pairs near 0 (:func:`near_zero`; all of them when ``spread``
    is ``None``); *same* at ``same_confidence`` (default: ``confidence``) on every pair. The
    estimate is always every pair's; the interval returned is the one the verdict rests on
    (``Paired.confidence`` says which): ``same_confidence``'s for *same*, the alarm's otherwise.
    """
    if floor < 0:
        raise ValueError(f"floor {floor} must not be negative")
    same_confidence = confidence if same_confidence is None else same_confidence
    if not d:
        raise ValueError("no pairs")
    every = walsh_averages(d)  # sorted once: the estimate and both intervals read it
    centre = median(every)
    near = list(d) if spread is None else near_zero(d, spread)
    low, high = signed_rank_interval(near, confidence, every if len(near) == len(d) else None)
    bound = math.log1p(floor)
    verdict: Verdict = "undecided"
    if alarm and low > 0 and centre >= bound:
        verdict = "slower"
    elif alarm and high < 0 and centre <= -bound:
        verdict = "faster"
    else:
        around = signed_rank_interval(d, same_confidence, every)
        if -bound < around[0] and around[1] < bound:
            verdict, (low, high), confidence, near = "same", around, same_confidence, list(d)
    return Paired(
        ratio=math.exp(centre),
        low=math.exp(low),
        high=math.exp(high),
        pairs=len(d),
        confidence=confidence,
        verdict=verdict,
        left_out=len(d) - len(near),
    )


@dataclass(frozen=True)
class Schedule:
    """How many pairs: ``first`` before any verdict, ``step`` more while undecided, up to ``cap``;
    *slower* and *faster* at ``confidence`` and only at the ``alarms`` looks (every look when
    empty), *same* at ``same_confidence`` at any look."""

    first: int
    step: int
    cap: int
    floor: float
    confidence: float
    same_confidence: float = SAME_CONFIDENCE
    alarms: tuple[int, ...] = ()
    spread: float | None = None

    def looks(self) -> list[int]:
        """The pair counts at which a case gets a verdict: ``first``, every ``step`` after, the cap."""
        return sorted({*range(self.first, self.cap + 1, self.step), self.cap})

    def judge(self, d: Sequence[float]) -> Paired | None:
        """The verdict on the pairs so far, when their number is a look; ``None`` between looks."""
        if len(d) not in self.looks():
            return None
        return decide(
            d,
            floor=self.floor,
            confidence=self.confidence,
            same_confidence=self.same_confidence,
            alarm=not self.alarms or len(d) in self.alarms,
            spread=self.spread,
        )

    def finished(self, paired: Paired) -> bool:
        """Whether a case with this verdict stops: decided, or at the cap."""
        return paired.verdict != "undecided" or paired.pairs >= self.cap

    def replay(self, d: Sequence[float]) -> Paired | None:
        """Where this schedule stops on pairs ``d`` taken in order (a case's pairs do not depend on
        when it stops), and what it says there; ``None`` when ``d`` ends before it stops."""
        for n in self.looks():
            paired = self.judge(d[:n]) if n <= len(d) else None
            if paired is None:
                return None
            if self.finished(paired):
                return paired
        return None


def next_pairs(done: int, verdict: Verdict, *, first: int, step: int, cap: int) -> int:
    """How many more pairs to run: ``first`` to begin, ``step`` more while undecided, none at ``cap``."""
    if done < first:
        return first - done
    if verdict != "undecided" or done >= cap:
        return 0
    return min(step, cap - done)
