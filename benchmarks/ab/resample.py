"""What ``perfsuite ab``'s stopping rule decides on this machine's own noise: A/A pairs resampled.

    python benchmarks/ab/resample.py ab-push/aa-*.json [--sims 1000] [--spread 4 --spread none]

The simulation (``simulate.py``) assumes normal noise; real pairs have heavy tails. This takes
the pairs of A/A comparisons (``perfsuite ab --json``), centres each case's log-ratios on their
median, and pools them: the machine's noise, outliers and all, as it is (not symmetrised, so a
skew in it shows as false alarms). Each simulated case draws its pairs from that pool with
replacement, adds ``log(1 + change)``, and runs through the schedule ``perfsuite ab`` uses for
``--cases`` cases (:func:`perfsuite.ab.comparison.schedule_for`), once per ``--spread`` (``none``:
perfsuite ab's rule; a number: the alarm on the pairs near 0 only, :func:`perfsuite.core.paired.near_zero`); with
``--scale``, each case's pairs are first rescaled to that robust sd. Per row:
the share of cases called slower, faster, same and undecided, called at each alarm look, and the
mean pairs taken. With no change, *slower* plus *faster* is one case's false-alarm rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from pathlib import Path

from simulate import VERDICTS, simulate  # this directory's: the schedule over simulated cases

from perfsuite.ab.comparison import schedule_for


def robust_sd(d: list[float]) -> float:
    """1.4826 times the median absolute deviation: the sd, for normal noise, that outliers do not move."""
    centre = statistics.median(d)
    return 1.4826 * statistics.median(abs(x - centre) for x in d)


def pool(paths: list[Path], mode: str | None, scale: float | None) -> list[float]:
    """Every A/A pair's log-ratio less its case's median (cases with fewer than 7 pairs are left out);
    with ``scale``, each case's divided by its robust sd and multiplied by ``scale``: the tails'
    shape at one noise level."""
    noise: list[float] = []
    for path in paths:
        for case in json.loads(path.read_text())["cases"]:
            d = [math.log(r) for r in case["ratios"]]
            if len(d) >= 7 and (mode is None or case.get("mode") == mode):
                centre, factor = statistics.median(d), 1.0 if scale is None else scale / robust_sd(d)
                noise += [(x - centre) * factor for x in d]
    return noise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="perfsuite ab --json files of A/A comparisons")
    parser.add_argument("--cases", type=int, default=35, help="cases in the comparison (default 35: every push)")
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--mode", choices=("duet", "alternate"), help="only the pairs of cases run this way")
    parser.add_argument("--scale", type=float, help="each case's pairs rescaled to this robust sd (e.g. 0.03)")
    parser.add_argument("--spread", action="append", help="the alarm's spread (default: 4 and none)")
    parser.add_argument("--change", action="append", type=float, help="injected changes (default: 0, 0.04, 0.05)")
    args = parser.parse_args()
    noise = pool(args.files, args.mode, args.scale)
    robust = robust_sd(noise)
    print(
        f"{len(noise)} pairs from {len(args.files)} file(s); robust sd {robust:.2%}, "
        f"beyond 4 robust sd: {sum(abs(x) > 4 * robust for x in noise)}; from {min(noise):+.1%} to {max(noise):+.1%}"
    )
    base = schedule_for(args.cases, floor=0.03, alpha=0.05, first=None, cap=None)
    looks = [f"alarm at {n}" for n in base.alarms]
    print(f"| spread | change | {' | '.join(VERDICTS)} | {' | '.join(looks)} | mean pairs |")
    print("|---|---|" + "---|" * (len(VERDICTS) + len(looks) + 1))
    for spread_text in args.spread or ["4", "none"]:
        spread = None if spread_text == "none" else float(spread_text)
        schedule = dataclasses.replace(base, spread=spread)
        for change in args.change or [0.0, 0.04, 0.05]:
            shares = simulate(schedule, change, lambda rng: rng.choice(noise), args.sims, seed=round(change * 1000))
            cells = " | ".join(f"{shares[k]:.2%}" for k in (*VERDICTS, *looks))
            print(f"| {spread_text} | {change:+.0%} | {cells} | {shares['mean pairs']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
