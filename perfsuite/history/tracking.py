"""One GitHub issue per regressed series, kept up to date each night and closed once the series is back in band.

:func:`plan` is pure: from tonight's verdicts and the open tracking issues it decides what
to create, update and close. :func:`apply` carries the plan out with the GitHub CLI
(``gh``), which the nightly workflow's GitHub-hosted job has with an ``issues: write``
token; the self-hosted GPU machine never runs this.

An issue is matched to its series by a marker in its body, not by its title, so a person
may retitle it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.history.judge import Judgement
from perfsuite.history.records import SeriesKey

LABEL = "perf-regression"
_MARKER = "<!-- perfsuite-series: {} -->"
_MARKER_RE = re.compile(r"<!-- perfsuite-series: (.+?) -->")


@dataclass(frozen=True)
class Action:
    """One thing to do on GitHub."""

    kind: str
    """``create``, ``update`` or ``close``."""
    key: SeriesKey
    title: str
    body: str
    number: int | None = None
    """The issue's number, for ``update`` and ``close``."""


def series_id(key: SeriesKey) -> str:
    machine, case, metric = key
    return f"{machine}|{case}|{metric}"


def title_of(key: SeriesKey) -> str:
    machine, case, metric = key
    return f"perf regression: {case} {metric} on {machine}"


def body_of(key: SeriesKey, judged: Judgement, commits: Mapping[str, str] | None = None) -> str:
    """The issue's text: the verdict, then the segment's recent nights as a table."""
    machine, case, metric = key
    commits = commits or {}
    lines = [
        f"**{judged.verdict}**: `{case}` {metric} on `{machine}`: {judged.reason}",
        "",
        "Each night's value is the measurement ÷ the committed baseline (1.000 is the baseline). "
        "This issue closes itself on the first night back in tolerance.",
        "",
        "| night | commit | ÷ baseline | out of tolerance |",
        "|---|---|---|---|",
    ]
    for night, out in list(zip(judged.segment, judged.violations, strict=True))[-14:]:
        commit = (commits.get(night.night) or "")[:7]
        lines.append(f"| {night.night} | {commit} | {night.value:.3f} | {'yes' if out else ''} |")
    if judged.drift is not None:
        lines += ["", f"Drift over the segment: {judged.drift:+.1%} (reported, never failing)."]
    lines += ["", _MARKER.format(series_id(key))]
    return "\n".join(lines)


def plan(
    verdicts: Mapping[SeriesKey, Judgement],
    open_issues: Sequence[Mapping[str, Any]],
    commits: Mapping[str, str] | None = None,
) -> list[Action]:
    """What to do tonight: create an issue per newly regressed series, update the ones still
    regressed, close those whose latest night is back in tolerance (or whose series is gone)."""
    tracked: dict[str, Mapping[str, Any]] = {}
    for listed in open_issues:
        found = _MARKER_RE.search(listed.get("body") or "")
        if found:
            tracked[found.group(1)] = listed
    actions = []
    for key, judged in sorted(verdicts.items()):
        issue: Mapping[str, Any] | None = tracked.pop(series_id(key), None)
        if judged.verdict == "regression":
            body = body_of(key, judged, commits)
            if issue is None:
                actions.append(Action("create", key, title_of(key), body))
            else:
                actions.append(Action("update", key, str(issue["title"]), body, int(issue["number"])))
        elif issue is not None:
            if judged.violations and judged.violations[-1]:
                # Still out tonight but no longer two nights in a row the same way: keep it open, refreshed.
                actions.append(
                    Action("update", key, str(issue["title"]), body_of(key, judged, commits), int(issue["number"]))
                )
            else:
                actions.append(
                    Action(
                        "close",
                        key,
                        str(issue["title"]),
                        f"Back in tolerance on {judged.segment[-1].night if judged.segment else '?'}: "
                        f"{judged.verdict}.",
                        int(issue["number"]),
                    )
                )
    for marker, gone in tracked.items():
        machine, case, metric = (marker.split("|") + ["", "", ""])[:3]
        actions.append(
            Action(
                "close",
                (machine, case, metric),
                str(gone["title"]),
                "This series is no longer measured (the case or its machine left the nightly run).",
                int(gone["number"]),
            )
        )
    return actions


def open_tracking_issues(repo: str, gh: str = "gh") -> list[dict[str, Any]]:
    out = subprocess.run(
        [
            gh,
            "issue",
            "list",
            "--repo",
            repo,
            "--label",
            LABEL,
            "--state",
            "open",
            "--limit",
            "500",
            "--json",
            "number,title,body",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    issues = json.loads(out or "[]")
    return issues if isinstance(issues, list) else []


def apply(actions: Sequence[Action], repo: str, gh: str = "gh") -> None:
    """Carry ``actions`` out with ``gh`` (each command checked: a failure raises)."""
    if any(a.kind == "create" for a in actions):
        subprocess.run(
            [
                gh,
                "label",
                "create",
                LABEL,
                "--repo",
                repo,
                "--force",
                "--color",
                "B60205",
                "--description",
                "a nightly perfsuite series out of tolerance",
            ],
            check=True,
        )
    for action in actions:
        if action.kind == "create":
            command = [
                gh,
                "issue",
                "create",
                "--repo",
                repo,
                "--label",
                LABEL,
                "--title",
                action.title,
                "--body",
                action.body,
            ]
        elif action.kind == "update":
            command = [gh, "issue", "edit", str(action.number), "--repo", repo, "--body", action.body]
        else:
            command = [gh, "issue", "close", str(action.number), "--repo", repo, "--comment", action.body]
        subprocess.run(command, check=True)
