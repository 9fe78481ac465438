"""How often an A/A of an explanation shows a time change, by the threshold's factor (simulated).

Each simulated explanation profiles one stack four times (A B A B). A profile has ``--entries`` ops
whose mean times are log-normal (median e^5 µs, log sd 1.5); each profile draws a whole-run factor
(normal, sd ``--run-sd``: a layout, a busy neighbour) and a factor per entry (sd ``--entry-sd``). The
diff (perfsuite.core.explain.profile.diff, with the factor set) is asked whether any entry's time
changed. Prints, per factor, the share of A/As that show an item, and the share of explanations of a
real change (one entry slowed by a tenth of the largest entry's time) that show it.

    python benchmarks/explain/threshold.py                      # the figures in profile.NOISE_FACTOR's docstring
    python benchmarks/explain/threshold.py --run-sd 0.08 --entry-sd 0.01
"""

from __future__ import annotations

import argparse
import math
import random

from perfsuite.core.explain import profile
from perfsuite.core.explain.records import StackRow, StepProfile


def _profile(means: list[float], run: float, entry_sd: float, draw: random.Random, slowed: float = 0.0) -> StepProfile:
    frames = ("step", *(f"aten::op{i}" for i in range(len(means))))
    rows = [StackRow((0, i + 1), m * run * (1 + draw.gauss(0, entry_sd)) + (slowed if i == 0 else 0.0), 1)
            for i, m in enumerate(means)]  # fmt: skip
    return StepProfile(1, frames, tuple(rows))


def shares(
    factor: float, *, entries: int, run_sd: float, entry_sd: float, trials: int, seed: int
) -> tuple[float, float]:
    profile.NOISE_FACTOR = factor
    draw = random.Random(seed)
    false = found = 0
    for _ in range(trials):
        means = [math.exp(draw.gauss(5, 1.5)) for _ in range(entries)]
        slowed = 0.1 * max(means)
        for change, count in ((0.0, "false"), (slowed, "found")):
            runs = [_profile(means, 1 + draw.gauss(0, run_sd), entry_sd, draw, change * (i % 2)) for i in range(4)]
            diff = profile.diff(runs[0::2], runs[1::2])
            if count == "false":
                false += bool(diff.changes)
            else:
                found += any(c.key == "aten::op0" for c in diff.changes)
    return false / trials, found / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=60)
    parser.add_argument("--run-sd", type=float, default=0.03)
    parser.add_argument("--entry-sd", type=float, default=0.05)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for factor in (1.0, 2.0, 3.0, 4.0):
        false, found = shares(
            factor, entries=args.entries, run_sd=args.run_sd, entry_sd=args.entry_sd, trials=args.trials, seed=args.seed
        )
        print(f"factor {factor:g}: an A/A shows an item in {false:.1%}; a tenth of the largest entry: {found:.1%}")


if __name__ == "__main__":
    main()
