"""Does a run's step time depend on the forkserver it was forked from? An A/A on this machine.

Every worker forked from one forkserver inherits its randomised address-space layout. On a
CPU one layout moves a case's step time by a few percent the same way in every run
(docs/ab.md), so the CPU tier's repeats each start a new forkserver. This measures the
effect where it runs: ``--blocks`` forkservers, each running every strategy ``--runs`` times
(interleaved, unprofiled, as the gate times them), and a one-way analysis of variance of
the log median step time by forkserver:

- ``within``: the spread of runs forked from one forkserver (robust to nothing: plain sd);
- ``between``: the spread a new forkserver adds on top, ``sqrt(max(0, (MS_b - MS_w) / runs))``;
- ``p``: how often a random split of the same runs into blocks gives an F at least as large
  (permutation test), so no normality is assumed.

    python benchmarks/gpu/layout.py --json layout.json   # bert-base-uncased vanilla and fp16, 4 x 2 runs each

The JSON is rewritten after every run, so a run cut short keeps what it measured; ``--analyse
FILE`` prints the analysis of such a file.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def analyse(rows: list[dict[str, Any]], permutations: int = 5000) -> dict[str, dict[str, Any]]:
    """Per strategy: runs, blocks, within and between spreads (as fractions), F and its permutation p."""
    out: dict[str, dict[str, Any]] = {}
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        blocks: dict[int, list[float]] = {}
        for r in rows:
            if r["strategy"] == strategy and r.get("median_s"):
                blocks.setdefault(r["block"], []).append(math.log(r["median_s"]))
        groups = [g for g in blocks.values() if len(g) >= 2]
        if len(groups) < 2:
            continue
        f, ms_w, ms_b = _anova(groups)
        runs = statistics.mean(len(g) for g in groups)
        values = [x for g in groups for x in g]
        sizes = [len(g) for g in groups]
        rng = random.Random(0)
        at_least = 0
        for _ in range(permutations):
            rng.shuffle(values)
            split, start = [], 0
            for size in sizes:
                split.append(values[start : start + size])
                start += size
            at_least += _anova(split)[0] >= f
        out[strategy] = {
            "runs": len(values),
            "blocks": len(groups),
            "block_medians_ms": [round(1e3 * math.exp(statistics.median(g)), 3) for g in groups],
            "within": math.sqrt(ms_w),
            "between": math.sqrt(max(0.0, (ms_b - ms_w) / runs)),
            "F": f,
            "p": (at_least + 1) / (permutations + 1),
        }
    return out


def _anova(groups: list[list[float]]) -> tuple[float, float, float]:
    n, k = sum(len(g) for g in groups), len(groups)
    grand = sum(sum(g) for g in groups) / n
    means = [sum(g) / len(g) for g in groups]
    ms_w = sum((x - m) ** 2 for g, m in zip(groups, means, strict=True) for x in g) / (n - k)
    ms_b = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True)) / (k - 1)
    return (ms_b / ms_w if ms_w > 0 else math.inf), ms_w, ms_b


def _report(analysis: dict[str, dict[str, Any]]) -> None:
    for strategy, a in analysis.items():
        print(
            f"{strategy}: {a['runs']} runs in {a['blocks']} forkservers, block medians {a['block_medians_ms']} ms; "
            f"within {100 * a['within']:.2f}%, between {100 * a['between']:.2f}%, F {a['F']:.2f}, p {a['p']:.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bert-base-uncased")
    parser.add_argument("--strategies", default="vanilla,fp16")
    parser.add_argument("--blocks", type=int, default=4, help="forkservers (default 4)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each strategy per forkserver (default 2)")
    parser.add_argument("--json", type=Path, help="write every run and the analysis here")
    parser.add_argument("--analyse", type=Path, metavar="FILE", help="only print the analysis of FILE")
    args = parser.parse_args()
    if args.analyse:
        _report(analyse(json.loads(args.analyse.read_text())["runs"]))
        return 0
    if args.json is None:
        parser.error("--json is required unless --analyse")

    from perfsuite.core.spec import tier_spec
    from perfsuite.worker.process import renew_forkserver, run_isolated

    strategies = args.strategies.split(",")
    rows: list[dict[str, Any]] = []
    for block in range(args.blocks):
        if block:
            renew_forkserver()
        for run in range(args.runs):
            # Alternate the order inside a block, so neither strategy always runs first after the boot.
            for strategy in strategies if (block + run) % 2 == 0 else strategies[::-1]:
                spec = tier_spec(args.model, strategy, profile=False)
                started = time.monotonic()
                record = run_isolated(spec, timeout_s=600)
                median = (record.get("step_time_s") or {}).get("median") if record["status"] == "ok" else None
                rows.append(
                    {
                        "block": block,
                        "run": run,
                        "strategy": strategy,
                        "status": record["status"],
                        "error": record.get("error"),
                        "median_s": median,
                        "worker_startup_s": record.get("worker_startup_s"),
                        "wall_s": time.monotonic() - started,
                        "phases_s": record.get("phases_s"),
                    }
                )
                shown = f"{1e3 * median:.2f} ms" if median else record.get("error")
                print(
                    f"block {block} run {run} {strategy}: {shown} (start {record.get('worker_startup_s') or 0:.1f} s)"
                )
                args.json.write_text(json.dumps({"runs": rows}, indent=1))
    analysis = analyse(rows)
    args.json.write_text(json.dumps({"runs": rows, "analysis": analysis}, indent=1))
    _report(analysis)
    return 0


if __name__ == "__main__":
    sys.exit(main())
