"""``perfsuite report``: report.html (inline SVG charts, offline) and summary.md, from the
committed CPU baselines of the tiny matrix replayed as a gated run (tests/replay.py), with
two cases changed so that the failures show, and a history of nights.

Every push renders the every-push CPU matrix (32 cases, about 5 s); the nightly tier
renders all 121 tiny-model cases with baselines."""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from replay import every_push_cases, replay, slower
from tools import chromium, require

from perfsuite.cli import main
from perfsuite.core.record import CaseRecord
from perfsuite.core.results import ReportCase, load_results, parse_results
from perfsuite.history.records import night_record, write_record
from perfsuite.reports import write_report
from perfsuite.reports.summary import LIMIT_BYTES, summary_markdown

pytest.importorskip("matplotlib", reason="the report extra: pip install 'perfsuite[report]'")

SLOW_CASE = "tiny-bert-fp16"
DIVERGED_CASE = "tiny-gpt2-vanilla"


def _diverge(record: dict[str, Any]) -> None:
    record["loss"][5] *= 1.01


EVERY_PUSH = every_push_cases()
SMALL = {"tiny-bert-vanilla", SLOW_CASE, "tiny-bert-grad_ckpt", "tiny-bert-adafactor"}


def _results(only: set[str] | None = EVERY_PUSH) -> dict[str, Any]:
    return replay({SLOW_CASE: slower(1.3), DIVERGED_CASE: _diverge}, only=only)


def _history(directory: Path, nights: int = 16, only: set[str] | None = EVERY_PUSH) -> None:
    """Nights of realistic noise (sd 4%, the per-run spread measured on CI), an upgrade halfway."""
    rng = random.Random(0)
    names = [c["case"] for c in replay(only=only)["cases"]]
    for i in range(nights):
        factors = {name: slower(1 + rng.gauss(0, 0.04)) for name in names}
        date, commit = f"2026-11-{i + 1:02d}T02:00:00+00:00", f"{i:07d}" + "0" * 33
        results = replay(factors, date=date, commit=commit, only=only)
        if i >= nights // 2:  # an upgrade of the stack halfway: a new segment
            results["env"]["versions"] = dict(results["env"]["versions"], torch="2.14.0")
        write_record(night_record(parse_results(results, "night")), directory)


def _render(root: Path, only: set[str] | None) -> dict[str, Any]:
    results = root / "results.json"
    results.write_text(json.dumps(_results(only)))
    history = root / "history"
    _history(history, only=only)
    out = root / "out"
    assert main(["report", str(results), "--history", str(history), "-o", str(out)]) == 0
    return {"root": root, "results": results, "history": history, "out": out, "html": (out / "report.html")}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The every-push CPU matrix's report."""
    return _render(tmp_path_factory.mktemp("report"), EVERY_PUSH)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Four tiny-bert cases: for the checks that render again."""
    return _render(tmp_path_factory.mktemp("small"), SMALL)


def _tables(results: Path) -> list[str]:
    return list(load_results(results).by_table())


def test_report_html_is_one_self_contained_file_under_2_mb(report: dict[str, Any]) -> None:
    text = report["html"].read_text()
    assert report["html"].stat().st_size < 2 * 2**20
    assert "<script" not in text.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "fetches something"
    assert "@import" not in text
    assert "url(http" not in text
    tables = _tables(report["results"])
    assert len(tables) == 5  # tiny-{bert,gpt2,t5,llama} and tiny-bert · trainer
    for kind in ("loss", "memory", "pareto"):
        assert text.count(f'data-chart="{kind}"') == len(tables), kind
    assert text.count('data-chart="heatmap"') == 1
    assert text.count('data-chart="trend"') == 1
    # the failures lead the gate table, with their metric named
    gate = text[text.index("id='gate'") :]
    assert gate.index(SLOW_CASE) < gate.index("tiny-bert-vanilla")
    assert gate.index(DIVERGED_CASE) < gate.index("tiny-bert-vanilla")
    assert "step time out of tolerance" in gate
    assert "loss out of tolerance" in gate


def test_report_stands_beside_the_published_figures(report: dict[str, Any]) -> None:
    text = report["html"].read_text()
    section = text[text.index("id='published'") :]
    assert "Efficient Training" in section  # each write-up by its title
    assert "Training large model with your GPU" in section
    assert "Model Training Strategies" in section
    assert "Gradient Checkpointing" in section
    assert "137%" in section  # theirs, labelled
    assert "tiny-bert: " in section  # ours beside it
    # the write-up's memory arithmetic checked against our AdamW breakdown: two moments per parameter
    assert re.search(r"<td>tiny-bert</td><td>[\d.,]+</td><td>[\d.,]+</td><td>2\.00</td>", section)


def test_the_same_input_gives_the_same_bytes(small: dict[str, Any], tmp_path: Path) -> None:
    again = tmp_path / "again"
    write_report(small["results"], again, history=small["history"])
    assert (again / "report.html").read_bytes() == small["html"].read_bytes()
    assert (again / "summary.md").read_bytes() == (small["out"] / "summary.md").read_bytes()


def test_every_chart_renders_in_headless_chromium(report: dict[str, Any]) -> None:
    executable = chromium()
    require("chromium", executable)
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (.ci/run does)")
    expected = {kind: len(_tables(report["results"])) for kind in ("loss", "memory", "pareto")}
    expected.update(heatmap=1, trend=1)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report["html"].as_uri())
        boxes = page.eval_on_selector_all(
            "figure.chart",
            """figures => figures.map(f => {
                const svg = f.querySelector(':scope > svg');
                const r = svg ? svg.getBoundingClientRect() : null;
                return {kind: f.dataset.chart, id: f.id, width: r ? r.width : 0, height: r ? r.height : 0,
                        drawn: svg ? svg.querySelectorAll('path, use, rect, image').length : 0};
            })""",
        )
        # What a person sees: each time-against-memory plot's labels, as the browser set them.
        labels = page.eval_on_selector_all(
            'figure.chart[data-chart="pareto"]',
            """figures => figures.map(f => ({
                id: f.id,
                boxes: [...f.querySelectorAll('g[id*="-label-"], g[id$="-legend"]')].map(g => {
                    const r = g.getBoundingClientRect();
                    return {name: g.id.endsWith('-legend') ? 'legend' : g.textContent.trim(),
                            x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
                }),
            }))""",
        )
        for figure in page.query_selector_all('figure.chart[data-chart="pareto"]'):
            figure.screenshot(path=str(report["root"] / f"{figure.get_attribute('id')}.png"))
        page.screenshot(path=str(report["root"] / "report.png"), full_page=True)
        browser.close()
    counts: dict[str, int] = {}
    for box in boxes:
        counts[box["kind"]] = counts.get(box["kind"], 0) + 1
        assert box["width"] > 300, box
        assert box["height"] > 150, box  # laid out at a readable size
        assert box["drawn"] > 10, box  # and it drew something
    assert counts == expected
    assert requests == [report["html"].as_uri()], "the report asked for more than itself"
    for figure in labels:
        names = [b["name"] for b in figure["boxes"] if b["name"] != "legend"]
        assert len(names) > 1, figure  # every strategy labelled
        crossing = [
            (a["name"], b["name"])
            for a, b in itertools.combinations(figure["boxes"], 2)
            if a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]
        ]
        shot = report["root"] / f"{figure['id']}.png"
        assert not crossing, f"{figure['id']}: labels drawn over each other in the browser ({shot}): {crossing}"


def _overlapping_labels(cases: list[ReportCase], title: str) -> list[tuple[str, str]]:
    """What :func:`charts.pareto_figure`'s labels cover, measured with matplotlib's renderer: each
    pair of a label and another label, a point's marker, the legend or the axes' outside."""
    from perfsuite.reports import charts
    from perfsuite.reports.labels import label_boxes, overlaps

    fig, labels = charts.pareto_figure(cases, title)
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ax = fig.axes[0]
    half = charts.PARETO_MARKER_PT * fig.dpi / 72 / 2
    shown, points, _ = charts.pareto_points(cases)
    things = [
        (f"point {c.strategy}", (x - half, y - half, x + half, y + half))
        for c, (x, y) in zip(shown, ax.transData.transform(points), strict=True)
    ]
    legend = ax.get_legend()
    if legend is not None:
        box = legend.get_window_extent(renderer)
        things.append(("legend", (box.x0, box.y0, box.x1, box.y1)))
    named = [(label.get_text(), box) for label, box in zip(labels, label_boxes(labels, renderer), strict=True)]
    assert [name for name, _ in named] == [c.strategy for c in shown]
    frame = ax.get_window_extent(renderer)
    found = [
        (name, "outside the axes")
        for name, b in named
        if not frame.contains(b[0], b[1]) or not frame.contains(b[2], b[3])
    ]
    found += [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(named, 2) if overlaps(box_a, box_b)]
    found += [(a, b) for a, box_a in named for b, box_b in things if overlaps(box_a, box_b)]
    return found


def _case(strategy: str, peak_mib: float, step_s: float) -> ReportCase:
    figures = {"status": "ok", "peak_memory_bytes": round(peak_mib * 2**20), "step_time_s": {"median": step_s}}
    record = CaseRecord.from_json({"model": "m", "strategy": strategy, **figures}, strategy)
    return ReportCase(id=strategy, model="m", strategy=strategy, engine="loop", status="ok", record=record)


def test_the_time_against_memory_labels_cover_nothing(report: dict[str, Any]) -> None:
    """Every table of the every-push matrix (tiny-bert's 13 strategies crowd around vanilla, two
    of them on one spot), and 16 strategies on one point: no label over another label, a point,
    the legend, or outside the plot."""
    for table, cases in load_results(report["results"]).by_table().items():
        assert _overlapping_labels(cases, table) == [], table
    crowd = ["vanilla", "fp16", "bf16", "grad_accum", "grad_ckpt", "adafactor", "adamw_8bit", "zero2_offload"]
    crowd += ["dataloader", "dynamic_padding", "smart_batching", "lora", "all", "fused_adamw", "lion", "galore"]
    assert _overlapping_labels([_case(s, 90.0, 0.1) for s in crowd], "one spot") == []


def test_a_run_without_baselines_draws_only_what_it_has(report: dict[str, Any], tmp_path: Path) -> None:
    """No baseline: no (run − baseline) ÷ tolerance panel, nor a word of one; a table of one
    strategy: its loss and memory, and no time-against-memory plot of one point."""
    gated = _results(SMALL | {DIVERGED_CASE})
    run = {"schema_version": 1, "env": gated["env"], "cases": [c["records"][0] for c in gated["cases"]]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    write_report(path, tmp_path / "out")
    text = (tmp_path / "out" / "report.html").read_text()
    assert "baseline) ÷ tolerance" not in text
    assert "dashed: baseline" not in text
    assert "the baseline's peak" not in text
    assert text.count('data-chart="loss"') == text.count('data-chart="memory"') == 2  # tiny-bert, tiny-gpt2
    assert 'id="pareto-tiny-bert"' in text
    assert 'id="pareto-tiny-gpt2"' not in text  # tiny-gpt2 ran vanilla alone
    # Gated, every table has its lower panel, and says so.
    gated_text = report["html"].read_text()
    assert gated_text.count("(run − baseline) ÷ tolerance") == gated_text.count('data-chart="loss"')
    assert gated_text.count("below, the difference from the baseline") == gated_text.count('data-chart="loss"')


def test_summary_md_leads_with_the_failures_and_fits_a_job_summary(report: dict[str, Any]) -> None:
    text = (report["out"] / "summary.md").read_text()
    assert len(text.encode()) < LIMIT_BYTES
    assert "<img" not in text
    assert "<svg" not in text
    assert "![" not in text
    head, _, folded = text.partition("<details>")
    assert SLOW_CASE in head
    assert DIVERGED_CASE in head
    assert "tiny-bert-vanilla |" in folded
    # a sparkline of the current segment's nights beside each case
    assert re.search(r"\| tiny-bert-vanilla \|.*\| [▁▂▃▄▅▆▇█]{3,} \|", folded)


def test_summary_md_is_cut_at_githubs_limit() -> None:
    results = _results()
    case = results["cases"][0]
    results["cases"] = [dict(case, case=f"{case['case']}-{i}", message="x" * 2000, status="failed") for i in range(800)]
    text = summary_markdown(parse_results(results, "big"))
    assert len(text.encode()) <= LIMIT_BYTES
    assert text.rstrip().endswith("the whole table is in report.html.")


def test_a_perfsuite_run_file_is_gated_against_the_baselines_when_given(tmp_path: Path) -> None:
    gated = _results(SMALL | {DIVERGED_CASE})
    run = {"schema_version": 1, "env": gated["env"], "cases": [c["records"][0] for c in gated["cases"]]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    bare = load_results(path)
    assert bare.kind == "run"
    assert all(not c.checks for c in bare.cases)
    out = tmp_path / "out"
    baselines = Path(__file__).parent.parent / "baselines"
    assert main(["report", str(path), "-o", str(out), "--baselines", str(baselines)]) == 0
    summary = (out / "summary.md").read_text()
    head = summary.partition("<details>")[0]
    assert f"| {SLOW_CASE} | failed | +30.0% |" in head
    assert f"| {DIVERGED_CASE} | failed |" in head


def test_a_run_file_reported_where_no_baselines_are_is_not_called_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside the project (or before its first refresh) nothing is compared: the headline says NOT GATED
    and the line under it why, never "passed" over cases no gate saw; one case with a baseline and one
    without is a pass of the one and a case NOT gated."""
    gated = replay(only={"tiny-bert-vanilla", "tiny-bert-grad_ckpt"})
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema_version": 1, "cases": [c["records"][0] for c in gated["cases"]]}))
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(run), "-o", str(tmp_path / "out")]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**perfsuite: NOT GATED: 2 ran, compared with no baseline**" in summary
    assert "_perfsuite run compared none of its 2 case(s) with a baseline (no baselines directory at " in summary
    assert "No case was compared with a baseline." in summary
    assert "passed" not in summary
    page = (tmp_path / "out" / "report.html").read_text()
    assert "perfsuite: NOT GATED: 2 ran, compared with no baseline" in page
    (tmp_path / "cpu").mkdir()
    baseline = Path(__file__).parents[1] / "baselines" / "cpu" / "tiny-bert-vanilla.json"
    (tmp_path / "cpu" / "tiny-bert-vanilla.json").write_text(baseline.read_text())
    assert main(["report", str(run), "-o", str(tmp_path / "out"), "--baselines", str(tmp_path)]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**perfsuite: passed: 1 passed, 1 ran but NOT gated" in summary
    assert "1 compared with none (tiny-bert-grad_ckpt: no baseline, or a figure it needs missing)" in summary
    assert "Every case passed its gates." not in summary


def test_a_case_whose_baseline_cannot_be_read_fails_the_report_as_it_fails_the_gate(tmp_path: Path) -> None:
    """Counted in the headline, not only noted in its row (a baseline whose spec is not an object, too)."""
    cases = ["tiny-bert-vanilla", "tiny-bert-grad_ckpt", "tiny-bert-fp16"]
    gated = replay(only=set(cases))
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema_version": 1, "cases": [c["records"][0] for c in gated["cases"]]}))
    (tmp_path / "cpu").mkdir()
    for case in cases:
        data = json.loads((Path(__file__).parents[1] / "baselines" / "cpu" / f"{case}.json").read_text())
        text = json.dumps(data | {"spec": "x"} if case == "tiny-bert-grad_ckpt" else data)
        (tmp_path / "cpu" / f"{case}.json").write_text(text[:500] if case == "tiny-bert-vanilla" else text)
    assert main(["report", str(run), "-o", str(tmp_path / "out"), "--baselines", str(tmp_path)]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**perfsuite: FAILED: 2 failed, 1 passed" in summary
    for case in cases[:2]:  # the two whose baselines are unreadable fail, each saying why
        assert f"\n| {case} | failed | — | — | — | — |  | {tmp_path}/cpu/{case}.json: corrupt baseline (" in summary


def test_a_run_without_a_figure_the_gate_needs_is_noted_not_failed(tmp_path: Path) -> None:
    """`perfsuite run --no-profile` measures no peak on a CPU: against a readable baseline its cases are
    not compared, saying why, and fail nothing (the pytest gate never runs without the profile step)."""
    gated = replay(only={"tiny-bert-vanilla"})
    record = gated["cases"][0]["records"][0] | {"peak_memory_bytes": None, "memory_breakdown_bytes": None}
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema_version": 1, "cases": [record]}))
    baselines = Path(__file__).parents[1] / "baselines"
    assert main(["report", str(run), "-o", str(tmp_path / "out"), "--baselines", str(baselines)]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "FAILED" not in summary
    assert "not compared with its baseline" in summary


def test_a_reports_files_appear_together_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary that cannot be drawn leaves the last report as it was: never a new page beside an old summary."""
    results, out = tmp_path / "results.json", tmp_path / "out"
    results.write_text(json.dumps(replay(only={"tiny-bert-vanilla"})))
    out.mkdir()
    (out / "report.html").write_text("last night's page")
    (out / "summary.md").write_text("last night's summary")

    def cannot(*args: Any, **kwargs: Any) -> str:
        raise OSError("no space left on device")

    monkeypatch.setattr("perfsuite.reports.summary.summary_markdown", cannot)
    with pytest.raises(OSError, match="no space left"):
        write_report(results, out)
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "summary.md"]  # and no half-written file
    assert (out / "report.html").read_text() == "last night's page"


def _run_blocked(blocked: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.modules[{blocked!r}] = None\nfrom perfsuite.cli import main\nsys.exit(main({argv!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)


def test_the_report_needs_no_torch(small: dict[str, Any], tmp_path: Path) -> None:
    proc = _run_blocked("torch", ["report", str(small["results"]), "-o", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.html").stat().st_size > 50_000


def test_without_matplotlib_it_names_the_extra(small: dict[str, Any], tmp_path: Path) -> None:
    proc = _run_blocked("matplotlib", ["report", str(small["results"]), "-o", str(tmp_path)])
    assert proc.returncode == 2
    assert "pip install 'perfsuite[report]'" in proc.stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such results file"), ("{", "not JSON"), ('{"cases": 3}', "no 'cases' list")],
)
def test_a_bad_results_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, problem: str
) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err
    assert problem in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda base: base["loss"].__setitem__(0, None), ": baseline.loss[0] is null, not a number"),
        (lambda base: base.update(memory="x"), ": baseline.memory is 'x' (str), not an object"),
    ],
    ids=["a-null-loss", "a-memory-of-text"],
)
def test_a_hand_edited_baseline_in_a_results_file_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, problem: str
) -> None:
    results = _results()
    case = next(c for c in results["cases"] if c.get("baseline"))
    change(case["baseline"])
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert main(["report", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{case['case']}{problem}" in err[0]


@pytest.mark.nightly
def test_the_whole_tiny_matrix_renders(tmp_path: Path) -> None:
    """All 121 tiny-model cases with baselines (loop and Trainer), every table's three charts, under 2 MB, no
    time-against-memory label over another, a point or the legend."""
    rendered = _render(tmp_path, None)
    text = rendered["html"].read_text()
    tables = _tables(rendered["results"])
    assert len(tables) >= 8
    for kind in ("loss", "memory", "pareto"):
        assert text.count(f'data-chart="{kind}"') == len(tables), kind
    assert rendered["html"].stat().st_size < 2 * 2**20
    for table, cases in load_results(rendered["results"]).by_table().items():
        assert _overlapping_labels(cases, table) == [], table


def test_the_one_writer_of_results_files_writes_the_payload_as_given_and_says_each_file(tmp_path: Path) -> None:
    """``perfsuite run``, ``ab`` and ``bisect`` write ``--json`` and ``--report`` through one function."""
    from perfsuite.core.results import write_results

    payload = {"schema_version": 1, "cases": [{"model": "m", "loss": [1, 2.5]}], "wall_s": 3.0}
    said: list[str] = []
    drawn: list[Path] = []

    def render(out: Path) -> list[Path]:
        drawn.append(out)
        return [out / "summary.md"]

    write_results(payload, json_file=tmp_path / "r.json", report_dir=tmp_path / "rep", render=render, say=said.append)
    assert (tmp_path / "r.json").read_text() == json.dumps(payload, indent=2) + "\n"
    assert drawn == [tmp_path / "rep"]
    assert said == [f"wrote {tmp_path / 'r.json'}", f"wrote {tmp_path / 'rep' / 'summary.md'}"]
    write_results(payload, json_file=tmp_path / "quiet.json", say=None)  # bisect's: written, nothing said
    assert json.loads((tmp_path / "quiet.json").read_text()) == payload


def test_a_report_that_cannot_be_drawn_here_is_said_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from perfsuite.cli.options import report_without_charts

    assert report_without_charts("ab", None, "x") is None  # no --report: nothing to say
    find_spec = importlib.util.find_spec
    if find_spec("matplotlib") is not None:
        assert report_without_charts("ab", tmp_path, "x") is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name))
    assert report_without_charts("ab", tmp_path / "ab", "summary.md is written without it") == (
        f"perfsuite ab: --report {tmp_path / 'ab'}: report.html's charts need matplotlib, which is not installed here "
        "(pip install 'perfsuite[report]'); summary.md is written without it"
    )


def test_a_results_file_of_no_case_is_not_called_passed() -> None:
    """A session that ran no matrix case writes such a file; its summary says nothing was gated."""
    from perfsuite.core.results import parse_results
    from perfsuite.reports.summary import summary_markdown

    text = summary_markdown(parse_results({"cases": []}, "unit.json"))
    assert text.startswith("### perfsuite: no case\n")
    assert "**perfsuite: NOTHING GATED: no case ran**" in text
    assert "passed" not in text


def test_a_failed_case_is_named_once_in_the_summarys_notes() -> None:
    from perfsuite.core.results import parse_results
    from perfsuite.reports.summary import summary_markdown

    failed = {"case": "tiny-bert-vanilla", "status": "failed", "message": "tiny-bert-vanilla: peak memory +25.00%"}
    text = summary_markdown(parse_results({"cases": [failed], "refresh": False}, "gate.json"))
    assert "- `tiny-bert-vanilla`: peak memory +25.00%" in text


@pytest.mark.parametrize(
    ("change", "note"),
    [
        ("not gated", "time not compared (not gated (--perfsuite-time=off))"),
        ("too noisy here", "time not compared (too noisy on this time class)"),
        ("machine busy", "time not compared (the machine was busy)"),
        ("not compared", "time not compared (no figure for this time class)"),
    ],
)
def test_a_reports_row_says_why_a_step_time_was_not_compared_as_the_terminal_does(change: str, note: str) -> None:
    """The report's table reads a results file's checks; a time gated by nothing on purpose
    (--perfsuite-time=off) is not one with no figure for its class."""
    from perfsuite.core.results import ReportCase
    from perfsuite.reports.summary import gate_row

    check = {"metric": "step time", "ok": True, "compared": False, "change": change}
    case = ReportCase(id="c", model="m", strategy="s", engine="loop", status="passed", record=None, checks=[check])
    assert note in gate_row(case, "")
