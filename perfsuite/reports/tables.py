"""Tables: the one practitioners publish (each strategy against vanilla) and the gate summary. Pure: no torch."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from perfsuite.core.check import NOT_GATED, Check, TimeCheck, why_not_compared
from perfsuite.core.record import CaseRecord
from perfsuite.core.stats import percent_of
from perfsuite.core.tolerance import GATE_SENSITIVE

CONTROL = "vanilla"


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**20:,.1f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _breakdown(case: CaseRecord, key: str) -> float | None:
    return (case.memory_breakdown_bytes or {}).get(key)


def table_title(case: CaseRecord) -> str:
    """The table a case belongs to: its model, and its engine beyond the loop (``tiny-bert · trainer``)."""
    engine = case.engine or "loop"
    return case.model if engine == "loop" else f"{case.model} · {engine}"


def strategy_label(case: CaseRecord) -> str:
    """The strategy, with its ranks beyond one (``ddp ×2``: its memory is the largest rank's)."""
    ranks = int(case.world_size or 1)
    return case.strategy if ranks == 1 else f"{case.strategy} ×{ranks}"


def summary_rows(cases: Iterable[CaseRecord]) -> dict[str, list[dict[str, Any]]]:
    """Per model and engine, one row per case: the figures, and time/memory as % of the
    vanilla run of the same model through the same engine. A multi-rank case's memory is its
    largest rank's (what each device must hold); their sum is in ``peak_memory_sum_bytes``."""
    by_model: dict[str, list[CaseRecord]] = {}
    for case in cases:
        by_model.setdefault(table_title(case), []).append(case)
    table: dict[str, list[dict[str, Any]]] = {}
    for model, runs in by_model.items():
        control = next((c for c in runs if c.strategy == CONTROL and c.ok), None)
        base_time = control.timed().median if control else None
        base_mem = control.peak_memory_bytes if control else None
        rows = []
        for case in runs:
            ok = case.ok
            median = case.timed().median if ok else None
            peak = case.peak_memory_bytes if ok else None
            losses = case.loss
            rows.append(
                {
                    "id": case.case_id,
                    "strategy": strategy_label(case),
                    "world_size": int(case.world_size or 1),
                    "peak_memory_sum_bytes": case.peak_memory_sum_bytes if ok else None,
                    "status": case.status,
                    "error": case.error,
                    "step_time_s": median,
                    "samples_per_s": case.samples_per_s if ok else None,
                    "tokens_per_s": (case.tokens_per_s.real if case.tokens_per_s else None) if ok else None,
                    "padding_fraction": case.padding_fraction if ok else None,
                    "peak_memory_bytes": peak,
                    "optimizer_state_bytes": _breakdown(case, "optimizer_state") if ok else None,
                    "activation_bytes": _breakdown(case, "activations") if ok else None,
                    "final_loss": losses[-1] if ok and losses else None,
                    "mfu": case.mfu if ok else None,
                    "time_pct": percent_of(median, base_time),
                    "memory_pct": percent_of(peak, base_mem),
                }
            )
        table[model] = rows
    return table


LOG_WIDTH = 200
"""Columns of a table written to a pipe, a file or a CI log, where nothing wraps it back."""


def log_console(*, stderr: bool = False) -> Console:
    """A console for the user's terminal, or, where output goes to a pipe, a file or a CI log,
    one :data:`LOG_WIDTH` wide: rich would squeeze a table into 80 columns and cut case ids and
    verdicts short ("tiny-ber…")."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.width = LOG_WIDTH
    return console


def render(cases: Sequence[CaseRecord], console: Console | None = None) -> None:
    """Print one table per model, then the reasons for skips and failures."""
    if console is None:
        console = log_console()
    notes: list[str] = []
    for model, rows in summary_rows(cases).items():
        show_mfu = any(r["mfu"] is not None for r in rows)
        # A model whose batches hold no sequences (an image model's) has no tokens to count.
        show_tokens = any(r["tokens_per_s"] for r in rows) or not any(r["status"] == "ok" for r in rows)
        # "default", not "left": left pads the title to the table's width with spaces, in a CI log too.
        table = Table(title=model, title_justify="default", header_style="bold")
        token_columns = ("tokens/s", "pad %") if show_tokens else ()
        for column in (
            ("strategy", "status", "step ms", "samples/s")
            + token_columns
            + ("peak MiB", "optim MiB", "activ MiB", "final loss", "time %", "memory %")
            + (("MFU",) if show_mfu else ())
        ):
            table.add_column(column, justify="left" if column in ("strategy", "status") else "right")
        for r in rows:
            tokens = [
                _num(r["tokens_per_s"], ",.0f"),
                _num(r["padding_fraction"] and 100 * r["padding_fraction"], ".0f"),
            ]
            cells = [
                r["strategy"],
                r["status"],
                _num(r["step_time_s"] and r["step_time_s"] * 1e3, ",.1f"),
                _num(r["samples_per_s"], ",.1f"),
                *(tokens if show_tokens else []),
                _mib(r["peak_memory_bytes"]),
                _mib(r["optimizer_state_bytes"]),
                _mib(r["activation_bytes"]),
                _num(r["final_loss"], ".4f"),
                _pct(r["time_pct"]),
                _pct(r["memory_pct"]),
            ]
            if show_mfu:
                cells.append(_num(r["mfu"] and 100 * r["mfu"], ".1f") + ("%" if r["mfu"] is not None else ""))
            table.add_row(
                *cells, style=None if r["status"] == "ok" else "yellow" if r["status"] == "skipped" else "red"
            )
            if r["status"] != "ok":
                notes.append(f"{r['id']}: {r['status']}: {r['error']}")
        console.print(table)
    if notes:
        console.print("\n".join(notes), markup=False, highlight=False)


# -- the pytest session summary: every matrix case against its baseline ---------------------

# "catches ≥": the step-time tolerance, i.e. the smallest change of this case's step time the gate fails on.
_GATE_COLUMNS = ("case", "status", "step time", "Δ time", "catches ≥", "peak memory", "Δ mem", "loss", "note")
_REFRESH_COLUMNS = ("case", "status", "metric", "old", "new", "change")
GATE_KEY = (
    "step time: the baseline's median → this run's; Δ time: what the gate judges, the median of each timed "
    "step's change against the baseline's same step (where both timed as many steps; else the medians' ratio), "
    "less the drift of a CPU session's cases where it applies"
)
"""Under the compare table: why Δ time is not the ratio of the two medians beside it."""


def _check(outcome: Any, metric: str) -> Any:
    return next((c for c in outcome.checks if c.metric == metric), None)


def _gate_cells(outcome: Any) -> list[str]:
    time, memory, loss = _check(outcome, "step time"), _check(outcome, "peak memory"), _check(outcome, "loss")
    failing = [c for c in outcome.checks if not c.ok and c.compared]
    notes = [f"{c.metric} out of tolerance" for c in failing]
    if time is not None and not time.compared:
        why = why_not_compared(time.change, outcome.case)
        notes.insert(0, f"time not compared: {why}")
    if loss is not None and not loss.compared:
        notes.insert(0, "loss not compared: other initial weights")
    attempts = getattr(outcome, "time_attempts", [])
    if len(attempts) > 1:
        notes.insert(0, f"time run {len(attempts)} times: {' → '.join(attempts)}")
    note = "; ".join(notes)
    if not outcome.checks and outcome.message:
        note = outcome.message.splitlines()[0]
    return [
        outcome.case,
        outcome.status,
        f"{time.baseline} → {time.measured}" if time else "—",
        time.change if time else "—",
        catches_cell(time.limit if time is not None and time.compared else None),
        f"{memory.baseline} → {memory.measured}" if memory else "—",
        memory.change if memory else "—",
        _loss_cell(loss),
        note,
    ]


def catches_cell(limit: float | None) -> str:
    """The "catches ≥" cell: the smallest step-time change, either way, that fails the case."""
    return "—" if limit is None else f"{limit:.1%}"


def _loss_cell(loss: Check | None) -> str:
    if loss is None:
        return "—"
    if not loss.compared:
        return "not compared"
    return ("ok, " if loss.ok else "DIVERGED, ") + loss.change


def _refresh_rows(outcome: Any) -> list[list[str]]:
    if not outcome.diff:
        return [
            [outcome.case, outcome.status, "—", "—", "—", outcome.message.splitlines()[0] if outcome.message else ""]
        ]
    rows = []
    for i, (metric, old, new, change) in enumerate(outcome.diff):
        rows.append([outcome.case if i == 0 else "", outcome.status if i == 0 else "", metric, old, new, change])
    if outcome.status == "refused":
        rows.append(["", "", "refused", "", "", outcome.message])
    return rows


def verdict(statuses: Sequence[str], time_checks: Sequence[TimeCheck], unbaselined: int = 0) -> str:
    """The first line of every summary: how many cases passed or failed, and how many were skipped for want
    of a baseline here (``unbaselined``, under ``--perfsuite-missing=skip``); how many of those whose step time
    was gated would catch a change of :data:`~perfsuite.core.tolerance.GATE_SENSITIVE` or less (and how
    wide the others are, so that a gate noise has widened is seen); when any case's step time was not
    compared (no figures for this machine's time class), how many and how to get it gated.

    ``time_checks``: per gated case, whether its step time was compared, the time class it ran on, and
    the smallest change its gate catches (its tolerance; ``None`` when not compared).
    """
    if not statuses:
        return "perfsuite: NOTHING GATED: no case ran"
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    bad = sum(n for status, n in counts.items() if status in ("failed", "missing", "refused"))
    ran_only = counts.pop("ok", 0)  # a `perfsuite run` file's case compared with no baseline: no gate said so
    # A gate's cases are "not reached" only when the session was interrupted: never a pass.
    head = "FAILED" if bad else "INTERRUPTED" if "not reached" in counts else "passed"
    if head == "passed" and ran_only and "passed" not in counts:
        head = "NOT GATED"
    said = [f"{n} {status}" for status, n in sorted(counts.items())]
    if ran_only:
        said.append(f"{ran_only} ran" + (", compared with no baseline" if head == "NOT GATED" else " but NOT gated"))
    line = f"perfsuite: {head}: " + ", ".join(said)
    if unbaselined:
        line += (
            f", {unbaselined} NOT gated (no baseline here, skipped: `perfsuite baselines refresh --missing` "
            "records them)"
        )
    uncompared = [check for check in time_checks if not check.compared]
    limits = [check.limit for check in time_checks if check.compared and check.limit is not None]
    sensitive = sum(1 for limit in limits if limit <= GATE_SENSITIVE + 1e-9)
    catches = ""
    if limits:
        catches = f": {sensitive} of {len(limits)} catch a change of {GATE_SENSITIVE:.0%} or less"
        wide = sorted(limit for limit in limits if limit > GATE_SENSITIVE + 1e-9)
        if wide:
            low, high = f"{wide[0]:.1%}", f"{wide[-1]:.1%}"
            span = low if low == high else f"{low}-{high}"
            catches += f", {len(wide)} only a change of {span} or more"
    if not uncompared:
        return line + (f"; step time gated for all {len(time_checks)}{catches}" if time_checks else "")
    missing = sorted({c.time_class or "unknown" for c in uncompared if not c.untimed and not c.busy})
    noisy = sorted({c.time_class or "unknown" for c in uncompared if c.untimed})
    busy = sum(c.busy for c in uncompared)
    several = sum(map(bool, (missing, noisy, busy))) > 1
    untimed = sum(c.untimed for c in uncompared)
    why = []
    if missing:
        why.append(
            (f"{len(uncompared) - untimed - busy} with " if several else "")
            + f"no baseline figures for this machine's time class {', '.join(missing)}"
        )
    if noisy:
        recordable = sum(c.recordable for c in uncompared)
        why.append(
            (f"{untimed} " if several else "")
            + f"too noisy on {', '.join(noisy)} to keep a time, as a pool of sessions there found"
            + (
                f", {recordable} of them now admitted by a gate widened since: a refresh of each records its time"
                if recordable
                else ""
            )
        )
    if busy:
        why.append(
            (f"{busy} " if several else "")
            + "timed while the machine was busy, another load able to move their steps by more than their "
            "tolerance: run them again when it is quiet"
        )
    # --missing leaves out the cases too noisy here: a refresh keeps their classes untimed.
    record = "record them here with `perfsuite baselines refresh --missing`, or " if missing else ""
    return (
        f"{line}; step time NOT gated for {len(uncompared)} of {len(time_checks)} ({'; '.join(why)}; memory and "
        f"loss were gated): {record}compare two stacks side by side on this machine with `perfsuite ab` "
        "(`--base-ref REF` for this code against its base, `--base OLD --candidate current` for an upgrade)"
        + (f"; of those gated{catches}" if limits else "")
    )


def outcomes_verdict(outcomes: Sequence[Any], unbaselined: int = 0) -> str:
    """:func:`verdict` of a session's outcomes (a step time not gated on purpose, ``--perfsuite-time=off``,
    is not counted as one without a figure for its class) and of ``unbaselined`` cases skipped."""
    time_checks = []
    for outcome in outcomes:
        check = next((c for c in outcome.checks if c.metric == "step time"), None)
        if check is not None and check.change != NOT_GATED:
            time_class = outcome.records[0].time_class if outcome.records else None
            compared, limit = bool(check.compared), check.limit
            time_checks.append(TimeCheck.of(compared, time_class, limit, check.change))
    line = verdict([o.status for o in outcomes], time_checks, unbaselined)
    other = sum(1 for o in outcomes for c in o.checks if c.metric == "loss" and not c.compared)
    if other:
        line += (
            f"; loss NOT gated for {other} (they started from other initial weights than their baselines': "
            "the random generator, a library's or this code's initialisation changed; where it is this code's, "
            "`perfsuite ab --base-ref BASE` compares it with its base before `perfsuite baselines refresh` "
            "records this stack's)"
        )
    return line


def gate_text(
    outcomes: Sequence[Any], *, refresh: bool, width: int = LOG_WIDTH, notes: Sequence[str] = (), unbaselined: int = 0
) -> str:
    """The session summary as terminal text: one row per case (a refresh: its old → new per metric),
    then ``notes`` (the session's drift). Why a step time was not compared is the first line's,
    once (the whole message per case is in the markdown summary and ``--perfsuite-json``)."""
    table = Table(header_style="bold", title="perfsuite: baselines " + ("refreshed" if refresh else "compared"))
    for column in _REFRESH_COLUMNS if refresh else _GATE_COLUMNS:
        table.add_column(column, overflow="fold")
    for outcome in outcomes:
        style = {"passed": None, "refreshed": None, "skipped": "yellow", "not reached": "yellow"}.get(
            outcome.status, "red"
        )
        for row in _refresh_rows(outcome) if refresh else [_gate_cells(outcome)]:
            table.add_row(*row, style=style)
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None).print(table)
    first = "" if refresh else outcomes_verdict(outcomes, unbaselined) + "\n"
    key = "" if refresh or not outcomes else f"{GATE_KEY}\n"
    return first + buffer.getvalue() + key + "".join(f"{line}\n" for line in notes)


def _uncompared(outcomes: Sequence[Any]) -> list[str]:
    """The whole message of every step time that was not compared (one line each, below the markdown table)."""
    return [c.message for o in outcomes for c in o.checks if not c.compared]


def gate_markdown(outcomes: Sequence[Any], *, refresh: bool, notes: Sequence[str] = (), unbaselined: int = 0) -> str:
    """The same summary as a markdown table (a CI job summary, a refresh pull request's body)."""
    columns = _REFRESH_COLUMNS if refresh else _GATE_COLUMNS
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for outcome in outcomes:
        for row in _refresh_rows(outcome) if refresh else [_gate_cells(outcome)]:
            lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in row) + " |")
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    heading = "perfsuite: baselines " + ("refreshed" if refresh else "compared")
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    key = [] if refresh or not outcomes else [GATE_KEY]
    below = "".join(f"\n- {line}" for line in [*key, *notes, *_uncompared(outcomes)])
    if not refresh:
        summary = outcomes_verdict(outcomes, unbaselined)
    return f"### {heading}\n\n{summary}\n\n" + "\n".join(lines) + "\n" + below + ("\n" if below else "")
