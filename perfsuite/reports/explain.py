"""``perfsuite ab``'s explanations for a reader: a numbered note per explained case under the
terminal's table, the causes at the top of ``summary.md`` (a pull request's comment: the cause in the
first screen), and in ``report.html`` a section per case with the profile's tables, the
differential flame graph, the tensors that differ, and the loss with the gradients' ratios."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.changed_code import ChangedCode
from perfsuite.core.explain import profile, profile_lines, tensors
from perfsuite.core.explain.explanation import Explanation
from perfsuite.core.explain.frames import python_parts, short
from perfsuite.core.explain.profile import LEVEL_NAMES

MiB = 2**20


def explained(payload: Mapping[str, Any]) -> list[tuple[str, Explanation]]:
    """Each explained case of an ``ab`` payload, with its explanation, in the table's order."""
    return [
        (case["case"], Explanation.from_json(case["explanation"]))
        for case in payload["cases"]
        if case.get("explanation")
    ]


def marks(payload: Mapping[str, Any]) -> dict[str, int]:
    """The note number of each explained case."""
    return {case: number for number, (case, _) in enumerate(explained(payload), 1)}


def notes(payload: Mapping[str, Any]) -> list[str]:
    """The terminal's notes under the table: ``[1] tiny-bert-vanilla: time: ...``, a line per cause."""
    out = []
    for number, (case, found) in enumerate(explained(payload), 1):
        lines = found.lines() or ["explained: nothing differs beyond the profiles' noise"]
        out += [f"[{number}] {case}: {lines[0]}", *(f"    {line}" for line in lines[1:])]
    return out


def _md(text: str) -> str:
    return text.replace("<", "&lt;").replace("|", "\\|")


def markdown_causes(payload: Mapping[str, Any]) -> list[str]:
    """``summary.md``'s causes: a bullet per explained case, a sub-bullet per cause."""
    found = explained(payload)
    if not found:
        return []
    verdicts = {case["case"]: case["verdict"] for case in payload["cases"]}
    out = ["**Why** (instrumented runs of each side, diffed):", ""]
    for number, (case, explanation) in enumerate(found, 1):  # numbered as the table marks them
        out.append(f"- [{number}] `{case}` ({verdicts.get(case, '?')}):")
        out += [f"  - {_md(line)}" for line in explanation.lines() or ["nothing differs beyond the profiles' noise"]]
    return [*out, *(_md(line) for line in innermost_note(payload, found)), ""]


def innermost_note(payload: Mapping[str, Any], found: Sequence[tuple[str, Explanation]]) -> list[str]:
    """Comparing the project's own code: where an op's changed calls are named by a frame in a file the
    change did not touch (the model's forward, under a changed step), a line saying that the frame
    named is where the calls ran, and which functions did change; ``[]`` otherwise."""
    changed = ChangedCode.from_json(payload.get("changed_code"))
    if changed is None or not changed.functions:
        return []
    untouched = []
    for _, explanation in found:
        for change in explanation.time.changes if explanation.time is not None else ():
            for source in change.sources:
                parts = python_parts(source.frame)
                if parts is not None and not any(f"/{parts[0]}".endswith(f"/{name}") for name in changed.files):
                    untouched.append(short(source.frame))
    if not untouched:
        return []
    touched = ", ".join(f.label for f in changed.functions[:3]) + (" and more" if len(changed.functions) > 3 else "")
    return [
        f"A call is named by the innermost Python frame that made it: {', '.join(dict.fromkeys(untouched))} did not "
        f"change; it is where code that did ({touched}) ran them."
    ]


def html_causes(payload: Mapping[str, Any], out_dir: Path | None = None) -> str:
    """``report.html``'s section of causes (empty when nothing was explained)."""
    from perfsuite.reports.explain_charts import flame_chart, gradient_chart
    from perfsuite.reports.html import esc, html_figure, html_table

    found = explained(payload)
    if not found:
        return ""
    losses = {case["case"]: case["loss"] for case in payload["cases"]}
    parts = ["<h2 id='causes'>Causes</h2>"]
    for number, (case, explanation) in enumerate(found, 1):
        parts.append(f"<h3 id='cause-{number}'>[{number}] {esc(case)}</h3>")
        parts.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in explanation.lines()) + "</ul>")
        diff = explanation.time
        if diff is not None:
            parts.append(
                html_table(
                    ["level", "entry", "calls/step A → B", "ms/step A → B", "change", "calls asked for by"],
                    _time_rows(diff),
                )
            )
            parts.append(
                html_figure(
                    "flame",
                    f"{number}",
                    flame_chart(explanation.flame),
                    "the profiled step, base and candidate merged: each frame as wide as the sides' mean time in it "
                    "and below it; red where the candidate spends more, blue less, beyond 3 × the frame's own change "
                    "between one side's two profiles",
                )
            )
            parts.append(_trace_links(diff.traces, out_dir))
        if explanation.memory is not None:
            rows = _tensor_rows(explanation.memory)
            if rows:
                parts.append(html_table(["kind", "name", "base", "candidate", "change MiB"], rows))
        if explanation.loss is not None and explanation.loss.step is not None:
            loss = losses.get(case) or {}
            chart = gradient_chart(loss.get("a") or [], loss.get("b") or [], explanation.loss)
            caption = "loss per step (left) and each parameter's gradient norm, candidate ÷ base (right)"
            parts.append(html_figure("gradient-ratios", f"{number}", chart, caption))
    return "\n".join(parts)


def _time_rows(diff: profile.ProfileDiff) -> list[list[str]]:
    return [
        [
            LEVEL_NAMES[c.level],
            c.key,
            "—" if c.level == "package" else f"{c.calls_a:,.4g} → {c.calls_b:,.4g}",
            f"{c.us_a / 1e3:,.3f} → {c.us_b / 1e3:,.3f}",
            ("calls " if c.counted else "") + ("time" if c.timed else ""),
            "; ".join(profile_lines.called_from(c, shown=None)),
        ]
        for c in diff.changes
    ]


def _tensor_rows(memory: tensors.MemoryCause) -> list[list[str]]:
    def side(entry: Any) -> str:
        return "—" if entry is None else f"{entry.dtype} {tuple(entry.shape)}"

    rows = [
        [c.kind, c.name, side(c.a), side(c.b), f"{c.delta / MiB:+,.3f}"]
        for cat in memory.categories
        for c in cat.changes
    ]
    rows += [
        [
            "activations kept by a forward" + (f" ({m.modules} modules)" if m.modules > 1 else ""),
            m.module,
            f"{m.bytes_a / MiB:,.3f} MiB",
            f"{m.bytes_b / MiB:,.3f} MiB",
            f"{m.delta / MiB:+,.3f}",
        ]
        for cat in memory.categories
        for m in cat.modules
    ]
    return rows


def _trace_links(traces: Sequence[str | None], out_dir: Path | None) -> str:
    from perfsuite.reports.html import esc

    links = []
    for side, path in zip(("base", "candidate"), traces, strict=False):
        if path is None:
            continue
        shown = os.path.relpath(path, out_dir) if out_dir is not None else path
        links.append(f"<a href='{esc(shown)}'>{side}</a>")
    if not links:
        return ""
    return f"<p class='meta'>Chrome traces (open in ui.perfetto.dev): {' · '.join(links)}</p>"
