"""The history rules, replayed on synthetic series: what a series of nights says, not one night.

Noise levels are assumptions until the GPU tier's own are measured: 1.5% night to night
on a GPU against a 5% tolerance (its floor), and 4% on this CPU tier against its 12%
(the repeat spread of the quiet refresh had a median of 2.2% and a 90th percentile of 7.3%).
"""

from __future__ import annotations

import numpy as np
import pytest

from perfsuite.history.judge import FAILING, Night, Rules, judge, segments

GPU = Rules(tolerance=0.05)
CPU = Rules(tolerance=0.12)


def _series(values: list[float], fingerprint: str = "h100/torch-2.11", start: int = 0) -> list[Night]:
    return [Night(f"night-{start + i:03d}", v, fingerprint, "b1") for i, v in enumerate(values)]


def _verdicts(nights: list[Night], rules: Rules) -> list[str]:
    """The verdict each night would have had, replaying the series night by night."""
    return [judge(nights[: i + 1], rules).verdict for i in range(len(nights))]


@pytest.mark.parametrize(("rules", "noise"), [(GPU, 0.015), (CPU, 0.04)], ids=["gpu", "cpu"])
def test_no_alarm_over_30_clean_nights_of_realistic_noise(rules: Rules, noise: float) -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):  # 50 series × 30 nights
        nights = _series(list(1 + rng.normal(0, noise, 30)))
        assert not FAILING & set(_verdicts(nights, rules))


def test_a_just_out_of_tolerance_step_is_caught_on_its_second_night() -> None:
    rng = np.random.default_rng(1)
    clean = list(1 + rng.normal(0, 0.01, 30))
    nights = _series([*clean, 1.06, 1.06])
    verdicts = _verdicts(nights, GPU)
    assert verdicts[:31] == ["insufficient_data"] * 2 + ["ok"] * 29  # one night out is not enough
    assert verdicts[31] == "regression"
    assert judge(nights, GPU).reason == "the last 2 nights out of ±5%: +6.0%, +6.0%"


def test_a_speed_up_is_an_improvement_that_asks_for_a_refresh_not_a_failure() -> None:
    verdict = judge(_series([1.0, 1.0, 1.0, 0.9, 0.9]), GPU).verdict
    assert verdict == "improvement"
    assert verdict not in FAILING


def test_a_fingerprint_change_starts_a_new_segment() -> None:
    before = _series([1.0] * 29 + [1.07])  # the old stack's last night is out of tolerance
    after = _series([1.2, 1.2, 1.2], fingerprint="h100/torch-2.12", start=30)
    assert [len(s) for s in segments(before + after)] == [30, 3]
    # A streak never reaches across the upgrade, and a new segment first collects nights...
    assert _verdicts(before + after, GPU)[30:] == ["insufficient_data", "insufficient_data", "regression"]
    # ...and then judges them like any other: an upgrade that makes training slower is caught.
    assert judge(before + after, GPU).segment == after


def test_a_baseline_refresh_starts_a_new_segment_too() -> None:
    nights = [*_series([1.0] * 10), Night("night-010", 1.0, "h100/torch-2.11", "b2")]
    assert [len(s) for s in segments(nights)] == [10, 1]


def test_a_memory_change_is_caught_on_its_first_night() -> None:
    memory = Rules(tolerance=0.01, deterministic=True)
    nights = _series([1.0] * 20 + [1.02])
    verdicts = _verdicts(nights, memory)
    assert verdicts[:20] == ["ok"] * 20
    assert verdicts[20] == "regression"


def test_three_nights_out_earlier_in_the_window_are_suspicious() -> None:
    judged = judge(_series([1.0] * 5 + [1.08, 0.93, 1.07] + [1.0] * 3), GPU)
    assert judged.verdict == "ok"  # alternating sides: not one slowdown
    judged = judge(_series([1.0] * 5 + [1.08, 1.07, 1.09] + [1.0] * 3), GPU)
    assert judged.verdict == "suspicious"
    assert judged.reason == "3 consecutive nights out of ±5% earlier in the window"


def test_slow_drift_inside_the_tolerance_is_reported_and_never_fails() -> None:
    creep = [1 + 0.002 * i for i in range(21)]  # 0.2% a night: +4% after 20 nights, inside ±5%
    judged = judge(_series(creep), GPU)
    assert judged.verdict == "ok"
    assert judged.drift == pytest.approx(1.034 / 1.006 - 1)
