"""A per-case table of benchmarks/ab/measure.sh's comparisons, from their JSON files (summarised in
docs/ab-sensitivity.md).

    python benchmarks/ab/table.py ab-results

One row per case, one column per comparison found (the names in ORDER, in that order): the
verdict, the estimate B/A with its interval, and the pairs it took (blank where a comparison
ran a selection without that case); then each comparison's wall time.

    python benchmarks/ab/table.py --log ab-results/uniform-5.log

A comparison killed before its end (SIGKILL, a lost machine) writes no JSON (Ctrl-C and
SIGTERM do: its open cases are *undecided (interrupted)* with every pair they had); its
progress lines still say where each case stood at every alarm look (the pairs at which
*slower* or *faster* can be called): one row per case, one column per look reached, and
where the case stood last.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

from resample import robust_sd  # this directory's

ORDER = (
    "uniform-5",
    "uniform-5b",
    "uniform-5c",
    "uniform-5d",
    "uniform-8",
    "adafactor-5",
    "adafactor-5b",
    "aa-1",
    "aa-2",
    "aa-3",
    "aa-4",
)


def cell(case: dict) -> str:
    t = case.get("time")
    if case.get("error"):
        return case["error"]
    ratios = case.get("ratios") or []
    if not t:  # stopped before its first look: the pairs' median so far
        if not ratios:
            return "—"
        stopped = "(interrupted) " if case.get("interrupted") else ""
        return f"{stopped}{statistics.median(ratios):.3f} before the first look, {len(ratios)}"
    low = "0" if not t["low"] else f"{t['low']:.3f}"
    high = "∞" if t["high"] is None else f"{t['high']:.3f}"
    verdict = f"**{t['verdict']}**" if t["verdict"] in ("slower", "faster") else t["verdict"]
    if case.get("interrupted"):  # the last look's figures, and every pair it had
        return f"{verdict} (interrupted) {t['ratio']:.3f} [{low}, {high}], {len(case['ratios'])}"
    return f"{verdict} {t['ratio']:.3f} [{low}, {high}], {t['pairs']}"


PROGRESS = re.compile(r"^\s+(\S+): (\d+) pair\(s\), B/A ([\d.]+) \[([\d.]+), ([\w.]+)\] → (\w+)")
ALARM_LOOKS = re.compile(r"slower or faster at [\d.]+ at pairs ([\d, ]+)")


def from_log(path: Path) -> None:
    text = path.read_text()
    found = ALARM_LOOKS.search(text)
    if not found:
        raise SystemExit(f"{path}: no 'perfsuite ab' header naming its alarm looks")
    looks = [int(n) for n in found.group(1).split(",")]
    rows: dict[str, dict[int, str]] = {}
    last: dict[str, str] = {}
    called_at: dict[str, int] = {}  # the pairs at which a case was called slower or faster
    for line in text.splitlines():
        m = PROGRESS.match(line)
        if m:
            case, pairs, ratio, low, high, verdict = m.groups()
            high = "∞" if high == "inf" else high
            shown = verdict
            if verdict in ("slower", "faster"):
                shown = f"**{verdict}**"
                called_at.setdefault(case, int(pairs))
            rows.setdefault(case, {})
            if int(pairs) in looks:
                rows[case][int(pairs)] = f"{shown} {ratio} [{low}, {high}]"
            last[case] = f"{shown} {ratio} [{low}, {high}], {pairs}"
    reached = [n for n in looks if any(n in row for row in rows.values())]
    print("| case | " + " | ".join(f"at {n} pairs" for n in reached) + " | last, pairs |")
    print("|---" * (len(reached) + 2) + "|")
    for case, row in rows.items():
        print(f"| {case} | " + " | ".join(row.get(n, "") for n in reached) + f" | {last[case]} |")
    for n in reached:
        called = sum(1 for at in called_at.values() if at <= n)
        print(f"called slower or faster by {n} pairs: {called} of {len(rows)}")


def main(directory: Path) -> None:
    runs = {}
    for name in ORDER:
        path = directory / f"{name}.json"
        if path.exists():
            try:
                runs[name] = json.loads(path.read_text())
                [(c["case"], c["ratios"]) for c in runs[name]["cases"]]  # noqa: B018 - what the table reads
            except (OSError, ValueError, KeyError, TypeError) as exc:
                print(f"{path}: not a `perfsuite ab --json` file ({type(exc).__name__}: {exc})", file=sys.stderr)
                raise SystemExit(2) from None
    if not runs:
        raise SystemExit(f"no {', '.join(ORDER)} JSON files in {directory}")
    names = list(runs)
    print("| case | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    by_case = {name: {c["case"]: c for c in payload["cases"]} for name, payload in runs.items()}
    tables = sorted(by_case.values(), key=len, reverse=True)  # the fullest comparison's order
    cases = list(dict.fromkeys(case for table in tables for case in table))
    for case in cases:  # a comparison of a selection leaves the rest of the rows blank
        cells = [cell(by_case[name][case]) if case in by_case[name] else "" for name in names]
        print(f"| {case} | " + " | ".join(cells) + " |")
    walls = [f"{round(p['wall_s']) // 60} min {round(p['wall_s']) % 60} s" for p in runs.values()]
    print("| wall time | " + " | ".join(walls) + " |")
    for name, payload in runs.items():
        counts = ", ".join(f"{n} {v}" for v, n in payload["verdicts"].items() if n)
        pairs = sum(len(c["ratios"]) for c in payload["cases"])
        sds = sorted(
            100 * robust_sd([math.log(r) for r in c["ratios"]]) for c in payload["cases"] if len(c["ratios"]) >= 5
        )
        spread = f"; a case's robust sd {statistics.median(sds):.1f}% ({sds[0]:.1f}-{sds[-1]:.1f}%)" if sds else ""
        each = f"{payload['wall_s'] / pairs:.1f} s a pair" if pairs else "none"
        print(f"{name}: {counts}; {pairs} pairs in {payload['wall_s']:.0f} s ({each}){spread}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--log"] and len(sys.argv) == 3:
        from_log(Path(sys.argv[2]))
    else:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else "ab-results"))
