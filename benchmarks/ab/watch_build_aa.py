"""Whether watching a case's build and first step moves anything its timed steps measure (``perfsuite ab``'s "what the
cases ran", docs/ab.md): the same case run in a worker of its own, plain (P) and with the watch asked
(W: build, first step and profile step watched), in ABBA blocks (P W W P), for tiny-bert (our loop) and tiny-llama
grad_accum (the Trainer). Prints, per case: whether the losses, the peak and the memory breakdown are
the same to the bit in every run; the watched runs' step-time median against the plain ones' in the
same block (log ratio, median and range over the blocks) beside the plain runs' own spread (the first
plain run of a block against its last: an A/A); and what the watch adds to the build and to the first warm-up step.

    python benchmarks/ab/watch_build_aa.py [BLOCKS] [CASE ...]   (4 blocks; CASE: a case id printed)
"""

from __future__ import annotations

import math
import statistics
import sys

from perfsuite.core.reach import WATCH_ENV, Ask
from perfsuite.core.spec import tier_spec
from perfsuite.worker.process import run_isolated


def main(blocks: int, only: list[str]) -> None:
    ask = Ask(("transformers", "accelerate", "bitsandbytes", "peft"))
    for model, strategy, engine in [("tiny-bert", "vanilla", "loop"), ("tiny-llama", "grad_accum", "trainer")]:
        spec = tier_spec(model, strategy, engine)
        if only and spec.id not in only:
            continue
        runs: dict[str, list] = {"P": [], "W": []}
        for _ in range(blocks):
            for arm in "PWWP":
                env = {WATCH_ENV: ask.request()} if arm == "W" else {}
                record = run_isolated(spec, timeout_s=600, env=env)
                assert record.ok, record.error
                assert (record.step_ran is not None) == (arm == "W")
                runs[arm].append(record)
        figures = {(tuple(r.loss), r.peak_memory_bytes, str(r.memory_breakdown_bytes)) for r in runs["P"] + runs["W"]}
        step = {arm: [r.timed().median for r in rs] for arm, rs in runs.items()}
        # A block's two watched runs against its two plain ones (geometric means): drift cancels.
        watched = [
            _log_mean(step["W"][2 * b : 2 * b + 2]) - _log_mean(step["P"][2 * b : 2 * b + 2]) for b in range(blocks)
        ]
        plain = [math.log(step["P"][2 * b + 1] / step["P"][2 * b]) for b in range(blocks)]
        build = {arm: statistics.median(r.phases_s["build"] for r in rs) for arm, rs in runs.items()}
        first = {arm: statistics.median(r.warmup_step_s[0] for r in rs) for arm, rs in runs.items()}
        print(
            f"{spec.id}: losses, peak and breakdown identical in all {4 * blocks} runs: {len(figures) == 1}; "
            f"step median W/P {_pct(statistics.median(watched))} (blocks {_pct(min(watched))}..{_pct(max(watched))}), "
            f"P/P {_pct(statistics.median(plain))} ({_pct(min(plain))}..{_pct(max(plain))}); "
            f"build {build['P']:.2f} s plain, {build['W']:.2f} s watched; "
            f"first warm-up step {first['P']:.3f} s plain, {first['W']:.3f} s watched"
        )


def _log_mean(values: list[float]) -> float:
    return statistics.fmean(math.log(v) for v in values)


def _pct(log_ratio: float) -> str:
    return f"{math.expm1(log_ratio):+.1%}"


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4, sys.argv[2:])
