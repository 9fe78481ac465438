"""The published-style table (pure)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from perfsuite.core.record import CaseRecord
from perfsuite.reports.tables import render, summary_rows


def _case(strategy: str, median: float, peak: int, status: str = "ok", **extra: Any) -> CaseRecord:
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
    return CaseRecord.from_json(case, strategy)


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
    failed = CaseRecord.from_json(
        {"model": "tiny-bert", "strategy": "zero3_offload", "status": "failed", "error": "timed out after 5 s"},
        "failed",
    )
    out = io.StringIO()
    render([_case("vanilla", 0.2, 2**21), failed], Console(file=out, width=200))
    text = out.getvalue()
    assert "tiny-bert" in text
    assert "vanilla" in text
    assert "100%" in text
    assert "tiny-bert-zero3_offload: failed: timed out after 5 s" in text


def test_a_model_without_tokens_shows_no_token_columns() -> None:
    """An image model's batches hold no sequences: its table has no tokens/s or padding columns; a
    sequence model's beside it keeps them."""
    images: dict[str, Any] = {"tokens_per_s": {"real": 0.0, "padded": 0.0}, "padding_fraction": 0.0, "model": "convnet"}
    out = io.StringIO()
    render([_case("vanilla", 0.2, 2**21, **images), _case("vanilla", 0.2, 2**21)], Console(file=out, width=200))
    convnet, bert = out.getvalue().split("tiny-bert")
    assert "samples/s" in convnet
    assert "tokens/s" not in convnet
    assert "pad %" not in convnet
    assert "tokens/s" in bert
    assert "pad %" in bert


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
    case = {"model": "tiny-bert", "strategy": "vanilla"}
    ok = CaseRecord.from_json(
        {**case, "status": "ok", "wall_s": 10.0, "worker_startup_s": 0.5, "phases_s": phases}, "ok"
    )
    failed = CaseRecord.from_json({**case, "status": "failed", "wall_s": 99.0, "error": "worker killed"}, "failed")
    line = wall_time_line([ok, ok, failed])
    assert line == (
        "where the time went, 2 ok runs, 20.0 s in workers: worker start 1.0 s (5%), build 4.0 s (20%), "
        "warm-up 2.0 s (10%), timed steps 8.0 s (40%), memory profile 2.0 s (10%), FLOP count 1.0 s (5%), "
        "close 1.0 s (5%), other 1.0 s (5%)"
    )
    assert wall_time_line([failed]) is None
    older = CaseRecord.from_json({**case, "status": "ok", "wall_s": 3.0}, "older")
    assert wall_time_line([older]) is None  # a record from before phases were kept


def test_a_table_in_a_log_keeps_whole_case_ids_and_verdicts(capsys: Any) -> None:
    """A CI log, a file or a pipe is no terminal: tables there are written wide, so no case id
    or verdict is cut short ("tiny-ber…", "regress…"), as 80 columns did."""
    from perfsuite.reports.ab import render_table
    from perfsuite.reports.tables import LOG_WIDTH, log_console

    console = log_console()
    assert not console.is_terminal  # pytest captures stdout
    assert console.width == LOG_WIDTH
    probe = {"version": "1", "file": None}
    side = {"env": "current", "overlay": [], "probe": {"libraries": {"torch": probe}}}
    case = {
        "case": "tiny-bert-zero2_offload+grad_accum-trainer",
        "verdict": "regressed",
        "error": None,
        "time": {"ratio": 1.12, "low": 1.1, "high": 1.14, "verdict": "slower", "pairs": 15},
        "mode": "alternate",
        "memory": {"a": 2**20, "b": 2**20, "breakdown_a": {}, "breakdown_b": {}},
        "loss": {"max_abs_diff": 0.0},
    }
    payload = {"cases": [case], "verdicts": {"regressed": 1}, "sides": {"base": side, "candidate": side}}
    console.print(render_table(payload))
    out = capsys.readouterr().out
    assert "tiny-bert-zero2_offload+grad_accum-trainer" in out
    assert "1.120 [1.100, 1.140] slower" in out
    assert "…" not in out
    # On a narrow terminal a long id folds onto the next line instead of losing its end.
    narrow = io.StringIO()
    Console(file=narrow, width=80).print(render_table(payload))
    assert "…" not in narrow.getvalue()


def test_a_step_time_left_ungated_on_purpose_says_so() -> None:
    """Under --perfsuite-time=off no step time is compared, and the summary says why: not a
    missing figure for this machine's class."""
    from types import SimpleNamespace

    from perfsuite.core.check import Check
    from perfsuite.reports.tables import gate_text

    def outcome(change: str) -> SimpleNamespace:
        time = Check("step time", True, "—", "10 ms", change, "—", "", compared=False)
        record = CaseRecord.from_json({"model": "tiny-bert", "strategy": "vanilla", "status": "ok"}, "record")
        return SimpleNamespace(case="tiny-bert-vanilla", status="passed", checks=[time], records=[record], message="")

    off = gate_text([outcome("not gated")], refresh=False)
    assert "time not compared: not gated (--perfsuite-time=off)" in off
    assert "NOT gated for" not in off.splitlines()[0]
    missing = gate_text([outcome("not compared")], refresh=False)
    assert "time not compared: no figure for this time class" in missing
    assert "step time NOT gated for 1 of 1" in missing.splitlines()[0]
    assert "record them here with `perfsuite baselines refresh --missing`" in missing.splitlines()[0]


def test_a_step_time_too_noisy_on_its_class_is_not_sent_to_a_refresh() -> None:
    """A case whose class keeps no time of it (a pool found its sessions there too noisy) is counted apart
    from one with no figure yet, and no refresh is advised for it alone (one would not record its time
    there); the row says why."""
    from types import SimpleNamespace

    from perfsuite.core.check import UNTIMED, Check
    from perfsuite.reports.tables import gate_text

    def outcome(change: str) -> SimpleNamespace:
        time = Check("step time", True, "—", "10 ms", change, "—", "", compared=False)
        record = CaseRecord.from_json(
            {"model": "tiny-bert", "strategy": "vanilla", "status": "ok", "time_class": "amd-x"}, "record"
        )
        return SimpleNamespace(case="tiny-bert-vanilla", status="passed", checks=[time], records=[record], message="")

    noisy = gate_text([outcome(UNTIMED), outcome(UNTIMED)], refresh=False)
    first = noisy.splitlines()[0]
    assert (
        "step time NOT gated for 2 of 2 (too noisy on amd-x to keep a time, as a pool of sessions there found;" in first
    )
    assert "baselines refresh" not in first
    assert "`perfsuite ab` (`--base-ref REF` for this code against its base, `--base OLD --candidate current`" in first
    assert "time not compared: too noisy on this time class" in noisy
    both = gate_text([outcome(UNTIMED), outcome("not compared"), outcome("not compared")], refresh=False)
    first = both.splitlines()[0]
    assert "NOT gated for 3 of 3 (2 with no baseline figures for this machine's time class amd-x; 1 too noisy" in first
    assert "record them here with `perfsuite baselines refresh --missing`" in first  # it leaves the noisy one out


def test_a_loss_not_compared_for_other_initial_weights_says_so_in_the_row_and_the_first_line() -> None:
    from types import SimpleNamespace

    from perfsuite.core.check import Check
    from perfsuite.reports.tables import gate_text

    time = Check("step time", True, "10 ms", "10 ms", "+0.0%", "±5%", "")
    loss = Check("loss", True, "weights aa", "weights bb", "not compared", "same initial weights", "…", compared=False)
    record = CaseRecord.from_json({"model": "tiny-bert", "strategy": "vanilla", "status": "ok", "time_class": "x"}, "r")
    outcome = SimpleNamespace(
        case="tiny-bert-vanilla", status="passed", checks=[time, loss], records=[record], message=""
    )
    text = gate_text([outcome], refresh=False)
    assert "loss NOT gated for 1 (they started from other initial weights" in text.splitlines()[0]
    assert "this code's initialisation changed; where it is this code's, `perfsuite ab --base-ref BASE`" in text
    assert "loss not compared: other initial weights" in text
    assert "ok, not compared" not in text


def test_under_the_compare_table_a_key_says_what_delta_time_is() -> None:
    """Δ time is the gate's step-by-step change, which can differ from the two medians beside it, even
    in sign: the key under the table (and the markdown's first note) says so; a refresh has none."""
    from types import SimpleNamespace

    from perfsuite.core.check import Check
    from perfsuite.reports.tables import GATE_KEY, gate_markdown, gate_text

    time = Check("step time", True, "1.285× calibration", "1.297× calibration", "-3.4%", "±15%", "")
    record = CaseRecord.from_json({"model": "tiny-bert", "strategy": "vanilla", "status": "ok", "time_class": "x"}, "r")
    outcome = SimpleNamespace(case="tiny-bert-vanilla", status="passed", checks=[time], records=[record], message="")
    assert GATE_KEY in gate_text([outcome], refresh=False).replace("\n", "")
    assert f"\n- {GATE_KEY}" in gate_markdown([outcome], refresh=False)
    refreshed = SimpleNamespace(case="tiny-bert-vanilla", status="refreshed", diff=[], message="", checks=[])
    assert GATE_KEY not in gate_text([refreshed], refresh=True)


def test_the_first_line_says_what_the_gates_catch() -> None:
    from perfsuite.core.check import TimeCheck
    from perfsuite.reports.tables import verdict

    cls = "amd-25.1-avx2"
    line = verdict(["passed"] * 3, [TimeCheck(True, cls, 0.15), TimeCheck(True, cls, 0.20), TimeCheck(True, cls, 0.20)])
    assert line == (
        "perfsuite: passed: 3 passed; step time gated for all 3: 1 of 3 catch a change of 15% or less, "
        "2 only a change of 20.0% or more"
    )
    line = verdict(["passed"] * 2, [TimeCheck(True, cls, 0.20), TimeCheck(True, cls, 0.30)])
    assert line.endswith("0 of 2 catch a change of 15% or less, 2 only a change of 20.0%-30.0% or more")
    # Timed on a busy machine: counted as not gated, and why, not as a gate that catches 15%.
    line = verdict(["passed"] * 2, [TimeCheck(True, cls, 0.15), TimeCheck(False, cls, None, busy=True)])
    assert line.startswith(
        "perfsuite: passed: 2 passed; step time NOT gated for 1 of 2 (timed while the machine was busy, another "
        "load able to move their steps by more than their tolerance: run them again when it is quiet; "
        "memory and loss were gated): compare two stacks"
    )
    assert line.endswith("; of those gated: 1 of 1 catch a change of 15% or less")
    line = verdict(["passed"] * 2, [TimeCheck(False, "intel", None), TimeCheck(False, cls, None, busy=True)])
    assert "(1 with no baseline figures for this machine's time class intel; 1 timed while the machine" in line


def test_a_time_read_on_a_busy_machine_says_so_in_its_row_and_in_the_first_line() -> None:
    from types import SimpleNamespace

    from perfsuite.core.check import BUSY, Check
    from perfsuite.reports.tables import gate_text

    time = Check("step time", True, "4.0×", "4.4×", BUSY, "±15.0%", "c: step time not gated: busy", compared=False)
    record = CaseRecord.from_json({"model": "tiny-bert", "strategy": "vanilla", "status": "ok", "time_class": "x"}, "r")
    outcome = SimpleNamespace(case="tiny-bert-vanilla", status="passed", checks=[time], records=[record], message="")
    text = gate_text([outcome], refresh=False)
    assert "step time NOT gated for 1 of 1 (timed while the machine was busy" in text.splitlines()[0]
    assert "time not compared: the machine was busy" in text.replace("\n", " ")
    assert "no figure for this time class" not in text
