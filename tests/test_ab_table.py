"""benchmarks/ab/table.py, the tabulation behind docs/ab-sensitivity.md's comparison tables: a case stopped
before its first look still shows its pairs' median, and each comparison says its throughput and
how spread a case's pairs were."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

AB = Path(__file__).resolve().parents[1] / "benchmarks" / "ab"


def _case(name: str, ratios: list[float], *, interrupted: bool, time: dict[str, Any] | None) -> dict[str, Any]:
    return {"case": name, "error": None, "interrupted": interrupted, "time": time, "ratios": ratios}


def test_interrupted_cases_and_each_comparisons_spread(tmp_path: Path) -> None:
    early = [1.00, 1.02, 1.04, 1.06, 1.30]  # stopped before the first look
    decided = [math.exp(0.05)] * 7  # no spread at all
    look = {"verdict": "slower", "ratio": 1.051, "low": 1.02, "high": 1.08, "pairs": 7}
    payload = {
        "wall_s": 36.0,
        "verdicts": {"slower": 1, "undecided": 1, "same": 0},
        "cases": [
            _case("tiny-bert-vanilla", early, interrupted=True, time=None),
            _case("tiny-bert-fp16", decided, interrupted=False, time=look),
            _case("tiny-bert-bf16", [1.0, 1.1], interrupted=False, time=None),  # its memory decided it at once
        ],
    }
    (tmp_path / "uniform-5.json").write_text(json.dumps(payload))
    never = _case("tiny-bert-vanilla", [], interrupted=True, time=None)
    nothing = {"wall_s": 5.0, "verdicts": {"undecided": 1}, "cases": [never]}
    (tmp_path / "aa-1.json").write_text(json.dumps(nothing))  # stopped before its first pair
    out = subprocess.run(
        [sys.executable, str(AB / "table.py"), str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    assert "| tiny-bert-vanilla | (interrupted) 1.040 before the first look, 5 | — |" in out
    assert "| tiny-bert-fp16 | **slower** 1.051 [1.020, 1.080], 7 |  |" in out
    assert "| tiny-bert-bf16 | 1.050 before the first look, 2 |  |" in out
    assert "aa-1: 1 undecided; 0 pairs in 5 s (none)" in out
    # 14 pairs in 36 s; a case of fewer than 5 pairs has no spread. `early`'s robust sd: 1.4826 x
    # the median |log r - log 1.04| (0.01942, from 1.02's), 2.9%, which its 1.30 does not move;
    # the median of it and `decided`'s 0 is 1.4%.
    assert "14 pairs in 36 s (2.6 s a pair); a case's robust sd 1.4% (0.0-2.9%)" in out


def test_a_file_that_is_not_an_ab_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "aa-1.json").write_text("")
    done = subprocess.run([sys.executable, str(AB / "table.py"), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == f"{tmp_path / 'aa-1.json'}: not a `perfsuite ab --json` file " + (
        "(JSONDecodeError: Expecting value: line 1 column 1 (char 0))"
    )
