"""An explanation where a verdict is shown: the note under the terminal's table, the causes at the top
of summary.md, and report.html's section (the profile's table, the flame graph, the tensors, the loss
with the gradients' ratios, links to the kept traces), rebuilt from --json's file alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perfsuite.core.explain import explanation
from perfsuite.core.explain.records import ExplainRecord, StackRow, StepFacts, StepProfile, TensorEntry
from perfsuite.reports.ab import markdown, render_table, report_html, rows

pytest.importorskip("matplotlib")


def _record(side: int, trace: str) -> ExplainRecord:
    mm = 2 + side
    rows_ = (StackRow((0,), 100.0, 1), StackRow((0, 1), 50.0 * mm, mm), StackRow((0, 2, 3), 900.0 * side, side))
    frames = ("acme/train.py(3): step", "aten::mm", "acme/hooks.py(9): slow_hook", "<built-in function sleep>")
    tensors = [TensorEntry("parameter", "w", "float32", (4,), 16)]
    if side:
        tensors.append(TensorEntry("buffer", "cache", "float32", (1024,), 4096))
    grads = {"w": 1.0 + 0.01 * side, "v": 2.0 * (1 + 0.01 * side)}
    return ExplainRecord(
        "weights",
        4,
        steps=(StepFacts(2.0 + 0.02 * side, "data", (1e-3,), grads),),
        profile=StepProfile(1, frames, rows_, trace=trace),
        tensors=tuple(tensors),
        forward_activations={"Model": (1 + side) * 2**20, "Model.layer": 2**20},
    )


def _payload(tmp_path: Path) -> dict[str, Any]:
    traces = [str(tmp_path / "traces" / f"case-{side}.pt.trace.json.gz") for side in ("base", "candidate")]
    runs = [(side, _record(side, traces[side])) for side in (0, 1, 0, 1)]
    found = explanation.explain(
        "tiny-bert-vanilla",
        explanation.ASPECTS,
        runs,
        loss=([2.0, 1.9], [2.02, 1.95]),
        breakdowns=({"buffers": 0, "activations": 2**20}, {"buffers": 4096, "activations": 2**21}),
        moved=["buffers", "activations"],
        loss_tolerance=(1e-3, 1e-4),
    )
    case = {
        "case": "tiny-bert-vanilla",
        "verdict": "regressed",
        "error": None,
        "time": {"ratio": 1.2, "low": 1.1, "high": 1.3, "verdict": "slower", "pairs": 1},
        "ratios": [1.2],
        "mode": "duet",
        "memory": {"a": 100, "b": 4196, "breakdown_a": {"buffers": 0}, "breakdown_b": {"buffers": 4096}},
        "loss": {"a": [2.0, 1.9], "b": [2.02, 1.95], "max_abs_diff": 0.05},
        "explanation": found.as_json(),
    }
    same = {**case, "case": "tiny-bert-adafactor", "verdict": "same", "time": None, "explanation": None}
    project = {"pyproject": str(tmp_path / "pyproject.toml"), "code": {"team.model": str(tmp_path / "team/model.py")}}
    probe = {"libraries": {"torch": {"version": "2.13.0"}}, "project": project}
    payload: dict[str, Any] = json.loads(json.dumps({
        "kind": "perfsuite-ab", "date": "2026-11-27", "device_type": "cpu", "wall_s": 10.0, "interrupted": 0,
        "schedule": {"first": 1, "cap": 1, "floor": 0.03, "confidence": 0.95, "same_confidence": 0.95, "alarms": [1]},
        "sides": {s: {"env": "current", "overlay": [], "probe": probe} for s in ("base", "candidate")},
        "cases": [same, case], "verdicts": {"regressed": 1, "same": 1}, "engines": ["loop"],
        "strategies_using": {"bitsandbytes": {"built-in": {"adamw_8bit": ["loop"]}, "project": {"acme-8bit": []}}},
    }))  # fmt: skip
    return payload


def test_the_cause_is_in_summary_md_s_first_screen(tmp_path: Path) -> None:
    text = markdown(_payload(tmp_path))
    head = text[: text.index("| case |")]  # above the table
    assert "**Why** (instrumented runs of each side, diffed):" in head
    assert "- [1] `tiny-bert-vanilla` (regressed):" in head  # the number the table marks it with
    assert "regressed [1]" in text[text.index("| case |") :]
    assert "  - time, ops: aten::mm 2 → 3 calls/step" in head
    new_hook = "new: acme/hooks.py:slow_hook (defined at line 9) → sleep 0 → 1 calls/step, +0.90 ms/step"
    assert f"  - time, Python functions: {new_hook}" in head
    assert "  - memory: buffers +4.0 KiB = 1,024 elements × 4 B (float32): new buffer cache" in head
    assert "  - loss: parts at step 0 (2 → 2.02); every gradient ×1.01 there (2 tensors)" in head
    assert "tiny-bert-adafactor" not in head  # nothing to explain
    assert "| tiny-bert-vanilla | regressed [1] |" in text
    assert text.endswith(  # under the table: what the verdicts mean at this comparison's floor
        "\n\nTime: *slower* (or *faster*) where B/A's interval at 0.95 lies above 1 (below) and its estimate is 3.0% "
        "or more off, at pair 1; *same* where its interval at 0.95 lies within ±3.0%; *undecided* otherwise, after "
        "at most 1 pair, its interval the change it could not rule out.\n"
    )
    assert "A call is named by the innermost" not in text  # comparing environments: no code of the project's changed


def test_a_call_named_by_a_frame_the_change_did_not_touch_says_where_the_change_is(tmp_path: Path) -> None:
    """Comparing the project's own code: the extra aten::mm calls are named by acme/train.py:step, which
    did not change (the hook did): said, so that a reader looks at the change, not at the frame."""
    payload = _payload(tmp_path)
    hook = {"file": "acme/hooks.py", "name": "slow_hook", "lines": [None, 9]}
    payload["changed_code"] = {"files": ["acme/hooks.py"], "functions": [hook], "same": []}
    assert (
        "\nA call is named by the innermost Python frame that made it: acme/train.py:step did not change; it is "
        "where code that did (acme/hooks.py:slow_hook) ran them.\n" in markdown(payload)
    )
    payload["changed_code"]["files"] = ["acme/hooks.py", "acme/train.py"]  # the frame's file changed too
    assert "A call is named by the innermost" not in markdown(payload)
    from perfsuite.reports.ab import reading

    every = reading({"cap": 60, "floor": 0.03, "confidence": 0.99875, "alarms": []})
    assert "interval at 0.9988 lies above 1 (below) and its estimate is 3.0% or more off, at any look;" in every


def test_the_terminal_table_notes_each_cause(tmp_path: Path) -> None:
    from rich.console import Console

    payload = _payload(tmp_path)
    assert [r[1] for r in rows(payload)] == ["same", "regressed [1]"]
    console = Console(width=200, record=True)
    console.print(render_table(payload))
    shown = console.export_text()
    assert "[1] tiny-bert-vanilla: loss: parts at step 0" in shown  # the failed check's cause first
    assert "    time, ops: aten::mm 2 → 3 calls/step" in shown
    # In a narrow log a note wraps under its own text, not at the line's start.
    narrow = Console(width=60, record=True)
    narrow.print(render_table(payload))
    after = narrow.export_text().split("[1] tiny-bert-vanilla:", 1)[1].splitlines()[1:]
    assert len(after) > 4, after
    assert all(line.startswith("    ") for line in after if line.strip()), after
    # No line of a log is padded past its text; from ten notes up, each note's text starts in one column.
    assert all(line == line.rstrip() for line in shown.splitlines()), [line for line in shown.splitlines()][-3:]
    from perfsuite.reports.notes import Notes

    numbered = Console(width=60, record=True)
    numbered.print(Notes([f"[{n}] note {n}" for n in range(1, 11)]))
    assert numbered.export_text().splitlines()[8:] == [" [9] note 9", "[10] note 10"]


def test_report_html_draws_the_flame_graph_tensors_and_gradients(tmp_path: Path) -> None:
    page = report_html(_payload(tmp_path), tmp_path)
    causes = page[page.index("<h2 id='causes'>") :]
    assert 'data-chart="flame"' in causes
    assert 'data-chart="gradient-ratios"' in causes
    assert "<td>aten::mm</td>" in causes  # the profile's table
    assert "<td>cache</td>" in causes  # the tensor table
    assert "<td>activations kept by a forward</td><td>Model</td><td>0.000 MiB</td><td>1.000 MiB</td>" in causes
    assert "<td>+1 from acme/train.py:step (defined at line 3)</td>" in causes  # who asked for the op's extra call
    assert "href='traces/case-base.pt.trace.json.gz'" in causes  # relative: the report moves with its traces
    assert "<svg" in causes


def test_the_flame_graph_colours_only_frames_beyond_their_bar() -> None:
    from perfsuite.core.explain.flame import Box
    from perfsuite.reports.explain_charts import NEUTRAL, _colour

    slower, faster = Box(0, 0, 1, "f", 100, 600, 50), Box(0, 0, 1, "g", 600, 100, 50)
    assert _colour(Box(0, 0, 1, "f", 100, 140, 50), 500) == NEUTRAL  # within its own bar
    assert _colour(Box(0, 0, 1, "f", 100, 600, None), 500) == NEUTRAL  # one profile a side: no bar
    red, blue = _colour(slower, 500), _colour(faster, 500)
    assert red[0] == 1.0 > red[2]
    assert blue[2] == 1.0 > blue[0]


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ({"aspects": "time"}, "ab.json: cases[1].explanation: aspects is 'time' (str), not a list"),
        ({"time": {"profiles": 3}}, "cases[1].explanation: time has no 'step_us_a'"),
        ({"flame": [{"depth": "0"}]}, "cases[1].explanation: flame[0] has no 'start'"),
        ({"wall_s": "1 s"}, "cases[1].explanation: wall_s is '1 s' (str), not a number"),
        (["time"], "cases[1].explanation: ['time'] (list) is not an object"),
    ],
)
def test_an_explanation_in_a_results_file_that_does_not_read_is_one_line_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: Any, said: str
) -> None:
    """``perfsuite report ab.json`` on a file from elsewhere (an artifact): untrusted, read by its types."""
    from perfsuite.cli import main

    payload = _payload(tmp_path)
    case = payload["cases"][1]
    case["explanation"] = {**case["explanation"], **bad} if isinstance(bad, dict) else bad
    (tmp_path / "ab.json").write_text(json.dumps(payload))
    assert main(["report", str(tmp_path / "ab.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert said in err[0]
    assert err[0].endswith(f"(case {case['case']!r})")  # named by its key and by the case's name
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("schema_version", 99, "ab.json: schema_version is 99; this perfsuite reads 1"),
        ("verdict", "bogus", "ab.json: cases[1].verdict is 'bogus' (str), not a verdict (regressed, improved,"),
        ("time", "regressed", "cases[1].time.verdict is 'regressed' (str), not a time verdict (slower, faster,"),
    ],
)
def test_an_ab_file_of_another_version_or_verdict_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any, said: str
) -> None:
    """A verdict no comparison gives would be drawn under a headline that counts another."""
    from perfsuite.cli import main

    payload = _payload(tmp_path)
    if key == "time":  # a case's verdict is no time's
        payload["cases"][1]["time"]["verdict"] = value
    else:
        (payload if key == "schema_version" else payload["cases"][1])[key] = value
    (tmp_path / "ab.json").write_text(json.dumps(payload))
    assert main(["report", str(tmp_path / "ab.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert said in err[0]
    assert not (tmp_path / "out").exists()


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    inner = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [at] + [p for key, item in inner for p in _paths(item, (*at, key))]


def test_a_file_of_any_other_shape_is_refused_naming_its_key_or_read_whole(tmp_path: Path) -> None:
    """Every value of an ab file, in turn, replaced by one of another type or left out: the file is
    refused (a ``ValueError`` naming the key) or its table, summary.md and (for the values the page
    alone reads) report.html are drawn. Nothing in between: no traceback from inside a chart."""
    import copy

    from perfsuite.core.ab_file import AbFile

    payload = _payload(tmp_path)
    refused = drawn = 0
    paged: set[tuple[Any, ...]] = set()
    for path in _paths(payload)[1:]:
        values: list[Any] = ["x", 3, None, [], {}, [1], True, KeyError]
        for value in values:
            changed = copy.deepcopy(payload)
            parent = changed
            for key in path[:-1]:
                parent = parent[key]
            if value is KeyError:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            try:
                AbFile.from_json(changed, "ab.json")
            except ValueError:
                refused += 1
                continue
            markdown(changed)
            rows(changed)
            if path[0] in ("schedule", "sides", "date", "wall_s") and path not in paged:  # what only the page reads
                report_html(changed, tmp_path)  # once a value (its charts are slow to draw)
                paged.add(path)
            drawn += 1
    assert refused > 1000
    assert drawn > 200
