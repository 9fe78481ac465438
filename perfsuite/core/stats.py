"""Summary statistics of step-time samples. Pure: no torch, no pytest."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def summarize(samples: Sequence[float]) -> dict[str, Any]:
    """Median and spread of per-step times.

    ``iqr`` and ``mad`` are robust to the odd slow step a shared machine produces;
    ``rel_spread`` (IQR / median) is what tolerances are derived from.
    """
    if not samples:
        raise ValueError("no samples to summarize (were all steps warm-up?)")
    if any(not math.isfinite(s) or s < 0 for s in samples):
        raise ValueError(f"step times must be finite and non-negative: {list(samples)}")
    ordered = sorted(samples)
    median = statistics.median(ordered)
    q1, q3 = _quantile(ordered, 0.25), _quantile(ordered, 0.75)
    mad = statistics.median(abs(s - median) for s in ordered)
    return {
        "median": median,
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "stdev": statistics.stdev(ordered) if len(ordered) > 1 else 0.0,
        "iqr": q3 - q1,
        "mad": mad,
        "rel_spread": (q3 - q1) / median if median > 0 else 0.0,
        "samples": list(samples),
    }


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of sorted data (numpy's default method)."""
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def first_non_finite(values: Sequence[float]) -> int | None:
    """Index of the first NaN or infinity, or ``None``."""
    for i, v in enumerate(values):
        if not math.isfinite(v):
            return i
    return None


def percent_of(value: float | None, reference: float | None) -> float | None:
    """``value`` as a percentage of ``reference`` (``None`` when either is missing or zero)."""
    if value is None or reference in (None, 0):
        return None
    return 100.0 * value / reference


def paired_change(now: Sequence[float], base: Sequence[float]) -> float:
    """Median over steps of ``now[i] / base[i]``, minus 1: the relative change of a step time, step by step.

    Step ``i`` trains on the same batch in every run (seeded data order), so comparing it
    with its own baseline cancels what differs between steps: a length-grouped or
    dynamically padded run's steps differ by 10x, and the median of such a run is one
    step's time, as noisy as a single step. The median of the paired ratios is robust
    to the odd slow step a shared machine produces.
    """
    if len(now) != len(base) or not now:
        raise ValueError(f"paired step times need equal, non-empty lengths ({len(now)} vs {len(base)})")
    return statistics.median(n / b for n, b in zip(now, base, strict=True)) - 1.0


def median_interval(values: Sequence[float], *, confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of ``values``: the order statistics
    whose binomial coverage is at least ``confidence`` (the sign-test interval; with n = 10 and
    95%, the 2nd smallest to the 2nd largest). Needs at least 6 values for 95%."""
    ordered = sorted(values)
    n = len(ordered)
    # P(B <= k - 1) for B ~ Binomial(n, 1/2): the chance the median lies below the k-th value.
    for k in range(n // 2, 0, -1):
        below = sum(math.comb(n, i) for i in range(k)) / 2**n
        if 1 - 2 * below >= confidence:
            return ordered[k - 1], ordered[n - k]
    raise ValueError(f"{n} values are too few for a {confidence:.0%} interval of the median")


def kendall_trend(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Kendall's tau between ``xs`` and ``ys`` and its exact two-sided p-value, the chance that ``ys`` in a
    random order (no association) agree with ``xs`` as far or farther. A tied pair counts neither way
    (tau-a); the p-value is that of untied data. Two values or fewer: ``(0.0, 1.0)``."""
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"kendall_trend needs equal lengths ({n} vs {len(ys)})")
    pairs = n * (n - 1) // 2
    if n < 3:
        return 0.0, 1.0
    score = sum(_sign((xs[j] - xs[i]) * (ys[j] - ys[i])) for i in range(n) for j in range(i + 1, n))
    # The number of orderings of n untied values with k inversions (score = pairs - 2k), built one value at a time.
    counts = [1]
    for m in range(2, n + 1):
        grown = [0] * (len(counts) + m - 1)
        for k, c in enumerate(counts):
            for extra in range(m):
                grown[k + extra] += c
        counts = grown
    as_far = sum(c for k, c in enumerate(counts) if abs(pairs - 2 * k) >= abs(score))
    return score / pairs, as_far / math.factorial(n)


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The median of the slopes between every two points of distinct ``xs`` (0.0 where there is none):
    a line's slope that one outlying point cannot move."""
    slopes = [
        (ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[j] != xs[i]
    ]
    return statistics.median(slopes) if slopes else 0.0


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def t_quantile(p: float, df: int) -> float:
    """Student's t distribution's ``p`` quantile with ``df`` degrees of freedom (``0 < p < 1``), to about
    1e-9: the t whose lower tail is ``p``, found by bisection on :func:`t_cdf`."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"no t quantile at p={p} with {df} degrees of freedom")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
        if high - low < 1e-10 * max(1.0, high):
            break
    return (low + high) / 2


def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom: ``1 - I_x(df/2, 1/2) / 2`` at
    ``x = df / (df + t²)`` for t ≥ 0 (I the regularised incomplete beta function), mirrored below 0."""
    tail = _incomplete_beta(df / (df + t * t), df / 2, 0.5) / 2
    return 1 - tail if t >= 0 else tail


def _incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), from its continued fraction (modified Lentz),
    on the side of ``x`` where it converges fast."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _incomplete_beta(1 - x, b, a)
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1) < 1e-15:
            break
    return front * fraction / a
