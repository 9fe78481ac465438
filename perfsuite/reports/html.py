"""``report.html``: one self-contained file (inline SVG and CSS; no JavaScript, no CDN) that
opens from a downloaded CI artifact on a machine with no network.

Per model: the table practitioners publish, the loss curves against the baseline, the
memory breakdown, time against memory; then the write-ups' published figures beside ours,
the gate table, and with a history the heatmap of recent nights and each case's trend.
Every chart is a ``<figure class="chart" data-chart="KIND">`` (tests look for them).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.record import CaseRecord
from perfsuite.core.results import ReportCase, Results, regressions_first
from perfsuite.core.results_file import PAGE_MARK
from perfsuite.history.judge import judge
from perfsuite.history.records import rules_for, series
from perfsuite.reports import charts
from perfsuite.reports.published import ADAM_ARITHMETIC, PUBLISHED
from perfsuite.reports.summary import gate_row
from perfsuite.reports.tables import summary_rows, verdict

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:12.5px}
th,td{border:1px solid #ddd;padding:.2em .5em;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}
tr.failed td,tr.missing td,tr.refused td{background:#fde8e8}tr.skipped td{background:#fff6dd}
figure.chart{margin:1em 0}figure.chart svg{max-width:100%;height:auto}
figcaption{font-size:12px;color:#555}.meta{color:#555}.theirs{color:#6a4c00}
nav a{margin-right:.8em}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def head(title: str) -> str:
    """The document's start, through its ``<h1>``: every perfsuite page's look."""
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{PAGE_MARK}"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><h1>{esc(title)}</h1>"
    )


def html_figure(kind: str, key: str, svg: str, caption: str) -> str:
    return (
        f'<figure class="chart" data-chart="{esc(kind)}" id="{esc(kind)}-{esc(key)}">{svg}'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], classes: Sequence[str] | None = None) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{esc(classes[i])}"' if classes else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


def _figures(cases: Sequence[ReportCase]) -> list[dict[str, Any]]:
    """:func:`perfsuite.reports.tables.summary_rows` of one table's cases (each case's first run
    record), in case order: the figures and time and memory as % of vanilla."""
    records = [
        c.record
        if c.record is not None
        else CaseRecord(model=c.model, strategy=c.strategy, engine=c.engine, status=c.status)
        for c in cases
    ]
    return next(iter(summary_rows(records).values()), [])


def _strategy_rows(cases: Sequence[ReportCase]) -> tuple[list[list[str]], list[str]]:
    rows = []
    for case, r in zip(cases, _figures(cases), strict=True):
        optim, activ = r["optimizer_state_bytes"], r["activation_bytes"]
        rows.append(
            [
                case.strategy,
                case.status,
                "—" if r["step_time_s"] is None else f"{r['step_time_s'] * 1e3:,.1f}",
                "—" if r["peak_memory_bytes"] is None else f"{r['peak_memory_bytes'] / charts.MIB:,.1f}",
                "—" if optim is None else f"{optim / charts.MIB:,.2f}",
                "—" if activ is None else f"{activ / charts.MIB:,.1f}",
                "—" if r["final_loss"] is None else f"{r['final_loss']:.4f}",
                _pct(r["time_pct"]),
                _pct(r["memory_pct"]),
            ]
        )
    return rows, [c.status for c in cases]


def _published_section(results: Results) -> str:
    """The write-ups' tables, each row beside our time and memory % of vanilla for the same strategy."""
    ours: dict[str, list[str]] = {}
    for table, cases in results.by_table().items():
        for r in _figures(cases):
            if r["status"] == "ok" and r["time_pct"] is not None:  # ran, beside a vanilla that ran
                ours.setdefault(r["strategy"], []).append(f"{table}: {_pct(r['time_pct'])} / {_pct(r['memory_pct'])}")
    parts = [
        "<h2 id='published'>Beside the published figures</h2>",
        "<p>Theirs: the write-ups' own runs, on their hardware, model and data, as % of <em>their</em> control. "
        "Ours: this run's time / peak memory as % of vanilla on the same model and engine, on this machine. "
        "Read them as context, not as a target: a tiny model on a CPU has other bottlenecks than a full-size "
        "model on a GPU (half precision is slower on a CPU without half-precision kernels, where their GPU ran it "
        "faster), and nvidia-smi counts the CUDA context and the allocator's cache, which a tensor peak does not.</p>",
    ]
    for source in dict.fromkeys(p.source for p in PUBLISHED):
        rows = []
        for p in (p for p in PUBLISHED if p.source == source):
            rows.append(
                [
                    p.their_label,
                    p.model,
                    f"{p.time} ({_pct(p.time_pct)})",
                    f"{p.memory} ({_pct(p.memory_pct)})",
                    p.relative_to,
                    "; ".join(ours.get(p.strategy, [])) or "not in this run",
                ]
            )
        parts.append(f"<p class='theirs'>{esc(source)}</p>")
        parts.append(
            html_table(
                ["their run", "their model", "their time", "their memory", "% of", "ours: time / memory % of vanilla"],
                rows,
            )
        )
    arithmetic = []
    for case in results.cases:
        parts_ = (case.record.memory_breakdown_bytes if case.record is not None else None) or {}
        if case.ran and case.strategy == "vanilla" and parts_.get("parameters"):
            ratio = parts_.get("optimizer_state", 0) / parts_["parameters"]
            arithmetic.append(
                [
                    case.table,
                    f"{parts_['parameters'] / charts.MIB:,.2f}",
                    f"{parts_.get('optimizer_state', 0) / charts.MIB:,.2f}",
                    f"{ratio:.2f}",
                ]
            )
    parts.append(f"<p class='theirs'>{esc(ADAM_ARITHMETIC)}</p>")
    if arithmetic:
        parts.append(
            html_table(
                ["ours (vanilla, AdamW)", "parameters MiB", "optimizer state MiB", "state ÷ parameters"], arithmetic
            )
        )
    return "\n".join(parts)


def _history_section(
    results: Results, records: Sequence[Mapping[str, Any]], machine: str | None, nights: int = 14
) -> str:
    found = {k: v for k, v in series(records).items() if machine is None or k[0] == machine}
    mine = {k: judge(n, rules_for(k[2], tol)) for k, (n, tol) in found.items()}
    time_series = [k for k in mine if k[2] == "step time"]
    if not time_series:
        return "<h2 id='history'>History</h2><p>No nights recorded for this machine yet.</p>"
    all_nights = sorted({n.night for k in time_series for n in found[k][0]})[-nights:]
    rows, cells = [], []
    for key in sorted(time_series):
        by_night = {n.night: n.value for n in found[key][0]}
        tol = found[key][1] or 0.15
        rows.append(key[1])
        cells.append([None if night not in by_night else (by_night[night] - 1) / tol for night in all_nights])
    heat = charts.heatmap_chart(rows, all_nights, cells)
    trends = []
    for key, judged in sorted(mine.items()):
        _, case_id, metric = key
        if metric != "step time" and judged.verdict == "ok":
            continue  # memory and loss: only the ones that moved; step time: every case
        recent = found[key][0][-nights:]
        starts = [
            i
            for i in range(1, len(recent))
            if (recent[i].fingerprint, recent[i].baseline) != (recent[i - 1].fingerprint, recent[i - 1].baseline)
        ]
        trends.append(
            {
                "title": f"{case_id} · {metric} · {judged.verdict}",
                "nights": [n.night for n in recent],
                "values": [n.value for n in recent],
                "tolerance": found[key][1],
                "segment_starts": starts,
            }
        )
    verdict_rows = [
        [case_id, metric, j.verdict, "—" if j.drift is None else f"{j.drift:+.1%}", j.reason]
        for (_, case_id, metric), j in sorted(mine.items())
        if j.verdict != "ok" or j.drift
    ]
    parts = [
        "<h2 id='history'>History</h2>",
        "<p>Each series is one case's metric on this machine, night after night, as value ÷ baseline, in the "
        "gate's tolerance band. An orange dashed rule marks a new segment (an upgrade of the stack or a "
        "baseline refresh); streaks and drift never reach across one. Step time is a regression after 2 "
        "nights in a row out of tolerance; memory and loss on the first night.</p>",
        html_figure("heatmap", "nights", heat, f"step time over the last {len(all_nights)} nights"),
    ]
    if verdict_rows:
        parts.append(html_table(["case", "metric", "verdict", "drift", "why"], verdict_rows))
    if trends:
        parts.append(
            html_figure(
                "trend",
                "cases",
                charts.trend_chart(trends),
                "the current segment of each case's step time (and of any memory or loss that moved)",
            )
        )
    return "\n".join(parts)


def report_html(
    results: Results,
    records: Sequence[Mapping[str, Any]] | None = None,
    machine: str | None = None,
) -> str:
    """The whole report as one HTML document; ``records`` (a history) add the history section,
    limited to ``machine``'s series when given."""
    charts.require_matplotlib()
    env = results.env
    versions = env.get("versions") or {}
    tables = results.by_table()
    device = next((c.record.device_name for c in results.cases if c.ran and c.record), None)
    nav = "".join(f"<a href='#model-{_slug(t)}'>{esc(t)}</a>" for t in tables)
    out = [
        head("perfsuite report"),
        f"<p class='meta'>{esc(results.counts())} · device "
        f"{esc(device)} · {esc(env.get('date'))} · commit {esc((env.get('commit') or '')[:7])} · "
        + esc(", ".join(f"{k} {v}" for k, v in versions.items() if v))
        + "</p>",
        f"<nav>{nav}<a href='#published'>published figures</a>"
        + ("<a href='#gate'>gate</a>" if results.kind == "gate" or any(c.checks for c in results.cases) else "")
        + ("<a href='#history'>history</a>" if records is not None else "")
        + "</nav>",
    ]
    # The verdict first, then the charts; the long tables after them, passing rows folded away.
    line = verdict([c.status for c in results.cases], results.time_checks())
    out.append(f"<p class='verdict'><strong>{esc(line)}</strong></p>")
    if (ran := results.run_compared()) is not None:
        out.append(f"<p><em>{esc(ran)}.</em></p>")
    gated = [c for c in results.cases if c.checks or c.status in ("failed", "missing")]
    if gated:
        ordered = regressions_first(gated)
        failing = [c for c in ordered if c.status in ("failed", "missing", "refused")]
        passing = [c for c in ordered if c not in failing]
        headers = ["case", "status", "step time", "catches ≥", "peak memory", "loss", "note"]

        def rows_of(cases: list[ReportCase]) -> list[list[str]]:
            return [[cell for i, cell in enumerate(gate_row(c, "")) if i != 6] for c in cases]  # no sparkline

        out += [
            "<h2 id='gate'>Gate</h2>",
            "<p>Each case against its committed baseline; failures first. 'catches ≥' is the step-time "
            "tolerance: the smallest change of this case's time, either way, that fails it.</p>",
        ]
        if failing:
            out.append(html_table(headers, rows_of(failing), [c.status for c in failing]))
        if passing:
            out += [
                f"<details><summary>{len(passing)} passing case(s)</summary>",
                html_table(headers, rows_of(passing), [c.status for c in passing]),
                "</details>",
            ]
    for table, cases in tables.items():
        rows, classes = _strategy_rows(cases)
        slug = _slug(table)
        out.append(f"<h2 id='model-{slug}'>{esc(table)}</h2>")
        if any(c.ran for c in cases):
            below = (
                "; below, the difference from the baseline in units of its tolerance" if charts.compared(cases) else ""
            )
            out += [
                html_figure("loss", slug, charts.loss_chart(cases, table), f"loss per optimizer step{below}"),
                html_figure(
                    "memory",
                    slug,
                    charts.memory_chart(cases, table),
                    "memory at the peak by category (PyTorch's colours)",
                ),
            ]
        if len(charts.pareto_points(cases)[1]) > 1:  # one point is no trade-off to show
            out.append(
                html_figure(
                    "pareto",
                    slug,
                    charts.pareto_chart(cases, table),
                    "median step time against peak memory; the dotted line is the Pareto front",
                )
            )
        out += [
            "<details><summary>the table: every strategy's figures</summary>",
            html_table(
                [
                    "strategy",
                    "status",
                    "step ms",
                    "peak MiB",
                    "optim MiB",
                    "activ MiB",
                    "final loss",
                    "time % of vanilla",
                    "memory % of vanilla",
                ],
                rows,
                classes,
            ),
            "</details>",
        ]
        for case in cases:
            if case.status not in ("ok", "passed") and case.message:
                out.append(f"<p class='meta'>{esc(case.id)}: {esc(case.message.splitlines()[0])}</p>")
    out.append(_published_section(results))
    if records is not None:
        out.append(_history_section(results, records, machine))
    out.append("</body></html>")
    return "\n".join(out) + "\n"
