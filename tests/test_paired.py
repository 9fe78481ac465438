"""The paired statistics of ``perfsuite ab`` on known distributions (perfsuite.core.paired)."""

from __future__ import annotations

import math
import random

import pytest

from perfsuite.core.paired import (
    SAME_CONFIDENCE,
    SPREAD,
    Schedule,
    alarm_looks,
    bounded,
    case_confidence,
    decide,
    hodges_lehmann,
    log_ratios,
    min_pairs,
    near_zero,
    next_pairs,
    signed_rank_interval,
)


def _pairs(shift: float, noise: float, n: int, seed: int) -> list[float]:
    """Log ratios of ``n`` pairs: B is ``shift`` slower than A, each run ``noise`` (relative sd) apart."""
    rng = random.Random(seed)
    a = [1.0 * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    b = [(1 + shift) * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    return log_ratios(a, b)


def test_hodges_lehmann_and_the_exact_interval_on_a_known_sample() -> None:
    d = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert hodges_lehmann(d) == pytest.approx(0.55)
    # n = 10 at 95%: the 9th smallest and 9th largest of the 55 Walsh averages (critical value 9).
    low, high = signed_rank_interval(d, 0.95)
    assert low == pytest.approx(0.3)
    assert high == pytest.approx(0.8)


def test_too_few_pairs_are_undecided_never_a_guess() -> None:
    assert min_pairs(0.95) == 6  # 2 / 2**6 < 0.05 <= 2 / 2**5
    d = _pairs(0.20, 0.01, 5, seed=1)  # clearly slower, but 5 pairs cannot reach 95%
    result = decide(d, floor=0.03, confidence=0.95)
    assert result.verdict == "undecided"
    assert (result.low, result.high) == (0.0, math.inf)


@pytest.mark.parametrize("seed", range(20))
def test_a_a_stays_same(seed: int) -> None:
    result = decide(_pairs(0.0, 0.01, 16, seed), floor=0.03, confidence=0.99)
    assert result.verdict == "same", result


@pytest.mark.parametrize("seed", range(20))
def test_a_shifted_sample_is_slower_and_the_mirror_faster(seed: int) -> None:
    slower = decide(_pairs(0.05, 0.01, 12, seed), floor=0.03, confidence=0.99)
    assert slower.verdict == "slower"
    assert 1.0 < slower.low < slower.ratio < slower.high
    faster = decide(_pairs(-0.05, 0.01, 12, seed), floor=0.03, confidence=0.99)
    assert faster.verdict == "faster"


def test_a_change_below_the_floor_is_same_once_the_interval_is_tight() -> None:
    assert decide(_pairs(0.01, 0.002, 16, 3), floor=0.03, confidence=0.99).verdict == "same"


def test_same_is_an_equivalence_test_at_its_own_confidence() -> None:
    # 7 quiet A/A pairs: too few to bound the 35-case confidence of slower/faster, enough for same
    confidence = case_confidence(35)
    d = _pairs(0.0, 0.005, 7, seed=2)
    assert decide(d, floor=0.03, confidence=confidence).verdict == "undecided"
    same = decide(d, floor=0.03, confidence=confidence, same_confidence=SAME_CONFIDENCE)
    assert same.verdict == "same"
    assert same.confidence == SAME_CONFIDENCE  # the interval shown is the one the verdict rests on
    assert 0.97 < same.low <= same.ratio <= same.high < 1.03
    # a clear slowdown at 7 pairs is neither: slower waits for the corrected confidence
    slow = decide(_pairs(0.08, 0.005, 7, seed=2), floor=0.03, confidence=confidence, same_confidence=SAME_CONFIDENCE)
    assert (slow.verdict, slow.confidence) == ("undecided", confidence)


@pytest.mark.parametrize(("shift", "most"), [(0.03, 40), (0.05, 2)])
def test_a_change_at_the_floor_or_beyond_is_rarely_called_same(shift: float, most: int) -> None:
    # Same's error is a miss: at most 2.5% per look for a change exactly at the floor (1000 cases
    # of 8 pairs: at most 40, 25 expected), and far fewer for 5% (measured 0 to 1 of 1000).
    rng = random.Random(5)
    same = sum(
        decide(
            _pairs(shift, 0.02, 8, rng.randrange(10**9)),
            floor=0.03,
            confidence=case_confidence(35),
            same_confidence=SAME_CONFIDENCE,
        ).verdict
        == "same"
        for _ in range(1000)
    )
    assert same <= most


def test_wide_noise_is_undecided_until_more_pairs_decide() -> None:
    d = _pairs(0.05, 0.06, 40, seed=7)
    assert decide(d[:8], floor=0.03, confidence=0.99).verdict == "undecided"


def test_the_confidence_is_corrected_for_the_number_of_cases() -> None:
    assert case_confidence(1) == pytest.approx(0.95)
    assert case_confidence(50) == pytest.approx(0.999)
    assert min_pairs(case_confidence(10)) == 9
    with pytest.raises(ValueError, match="at least one case"):
        case_confidence(0)


def test_false_alarms_over_many_cases_stay_rare() -> None:
    # 50 cases of A/A at the corrected confidence, 200 times: a false alarm in at most a few comparisons.
    confidence = case_confidence(50)
    alarms = 0
    rng = random.Random(0)
    for _ in range(200):
        verdicts = [
            decide(_pairs(0.0, 0.03, 12, rng.randrange(10**9)), floor=0.03, confidence=confidence).verdict
            for _ in range(50)
        ]
        alarms += any(v in ("slower", "faster") for v in verdicts)
    assert alarms <= 10  # 5% of 200


def test_the_schedule_starts_extends_while_undecided_and_stops_at_the_cap() -> None:
    assert next_pairs(0, "undecided", first=6, step=2, cap=12) == 6
    assert next_pairs(6, "undecided", first=6, step=2, cap=12) == 2
    assert next_pairs(6, "same", first=6, step=2, cap=12) == 0
    assert next_pairs(11, "undecided", first=6, step=2, cap=12) == 1
    assert next_pairs(12, "undecided", first=6, step=2, cap=12) == 0


def test_bad_inputs_are_errors() -> None:
    with pytest.raises(ValueError, match="a pair needs one of each"):
        log_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="between 0 and 1"):
        signed_rank_interval([0.1] * 8, 1.0)
    with pytest.raises(ValueError, match="no pairs"):
        hodges_lehmann([])


def test_slower_or_faster_only_at_a_few_looks_corrected_for_cases_and_looks() -> None:
    looks = [*range(7, 60, 2), 60]
    confidence, alarms = alarm_looks(looks, cases=35, alpha=0.05)
    assert confidence == pytest.approx(1 - 0.05 / (35 * 3))
    assert alarms[0] == min(n for n in looks if n > min_pairs(confidence))
    assert len(alarms) == 3
    assert alarms[-1] == 60
    assert alarms[0] < alarms[1] < alarms[2]
    # A cap too short for three looks takes fewer, each at a looser confidence; none fitting, the cap alone.
    for looks_, cases, expected_confidence, expected in (
        ([7, 9, 11, 13, 14], 35, 1 - 0.05 / 70, (13, 14)),
        ([7, 9, 11, 12], 35, 1 - 0.05 / 35, (12,)),
        ([1], 1, 0.95, (1,)),
    ):
        confidence, alarms = alarm_looks(looks_, cases=cases, alpha=0.05)
        assert confidence == pytest.approx(expected_confidence)
        assert alarms == expected


def test_no_alarm_between_alarm_looks_but_same_at_any() -> None:
    shifted = _pairs(0.10, 0.01, 20, seed=3)
    assert decide(shifted, floor=0.03, confidence=0.999).verdict == "slower"
    assert decide(shifted, floor=0.03, confidence=0.999, alarm=False).verdict == "undecided"
    quiet = _pairs(0.0, 0.005, 8, seed=4)
    assert decide(quiet, floor=0.03, confidence=0.999, same_confidence=SAME_CONFIDENCE, alarm=False).verdict == "same"


def test_a_schedule_replays_where_it_stops_and_what_it_says() -> None:
    confidence, alarms = alarm_looks([*range(7, 30, 2), 30], cases=10, alpha=0.05)
    schedule = Schedule(first=7, step=2, cap=30, floor=0.03, confidence=confidence, alarms=alarms)
    quiet = schedule.replay(_pairs(0.0, 0.005, 30, seed=5))
    assert quiet is not None
    assert (quiet.verdict, quiet.pairs) == ("same", 7)
    slowed = schedule.replay(_pairs(0.10, 0.01, 30, seed=6))
    assert slowed is not None
    assert (slowed.verdict, slowed.pairs) == ("slower", alarms[0])
    noisy = schedule.replay(_pairs(0.0, 0.3, 30, seed=7))
    assert noisy is not None
    assert (noisy.verdict, noisy.pairs) == ("undecided", 30)
    assert schedule.replay(_pairs(0.0, 0.3, 12, seed=7)) is None  # ran out before it stopped


def test_a_a_over_the_whole_schedule_rarely_alarms() -> None:
    # 200 A/A comparisons of 35 noisy cases (pairs 6% apart) through every look of ab's default schedule.
    from perfsuite.ab.comparison import schedule_for

    schedule = schedule_for(35, floor=0.03, alpha=0.05, first=None, cap=None)
    rng = random.Random(1)
    comparisons, alarmed = 200, 0
    for _ in range(comparisons):
        verdicts = []
        for _ in range(35):
            paired = schedule.replay([rng.gauss(0, 0.06) for _ in range(schedule.cap)])
            assert paired is not None
            verdicts.append(paired.verdict)
        alarmed += any(v in ("slower", "faster") for v in verdicts)
    # At most alpha (5%) of comparisons by construction, give or take three standard errors of
    # chance: 19 of 200 (9.6%). This seed reads 6.
    assert alarmed / comparisons <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / comparisons)


def test_slower_and_faster_leave_out_only_pairs_far_from_zero() -> None:
    d = [0.05, 0.04, 0.06, -0.01, 0.05, -0.35]  # median |d| 0.05: within 4 x 0.05 of 0, all but -0.35
    assert near_zero(d) == d[:-1]
    assert near_zero([0.0] * 5) == [0.0] * 5
    assert near_zero(d, spread=100) == d


def test_leaving_far_pairs_out_a_stalled_pair_no_longer_blocks_a_slowdown() -> None:
    # 15 pairs 5% slower (1% apart) and one whose B side stalled: the plain interval reaches -15%.
    d = [*_pairs(0.05, 0.01, 15, seed=3), math.log(0.7)]
    plain = decide(d, floor=0.03, confidence=0.9995)
    assert plain.verdict == "undecided"
    assert plain.low < 0.9
    near = decide(d, floor=0.03, confidence=0.9995, spread=SPREAD)
    assert near.verdict == "slower"
    assert near.left_out == 1
    assert 1.0 < near.low < near.ratio < near.high


@pytest.mark.parametrize("contamination", [0.0, 0.1, 0.3])
def test_leaving_far_pairs_out_keeps_the_false_alarm_rate_on_heavy_tails(contamination: float) -> None:
    # A/A with symmetric heavy tails (a share of pairs 10 times noisier): the test of the pairs kept
    # is exact, so at 90% slower or faster is called at most 10% of the time (give or take chance).
    rng = random.Random(7)
    sims, alarms = 4000, 0
    for _ in range(sims):
        d = [rng.gauss(0, 0.3 if rng.random() < contamination else 0.03) for _ in range(15)]
        alarms += decide(d, floor=0.0, confidence=0.9, spread=SPREAD).verdict in ("slower", "faster")
    assert alarms / sims <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / sims)


def test_ab_makes_no_look_before_its_first_alarm_look() -> None:
    from perfsuite.ab.comparison import schedule_for

    schedule = schedule_for(35, floor=0.03, alpha=0.05, first=None, cap=None)
    assert schedule.alarms == (15, 39, 60)
    assert schedule.looks()[0] == schedule.first == 15  # 7 quiet pairs no longer end a case as same
    assert set(schedule.alarms) <= set(schedule.looks())
    assert schedule.judge(_pairs(0.0, 0.005, 7, seed=5)) is None
    assert schedule_for(35, floor=0.03, alpha=0.05, first=3, cap=3).looks() == [3]  # --pairs 3 --max-pairs 3


def test_an_interval_too_few_pairs_bound_is_said_so_not_printed_as_zero_to_infinity() -> None:
    assert bounded(1.01, 0.0, math.inf) == "1.010 (too few pairs to bound it)"
    assert bounded(1.01, None, None) == "1.010 (too few pairs to bound it)"  # as a results file holds it
    assert bounded(1.01, 0.0, 1.2) == "1.010 [0, 1.200]"
    assert bounded(1.01, 0.982, 1.044) == "1.010 [0.982, 1.044]"
    few = decide([0.01, 0.02], floor=0.03, confidence=0.95)
    assert few.said() == f"{few.ratio:.3f} (too few pairs to bound it)"
