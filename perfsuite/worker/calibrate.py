"""The calibration workload that CPU step times are measured against. No torch.

On shared machines whole runs land faster or slower by tens of percent (a busy
neighbour, a lower clock), so a step time in seconds, or as a ratio to a vanilla run
made minutes earlier, carries that drift. A case's worker therefore runs this fixed
workload right before each timed step and after the last one, and the gated figure
is the median over steps of ``step time ÷ the mean of the two calibrations around
it``: drift that slows both cancels, while a slowdown of the training stack (torch,
transformers, accelerate...) shows, because this workload goes through none of it.

The mix imitates what a training step spends time on: a BLAS matmul, memory-bound
elementwise passes over a few MiB, and interpreter work (a tiny model's step is mostly
Python and dispatcher overhead). Changing it changes every calibrated figure, so it is
versioned: :data:`NAME` is stored with each baseline and a mismatch asks for a refresh.

v2 runs the mix twice and times only the second pass: the pass right after a training
step ran about 5% slower after a busy step and 15% after a sleeping one (the core's
clock and caches still in the step's state), which pulled an injected 25% slowdown down
to +20% in the calibrated figure; the second pass no longer depends on what came before.

The workload's BLAS runs on one thread, whatever the case's thread count. numpy's
OpenBLAS threads spin for a while after each call, so with the case's two threads they
went on spinning through the step that followed and took a core from torch's intra-op
threads: a tiny-bert step at two threads took 1.6-1.9x what the same step takes in a bare
loop (``perfsuite overhead``, docs/overhead.md). One thread wakes no BLAS thread at all, and
the workload still measures what it is for, the speed of the core the steps run on. At
one thread (the CPU tier's) nothing changes, so the workload keeps its name.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

NAME = "numpy-mix-v2"
"""Identifies the workload below; a baseline records it next to its calibrated times."""


class Calibration:
    """The workload's inputs, made once per worker (seeded, so every run does the same work)."""

    def __init__(self) -> None:
        from threadpoolctl import threadpool_limits

        # Only numpy's BLAS ("blas": torch's CPU wheel brings none that threadpoolctl sees;
        # its OpenMP pool is torch.set_num_threads'). For the worker's life: nothing else
        # in a case calls numpy's BLAS.
        threadpool_limits(limits=1, user_api="blas")
        rng = np.random.default_rng(0)
        self._a = rng.standard_normal((192, 384), dtype=np.float32)
        self._b = rng.standard_normal((384, 768), dtype=np.float32)
        self._c = np.empty((192, 768), dtype=np.float32)
        self._x = rng.standard_normal(1 << 20, dtype=np.float32)  # 4 MiB: past L2, inside L3
        self._y = np.empty_like(self._x)

    def run_once(self) -> float:
        """Seconds the workload's second pass took (about 13 ms on one EPYC core)."""
        self._mix()  # settles the core after whatever ran before (see the module docstring)
        start = time.perf_counter()
        self._mix()
        return time.perf_counter() - start

    def _mix(self) -> None:
        for _ in range(3):
            np.matmul(self._a, self._b, out=self._c)
            np.tanh(self._c, out=self._c)
        for _ in range(6):
            np.multiply(self._x, 1.0001, out=self._y)
            np.add(self._y, self._x, out=self._y)
            np.exp(self._y[: 1 << 18], out=self._y[: 1 << 18])
        table: dict[int, int] = {}
        for i in range(30_000):
            table[i & 255] = table.get(i & 255, 0) + i


def calibrated_steps(step_times: Sequence[float], calibrations: Sequence[float]) -> list[float]:
    """Each step's time over the mean of the calibrations run just before and just after it."""
    if len(calibrations) != len(step_times) + 1:
        raise ValueError(f"{len(step_times)} steps need {len(step_times) + 1} calibrations, got {len(calibrations)}")
    return [s / ((calibrations[i] + calibrations[i + 1]) / 2) for i, s in enumerate(step_times)]
