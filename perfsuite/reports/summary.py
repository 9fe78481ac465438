"""``summary.md``: the report for a GitHub job summary. Pure: no torch, no matplotlib.

Job summaries strip images and inline SVG and refuse more than 1 MiB per step, so this is
text only: a status line, the cases that need a look first (failed, missing, and series
the history flags), each with a sparkline of its recent nights, and the rest folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.check import why_not_compared
from perfsuite.core.results import ReportCase, Results, regressions_first
from perfsuite.history.records import judge_all
from perfsuite.reports.tables import catches_cell, verdict

LIMIT_BYTES = 1024 * 1024
"""GitHub's limit for one step's summary."""
_BARS = "▁▂▃▄▅▆▇█"
_COLUMNS = ("case", "status", "step time", "catches ≥", "peak memory", "loss", "nights", "note")


def sparkline(values: Sequence[float], tolerance: float) -> str:
    """Each value ÷ baseline as a bar: the middle is the baseline, the top and bottom twice the tolerance."""
    span = 2 * tolerance or 1.0
    bars = []
    for value in values:
        level = (value - 1 + span) / (2 * span)
        bars.append(_BARS[max(0, min(len(_BARS) - 1, int(level * len(_BARS))))])
    return "".join(bars)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def gate_row(case: ReportCase, trend: str) -> list[str]:
    time, memory, loss = case.check("step time"), case.check("peak memory"), case.check("loss")
    note = "; ".join(f"{m} out of tolerance" for m in case.failed_metrics)
    if time is not None and not time.get("compared", True):
        why = why_not_compared(str(time.get("change")), case.id)
        note = f"time not compared ({why})" + (f"; {note}" if note else "")
    if loss is not None and not loss.get("compared", True):
        note = "loss not compared (other initial weights)" + (f"; {note}" if note else "")
    if not case.checks and case.message:
        note = case.message.splitlines()[0]
    return [
        case.id,
        case.status,
        time["change"] if time else "—",
        catches_cell(time.get("limit") if time is not None and time.get("compared", True) else None),
        memory["change"] if memory else "—",
        "not compared"
        if loss is not None and not loss.get("compared", True)
        else (("ok, " if loss["ok"] else "DIVERGED, ") + loss["change"])
        if loss
        else "—",
        trend,
        note,
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def summary_markdown(
    results: Results,
    records: Sequence[Mapping[str, Any]] | None = None,
    machine: str | None = None,
) -> str:
    """The job summary; ``records`` (a history) add sparklines and the history's flags,
    limited to ``machine``'s series when given."""
    verdicts = judge_all(records or [])
    env = results.env
    versions = env.get("versions") or {}
    stack = ", ".join(f"{k} {v}" for k, v in versions.items() if v and k in ("torch", "transformers", "deepspeed"))
    head = [
        "### perfsuite: " + results.counts(),
        "",
        " · ".join(x for x in (env.get("date"), (env.get("commit") or "")[:7], stack) if x),
        "",
    ]
    flagged_history = {
        key: judged
        for key, judged in verdicts.items()
        if (machine is None or key[0] == machine) and judged.verdict in ("regression", "suspicious", "improvement")
    }
    if flagged_history:
        head.append("**History** (step time needs 2 nights in a row; memory and loss fail on the first):")
        for (mach, case_id, metric), judged in sorted(flagged_history.items()):
            head.append(f"- **{judged.verdict}**: `{case_id}` {metric} on `{mach}`: {judged.reason}")
        drifting = [(k, j) for k, j in verdicts.items() if j.drift is not None and abs(j.drift) >= 0.05]
        for (mach, case_id, metric), judged in sorted(drifting):
            head.append(f"- drift: `{case_id}` {metric} on `{mach}`: {judged.drift:+.1%} over the segment")
        head.append("")

    def trend(case: ReportCase) -> str:
        for (mach, case_id, metric), judged in verdicts.items():
            if case_id == case.id and metric == "step time" and (machine is None or mach == machine):
                tolerance = (case.check("step time") or {}).get("limit") or 0.15
                return sparkline([n.value for n in judged.segment[-14:]], float(tolerance))
        return ""

    flagged_ids = {key[1] for key in flagged_history}
    ordered = regressions_first(results.cases)
    first = [c for c in ordered if c.status in ("failed", "missing", "refused") or c.id in flagged_ids]
    rest = [c for c in ordered if c not in first]
    line = verdict([c.status for c in results.cases], results.time_checks())
    passed = (
        "No case is in this file."
        if not results.cases
        else "No case was compared with a baseline."
        if not any(c.checks for c in results.cases)
        else "Every case passed its gates."
        if all(check.compared for check in results.time_checks()) and not any(c.status == "ok" for c in results.cases)
        else "No case failed a gate it was given."
    )
    ran = results.run_compared()
    said = [f"**{line}**", "", *([f"_{ran}._", ""] if ran else [])]
    body = [*head[:2], *said, *head[2:], "**Needs a look**" if first else passed, ""]
    if first:
        body += _table([gate_row(c, trend(c)) for c in first]) + [""]
        for case in first:
            if case.message:
                note = case.message.splitlines()[0].removeprefix(f"{case.id}: ")  # named once
                body.append(f"- `{case.id}`: " + _cell(note))
        body.append("")
    folded = ["<details><summary>" + f"{len(rest)} other case(s)</summary>", ""]
    folded += _table([gate_row(c, trend(c)) for c in rest]) + ["", "</details>", ""]
    text = "\n".join(body + (folded if rest else []))
    if len(text.encode()) > LIMIT_BYTES:
        cut = text.encode()[: LIMIT_BYTES - 200].decode(errors="ignore")
        text = cut + "\n\n… cut at GitHub's 1 MiB limit; the whole table is in report.html.\n"
    return text
