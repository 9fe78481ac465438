"""``perfsuite history``: keep and judge nightly results (:mod:`perfsuite.history.command` runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsuite.cli.options import existing_dir, night, not_a_file, output_file


def add_parser(sub: Any) -> None:
    """The subcommand's arguments."""
    history = sub.add_parser("history", help="keep and judge nightly results (the perf-history branch)")
    steps = history.add_subparsers(dest="action", required=True)
    record = steps.add_parser("record", help="append tonight's record of a `pytest --perfsuite-json` file")
    record.add_argument("results", type=Path)
    record.add_argument("--dir", type=not_a_file, required=True, help="the history directory")
    record.add_argument("--night", type=night, help="the night's date, YYYY-MM-DD (default: the results' date)")
    judge = steps.add_parser(
        "judge",
        help="judge every series; exit 1 when one regressed",
        description="Step time is a regression when its last 2 nights are out of tolerance on the same side, "
        "suspicious after 3 in a row earlier; memory and loss regress on their first night out. Drift (the last "
        "7 nights against the segment's first 7) is reported and never fails.",
    )
    judge.add_argument("--dir", type=existing_dir, required=True, help="the history directory")
    judge.add_argument("--markdown", type=output_file, help="also write the verdicts as markdown")
    judge.add_argument(
        "--results",
        type=Path,
        help="tonight's `pytest --perfsuite-json` file: also fail on a case that crashed or has no baseline",
    )
    track = steps.add_parser(
        "track", help="open, update and close one GitHub issue per regressed series (needs gh and a token)"
    )
    track.add_argument("--dir", type=existing_dir, required=True, help="the history directory")
    track.add_argument("--repo", required=True, help="OWNER/NAME")
    track.add_argument("--dry-run", action="store_true", help="print what would be done")


def run(args: Any) -> int:
    from perfsuite.history.command import run_history

    return run_history(args)
