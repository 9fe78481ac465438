"""The upgrade verdict comment: what a comparing run's artifact must be before any of its text reaches
a pull request, and the comment's own frame around it. Pure: no torch, no network.

The artifact is data, possibly forged (a ``pull_request`` run runs the pull request's own copy of
the comparing workflow). It is two files: ``binding.json`` (the pull request's number and the head
commit compared, written by the run's first step) and ``summary.md`` (``perfsuite ab``'s). A
summary is refused, with one line that quotes none of it, when it is larger than a comment may
be, is not UTF-8 text, does not start with a marker, or holds anything a real summary never has:
HTML (a second marker, a hidden line, a tag) or the frame's own words. Mentions are defused.
The frame (first lines, written here, never taken from the artifact) names the commit the
verdict is for and whether the pull request's own code computed it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perfsuite.reports.ab import NOTHING_COMPARED, marker

MAX_SUMMARY_BYTES = 60_000
"""The largest summary posted (a comment holds 65,536 characters; the frame takes the rest)."""
MAX_BINDING_BYTES = 1_000
MARKERS = (marker("cpu"), marker("cuda"), marker("cpu", own=True))
"""The first lines perfsuite ab writes: the upgrade verdict per device, and the project's own code's."""
TITLE = "perfsuite ab verdict for"
STALE = "> **Stale**:"
UNVERIFIED = "**Unverified**"
_FRAME_WORDS = (TITLE, "**Stale**", UNVERIFIED, "perfsuite-ab head")
_HEAD = re.compile(r"<!-- perfsuite-ab head ([0-9a-f]{40}) -->")
_SHA = re.compile(r"[0-9a-f]{40}")
_MARKUP = re.compile(r"<\s*[A-Za-z!/?]")
_MENTION = re.compile(r"@(?=[A-Za-z0-9_-])")


class Refused(ValueError):
    """An artifact that is not posted: one line saying why, quoting none of it."""


@dataclass(frozen=True)
class Binding:
    """What a comparing run was for, written before any of the pull request's code ran."""

    pull_request: int
    head_sha: str


@dataclass(frozen=True)
class Summary:
    """A summary.md that passed every check."""

    marker: str
    lines: tuple[str, ...]
    """Its lines after the marker, mentions defused."""
    nothing_compared: bool


def read_binding(path: Path) -> Binding:
    """``binding.json``: ``{"pull_request": N, "head_sha": "<40 hex>"}`` and nothing else."""
    raw = path.read_bytes()
    if len(raw) > MAX_BINDING_BYTES:
        raise Refused(f"binding.json is {len(raw):,} bytes, not a binding")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Refused("binding.json is not JSON") from None
    if not isinstance(data, dict) or set(data) != {"pull_request", "head_sha"}:
        raise Refused("binding.json holds other keys than pull_request and head_sha")
    number, sha = data["pull_request"], data["head_sha"]
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise Refused("binding.json names no pull request number")
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise Refused("binding.json names no commit (40 lower-case hex digits)")
    return Binding(number, sha)


def read_summary(path: Path) -> Summary:
    """``summary.md``, checked line by line (the line numbers are what a refusal names)."""
    raw = path.read_bytes()
    if len(raw) > MAX_SUMMARY_BYTES:
        raise Refused(f"summary.md is {len(raw):,} bytes, over the {MAX_SUMMARY_BYTES:,} a verdict may be")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("summary.md is not UTF-8 text") from None
    if "\0" in text:
        raise Refused("summary.md holds a NUL byte")
    first, *rest = text.splitlines() or [""]
    if first not in MARKERS:
        raise Refused("summary.md does not start with a perfsuite ab marker")
    nothing = bool(rest) and rest[0] == NOTHING_COMPARED
    kept = rest[1:] if nothing else rest
    for number, line in enumerate(kept, start=3 if nothing else 2):
        if _MARKUP.search(line):
            raise Refused(f"summary.md line {number} holds HTML, which a verdict never has")
        if any(word in line for word in _FRAME_WORDS):
            raise Refused(f"summary.md line {number} imitates the comment's own frame")
    return Summary(first, tuple(_MENTION.sub("&#64;", line) for line in kept), nothing)


def render(
    summary: Summary, *, head_sha: str, run_url: str, unverified: Sequence[str] = (), goalposts: str = ""
) -> str:
    """The comment: the frame (marker, the commit, whether to trust it, the goalposts moved), then the summary.

    ``unverified``: why the pull request's own code computed the figures (empty: it did not)."""
    frame = [
        summary.marker,
        f"<!-- perfsuite-ab head {head_sha} -->",
        f"**{TITLE} `{head_sha[:7]}`** · [the run]({run_url}): its job summary, report.html and ab.json",
        "",
    ]
    if unverified:
        frame += [
            f"> {UNVERIFIED}: {'; '.join(unverified)}. The figures below come from the pull request's own run: "
            "read them as its author's claim, not as the project's check.",
            "",
        ]
    return "\n".join([*frame, ""]) + goalposts + "\n".join(summary.lines) + "\n"


def recorded_head(body: str) -> str | None:
    """The head commit a verdict comment was written for (``None`` for a comment without one)."""
    found = _HEAD.search(body.split("\n", 2)[1] if body.count("\n") >= 1 else "")
    return found.group(1) if found else None


def stale(body: str, *, head_sha: str) -> str | None:
    """``body`` marked stale now that the pull request's head is ``head_sha``; ``None`` when it is
    current, already says so, or is no verdict of ours."""
    compared = recorded_head(body)
    if compared is None or compared == head_sha:
        return None
    lines = body.split("\n")
    note = (
        f"{STALE} this verdict is for `{compared[:7]}`; the pull request's head is now `{head_sha[:7]}`. "
        "The next comparison replaces it."
    )
    if len(lines) > 2 and lines[2].startswith(STALE):
        if lines[2] == note:
            return None
        lines[2] = note
    else:
        lines[2:2] = [note, ""]
    return "\n".join(lines)
