"""Re-decide the pairs of earlier ``perfsuite ab --json`` files under today's stopping rule.

    python benchmarks/ab/replay.py ab-results [--spread 4]

A case's pairs do not depend on when it stops (each round runs one pair of every open
case), so the pairs a file keeps show where today's rule (:func:`perfsuite.ab.comparison.schedule_for`,
:func:`perfsuite.core.paired.decide`) would have stopped and what it would have said. Per
file: each case's recorded verdict and pairs beside the replayed ones, and the pairs in all.
A case whose recorded pairs ran out before today's rule decided it says so ("ran out").
``--spread`` tries the alarm rule that leaves pairs far from 0 out (:func:`perfsuite.core.paired.near_zero`,
off in perfsuite ab).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from perfsuite.ab.comparison import schedule_for
from perfsuite.core.paired import SPREAD


def replay(ratios: list[float], cases: int, floor: float, alpha: float, spread: float | None) -> tuple[str, int]:
    """Today's verdict on these pairs, and how many it would have taken."""
    schedule = schedule_for(cases, floor=floor, alpha=alpha, first=None, cap=None)
    schedule = dataclasses.replace(schedule, spread=spread)
    paired = schedule.replay([math.log(r) for r in ratios])
    return ("ran out", len(ratios)) if paired is None else (paired.verdict, paired.pairs)


def main(directory: Path, spread: float | None) -> None:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise SystemExit(f"no perfsuite ab JSON files in {directory}")
    for path in files:
        payload = json.loads(path.read_text())
        if payload.get("kind") != "perfsuite-ab":
            continue
        cases = payload["cases"]
        floor = payload["schedule"]["floor"]
        alpha = payload.get("alpha") or (1 - payload["schedule"]["confidence"]) * len(cases)
        print(f"{path.name}:")
        recorded = replayed = 0
        for case in cases:
            if not case["ratios"] or case["time"] is None:
                continue
            verdict, pairs = replay(case["ratios"], len(cases), floor, alpha, spread)
            recorded += len(case["ratios"])
            replayed += pairs
            was = f"{case['time']['verdict']} at {len(case['ratios'])}"
            print(f"  {case['case']}: {was} → {verdict} at {pairs}")
        print(f"  pairs: {recorded} recorded, {replayed} under today's rule")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=Path("ab-results"))
    parser.add_argument("--spread", type=float, help=f"leave out pairs farther from 0 (e.g. {SPREAD})")
    args = parser.parse_args()
    main(args.directory, args.spread)
