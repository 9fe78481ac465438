"""What watching a step costs (``perfsuite ab``'s "what the cases' steps ran", docs/ab.md): the memory
profile's step, which the watch rides on, timed plain and watched in turn in one process, after
the warm-up, for tiny-bert (our loop) and tiny-llama (the Trainer), medians of 8 each; and the
matching of the calls to the packages' files after it.

    python benchmarks/ab/watch_cost.py
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch

from perfsuite.core.reach import Ask
from perfsuite.core.spec import tier_spec
from perfsuite.worker.build import build
from perfsuite.worker.engines.driven import Driven
from perfsuite.worker.measure import memory_breakdown
from perfsuite.worker.reach import Watch

torch.set_num_threads(1)
warnings.simplefilter("ignore")
for model, strategy, engine_name in [("tiny-bert", "vanilla", "loop"), ("tiny-llama", "grad_accum", "trainer")]:
    spec = tier_spec(model, strategy, engine_name, steps=40, warmup_steps=2)
    built = build(spec)
    engine = Driven(built.engine, device_type="cpu", tokens=built.token_positions)
    for _ in range(spec.warmup_steps):
        engine.step()
    memory_breakdown(engine)
    times: dict[str, list[float]] = {"plain": [], "watched": [], "ran()": []}
    for i in range(16):
        label = "watched" if i % 2 else "plain"
        watch = Watch(Ask(("transformers", "accelerate", "bitsandbytes")))
        if label == "watched":
            engine.watch_next_step(watch.watching())
        t = time.perf_counter()
        memory_breakdown(engine)
        times[label].append(time.perf_counter() - t)
        if label == "watched":
            t = time.perf_counter()
            watch.ran()
            times["ran()"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{model}-{strategy}-{engine_name}: profile step plain {med['plain'] * 1e3:.1f} ms, "
        f"watched {med['watched'] * 1e3:.1f} ms ({med['watched'] / med['plain'] - 1:+.1%}), "
        f"matching after it {med['ran()'] * 1e3:.1f} ms"
    )
