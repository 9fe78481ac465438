"""benchmarks/ab's injected slowdown, the tool behind docs/ab-sensitivity.md's figures: the
slow-python wrapper lengthens each optimizer step by the fraction asked, control-python by
nothing, and an optimizer of another class is left alone."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

AB = Path(__file__).resolve().parents[1] / "benchmarks" / "ab"
# Each step: 20 ms of sleep (the "step"), then the optimizer's step and the hook.
STEPS = """
import json, time, torch
param = torch.nn.Parameter(torch.zeros(4))
optimizer = torch.optim.SGD([param], lr=0.1)
times = []
for _ in range(12):
    start = time.perf_counter()
    time.sleep(0.02)
    optimizer.step()
    times.append(time.perf_counter() - start)
print(json.dumps(times[2:]))
"""


def _output(wrapper: str, script: str, env: dict[str, str]) -> Any:
    """What ``script`` prints (JSON) under ``wrapper`` with ``env`` added."""
    environment = {**os.environ, "PERFSUITE_BASE_PYTHON": sys.executable, **env}
    command = ["sh", str(AB / wrapper), "-c", script]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=True, timeout=120)
    return json.loads(done.stdout)


def _median_step(wrapper: str, **env: str) -> float:
    return float(statistics.median(_output(wrapper, STEPS, env)))


@pytest.mark.slow
@pytest.mark.nightly  # the tool serves docs/ab-sensitivity.md's runs, not a push
@pytest.mark.alone  # it times steps
def test_slow_python_lengthens_each_step_by_the_fraction_and_control_python_does_not() -> None:
    control = _median_step("control-python", PERFSUITE_SLOWDOWN="0.5", PERFSUITE_SLOWDOWN_CONTROL="1")
    slow = _median_step("slow-python", PERFSUITE_SLOWDOWN="0.5")
    other = _median_step("slow-python", PERFSUITE_SLOWDOWN="0.5", PERFSUITE_SLOWDOWN_OPTIMIZER="Adafactor")
    assert 1.35 < slow / control < 1.7  # 50% asked
    assert 0.9 < other / control < 1.1  # SGD is not Adafactor: not slowed


# A GPU that runs a spin of N cycles in N / 1e9 s, for the kernel mode on a machine without one:
# the hook sees a CUDA device, and torch.cuda's calls it makes are stand-ins that log the spins.
FAKE_GPU = """
import contextlib, json, sys, time, torch
RATE = 1e9
spins = []
def _sleep(cycles):
    spins.append(cycles)
    time.sleep(cycles / RATE)
class Event:
    def __init__(self, enable_timing=False):
        self.at = None
    def record(self):
        self.at = time.perf_counter()
    def synchronize(self):
        pass
    def elapsed_time(self, end):
        return (end.at - self.at) * 1000
torch.cuda._sleep, torch.cuda.Event = _sleep, Event
torch.cuda.synchronize = lambda device=None: None
torch.cuda.device = lambda device: contextlib.nullcontext()
sys.modules["sitecustomize"]._device_of = lambda optimizer: torch.device("cuda")
"""


def _kernel_steps(wrapper: str, **env: str) -> tuple[float, list[int]]:
    """The median step under ``wrapper`` on the stand-in GPU, and the spins it was asked for."""
    script = FAKE_GPU + STEPS.replace("print(json.dumps(times[2:]))", "print(json.dumps([times[2:], spins]))")
    times, spins = _output(wrapper, script, {"PERFSUITE_SLOWDOWN_KERNEL": "1", **env})
    return float(statistics.median(times)), spins


@pytest.mark.slow
@pytest.mark.nightly
@pytest.mark.alone  # it times steps
def test_the_kernel_mode_spins_the_gpu_for_the_fraction_and_its_control_only_measures_the_rate() -> None:
    control, calibration = _kernel_steps("control-python", PERFSUITE_SLOWDOWN="0.5", PERFSUITE_SLOWDOWN_CONTROL="1")
    slow, spins = _kernel_steps("slow-python", PERFSUITE_SLOWDOWN="0.5")
    assert calibration == [10_000_000, 10_000_000]  # the rate measured once, on both sides, and nothing spun
    assert spins[:2] == calibration
    assert len(spins) == 2 + 11  # then one spin after each later step
    # Each a half of a 20 ms step at the measured rate of 1e9 cycles a second: 10 ms, 1e7 cycles.
    assert all(0.8e7 < cycles < 1.5e7 for cycles in spins[2:]), spins
    assert 1.35 < slow / control < 1.7
