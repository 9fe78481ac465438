"""How often ``perfsuite ab``'s judgement of a loss from other initial weights alarms when nothing but the
seed changed (an A/A over seeds), and how wide its interval is.

    python benchmarks/ab/seeds_aa.py run CASES SEEDS OUT.json     # e.g. tiny-bert:vanilla,tiny-gpt2:vanilla 40
    python benchmarks/ab/seeds_aa.py judge OUT.json [--draws 20000] [--confidence 0.99] [--seeds 5]

``run`` trains each case (``model:strategy``, on a CPU, one thread, unprofiled) at seeds 0 to SEEDS-1
and keeps each loss curve. ``judge`` draws, per case, a set of seeds as the base's (its own and
``--seeds`` more: :data:`perfsuite.ab.pairs.LOSS_SEEDS` unless asked) and one other seed as a
candidate that only re-drew its initial weights and data, and judges it as ``perfsuite ab`` does
(:func:`perfsuite.core.loss.check_against_seeds`) at ``--confidence`` (``ab`` uses 1 - alpha / cases:
0.9986 for 35 cases): the share judged *higher than at another seed* is the false-alarm rate of one
case (a regression), apart from the share judged *lower* (improved, which fails nothing);
the median half-width, what a change of the mean loss must exceed to be caught. Losses do not depend
on the machine's load, so this may run beside other work.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path


def run(cases: list[str], seeds: int, out: Path) -> None:
    from perfsuite.core.preloads import preload_for
    from perfsuite.core.spec import CaseSpec
    from perfsuite.worker.process import run_isolated

    curves: dict[str, list[list[float]]] = {}
    for case in cases:
        model, strategy = case.split(":")
        specs = [
            CaseSpec(model=model, strategy=strategy, seed=s, device="cpu", profile=False, threads=1)
            for s in range(seeds)
        ]
        preload_for(specs)
        curves[case] = []
        for spec in specs:
            record = run_isolated(spec, timeout_s=600)
            if not record.ok:
                sys.exit(f"{spec.id} at seed {spec.seed}: {record.error}")
            curves[case].append([float(v) for v in record.loss])
        print(f"{case}: {seeds} seeds, {len(curves[case][0])} steps", flush=True)
    out.write_text(json.dumps(curves))


def judge(path: Path, draws: int, confidence: float, seeds: int) -> None:
    from perfsuite.core.loss import check_against_seeds

    curves: dict[str, list[list[float]]] = json.loads(path.read_text())
    print(
        f"| case | seeds | false alarms (of {draws} draws): higher (a regression) | lower (improved) "
        f"| median half-width of the {confidence:.4g} interval |"
    )
    print("|---|---|---|---|---|")
    for case, runs in curves.items():
        rng = random.Random(0)
        higher, lower, widths = 0, 0, []
        for _ in range(draws):
            drawn = rng.sample(range(len(runs)), seeds + 2)
            check = check_against_seeds(case, [runs[i] for i in drawn[:-1]], runs[drawn[-1]], "re-seeded", confidence)
            higher += not check.ok and not (check.rel or 0.0) < 0
            lower += not check.ok and (check.rel or 0.0) < 0
            widths.append(check.limit or 0.0)
        said = f"{higher / draws:.2%} | {lower / draws:.2%} | {statistics.median(widths):.2%}"
        print(f"| {case} | {len(runs)} | {said} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    running = sub.add_parser("run")
    running.add_argument("cases")
    running.add_argument("seeds", type=int)
    running.add_argument("out", type=Path)
    judging = sub.add_parser("judge")
    judging.add_argument("file", type=Path)
    judging.add_argument("--draws", type=int, default=20000)
    judging.add_argument("--confidence", type=float, default=0.99)
    judging.add_argument("--seeds", type=int, help="the base's other seeds (default: perfsuite ab's, 5)")
    args = parser.parse_args()
    if args.command == "run":
        run(args.cases.split(","), args.seeds, args.out)
    else:
        from perfsuite.ab.pairs import LOSS_SEEDS

        judge(args.file, args.draws, args.confidence, LOSS_SEEDS if args.seeds is None else args.seeds)


if __name__ == "__main__":
    main()
