"""Step-time statistics (pure)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from perfsuite.core.stats import (
    first_non_finite,
    kendall_trend,
    median_interval,
    paired_change,
    percent_of,
    summarize,
    theil_sen_slope,
)


def test_summarize_median_and_spread() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median"] == 3.0
    assert s["min"] == 1.0
    assert s["max"] == 100.0
    assert s["iqr"] == pytest.approx(2.0)  # 4 - 2: the outlier does not widen it
    assert s["mad"] == 1.0
    assert s["rel_spread"] == pytest.approx(2.0 / 3.0)
    assert s["samples"] == [1.0, 2.0, 3.0, 4.0, 100.0]


def test_summarize_single_sample() -> None:
    s = summarize([0.5])
    assert s["median"] == 0.5
    assert s["stdev"] == 0.0
    assert s["iqr"] == 0.0


@pytest.mark.parametrize(("bad", "message"), [([], "no samples"), ([math.nan], "finite"), ([-1.0], "non-negative")])
def test_summarize_rejects_bad_samples(bad: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        summarize(bad)


def test_first_non_finite() -> None:
    assert first_non_finite([1.0, 2.0]) is None
    assert first_non_finite([1.0, math.inf, math.nan]) == 1


def test_percent_of() -> None:
    assert percent_of(50.0, 200.0) == 25.0
    assert percent_of(None, 1.0) is None
    assert percent_of(1.0, 0) is None


def test_paired_change_is_the_median_ratio_step_by_step() -> None:
    assert paired_change([2.0, 20.0, 3.3], [2.0, 10.0, 3.0]) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_change([1.0], [1.0, 2.0])


def test_median_interval_is_the_sign_test_interval() -> None:
    assert median_interval(list(range(1, 11))) == (2, 9)  # n = 10: coverage 97.9%; (3, 8) would be 89%
    assert median_interval([5.0, 1.0, 3.0, 2.0, 4.0, 6.0]) == (1.0, 6.0)
    with pytest.raises(ValueError, match="too few"):
        median_interval([1.0, 2.0, 3.0, 4.0, 5.0])


def test_median_interval_covers_the_median_as_often_as_it_claims() -> None:
    import random

    rng = random.Random(0)
    covered = 0
    for _ in range(2000):
        low, high = median_interval([rng.gauss(0.0, 1.0) for _ in range(12)])
        covered += low <= 0.0 <= high
    assert 0.95 <= covered / 2000 <= 0.995


def test_kendalls_exact_p_value_is_the_share_of_orderings_as_far_from_none() -> None:
    """Against every ordering of the same values, counted one by one: the p-value is the share whose
    |tau| is at least the observed one."""
    rng = random.Random(3)
    for n in (4, 5, 6):
        xs = [float(i) for i in range(n)]
        ys = [rng.uniform(-1, 1) for _ in range(n)]
        tau, p = kendall_trend(xs, ys)
        taus = [kendall_trend(xs, list(order))[0] for order in itertools.permutations(ys)]
        assert p == pytest.approx(sum(abs(t) >= abs(tau) - 1e-12 for t in taus) / len(taus))
    assert kendall_trend([0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]) == pytest.approx((1.0, 2 / 720))
    assert kendall_trend([0, 1, 2, 3], [4, 3, 2, 1]) == pytest.approx((-1.0, 2 / 24))  # 4 cannot go below 0.05
    assert kendall_trend([0, 1], [0, 1]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="equal lengths"):
        kendall_trend([0, 1, 2], [0, 1])


def test_theil_sen_is_the_lines_slope_whatever_one_point_does() -> None:
    xs = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    ys = [0.5 * x + 1 for x in xs]
    ys[4] = 100.0
    assert theil_sen_slope(xs, ys) == pytest.approx(0.5)
    assert theil_sen_slope([1.0, 1.0], [0.0, 3.0]) == 0.0  # no two distinct xs
