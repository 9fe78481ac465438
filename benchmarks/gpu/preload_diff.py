"""Two runs of the same cases whose one difference is what their forkserver preloaded (with and
without ``PERFSUITE_PRELOAD_NVML=1``, docs/gpu.md): per case, the build and worker start of each,
whether every loss and the peak are the same, and what the second preloaded beyond the first.

    python benchmarks/gpu/preload_diff.py push-compare-default.json push-compare-nvml.json

Either kind of results file (``perfsuite run --json``, ``pytest --perfsuite-json``: its first run
of each case). A markdown table, then the totals; exit 1 where a loss or a peak moved or a case ran
in one file only, 2 where a file cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path

from perfsuite.core.record import CaseRecord
from perfsuite.core.results import ResultsError, load_results


def _runs(path: str) -> dict[str, CaseRecord]:
    return {case.id: case.record for case in load_results(Path(path)).cases if case.record and case.record.ok}


def _seconds(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None else f"{a:.2f} → {b:.2f}"


def _loss(a: CaseRecord, b: CaseRecord) -> str:
    if len(a.loss) != len(b.loss):
        return f"{len(a.loss)} → {len(b.loss)} steps"
    return f"max \\|Δ\\| {max((abs(x - y) for x, y in zip(a.loss, b.loss, strict=True)), default=0.0):.3g}"


def compare(first: str, second: str) -> tuple[list[str], bool]:
    """The table's lines, and whether every case ran in both with its losses and peak unchanged."""
    a, b = _runs(first), _runs(second)
    lines = [
        "| case | build s | worker start s | wall s | peak bytes | loss | preloaded beyond the first |",
        "|---|---|---|---|---|---|---|",
    ]
    same = set(a) == set(b)
    totals = [0.0, 0.0, 0.0, 0.0]
    for case in [c for c in a if c in b]:
        x, y = a[case], b[case]
        same &= x.loss == y.loss and x.peak_memory_bytes == y.peak_memory_bytes
        peaks = (x.peak_memory_bytes, y.peak_memory_bytes)
        peak = "same" if peaks[0] == peaks[1] else f"{peaks[0]} → {peaks[1]}"
        extra = ", ".join(sorted(set(y.preloaded) - set(x.preloaded))) or "—"
        build = (x.phases_s.get("build"), y.phases_s.get("build"))
        lines.append(
            f"| {case} | {_seconds(*build)} | {_seconds(x.worker_startup_s, y.worker_startup_s)} "
            f"| {_seconds(x.wall_s, y.wall_s)} | {peak} | {'same' if x.loss == y.loss else _loss(x, y)} | {extra} |"
        )
        for i, value in enumerate((*build, x.wall_s, y.wall_s)):
            totals[i] += value or 0.0
    lines.append(
        f"{len(set(a) & set(b))} cases in both: build {totals[0]:.1f} → {totals[1]:.1f} s, "
        f"in workers {totals[2]:.1f} → {totals[3]:.1f} s"
    )
    for name, only in ((first, set(a) - set(b)), (second, set(b) - set(a))):
        if only:
            lines.append(f"ran in {name} only: {', '.join(sorted(only))}")
    return lines, same


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: preload_diff.py FIRST.json SECOND.json", file=sys.stderr)
        return 2
    try:
        lines, same = compare(*argv)
    except ResultsError as exc:
        print(f"preload_diff: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
