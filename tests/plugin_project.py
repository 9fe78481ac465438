"""A project for the pytest plugin's end-to-end tests (test_plugin.py, test_refresh.py): perfsuite's matrix
test, a conftest whose ``pytest_perfsuite_run_case`` feeds chosen measurements through the gates (so a
"10% faster baseline" is exactly 10% and nothing depends on this machine's noise), baselines for three
tiny-bert cases recorded by a real refresh, and helpers to read and edit them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

MATRIX_TEST = (Path(__file__).parent / "test_matrix.py").read_text()


# A stand-in for the worker: deterministic records shaped like perfsuite.case.run_case's.
FAKE_RUNNER = """
import math
import os
import time

import pytest

from perfsuite.worker.calibrate import NAME as CALIBRATION

CALLS = {}
FACTOR = {"vanilla": 1.0, "fp16": 5.0, "grad_ckpt": 1.8, "adafactor": 1.0}


@pytest.hookimpl(tryfirst=True)
def pytest_perfsuite_run_case(config, spec, timeout_s):
    repeat = CALLS[spec] = CALLS.get(spec, -1) + 1
    sleepy, _, seconds = os.environ.get("FAKE_SLEEP", "").partition("=")  # "<case>=<seconds>"
    if sleepy == spec.id:
        if float(seconds) > timeout_s:  # as the worker's timeout would: killed, no result
            time.sleep(timeout_s)
            return {"model": spec.model, "strategy": spec.strategy, "status": "failed",
                    "error": f"timed out after {timeout_s:g} s; worker killed"}
        time.sleep(float(seconds))
    if os.environ.get("FAKE_INTERRUPT") == spec.id:
        raise KeyboardInterrupt
    if os.environ.get("FAKE_CRASH") == spec.id:
        return {"model": spec.model, "strategy": spec.strategy, "status": "failed",
                "error": "worker killed by signal SIGKILL"}
    if spec.id in os.environ.get("FAKE_SKIP", "").split(","):
        return {"model": spec.model, "strategy": spec.strategy, "status": "skipped", "error": "needs a GPU"}
    jitter = float(os.environ.get("FAKE_JITTER", "0")) * ((repeat % 3) - 1) * (spec.strategy != "vanilla")
    # FAKE_SLOW="<case>=<factor>:<n>": that case's first n runs are <factor> slower.
    target, _, slow = os.environ.get("FAKE_SLOW", "").partition("=")
    factor, _, runs = slow.partition(":")
    if slow and target == spec.id and repeat < int(runs):
        jitter += float(factor)
    median = 0.1 * FACTOR.get(spec.strategy, 1.2) * (1 + jitter)
    calibration = 0.01  # the calibration workload's time: the gated figure is median / calibration
    mib = 2**20
    memory = 30 * mib if spec.strategy == "grad_ckpt" else 100 * mib
    loss = [2.0 - 0.05 * i for i in range(spec.warmup_steps + spec.steps)]
    if os.environ.get("FAKE_NAN") == spec.id:
        loss[3] = math.nan
    return {
        "model": spec.model, "strategy": spec.strategy, "status": "ok", "error": None,
        "device": "cpu", "device_name": "Fake CPU", "hardware": "cpu",
        "time_class": os.environ.get("FAKE_CLASS", "fake-1.2-avx2"),
        "precision": "fp16" if "fp16" in spec.strategy else "fp32",
        "batch_size": 16, "micro_batch_size": 16, "seq_len": 128,
        "step_time_s": {"median": median, "samples": [median] * spec.steps},
        "step_time_calibrated": {"median": median / calibration},
        "calibration": {"workload": CALIBRATION, "median_s": calibration},
        "peak_memory_bytes": memory,
        "memory_breakdown_bytes": {"activations": memory - 6 * mib, "parameters": 2 * mib, "optimizer_state": 4 * mib},
        "loss": loss,
    }
"""


CASES = "tiny-bert-vanilla or (tiny-bert-fp16 and not grad_ckpt) or tiny-bert-grad_ckpt"


REFRESH = ("-p", "no:cacheprovider", "-m", "cpu and not trainer", "-k", CASES, "--perfsuite-refresh")
"""pytest's arguments for a refresh of the three cases (add ``--perfsuite-repeats``)."""


def write_project(root: Path) -> None:
    (root / "test_matrix.py").write_text(MATRIX_TEST)
    (root / "conftest.py").write_text(FAKE_RUNNER)
    (root / "pyproject.toml").write_text("[tool.perfsuite]\nbaselines = 'baselines'\n")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baselines for the three tiny-bert cases, recorded once per module by a real refresh
    (a refresh asks torch for the device, about 3 s a session), copied into each test's project."""
    root = tmp_path_factory.mktemp("recorded")
    write_project(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *REFRESH, "--perfsuite-repeats=3"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((root / "baselines" / "cpu").glob("tiny-bert-*.json"))) == 3
    return root / "baselines"


@pytest.fixture
def project(pytester: pytest.Pytester, recorded: Path) -> pytest.Pytester:
    """A project with perfsuite's matrix test, the fake runner and baselines for three tiny-bert cases."""
    write_project(pytester.path)
    shutil.copytree(recorded, pytester.path / "baselines")
    return pytester


def baseline(pytester: pytest.Pytester, case: str) -> Path:
    return pytester.path / "baselines" / "cpu" / f"{case}.json"


def time_entry(data: dict[str, Any]) -> dict[str, Any]:
    entry = data["time"]["fake-1.2-avx2"]
    assert isinstance(entry, dict)
    return entry


def scale_median(data: dict[str, Any], factor: float) -> None:
    """The stored step time ``factor`` times what was recorded: its median and the repeats it is the
    median of, as a refresh on a machine that much faster or slower would write them."""
    entry = time_entry(data)
    entry["median"] *= factor
    entry["repeats"] = [r * factor for r in entry.get("repeats") or ()] or entry.get("repeats")


def edit(pytester: pytest.Pytester, case: str, change: Any) -> None:
    path = baseline(pytester, case)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def baseline_files(pytester: pytest.Pytester) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (pytester.path / "baselines" / "cpu").iterdir()}


def changed(pytester: pytest.Pytester, before: dict[str, bytes]) -> set[str]:
    after = baseline_files(pytester)
    return {name for name in after if after[name] != before.get(name)}


def assert_only_rewritten(pytester: pytest.Pytester, before: dict[str, bytes], case: str) -> None:
    """Only ``case``'s file (whose peak memory the test had set to 1 byte) and the pinned
    pytest-benchmark file were rewritten."""
    assert changed(pytester, before) == {f"{case}.json", "pytest-benchmark.fake-1.2-avx2.json"}
    assert json.loads(baseline(pytester, case).read_text())["memory"]["peak_bytes"] == 100 * 2**20


def gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The project's pytest, in this process (the fake runner starts no worker): with Python's
    default warning filters, as the project's own pytest has them, not this suite's "error"; its
    test files imported by path, beside this suite's modules of the same names."""
    args = ("-W", "default", "--import-mode=importlib", "-m", "cpu and not trainer", "-k", CASES, *args)
    return pytester.runpytest(*args)


def local_class() -> str:
    from perfsuite.core.hardware import local_cpu_class

    return local_cpu_class()
