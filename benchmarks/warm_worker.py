"""Would a case run after another in the same worker measure what it measures in a worker of its own?

perfsuite runs every case in a new worker forked from the session's forkserver. A warm worker,
running several cases one after another, would save each case its process start (on a GPU, the
CUDA start and the model moved), but TorchBench left shared processes because results depended
on which model ran before. This is the A/A that decides: each case runs *fresh* (a worker of its
own, as perfsuite runs it) and *warm* (in a worker that first ran another case, a different
predecessor each time, always including the largest one, its engine closed), in the order
F W W F F W W F F W, and the two are compared:

- loss: every step's, to the bit, against the first fresh run;
- memory: the peak and its split by category, to the byte;
- step time: warm ÷ fresh of the calibrated medians (raw on a GPU), with a bootstrap 95% interval
  over runs; inside ±1% passes.

    python benchmarks/warm_worker.py --json warm.json            # eight CPU-tier cases, 5 + 5 runs each
    python benchmarks/warm_worker.py --reset --json warm.json    # accelerate's state reset between the two
    python benchmarks/warm_worker.py --analyse warm.json

The JSON is rewritten after every run, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

CASES = (
    "tiny-bert-vanilla,tiny-bert-fp16,tiny-bert-adamw_8bit,tiny-bert-grad_ckpt,tiny-t5-vanilla,"
    "tiny-gpt2-dynamic_padding,tiny-llama-lora,tiny-bert-vanilla-trainer"
)
PREDECESSORS = (
    "tiny-bert-all,tiny-bert-zero2_offload,tiny-bert-adafactor,tiny-t5-grad_accum,tiny-gpt2-grad_ckpt,"
    "tiny-llama-vanilla,tiny-bert-lora,tiny-bert-dataloader,tiny-bert-grad_accum-trainer,tiny-bert-bf16"
)
ORDER = "FWWFFWWFFW"
_PREDECESSOR = "PERFSUITE_WARM_PREDECESSOR"
_RESET = "PERFSUITE_WARM_RESET"


def _spec(case_id: str) -> Any:
    from perfsuite.core.spec import parse_case_id, tier_spec

    model, strategy, engine, world_size = parse_case_id(case_id)
    return tier_spec(model, strategy, engine, world_size=world_size)


def warm(spec: Any) -> Any:
    """In the worker: the predecessor's case, its engine closed, then ``spec``'s, whose record is returned."""
    from perfsuite.worker import teardown
    from perfsuite.worker.run import run_case

    environment = dict(os.environ)
    worker = teardown._STATE["worker"]
    teardown._STATE["worker"] = None  # the predecessor's engine is closed, as a warm worker would close it
    try:
        run_case(_spec(os.environ[_PREDECESSOR]))
    finally:
        teardown._STATE["worker"] = worker
    if os.environ.get(_RESET):
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        os.environ.clear()
        os.environ.update(environment)
    gc.collect()
    return run_case(spec)


def _interval(warm_runs: list[float], fresh_runs: list[float], draws: int = 4000) -> tuple[float, float]:
    rng = random.Random(0)
    ratios = sorted(
        statistics.median(rng.choices(warm_runs, k=len(warm_runs)))
        / statistics.median(rng.choices(fresh_runs, k=len(fresh_runs)))
        for _ in range(draws)
    )
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def analyse(rows: list[dict[str, Any]]) -> list[str]:
    """A line per case, then one per warm run that failed or differs from the first fresh one."""
    lines = []
    for case in dict.fromkeys(r["case"] for r in rows):
        fresh = [r for r in rows if r["case"] == case and r["mode"] == "F" and r["status"] == "ok"]
        warm_all = [r for r in rows if r["case"] == case and r["mode"] == "W"]
        warm_ok = [r for r in warm_all if r["status"] == "ok"]
        if not fresh:
            lines.append(f"{case}: no fresh run finished")
            continue
        first = fresh[0]
        same_fresh = all(r["loss"] == first["loss"] and r["memory"] == first["memory"] for r in fresh)
        line = f"{case}: fresh {len(fresh)} (loss and memory alike: {same_fresh})"
        line += f", warm {len(warm_ok)} of {len(warm_all)} ran"
        if warm_ok:
            w, f = [r["step_s"] for r in warm_ok], [r["step_s"] for r in fresh]
            low, high = _interval(w, f)
            line += f"; step time warm/fresh {statistics.median(w) / statistics.median(f):.3f} [{low:.3f}, {high:.3f}]"
        lines.append(line)
        for r in warm_all:
            if r["status"] != "ok":
                lines.append(f"  after {r['predecessor']}: {r['status']}: {(r['error'] or '')[:100]}")
                continue
            if r["loss"] != first["loss"]:
                worst = max(abs(a - b) for a, b in zip(r["loss"], first["loss"], strict=True))
                lines.append(f"  after {r['predecessor']}: loss differs, at most {worst:.2e}")
            if r["memory"] != first["memory"]:
                before = first["memory"]
                moved = {k: v - before.get(k, 0) for k, v in r["memory"].items() if v != before.get(k)}
                lines.append(f"  after {r['predecessor']}: memory differs by {moved} bytes")
    return lines


def _row(case: str, mode: str, predecessor: str | None, record: dict[str, Any]) -> dict[str, Any]:
    ok = record["status"] == "ok"
    timed = record.get("step_time_calibrated") or record.get("step_time_s") or {}
    breakdown = record.get("memory_breakdown_bytes") or {}
    memory = {"peak": record.get("peak_memory_bytes"), **breakdown.get("categories", breakdown)} if ok else {}
    return {
        "case": case,
        "mode": mode,
        "predecessor": predecessor,
        "status": record["status"],
        "error": record.get("error"),
        "loss": record.get("loss"),
        "memory": {k: v for k, v in memory.items() if isinstance(v, int)},
        "step_s": timed.get("median"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=CASES, help="comma-separated case ids")
    parser.add_argument("--predecessors", default=PREDECESSORS, help="case ids to draw from; the first always runs")
    parser.add_argument("--reset", action="store_true", help="reset accelerate's process-wide state between cases")
    parser.add_argument("--json", type=Path, help="write every run here")
    parser.add_argument("--analyse", type=Path, metavar="FILE", help="only print the analysis of FILE")
    args = parser.parse_args()
    if args.analyse:
        try:
            runs = json.loads(args.analyse.read_text())["runs"]
            print("\n".join(analyse(runs)))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a file of another kind, or none
            parser.error(f"--analyse {args.analyse}: not a file this script wrote ({type(exc).__name__}: {exc})")
        return 0
    if args.json is None:
        parser.error("--json is required unless --analyse")

    from perfsuite.core.preloads import preload_for
    from perfsuite.worker.process import run_isolated

    cases, pool = args.cases.split(","), args.predecessors.split(",")
    try:
        for case in cases + pool:
            _spec(case)
    except ValueError as exc:
        parser.error(str(exc))
    preload_for([_spec(c) for c in cases + pool])  # one forkserver for every run, as a session has
    env = {_RESET: "1"} if args.reset else {}
    rng = random.Random(0)
    rows: list[dict[str, Any]] = []
    for case in cases:
        drawn = [pool[0], *rng.sample([p for p in pool[1:] if p != case], ORDER.count("W") - 1)]
        rng.shuffle(drawn)
        for mode in ORDER:
            predecessor = drawn.pop() if mode == "W" else None
            if predecessor is None:
                record = run_isolated(_spec(case), timeout_s=600)
            else:
                record = run_isolated(_spec(case), timeout_s=600, target=warm, env={**env, _PREDECESSOR: predecessor})
            rows.append(_row(case, mode, predecessor, record))
            print(f"{case} {mode} {predecessor or ''}: {record['status']}", flush=True)
            args.json.write_text(json.dumps({"reset": args.reset, "runs": rows}, indent=1))
    print("\n".join(analyse(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
