"""``perfsuite history record|judge|track``: what the nightly workflow's GitHub-hosted job runs."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from perfsuite.core.baselines import write_text_atomic
from perfsuite.core.results import Results, load_results
from perfsuite.core.results_file import ResultsError
from perfsuite.history.judge import FAILING
from perfsuite.history.records import (
    HistoryError,
    commits_by_night,
    judge_all,
    load_records,
    night_record,
    write_record,
)
from perfsuite.history.tracking import apply, open_tracking_issues, plan


def verdicts_markdown(records: list[dict[str, object]]) -> str:
    verdicts = judge_all(records)
    lines = ["| machine | case | metric | verdict | nights | drift | why |", "|---|---|---|---|---|---|---|"]
    order = {"regression": 0, "suspicious": 1, "improvement": 2, "insufficient_data": 3, "ok": 4}
    for (machine, case, metric), judged in sorted(verdicts.items(), key=lambda kv: (order[kv[1].verdict], kv[0])):
        drift = "—" if judged.drift is None else f"{judged.drift:+.1%}"
        lines.append(
            f"| {machine} | {case} | {metric} | {judged.verdict} | {len(judged.segment)} | {drift} | {judged.reason} |"
        )
    return "\n".join(lines) + "\n"


def not_judged_by_history(results: Results) -> list[str]:
    """Tonight's failures that no series holds: a case that crashed, timed out, ran out of
    memory or has no baseline (a step time out of tolerance is left to the history)."""
    lines = []
    for case in results.cases:
        if case.status in ("failed", "missing", "refused") and not case.checks:
            first = case.message.splitlines()[0] if case.message else "no message"
            lines.append(f"{case.status} tonight: {case.id}: {first}")
    return lines


def _tonight(path: Path) -> Results:
    """``judge --results``: tonight's gate file (a ``perfsuite run`` file has no gate to have failed)."""
    results = load_results(path, gate_only=True)
    if results.kind != "gate":
        raise ResultsError(
            f"{path}: `history judge --results` needs the gate's results (`pytest --perfsuite-json`), "
            "not `perfsuite run --json`'s"
        )
    return results


def run_history(args: argparse.Namespace) -> int:
    # Every input read and checked before anything is printed or written.
    try:
        if args.action == "record":
            path, written = write_record(
                night_record(load_results(args.results, gate_only=True), night=args.night), args.dir
            )
            print(f"wrote {path}" if written else f"{path}: this night's record is there already, unchanged")
            return 0
        tonight = _tonight(args.results) if args.action == "judge" and args.results is not None else None
        if args.action == "track" and not args.dry_run and shutil.which("gh") is None:
            raise HistoryError("`perfsuite history track` needs the GitHub CLI (gh) on PATH: https://cli.github.com")
        records = load_records(args.dir)
        if not records:
            raise HistoryError(f"no history records in {args.dir} (<machine>/<night>_<commit>.json files)")
    except (HistoryError, ResultsError) as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    verdicts = judge_all(records)
    if args.action == "judge":
        text = verdicts_markdown(records)
        print(text, end="")
        if args.markdown:
            write_text_atomic(args.markdown, text)
        failing = sorted(k for k, j in verdicts.items() if j.verdict in FAILING)
        for machine, case, metric in failing:
            print(f"regression: {case} {metric} on {machine}", file=sys.stderr)
        broken = not_judged_by_history(tonight) if tonight is not None else []
        for line in broken:
            print(line, file=sys.stderr)
        return 1 if failing or broken else 0
    commits = commits_by_night(records)
    try:
        actions = plan(verdicts, [] if args.dry_run else open_tracking_issues(args.repo), commits)
        for action in actions:
            print(f"{action.kind}: {action.title}" + (f" (#{action.number})" if action.number else ""))
        if not actions:
            print(f"nothing to open, comment on or close: {len(records)} record(s) in {args.dir} judged")
        if not args.dry_run:
            apply(actions, args.repo)
    except subprocess.CalledProcessError as exc:
        said = (exc.stderr or "").strip().splitlines()
        print(f"perfsuite: error: `{' '.join(exc.cmd[:3])}` failed: {said[-1] if said else exc}", file=sys.stderr)
        return 1
    return 0
