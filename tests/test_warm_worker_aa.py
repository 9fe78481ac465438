"""benchmarks/warm_worker.py's analysis, the A/A behind docs/case-cost.md's warm-worker figures:
a warm run is called alike only when its loss and memory equal the first fresh run's."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "warm_worker.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("warm_worker", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(mode: str, predecessor: str | None = None, **over: Any) -> dict[str, Any]:
    row = {
        "case": "tiny-bert-vanilla",
        "mode": mode,
        "predecessor": predecessor,
        "status": "ok",
        "error": None,
        "loss": [1.5, 1.25],
        "memory": {"peak": 1000, "other": 10},
        "step_s": 10.0,
    }
    return row | over


def test_a_warm_run_that_moves_memory_or_loss_or_fails_is_named() -> None:
    analyse = _module().analyse
    rows = [
        _row("F"),
        _row("W", "a", step_s=10.1),
        _row("W", "b", memory={"peak": 1032, "other": 42}),
        _row("W", "c", loss=[1.5, 1.2500001]),
        _row("W", "d", status="failed", error="ValueError: AcceleratorState has already been initialized"),
        _row("F", step_s=9.9),
    ]
    lines = analyse(rows)
    assert lines[0].startswith("tiny-bert-vanilla: fresh 2 (loss and memory alike: True), warm 3 of 4 ran")
    assert "step time warm/fresh 1.005" in lines[0]  # medians: 10.0 warm, 9.95 fresh
    assert lines[1:] == [
        "  after b: memory differs by {'peak': 32, 'other': 32} bytes",
        "  after c: loss differs, at most 1.00e-07",
        "  after d: failed: ValueError: AcceleratorState has already been initialized",
    ]


def test_fresh_runs_that_disagree_are_said() -> None:
    lines = _module().analyse([_row("F"), _row("F", loss=[1.5, 1.0])])
    assert lines == ["tiny-bert-vanilla: fresh 2 (loss and memory alike: False), warm 0 of 0 ran"]


def test_a_file_it_did_not_write_or_a_case_that_is_none_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "run.json").write_text('{"cases": []}')  # a `perfsuite run` file: no "runs"
    for argv, said in (
        (["--analyse", str(tmp_path / "run.json")], "not a file this script wrote (KeyError: 'runs')"),
        (["--cases", "nosuch", "--json", str(tmp_path / "x.json")], "'nosuch' is not a case id"),
    ):
        done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert said in done.stderr.splitlines()[-1]
        assert "Traceback" not in done.stderr
