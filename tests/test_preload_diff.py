"""benchmarks/gpu/preload_diff.py, the comparison behind docs/gpu.md's figures for the forkserver's
preloads under torch's NVML check: it pairs the cases of two runs, says what each build and start
took, and fails where a loss or a peak moved or a case ran in one run only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DIFF = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "preload_diff.py"


def _case(strategy: str, build: float, loss: list[float], peak: int, preloaded: list[str]) -> dict[str, Any]:
    return {
        "model": "bert-base-uncased",
        "strategy": strategy,
        "status": "ok",
        "step_time_s": {"median": 0.06, "samples": [0.06]},
        "phases_s": {"build": build},
        "worker_startup_s": 0.02,
        "wall_s": build + 10,
        "loss": loss,
        "peak_memory_bytes": peak,
        "preloaded": preloaded,
    }


Cases = list[dict[str, Any]]


def _diff(tmp_path: Path, first: Cases, second: Cases, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    paths = []
    for name, cases in (("default", first), ("nvml", second)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"schema_version": 1, "cases": cases}))
        paths.append(str(path))
    return subprocess.run([sys.executable, str(DIFF), *paths], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_losses_and_peaks_within_the_gates_tolerance_pass_and_beyond_it_fail(tmp_path: Path) -> None:
    """A GPU's reductions differ in the last bits from run to run: the gate's tolerance for the
    case's precision decides (fp32: 1e-4 + 1e-3 x the loss a step; peaks 1% or 64 KiB)."""
    before = [
        _case("adafactor", 3.5, [1.0, 0.5], 100_000_000, []),
        _case("vanilla", 1.5, [1.0, 0.9], 50_000_000, []),
    ]
    after = [
        _case("adafactor", 0.5, [1.0, 0.5], 100_000_000, ["transformers.optimization"]),
        _case("vanilla", 1.5, [1.0, 0.9000005], 50_000_512, []),
    ]
    done = _diff(tmp_path, before, after)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "| bert-base-uncased-adafactor | 3.50 → 0.50 | 0.02 → 0.02 | 13.50 → 10.50 | same | same "
        "| transformers.optimization |" in done.stdout
    )
    assert "| 50000000 → 50000512 | max \\|Δ\\| 5e-07 | — |" in done.stdout
    assert "2 cases ran in both: build 5.0 → 2.0 s, in workers 25.0 → 22.0 s" in done.stdout

    moved = [_case("adafactor", 0.5, [1.0, 0.51], 102_000_000, [])]  # one case: the other is reported, not judged
    done = _diff(tmp_path, before, moved)
    assert done.returncode == 1
    assert "| 100000000 → 102000000 (beyond tolerance) | max \\|Δ\\| 0.01 (beyond tolerance) |" in done.stdout
    assert "default.json only (not compared): bert-base-uncased-vanilla" in done.stdout
    done = _diff(tmp_path, before, [after[0]])
    assert done.returncode == 0  # a case that ran in one file only fails nothing


def test_a_case_that_failed_in_either_run_fails_the_comparison(tmp_path: Path) -> None:
    """A forkserver that started CUDA fails every GPU case: those cases ran in neither file as ok."""
    ok = _case("vanilla", 1.5, [1.0, 0.9], 50_000_000, [])
    failed = {**ok, "status": "failed", "error": "RuntimeError: this worker's forkserver started CUDA"}
    done = _diff(tmp_path, [ok, _case("fp16", 1.5, [1.0], 1, [])], [failed, _case("fp16", 1.5, [1.0], 1, [])])
    assert done.returncode == 1
    assert "failed: bert-base-uncased-vanilla (" in done.stdout
    assert "nvml.json: RuntimeError: this worker's forkserver started CUDA)" in done.stdout
    assert "1 cases ran in both" in done.stdout
    assert _diff(tmp_path, [ok], [failed]).returncode == 1  # and none ran in both


def test_a_file_that_is_not_a_results_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "default.json").write_text("[]")
    done = subprocess.run(
        [sys.executable, str(DIFF), str(tmp_path / "default.json"), str(tmp_path / "default.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "not a perfsuite results file" in done.stderr


def test_the_projects_tolerances_decide_as_its_gate_does(tmp_path: Path) -> None:
    """The nearest pyproject.toml above the working directory: an override for the case's hardware
    decides a peak that moved by 2%, one way and the other; a bad setting is one line and exit 2."""
    project = tmp_path / "project"
    (project / "results").mkdir(parents=True)
    before = [{**_case("vanilla", 1.5, [1.0, 0.9], 100_000_000, []), "hardware": "nvidia-h200"}]
    after = [{**before[0], "peak_memory_bytes": 102_000_000}]
    (project / "pyproject.toml").write_text('[tool.perfsuite.overrides."nvidia-h200/*"]\nmemory_rtol = 0.03\n')
    assert _diff(tmp_path, before, after, cwd=project / "results").returncode == 0
    assert _diff(tmp_path, before, after, cwd=tmp_path).returncode == 1  # the defaults: 1%
    (project / "pyproject.toml").write_text('[tool.perfsuite.overrides."nvidia-h200/*"]\nmemory_rtol = "3%"\n')
    done = _diff(tmp_path, before, after, cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "pyproject.toml" in done.stderr
    assert "memory_rtol" in done.stderr
