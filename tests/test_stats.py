"""Step-time statistics (pure)."""

from __future__ import annotations

import math

import pytest

from perfsuite.core.stats import first_non_finite, paired_change, percent_of, summarize


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
