"""What ``perfsuite ab``'s default schedule decides on synthetic pairs: false alarms, misses, power, pairs.

    python benchmarks/ab/simulate.py [--cases 35] [--sims 20000] [--max-pairs N]

Each simulated case draws pair log-ratios ``log(1 + change) + N(0, noise)`` and runs them
through the schedule ``perfsuite ab`` uses for that many cases
(:func:`perfsuite.ab.comparison.schedule_for`, :meth:`perfsuite.core.paired.Schedule.replay`).
One row per noise level and change: the share of cases called slower, faster, same and
undecided, and the mean pairs taken. With no change, *slower* plus *faster* is the false-alarm
rate of one case (over the comparison's cases it adds up to at most alpha); with a change
beyond the floor, *same* is the miss rate. Normal noise is an idealisation: the A/A and
injected-slowdown runs on a real machine (benchmarks/ab/measure.sh) are the test.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable

from perfsuite.ab.comparison import schedule_for
from perfsuite.core.paired import Schedule

VERDICTS = ("slower", "faster", "same", "undecided")


def simulate(
    schedule: Schedule, change: float, draw: Callable[[random.Random], float], sims: int, seed: int
) -> dict[str, float]:
    """Over ``sims`` cases whose pairs are ``log(1 + change)`` plus ``draw(rng)``: the share given each
    verdict, the share called slower or faster at each alarm look (``alarm at N``), and the
    mean number of pairs taken (``mean pairs``)."""
    rng = random.Random(seed)
    counts = dict.fromkeys(VERDICTS, 0) | {f"alarm at {n}": 0 for n in schedule.alarms}
    pairs = 0
    for _ in range(sims):
        d = [math.log1p(change) + draw(rng) for _ in range(schedule.cap)]
        paired = schedule.replay(d)
        if paired is None:  # cannot happen: the pairs reach the cap
            raise AssertionError("the schedule ran out of pairs")
        counts[paired.verdict] += 1
        if paired.verdict in ("slower", "faster"):
            counts[f"alarm at {paired.pairs}"] += 1
        pairs += paired.pairs
    return {k: n / sims for k, n in counts.items()} | {"mean pairs": pairs / sims}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=35, help="cases in the comparison (default 35: every push)")
    parser.add_argument("--sims", type=int, default=20000, help="simulated cases per row (default 20000)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--floor", type=float, default=0.03)
    parser.add_argument("--max-pairs", type=int, help="the cap (default: perfsuite ab's)")
    args = parser.parse_args()
    schedule = schedule_for(args.cases, floor=args.floor, alpha=args.alpha, first=None, cap=args.max_pairs)
    print(
        f"{args.cases} cases: pairs {schedule.first} to {schedule.cap}, looks every {schedule.step}; "
        f"slower or faster at pairs {', '.join(map(str, schedule.alarms))} at {schedule.confidence:.5f}; "
        f"same at {schedule.same_confidence} at any look; {args.sims} simulated cases per row"
    )
    print("| noise (sd of a pair) | change | slower | faster | same | undecided | mean pairs |")
    print("|---|---|---|---|---|---|---|")
    for noise in (0.02, 0.04, 0.06, 0.08):
        for change in (0.0, 0.04, 0.05):
            shares = simulate(
                schedule,
                change,
                lambda rng, sd=noise: rng.gauss(0, sd),
                args.sims,
                seed=round(noise * 1000 + change * 100),
            )
            cells = " | ".join(f"{shares[v]:.2%}" for v in VERDICTS)
            print(f"| {noise:.0%} | {change:+.0%} | {cells} | {shares['mean pairs']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
