"""Made-up profiles of a training step, for the tests of the explanations' profile diff and words."""

from __future__ import annotations

import random

from perfsuite.core.explain.records import StackRow, StepProfile

STEP = "perfsuite/worker/engines/loop.py(170): _step"
LINEAR = "torch/nn/modules/linear.py(130): forward"
HOOK = "acme/hooks.py(3): slow_hook"
SLEEP = "<built-in function sleep>"


def profile_from(
    stacks: dict[tuple[str, ...], tuple[float, int]], steps: int = 1, trace: str | None = None
) -> StepProfile:
    """A profile of ``steps`` steps from ``{frames outermost first: (self µs, calls)}`` (totals, not per step)."""
    frames: dict[str, int] = {}
    rows = []
    for path, (us, calls) in stacks.items():
        rows.append(StackRow(tuple(frames.setdefault(f, len(frames)) for f in path), us, calls))
    return StepProfile(steps, tuple(frames), tuple(rows), trace=trace)


def step(
    mm_calls: int = 2, mm_us: float = 500.0, sleep_us: float | None = None, jitter: float = 0.0, seed: int = 0
) -> StepProfile:
    """One profile of a step; ``jitter``: each entry's time within ± half that share, drawn from ``seed``."""
    noisy = random.Random(seed)

    def t(us: float) -> float:
        return us * (1 + jitter * (noisy.random() - 0.5))

    stacks = {
        (STEP,): (t(300.0), 1),
        (STEP, LINEAR, "aten::linear", "aten::addmm"): (t(1000.0), 4),
        (STEP, "aten::mm"): (t(mm_us), mm_calls),
        (STEP, "aten::add_"): (t(50.0), 10),
    }
    if sleep_us is not None:
        stacks[(STEP, HOOK)] = (t(20.0), 1)
        stacks[(STEP, HOOK, SLEEP)] = (t(sleep_us), 1)
    return profile_from(stacks)
