"""``perfsuite report`` (report.html and summary.md from a results file) and ``perfsuite merge`` (the shards' files)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from perfsuite.cli.common import project_baselines
from perfsuite.cli.options import at_least, existing_dir, not_a_file, output_file
from perfsuite.core.baselines import write_json_atomic


def add_report(sub: Any) -> None:
    """The subcommand's arguments."""
    report = sub.add_parser(
        "report",
        help="write report.html (charts, offline) and summary.md (a CI job summary) from a results file",
        description="RESULTS is `pytest --perfsuite-json`'s file, `perfsuite run --json`'s or `perfsuite ab "
        "--json`'s. report.html is one "
        "self-contained file (inline SVG, no JavaScript); summary.md fits a GitHub job summary. Charts need "
        "matplotlib: pip install 'perfsuite[report]'. No torch needed.",
    )
    report.add_argument("results", type=Path)
    report.add_argument("-o", "--out", type=not_a_file, required=True, metavar="DIR")
    report.add_argument(
        "--history", type=existing_dir, metavar="DIR", help="nightly records: trends, heatmap, sparklines"
    )
    report.add_argument(
        "--baselines",
        type=existing_dir,
        metavar="DIR",
        help="compare a `perfsuite run` file's cases with these (default: [tool.perfsuite] baselines when present)",
    )


def add_merge(sub: Any) -> None:
    """The subcommand's arguments."""
    merge = sub.add_parser(
        "merge",
        help="merge the shards' pytest --perfsuite-json files into one (the nightly's machines each run a shard)",
    )
    merge.add_argument("results", type=Path, nargs="+")
    merge.add_argument("-o", "--out", type=output_file, required=True, metavar="FILE")
    merge.add_argument("--expect", type=at_least(1), metavar="N", help="fail unless there are N files (a shard lost)")


def run_report(args: Any) -> int:
    from perfsuite.core.results_file import ResultsError
    from perfsuite.history.records import HistoryError
    from perfsuite.reports import write_report
    from perfsuite.reports.charts import ReportExtraMissing

    settings, found = project_baselines()
    baselines = args.baselines or found
    try:
        written = write_report(args.results, args.out, history=args.history, baselines=baselines, settings=settings)
    except (ResultsError, HistoryError, ReportExtraMissing) as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1024:,.0f} KiB)")
    return 0


def run_merge(args: Any) -> int:
    from perfsuite.core.results_file import ResultsError
    from perfsuite.core.shards import merge_results

    if args.out.resolve() in {Path(path).resolve() for path in args.results}:
        print(f"perfsuite: error: --out: {args.out} is one of the shards it merges; write elsewhere", file=sys.stderr)
        return 2
    try:
        merged = merge_results(args.results, expect=args.expect)
    except ResultsError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(args.out, merged)
    print(f"wrote {args.out}: {len(merged['cases'])} cases from {len(args.results)} shard(s)")
    return 0
