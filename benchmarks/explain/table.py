"""benchmarks/explain/measure.sh's comparisons, tabulated from their JSON files (docs/explain.md).

    python benchmarks/explain/table.py explain-results

Per comparison and case: the explanation's wall time (all its runs, A B A B), each level's time
threshold (ms per step), and what it showed: the count of call-count changes and of time changes
per level, the tensors that differ, the loss's shape. An A/A (``aa-*``) should show nothing; an
injected comparison (``injected-*``) should show ``aten::mm`` +1, the hook's sleep, the buffer and
a scale of 1.01.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[list[str]]:
    out = []
    for case in json.loads(path.read_text())["cases"]:
        found = case.get("explanation")
        if not found:
            out.append([path.stem, case["case"], "not explained", "", "", "", ""])
            continue
        time = found.get("time") or {}
        bars = " ".join(f"{k} {v / 1e3:.2f}" for k, v in (time.get("thresholds") or {}).items())
        changes = time.get("changes") or []
        counted = sum(c["counted"] for c in changes)
        timed = sum(c["timed"] for c in changes)
        tensors = sum(len(c["changes"]) for c in ((found.get("memory") or {}).get("categories") or []))
        loss = found.get("loss") or {}
        scale = f" ×{loss['scale']:.4g}" if loss.get("scale") else ""
        shape = "holds" if loss.get("step") is None else f"{loss.get('shape')}{scale}"
        out.append(
            [path.stem, case["case"], f"{found['wall_s']:.1f}", bars, f"{counted} counted, {timed} timed",
             str(tensors), shape]
        )  # fmt: skip
    return out


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "explain-results")
    header = ["comparison", "case", "explained in s", "thresholds ms/step", "profile items", "tensors", "loss"]
    table = [header] + [row for path in sorted(folder.glob("*.json")) for row in rows(path)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
