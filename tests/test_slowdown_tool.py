"""benchmarks/ab's injected slowdown, the tool behind docs/ab.md's sensitivity figures: the
slow-python wrapper lengthens each optimizer step by the fraction asked, control-python by
nothing, and an optimizer of another class is left alone."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

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


def _median_step(wrapper: str, **env: str) -> float:
    environment = {**os.environ, "PERFSUITE_BASE_PYTHON": sys.executable, **env}
    out = subprocess.run(
        ["sh", str(AB / wrapper), "-c", STEPS], env=environment, capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return float(statistics.median(json.loads(out)))


@pytest.mark.slow
@pytest.mark.nightly  # the tool serves docs/ab.md's sensitivity runs, not a push
@pytest.mark.alone  # it times steps
def test_slow_python_lengthens_each_step_by_the_fraction_and_control_python_does_not() -> None:
    control = _median_step("control-python", PERFSUITE_SLOWDOWN="0.5", PERFSUITE_SLOWDOWN_CONTROL="1")
    slow = _median_step("slow-python", PERFSUITE_SLOWDOWN="0.5")
    other = _median_step("slow-python", PERFSUITE_SLOWDOWN="0.5", PERFSUITE_SLOWDOWN_OPTIMIZER="Adafactor")
    assert 1.35 < slow / control < 1.7  # 50% asked
    assert 0.9 < other / control < 1.1  # SGD is not Adafactor: not slowed
