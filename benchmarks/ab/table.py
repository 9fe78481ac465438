"""The measurement table of docs/ab.md from benchmarks/ab/measure.sh's JSON files.

    python benchmarks/ab/table.py ab-results

One row per case, one column per comparison (uniform-5, adafactor-5, aa-1..3): the verdict,
the estimate B/A with its interval, and the pairs it took; then each comparison's wall time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ("uniform-5", "adafactor-5", "aa-1", "aa-2", "aa-3")


def cell(case: dict) -> str:
    t = case.get("time")
    if case.get("error") or not t:
        return case.get("error") or "—"
    low = "0" if not t["low"] else f"{t['low']:.3f}"
    high = "∞" if t["high"] is None else f"{t['high']:.3f}"
    verdict = f"**{t['verdict']}**" if t["verdict"] in ("slower", "faster") else t["verdict"]
    return f"{verdict} {t['ratio']:.3f} [{low}, {high}], {t['pairs']}"


def main(directory: Path) -> None:
    runs = {
        name: json.loads((directory / f"{name}.json").read_text())
        for name in ORDER
        if (directory / f"{name}.json").exists()
    }
    if not runs:
        raise SystemExit(f"no {', '.join(ORDER)} JSON files in {directory}")
    names = list(runs)
    print("| case | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for index, case in enumerate(next(iter(runs.values()))["cases"]):
        cells = [cell(payload["cases"][index]) for payload in runs.values()]
        print(f"| {case['case']} | " + " | ".join(cells) + " |")
    walls = [f"{round(p['wall_s']) // 60} min {round(p['wall_s']) % 60} s" for p in runs.values()]
    print("| wall time | " + " | ".join(walls) + " |")
    for name, payload in runs.items():
        counts = ", ".join(f"{n} {v}" for v, n in payload["verdicts"].items() if n)
        pairs = sum(len(c["ratios"]) for c in payload["cases"])
        print(
            f"{name}: {counts}; {pairs} pairs in {payload['wall_s']:.0f} s ({payload['wall_s'] / pairs:.1f} s a pair)"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "ab-results"))
