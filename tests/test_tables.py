"""The published-style table (pure)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from perfsuite.reports.tables import render, summary_rows


def _case(strategy: str, median: float, peak: int, status: str = "ok", **extra: Any) -> dict[str, Any]:
    case = {
        "model": "tiny-bert",
        "strategy": strategy,
        "status": status,
        "error": None if status == "ok" else "boom",
        "step_time_s": {"median": median},
        "samples_per_s": 16 / median,
        "tokens_per_s": {"real": 1000.0, "padded": 2000.0},
        "padding_fraction": 0.5,
        "peak_memory_bytes": peak,
        "memory_breakdown_bytes": {"optimizer_state": 2**20, "activations": 3 * 2**20},
        "loss": [1.4, 1.2],
        "mfu": None,
    }
    case.update(extra)
    return case


def test_rows_are_percent_of_vanilla() -> None:
    rows = summary_rows([_case("vanilla", 0.2, 1000), _case("fp16", 0.08, 780)])["tiny-bert"]
    assert rows[0]["time_pct"] == 100.0
    assert rows[0]["memory_pct"] == 100.0
    assert rows[1]["time_pct"] == 40.0
    assert rows[1]["memory_pct"] == 78.0
    assert rows[1]["final_loss"] == 1.2


def test_no_vanilla_means_no_percentages() -> None:
    rows = summary_rows([_case("fp16", 0.1, 100)])["tiny-bert"]
    assert rows[0]["time_pct"] is None


def test_failed_cases_show_status_and_reason() -> None:
    failed = {"model": "tiny-bert", "strategy": "zero3_offload", "status": "failed", "error": "timed out after 5 s"}
    out = io.StringIO()
    render([_case("vanilla", 0.2, 2**21), failed], Console(file=out, width=200))
    text = out.getvalue()
    assert "tiny-bert" in text
    assert "vanilla" in text
    assert "100%" in text
    assert "tiny-bert-zero3_offload: failed: timed out after 5 s" in text


def test_each_engine_has_its_own_table_against_its_own_vanilla() -> None:
    tables = summary_rows(
        [
            _case("vanilla", 0.2, 1000),
            _case("vanilla", 0.25, 1100, engine="trainer"),
            _case("fp16", 0.1, 550, engine="trainer"),
        ]
    )
    assert list(tables) == ["tiny-bert", "tiny-bert · trainer"]
    fp16 = tables["tiny-bert · trainer"][1]
    assert fp16["id"] == "tiny-bert-fp16-trainer"
    assert fp16["time_pct"] == 40.0  # of the Trainer's vanilla, not the loop's
    assert fp16["memory_pct"] == 50.0


def test_where_the_time_went_sums_the_ok_cases_and_names_the_rest_other() -> None:
    from perfsuite.reports.walltime import wall_time_line

    phases = {"build": 2.0, "warmup": 1.0, "timed": 4.0, "memory_profile": 1.0, "flop_count": 0.5, "close": 0.5}
    ok = {"status": "ok", "wall_s": 10.0, "worker_startup_s": 0.5, "phases_s": phases}
    failed = {"status": "failed", "wall_s": 99.0, "error": "worker killed"}
    line = wall_time_line([ok, ok, failed])
    assert line == (
        "where the time went, 2 ok case(s), 20.0 s in workers: worker start 1.0 s (5%), build 4.0 s (20%), "
        "warm-up 2.0 s (10%), timed steps 8.0 s (40%), memory profile 2.0 s (10%), FLOP count 1.0 s (5%), "
        "close 1.0 s (5%), other 1.0 s (5%)"
    )
    assert wall_time_line([failed]) is None
    assert wall_time_line([{"status": "ok", "wall_s": 3.0}]) is None  # a record from before phases were kept
