"""``perfsuite ab``'s results for a reader: the terminal table, ``summary.md`` and a ``report.html``
in the suite report's look (verdicts first, then a chart of every pair's time ratio per case,
then the table). ``perfsuite report ab.json`` rebuilds them from ``--json``'s file."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import write_text_atomic
from perfsuite.core.changed_code import ChangedCode
from perfsuite.core.gates import BREAKDOWN_PREFIX, category_change
from perfsuite.core.loss import seeds_said, side_by_side
from perfsuite.core.paired import SAME_CONFIDENCE, bounded
from perfsuite.core.reach import Reach, described, reach, unreached, unreached_said
from perfsuite.core.results_file import SUMMARY_MARK
from perfsuite.core.tolerance import Tolerance
from perfsuite.core.units import format_bytes, format_time
from perfsuite.reports.explain import html_causes, markdown_causes, marks, notes

HEADERS = ("case", "verdict", "time B/A [interval]", "pairs", "peak MiB A → B", "breakdown change", "loss A → B")


def _time(case: Mapping[str, Any]) -> tuple[str, str]:
    t = case.get("time")
    if not t:
        ratios = [r for r in case.get("ratios") or () if r and r > 0]
        if not ratios:
            return "—", "0"
        # Stopped before its first look: the pairs' geometric mean, with no interval and no verdict.
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        return f"{mean:.3f} before the first look", f"{len(ratios)} {case.get('mode', '')}".strip()
    pairs = f"{t['pairs']} {case.get('mode', '')}".strip()
    return f"{bounded(t['ratio'], t['low'], t['high'])} {t['verdict']}", pairs


def _memory(case: Mapping[str, Any]) -> tuple[str, str]:
    m = case["memory"]
    if m["a"] is None or m["b"] is None:
        return "—", "—"
    peak = f"{m['a'] / 2**20:,.2f} → {m['b'] / 2**20:,.2f} ({(m['b'] - m['a']) / max(m['a'], 1):+.1%})"
    changes, few = [], Tolerance().memory_atol_bytes
    moment = {str(c.get("metric")) for c in case.get("checks") or () if c.get("moment")}  # as said beside it
    for name in sorted(set(m["breakdown_a"]) | set(m["breakdown_b"])):
        a, b = m["breakdown_a"].get(name, 0), m["breakdown_b"].get(name, 0)
        if abs(b - a) > max(few, 0.01 * max(a, 1)):
            moved = f"{BREAKDOWN_PREFIX}{name}" in moment
            changes.append(category_change(name, a, b) + (" (the peak's moment moved)" if moved else ""))
    return peak, ", ".join(changes) or "none"


def rows(payload: Mapping[str, Any]) -> list[list[str]]:
    out = []
    noted = marks(payload)
    for case in payload["cases"]:
        if case["verdict"] == "new":  # the candidate's alone: nothing to pair it with
            step, _, final = _alone(case)
            b = case["memory"]["b"]
            cells = [f"B alone, one run: {step}" if step else "—", "0", "—" if b is None else f"— → {b / 2**20:,.2f}"]
            loss = f"B alone: final {final}" if final else "—"
            out.append([case["case"], f"new ({case.get('new')} not in base)", *cells, "—", loss])
            continue
        if case["error"]:
            error = case["error"] if len(case["error"]) <= 200 else case["error"][:199] + "…"
            verdict = f"{case['verdict']} (new)" if case.get("new") else case["verdict"]  # it ran on B alone
            out.append([case["case"], verdict, error, "—", "—", "—", "—"])
            continue
        time_cell, pairs = _time(case)
        verdict = case["verdict"]
        cut = "interrupted" if case.get("interrupted") else "stopped" if case.get("stopped") else None
        if cut:  # its time is the last look's; the pairs, all it had
            verdict, pairs = f"{verdict} ({cut})", f"{len(case['ratios'])} {case.get('mode', '')}".strip()
        peak, breakdown = _memory(case)
        if case["case"] in noted:  # its cause: the note under the table (summary.md: above it)
            verdict = f"{verdict} [{noted[case['case']]}]"
        out.append([case["case"], verdict, time_cell, pairs, peak, breakdown, _loss(case)])
    return out


def _alone(case: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """A new case's one run on the candidate: its median step time, peak and final loss, each ``None``
    where it was not measured."""
    steps = (case.get("step_time_s") or {}).get("b") or ()
    peak, curve = case["memory"]["b"], case["loss"].get("b")
    return (
        f"{format_time(steps[0], 's')} a step" if steps else None,
        format_bytes(peak) if peak is not None else None,
        f"{curve[-1]:.6g}" if curve else None,
    )


def new_figures(case: Mapping[str, Any]) -> str:
    """What a new case's one run on the candidate measured (``case``: its JSON): ``the candidate, one
    run: 5.10 ms a step, peak 12.30 MiB, final loss 2.31``."""
    step, peak, final = _alone(case)
    said = [step, *([f"peak {peak}"] if peak else []), *([f"final loss {final}"] if final else [])]
    shown = ", ".join(filter(None, said)) or "nothing measured"
    return f"the candidate, one run: {shown}; nothing to compare it with"


def _loss(case: Mapping[str, Any]) -> str:
    """Where the two curves ended and how far apart they ran; a difference its check let pass says so
    (on one stack a curve moves only where the code's arithmetic changed)."""
    loss, diff = case["loss"], case["loss"]["max_abs_diff"]
    a, b = loss.get("a"), loss.get("b")
    said = side_by_side(a, b)
    if said is None:
        if a and b:  # the case's step count differs between the sides
            return f"{len(a)} → {len(b)} steps"
        return "—" if diff is None else f"max |Δ| {diff:.3g}"  # a file from before the curves were kept
    check: Mapping[str, Any] = next((c for c in case.get("checks") or () if c.get("metric") == "loss"), {})
    if check.get("seeds"):  # from other weights, judged against the base's curves at other seeds
        texts = [str(check.get(key) or "") for key in ("tolerance", "baseline", "measured")]
        return f"{said}, {seeds_said(bool(check.get('ok')), check.get('rel'), *texts)}"
    if check.get("compared") is False:  # their curves part for another reason, said by the check
        return f"{said}, other initial weights"
    return f"{said}, within its tolerance" if check.get("ok") and diff else said


def differing(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> list[str]:
    """``name a → b`` for each library whose version differs between two sides."""
    return [f"{n} {a.get(n)} → {b.get(n)}" for n in dict.fromkeys([*a, *b]) if a.get(n) != b.get(n)]


def _versions(payload: Mapping[str, Any], side: str) -> dict[str, str | None]:
    return {n: (lib or {}).get("version") for n, lib in payload["sides"][side]["probe"]["libraries"].items()}


def verdict_line(payload: Mapping[str, Any]) -> str:
    counts = payload["verdicts"]
    undecided = sum(n for v, n in counts.items() if v not in ("same", "improved", "skipped", "new"))
    if counts.get("regressed"):
        head = "REGRESSED"
    elif payload.get("interrupted"):  # a case stopped half-way may have been on its way to a regression
        head = "INTERRUPTED, no regression called before it stopped"
    elif payload.get("stopped"):
        head = "STOPPED when a side stopped answering, no regression called before it"
    elif not any(counts.get(v) for v in ("same", "improved", "undecided")):
        head = "nothing compared"  # every case skipped, not testable, or new to the candidate
    else:  # "no regression" only where every case was decided
        head = "no regression called" if undecided else "no regression"
    parts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    moved = ", ".join(differing(_versions(payload, "base"), _versions(payload, "candidate")))
    missed = unreached_said(_reach(payload), name=code_span)  # what a verdict on these cases cannot speak for
    code = [payload["sides"][name].get("code") for name in ("base", "candidate")]
    changed = f"the project's code {code[0]} → {code[1]}; " if all(code) and code[0] != code[1] else ""
    stopped = ""
    for key, word in (("interrupted", "INTERRUPTED"), ("stopped", "STOPPED")):
        if n := payload.get(key):  # the headline's word said once
            stopped += f"; {n} case(s) unfinished" if head.startswith(word) else f"; {word} with {n} case(s) unfinished"
    unseen = f"; {missed}" if missed else ""
    probed = all(_versions(payload, name) for name in ("base", "candidate"))
    versions = moved or ("the same versions" if probed else "a side's versions not read: it was not set up")
    if untested_reason(payload) is not None:  # the side and the reason: not just "not set up"
        side = payload.get("untested_side")
        unset = f"the {side} cannot be tested" if side else "the sides cannot be tested"
        versions = f"{moved}; {unset}" if moved else unset
    return f"{head}: {parts} (base → candidate: {changed}{versions}{unseen}){stopped}"


def untested_reason(payload: Mapping[str, Any]) -> str | None:
    """Why no case could be tested, where one reason stopped them all (a side that could not be set up,
    or whose workers could not import what the cases need), said whole; else ``None``."""
    errors = {str(case.get("error") or "") for case in payload.get("cases") or ()}
    error = errors.pop() if len(errors) == 1 else ""
    return error.removeprefix("cannot test: ") if error.startswith("cannot test: ") else None


def _timed(payload: Mapping[str, Any]) -> bool:
    """Whether any case ran a pair (a time verdict's reading applies)."""
    return any(case.get("ratios") for case in payload.get("cases") or ())


def _reach(payload: Mapping[str, Any]) -> list[Reach]:
    return reach(payload.get("cases") or (), ChangedCode.from_json(payload.get("changed_code")))


def reach_lines(payload: Mapping[str, Any], most: int | None = None, name: Callable[[str], str] = str) -> list[str]:
    """Per package, function or file that differs between the sides, what the cases' builds and steps
    ran of it (:mod:`perfsuite.core.reach`), what none was seen calling first; past ``most`` lines,
    how many more ``--json`` holds. ``name``: how a name is written (:func:`code_span` in markdown)."""
    compared = sum(not case["error"] and not case.get("new") for case in payload["cases"])
    device_type = payload.get("device_type", "cpu")
    found = _reach(payload)
    missed = set(unreached(found))
    found.sort(key=lambda r: r.name not in missed)  # stable: each group keeps its order
    engines = [str(e) for e in payload.get("engines") or ()]
    using = payload.get("strategies_using")  # None in an older file: this process's registry
    lines = [described(r, compared, device_type, name, engines, using) for r in found]
    if most is not None and len(lines) > most:
        return [*lines[:most], f"… and {len(lines) - most} more (the comparison's --json holds each case's)"]
    return lines


def _reach_markdown(payload: Mapping[str, Any]) -> list[str]:
    ran = reach_lines(payload, SHOWN_REACH, code_span)
    return ["", REACH_HEAD, *(f"- {line}" for line in ran)] if ran else []


def code_span(name: str) -> str:
    """``name`` as markdown's code span: ``__init__`` stays itself, and a ``<`` is no tag."""
    return f"`{name}`"


SHOWN_REACH = 30
"""The lines of it ``summary.md`` and ``report.html`` show (a pull request's comment has a size limit)."""


REACH_HEAD = "What the cases ran of the code that differs (each side's first pair: build, first step, profile step):"


def imported(project: Mapping[str, Any], name: Callable[[str], str] = str) -> str:
    """What a side's probe says it imported of the project's own code (``project``: its ``pyproject``
    and, per declared module, the file): ``from <its copy>: a/model.py, a/train.py``, a file outside
    the copy (an installed one) by its whole path, said so, and one not found said so; ``""`` for none."""
    root = Path(str(project["pyproject"])).parent if project.get("pyproject") else None
    files = []
    for module, file in (project.get("code") or {}).items():
        path = Path(str(file)) if file else None
        if path is None:
            files.append(f"{name(str(module))} (not found)")
        elif root is not None and path.is_relative_to(root):
            files.append(name(str(path.relative_to(root))))
        else:
            files.append(f"{name(str(path))} (outside its copy)")
    if not files:
        return ""
    return f"from {name(str(root))}: {', '.join(files)}" if root is not None else ", ".join(files)


def code_lines(payload: Mapping[str, Any]) -> list[str]:
    """Where each side imported the project's own code from (comparing the project's code at two commits)."""
    lines = []
    for side_name, side in payload["sides"].items():
        project = side["probe"].get("project") or {}
        if side.get("code") and (said := imported(project, code_span)):
            lines.append(f"- {side_name} imported the modules its declarations name {said}")
    return lines


def render_table(payload: Mapping[str, Any]) -> Any:
    """The headline, the table and its notes, for a console: the headline and each note wrapped at the
    console's width (a log's 200 columns), not at the table's (:class:`~perfsuite.reports.notes.Notes`)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from perfsuite.reports.notes import Notes

    table = Table()
    for header in HEADERS:
        # A case id and a verdict are never cut short ("tiny-ber…", "regress…"): folded if need be.
        table.add_column(header, overflow="fold")
    for row in rows(payload):
        table.add_row(*row)
    noted = notes(payload)
    return Group(Text(verdict_line(payload)), table, *([Notes(noted)] if noted else []))


def marker(device_type: str, *, own: bool = False) -> str:
    """``summary.md``'s first line, hidden in a pull request's comment: a workflow that posts it finds
    its own comment by this line and updates it (one per device, and one for a comparison of the
    project's own code beside one of its dependency pins)."""
    return f"{SUMMARY_MARK}{'own ' if own else ''}{device_type} -->"


NOTHING_COMPARED = "<!-- perfsuite-ab: nothing compared -->"
"""The second line of a summary that compared nothing: a workflow updates its comment with it, never opens one."""


def _pins_lines(base: str | None, candidate: str | None, pins: Mapping[str, Any] | None) -> list[str]:
    """The two sides (unless ``None``), and with ``--pins`` the commits, the pins that moved and what was skipped."""
    lines = [f"- {name}: `{env}`" for name, env in (("base", base), ("candidate", candidate)) if env is not None]
    if pins:
        moved = f" in {', '.join(pins['files'])}: {', '.join(pins['moved']) or 'none changed'}"
        lines.append(
            f"- pins of `{pins['base_ref']}` ({pins['base_commit']}) → `{pins['head_ref']}` ({pins['head_commit']})"
            f"{moved if pins['files'] else ': no pin file changed'}"
        )
        lines += [f"- skipped {s['name']}: {s['why']}".replace("<", "&lt;") for s in pins["skipped"]]
    return lines


def markdown(payload: Mapping[str, Any]) -> str:
    sides = payload["sides"]
    device_type = payload.get("device_type", "cpu")
    own = any(side.get("code") for side in sides.values())
    lines = [
        marker(device_type, own=own),
        f"### perfsuite ab on {device_type}" + (": the project's own code" if own else ""),
        f"**{verdict_line(payload)}**",
        "",
        *([f"> cannot test: {reason}".replace("<", "&lt;"), ""] if (reason := untested_reason(payload)) else []),
        *markdown_causes(payload),
        *_pins_lines(sides["base"]["env"], sides["candidate"]["env"], payload.get("pins")),
        *code_lines(payload),
        *(
            ["", REACH_HEAD, *(f"- {line}" for line in ran)]
            if (ran := reach_lines(payload, SHOWN_REACH, code_span))
            else []
        ),
        "",
        _markdown_row(HEADERS),
        "|" + "---|" * len(HEADERS),
    ]
    lines += [_markdown_row(row) for row in rows(payload)]
    schedule = payload.get("schedule")  # in every file ab writes; a hand-made one may lack it
    return "\n".join([*lines, *(["", reading(schedule)] if schedule and _timed(payload) else [])]) + "\n"


def reading(schedule: Mapping[str, Any]) -> str:
    """How to read a time verdict, with this comparison's floor and confidences: what *same* rules out,
    and what an *undecided* case's interval still allows."""
    alarms = schedule.get("alarms")
    looks = f"at pair{'s' if len(alarms) > 1 else ''} {', '.join(map(str, alarms))}" if alarms else "at any look"
    same = schedule.get("same_confidence", SAME_CONFIDENCE)
    return (
        f"Time: *slower* (or *faster*) where B/A's interval at {schedule['confidence']:.4g} lies above 1 (below) "
        f"and its estimate is {schedule['floor']:.1%} or more off, {looks}; *same* where its interval at "
        f"{same:.4g} lies within ±{schedule['floor']:.1%}; *undecided* otherwise, after at most {schedule['cap']} "
        f"{'pair' if schedule['cap'] == 1 else 'pairs'}, its interval the change it could not rule out."
    )


def _markdown_row(cells: Iterable[str]) -> str:
    """A table row; a cell's own ``|`` (``loss max |Δ|``) escaped, or it would split the cell."""
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def note_markdown(device_type: str, headline: str, pins: Mapping[str, Any]) -> str:
    """``summary.md`` of an upgrade comparison that had nothing to compare (no exact pin changed)."""
    lines = [marker(device_type), NOTHING_COMPARED, f"### perfsuite ab on {device_type}", f"**{headline}**"]
    return "\n".join([*lines, "", *_pins_lines(None, None, pins)]) + "\n"


def write_note(out: Path, text: str) -> Path:
    """``summary.md`` alone (:func:`note_markdown`'s) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "summary.md", text if text.endswith("\n") else text + "\n")
    return out / "summary.md"


def report_html(payload: Mapping[str, Any], out_dir: Path | None = None) -> str:
    """The comparison as a page of the suite's report (:mod:`perfsuite.reports.html`): the verdict,
    the per-pair ratio chart, the table, each side's stack."""
    from perfsuite.reports import charts
    from perfsuite.reports.html import esc, head, html_figure, html_table

    charts.require_matplotlib()
    schedule = payload["schedule"]
    sides = payload["sides"]
    stacks = [
        [name, side["env"], ", ".join(f"{k} {v}" for k, v in _versions(payload, name).items() if v)]
        for name, side in sides.items()
    ]
    out = [
        head("perfsuite ab"),
        f"<p class='meta'>{esc(payload['date'])} · {len(payload['cases'])} case(s) in {payload['wall_s']:.0f} s · "
        f"{schedule['first']} to {schedule['cap']} pairs each · floor {schedule['floor']:.1%} · "
        f"slower or faster at {schedule['confidence']:.4g} at pairs "
        f"{', '.join(map(str, schedule.get('alarms') or ['any']))}</p>",
        f"<p class='verdict'><strong>{esc(verdict_line(payload))}</strong></p>",
        *([f"<p>cannot test: {esc(reason)}</p>"] if (reason := untested_reason(payload)) else []),
        html_figure(
            "pair-ratios",
            "ab",
            charts.pair_ratio_chart(payload["cases"], schedule["floor"]),
            "step time B/A of every pair (later pairs darker), the estimate (red) and its interval (black); "
            "the grey band is ± the floor, within which a case is 'same'",
        ),
        "<h2 id='cases'>Cases</h2>",
        html_table(HEADERS, rows(payload)),
        html_causes(payload, out_dir),
        *(
            [f"<p>{esc(REACH_HEAD)}</p><ul>", *(f"<li>{esc(line)}</li>" for line in ran), "</ul>"]
            if (ran := reach_lines(payload, SHOWN_REACH))
            else []
        ),
        "<h2 id='sides'>Sides</h2>",
        html_table(["side", "environment", "versions"], stacks),
        "</body></html>",
    ]
    return "\n".join(out) + "\n"


def write_report(payload: Mapping[str, Any], out: Path) -> list[Path]:
    """``report.html`` and ``summary.md`` of a comparison into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    page, summary = out / "report.html", out / "summary.md"
    write_text_atomic(summary, markdown(payload))  # first: the page needs matplotlib, the summary nothing
    write_text_atomic(page, report_html(payload, out))
    return [page, summary]
