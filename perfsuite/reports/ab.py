"""``perfsuite ab``'s results for a reader: the terminal table, ``summary.md`` and ``report.html``
(verdicts first, then a chart of every pair's time ratio per case, then the table)."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import write_text_atomic

HEADERS = ("case", "verdict", "time B/A [interval]", "pairs", "peak MiB A → B", "breakdown change", "loss max |Δ|")


def _time(case: Mapping[str, Any]) -> tuple[str, str]:
    t = case.get("time")
    if not t:
        return "—", "0"
    low = "0" if t["low"] in (None, 0) else f"{t['low']:.3f}"
    high = "∞" if t["high"] is None else f"{t['high']:.3f}"
    return f"{t['ratio']:.3f} [{low}, {high}] {t['verdict']}", str(t["pairs"])


def _memory(case: Mapping[str, Any]) -> tuple[str, str]:
    m = case["memory"]
    if m["a"] is None or m["b"] is None:
        return "—", "—"
    peak = f"{m['a'] / 2**20:,.2f} → {m['b'] / 2**20:,.2f} ({(m['b'] - m['a']) / max(m['a'], 1):+.1%})"
    changes = []
    for name in sorted(set(m["breakdown_a"]) | set(m["breakdown_b"])):
        a, b = m["breakdown_a"].get(name, 0), m["breakdown_b"].get(name, 0)
        if abs(b - a) > max(65536, 0.01 * max(a, 1)):
            changes.append(
                f"{name.replace('_', ' ')} {(b - a) / max(a, 1):+.0%}" if a else f"{name} +{b / 2**20:.1f} MiB"
            )
    return peak, ", ".join(changes) or "none"


def rows(payload: Mapping[str, Any]) -> list[list[str]]:
    out = []
    for case in payload["cases"]:
        if case["error"]:
            out.append([case["case"], case["verdict"], case["error"][:80], "—", "—", "—", "—"])
            continue
        time_cell, pairs = _time(case)
        peak, breakdown = _memory(case)
        diff = case["loss"]["max_abs_diff"]
        out.append(
            [case["case"], case["verdict"], time_cell, pairs, peak, breakdown, "—" if diff is None else f"{diff:.3g}"]
        )
    return out


def differing(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> list[str]:
    """``name a → b`` for each library whose version differs between two sides."""
    return [f"{n} {a.get(n)} → {b.get(n)}" for n in dict.fromkeys([*a, *b]) if a.get(n) != b.get(n)]


def _versions(payload: Mapping[str, Any], side: str) -> dict[str, str | None]:
    return {n: (lib or {}).get("version") for n, lib in payload["sides"][side]["probe"]["libraries"].items()}


def verdict_line(payload: Mapping[str, Any]) -> str:
    counts = payload["verdicts"]
    head = "REGRESSED" if counts["regressed"] else "no regression"
    parts = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    moved = ", ".join(differing(_versions(payload, "base"), _versions(payload, "candidate")))
    return f"{head}: {parts} (base → candidate: {moved or 'the same versions'})"


def render_table(payload: Mapping[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=verdict_line(payload), title_justify="left")
    for header in HEADERS:
        table.add_column(header)
    for row in rows(payload):
        table.add_row(*row)
    return table


def markdown(payload: Mapping[str, Any]) -> str:
    lines = [f"**{verdict_line(payload)}**", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(payload)]
    return "\n".join(lines) + "\n"


def _chart(payload: Mapping[str, Any]) -> str | None:
    """Every pair's B/A time ratio per case, with the estimate and its interval, as a PNG data URL."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cases = [c for c in payload["cases"] if c["ratios"]]
    if not cases:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) + 1.2))
    for y, case in enumerate(cases):
        ax.scatter(case["ratios"], [y] * len(case["ratios"]), s=12, alpha=0.6, color="tab:blue")
        t = case["time"]
        if t:
            low, high = max(t["low"] or 0.5, 0.5), min(t["high"] or 2.0, 2.0)
            ax.plot([low, high], [y, y], color="black", lw=2)
            ax.plot([t["ratio"]], [y], marker="|", color="red", ms=14)
    ax.axvline(1.0, color="grey", lw=0.8)
    ax.set_yticks(range(len(cases)), [c["case"] for c in cases])
    ax.set_xlabel("step time B / A per pair (black: interval, red: estimate)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def write_report(payload: Mapping[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "summary.md", markdown(payload))
    chart = _chart(payload)
    table = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows(payload)
    )
    page = (
        "<!doctype html><meta charset='utf-8'><title>perfsuite ab</title>"
        f"<h1>{html.escape(verdict_line(payload))}</h1>"
        + (f"<img alt='per-pair time ratios' src='{chart}'>" if chart else "<p>(no chart: pip install matplotlib)</p>")
        + "<table border=1 cellspacing=0 cellpadding=3><tr>"
        + "".join(f"<th>{h}</th>" for h in HEADERS)
        + f"</tr>{table}</table>"
    )
    write_text_atomic(out / "report.html", page)
