"""Two runs of the same cases whose one difference is what their forkserver preloaded (with and
without ``PERFSUITE_PRELOAD_NVML=1``, docs/gpu.md): per case, the build and worker start of each,
whether every loss and the peak are the same, and what the second preloaded beyond the first.

    python benchmarks/gpu/preload_diff.py push-compare-default.json push-compare-nvml.json

Either kind of results file (``perfsuite run --json``, ``pytest --perfsuite-json``: its first run
of each case). Losses and peaks are held to the tolerances the gate gives the case (a GPU's
reductions differ from run to run in the last bits): its precision's and hardware's defaults,
then the nearest ``pyproject.toml``'s ``[tool.perfsuite]`` above the working directory, as
``pytest`` there reads them; exactly equal reads ``same``. A markdown table, then the totals and
the cases that ran in one file only (two runs stopped at one time limit reach different cases);
exit 1 where a case failed in either file (a forkserver that started CUDA fails every GPU case),
a loss or a peak moved beyond its tolerance, or no case ran in both;
2 where a file or the project's settings cannot be read.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.declaration import DeclarationError, find_pyproject, read_pyproject
from perfsuite.core.record import CaseRecord
from perfsuite.core.results import load_results
from perfsuite.core.results_file import ResultsError
from perfsuite.core.tolerance import Tolerance, resolve_tolerance


def _runs(path: str) -> dict[str, CaseRecord]:
    """Each case's first run that reached a worker (ok or failed; a skipped one is left out)."""
    return {
        case.id: case.record
        for case in load_results(Path(path)).cases
        if case.record is not None and case.record.status in ("ok", "failed")
    }


def _seconds(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None else f"{a:.2f} → {b:.2f}"


def _settings() -> dict[str, Any]:
    """The nearest project's ``[tool.perfsuite]``, checked as the gate checks it (raises
    :class:`DeclarationError`)."""
    pyproject = find_pyproject(Path.cwd())
    return read_pyproject(pyproject) if pyproject is not None else {}


def _tolerance(settings: Mapping[str, Any], case: str, record: CaseRecord) -> Tolerance:
    """The gate's tolerance of the case, for its precision and hardware."""
    return resolve_tolerance(
        settings, hardware=record.hardware or "cpu", case_id=case, precision=record.precision or "fp32"
    )


def _loss(a: CaseRecord, b: CaseRecord, tol: Tolerance) -> tuple[str, bool]:
    """How the loss curves compare, and whether within the tolerance."""
    if a.loss == b.loss:
        return "same", True
    if len(a.loss) != len(b.loss):
        return f"{len(a.loss)} → {len(b.loss)} steps", False
    diffs = [abs(x - y) for x, y in zip(a.loss, b.loss, strict=True)]
    within = all(d <= tol.loss_atol + tol.loss_rtol * abs(x) for d, x in zip(diffs, a.loss, strict=True))
    return f"max \\|Δ\\| {max(diffs):.3g}{'' if within else ' (beyond tolerance)'}", within


def _peak(a: int | None, b: int | None, tol: Tolerance) -> tuple[str, bool]:
    if a == b:
        return "same", True
    if a is None or b is None:
        return f"{a} → {b}", False
    within = abs(b - a) <= max(tol.memory_atol_bytes, tol.memory_rtol * a)
    return f"{a} → {b}{'' if within else ' (beyond tolerance)'}", within


def compare(first: str, second: str, settings: Mapping[str, Any]) -> tuple[list[str], bool]:
    """The table's lines, and whether some case ran in both, none failed in either file, and every
    one that ran in both kept its losses and peak."""
    a, b = _runs(first), _runs(second)
    lines = [
        "| case | build s | worker start s | wall s | peak bytes | loss | preloaded beyond the first |",
        "|---|---|---|---|---|---|---|",
    ]
    kept = True
    totals = [0.0, 0.0, 0.0, 0.0]
    failed = [f"{case} ({name}: {run[case].error})" for name, run in ((first, a), (second, b)) for case in run
              if not run[case].ok]  # fmt: skip
    both = [c for c in a if c in b and a[c].ok and b[c].ok]
    for case in both:
        x, y = a[case], b[case]
        tol = _tolerance(settings, case, x)
        (peak, peak_ok), (loss, loss_ok) = _peak(x.peak_memory_bytes, y.peak_memory_bytes, tol), _loss(x, y, tol)
        kept &= peak_ok and loss_ok
        extra = ", ".join(sorted(set(y.preloaded) - set(x.preloaded))) or "—"
        build = (x.phases_s.get("build"), y.phases_s.get("build"))
        lines.append(
            f"| {case} | {_seconds(*build)} | {_seconds(x.worker_startup_s, y.worker_startup_s)} "
            f"| {_seconds(x.wall_s, y.wall_s)} | {peak} | {loss} | {extra} |"
        )
        for i, value in enumerate((*build, x.wall_s, y.wall_s)):
            totals[i] += value or 0.0
    lines.append(
        f"{len(both)} cases ran in both: build {totals[0]:.1f} → {totals[1]:.1f} s, "
        f"in workers {totals[2]:.1f} → {totals[3]:.1f} s"
    )
    lines += [f"failed: {line}" for line in failed]
    for name, run, other in ((first, a, b), (second, b, a)):
        only = sorted(case for case in run if run[case].ok and case not in other)
        if only:
            lines.append(f"ran in {name} only (not compared): {', '.join(only)}")
    return lines, kept and not failed and bool(both)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: preload_diff.py FIRST.json SECOND.json", file=sys.stderr)
        return 2
    try:
        lines, same = compare(*argv, _settings())
    except (ResultsError, DeclarationError) as exc:
        print(f"preload_diff: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
