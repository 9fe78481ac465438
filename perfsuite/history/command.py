"""``perfsuite history record|judge|track``: what the nightly workflow's GitHub-hosted job runs."""

from __future__ import annotations

import argparse
import sys

from perfsuite.core.baselines import write_text_atomic
from perfsuite.core.results import Results, ResultsError, load_results
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


def run_history(args: argparse.Namespace) -> int:
    try:
        if args.action == "record":
            path = write_record(night_record(load_results(args.results), night=args.night), args.dir)
            print(f"wrote {path}")
            return 0
        records = load_records(args.dir)
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
        broken = []
        if args.results is not None:
            try:
                broken = not_judged_by_history(load_results(args.results))
            except ResultsError as exc:
                print(f"perfsuite: error: {exc}", file=sys.stderr)
                return 2
        for line in broken:
            print(line, file=sys.stderr)
        return 1 if failing or broken else 0
    commits = commits_by_night(records)
    actions = plan(verdicts, [] if args.dry_run else open_tracking_issues(args.repo), commits)
    for action in actions:
        print(f"{action.kind}: {action.title}" + (f" (#{action.number})" if action.number else ""))
    if not args.dry_run:
        apply(actions, args.repo)
    return 0
