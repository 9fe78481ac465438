"""``perfsuite comment``: the upgrade verdict comment workflow's step (a ``workflow_run`` of a comparing
workflow, with a token that can write pull requests' comments and read runs' artifacts).

Everything it trusts comes from GitHub: the ``workflow_run`` event (which workflow file ran, on what
event, for which head commit) and the API (the pull request, its head, its files). The artifact
(:mod:`perfsuite.reports.verdict`) is bound to a pull request and a head commit, and posted only
when both are the API's: a ``pull_request`` run's binding must name the commit the run compared and
a pull request whose head it is; a ``pull_request_target`` run's (the GPU's, whose definition is the
base branch's and which writes the binding before any of the pull request's code) must name an open,
labelled pull request of this repository's own branch. A verdict whose head has moved marks the
comment stale instead of posting; a run of a ``--stale-on`` workflow (one that runs on every push of
a pull request) marks stale every verdict of an older head. The pull request's number always comes
from the API, its text never reaches the log, and nothing is checked out or run.

Refused: one line (``::error::``), exit 1. Bad arguments, an event file whose fields are not what
GitHub sends, or no ``gh``: one line, exit 2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfsuite.core.goalposts import baselines_dir, is_config, moves, under
from perfsuite.core.goalposts import markdown as goalposts_markdown
from perfsuite.reports.verdict import MARKERS, Binding, Refused, read_binding, read_summary, render, stale

BOT = "github-actions[bot]"
_EVENTS = ("pull_request", "pull_request_target")


def add_parser(sub: Any) -> None:
    """The subcommand's arguments."""
    comment = sub.add_parser(
        "comment",
        help="post a finished upgrade comparison's verdict on its pull request (the comment workflow's step)",
        description="Reads the workflow_run event ($GITHUB_EVENT_PATH) and the run's artifact, checks both "
        "against the API through `gh`, and creates, updates or marks stale the verdict comment.",
    )
    comment.add_argument("--artifact", type=Path, required=True, help="where the run's verdict artifact was downloaded")
    comment.add_argument(
        "--binding", type=Path, help="the run's binding.json, downloaded on its own (default: in --artifact)"
    )
    comment.add_argument(
        "--workflow",
        action="append",
        default=[],
        required=True,
        metavar="PATH",
        help="a comparing workflow whose runs may post (.github/workflows/...); repeat for each",
    )
    comment.add_argument(
        "--stale-on", action="append", default=[], metavar="PATH", help="a workflow whose runs only mark verdicts stale"
    )
    comment.add_argument("--label", default="gpu-upgrade", help="the label a pull_request_target run requires")
    comment.add_argument("--pin-files", default="", help="more pin files, comma-separated globs (as ab --pin-files)")
    comment.add_argument(
        "--dry-run",
        type=Path,
        metavar="DIR",
        help="check everything against the API as ever, but write each comment it would create, update or mark "
        "stale into DIR (made if need be) instead of sending it (a token that reads is enough)",
    )
    comment.add_argument("--event", type=Path, help="the event file (default: $GITHUB_EVENT_PATH)")
    comment.add_argument("--repo", help="owner/name (default: $GITHUB_REPOSITORY)")


class GitHub:
    """The REST API through ``gh api`` (its token from ``GH_TOKEN``)."""

    def __init__(self, repo: str, dry_run: Path | None = None) -> None:
        self.repo, self.dry_run = repo, dry_run
        self.unsent = 0

    def _gh(self, *args: str) -> str:
        done = subprocess.run(["gh", "api", *args], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise Refused(f"gh api {args[-1]}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
        return done.stdout

    def get(self, path: str) -> Any:
        return json.loads(self._gh(f"repos/{self.repo}/{path}"))

    def list(self, path: str) -> list[Any]:
        out = self._gh("--paginate", f"repos/{self.repo}/{path}", "--jq", ".[]")
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def raw(self, path: str, ref: str) -> str | None:
        """A file's text at ``ref``; ``None`` where it does not exist."""
        try:
            return self._gh(
                "-H", "Accept: application/vnd.github.raw+json", f"repos/{self.repo}/contents/{path}?ref={ref}"
            )
        except Refused:
            return None

    def send(self, method: str, path: str, body: str) -> None:
        if self.dry_run is not None:  # the body is the artifact's: into a file, never onto the log
            self.unsent += 1
            written = self.dry_run / f"{self.unsent}-{method}-{path.replace('/', '-')}.md"
            try:
                written.write_text(body, encoding="utf-8")
            except OSError as exc:
                raise Refused(f"--dry-run: cannot write {written}: {exc.strerror or exc}") from None
            print(f"dry run: would {method} {path}: its body in {written}")
            return
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            json.dump({"body": body}, handle)
        try:
            self._gh("--method", method, f"repos/{self.repo}/{path}", "--input", handle.name)
        finally:
            Path(handle.name).unlink(missing_ok=True)


def _verdicts(gh: GitHub, number: int) -> Iterator[dict[str, Any]]:
    """The bot's verdict comments on pull request ``number``."""
    for comment in gh.list(f"issues/{number}/comments"):
        body = str(comment.get("body") or "")
        if (comment.get("user") or {}).get("login") == BOT and body.split("\n", 1)[0] in MARKERS:
            yield comment


def mark_stale(gh: GitHub, number: int, head_sha: str, only: str | None = None) -> int:
    """Mark stale each verdict on ``number`` (of marker ``only``, when given) written for another head."""
    marked = 0
    for comment in _verdicts(gh, number):
        if only is not None and not str(comment["body"]).startswith(only + "\n"):
            continue
        changed = stale(str(comment["body"]), head_sha=head_sha)
        if changed is not None:
            gh.send("PATCH", f"issues/comments/{int(comment['id'])}", changed)
            marked += 1
    return marked


def _pull_requests_of(gh: GitHub, sha: str, *, head: bool) -> list[dict[str, Any]]:
    """The open pull requests that hold commit ``sha`` (whose head it is, with ``head``); a fork's
    included, which the event's own list leaves out."""
    found = [p for p in gh.list(f"commits/{sha}/pulls") if p.get("state") == "open"]
    return [p for p in found if (p.get("head") or {}).get("sha") == sha] if head else found


def _check_binding(gh: GitHub, run: dict[str, Any], binding: Binding, label: str) -> dict[str, Any]:
    """The pull request the binding names, once the API confirms it is the one that run compared."""
    number = binding.pull_request
    pull: dict[str, Any] = gh.get(f"pulls/{number}")
    if pull.get("state") != "open":
        raise Refused(f"#{number} is not an open pull request")
    if run["event"] == "pull_request":
        if binding.head_sha != run["head_sha"]:
            raise Refused(
                f"the artifact is bound to {binding.head_sha[:7]}, but that run compared {run['head_sha'][:7]}"
            )
        if number not in {p["number"] for p in _pull_requests_of(gh, run["head_sha"], head=False)}:
            raise Refused(f"#{number} does not hold {run['head_sha'][:7]}, the commit that run compared")
        if (run.get("head_repository") or {}).get("full_name") != pull["head"]["repo"]["full_name"]:
            raise Refused(f"that run was of another repository than #{number}'s head")
        return pull
    labels = {str(x.get("name")) for x in pull.get("labels") or []}
    if pull["head"]["repo"]["full_name"] != gh.repo or label not in labels:
        raise Refused(f"#{number} is not a pull request of a branch of {gh.repo} labelled {label}")
    return pull


def _unverified(gh: GitHub, pull: dict[str, Any], pin_files: list[str]) -> list[str]:
    """Why the pull request's own code computed the figures (empty: it changes pin files only)."""
    from perfsuite.ab.pins import is_pin_file

    why = []
    if pull["head"]["repo"]["full_name"] != gh.repo:
        why.append("it comes from a fork")
    files = gh.list(f"pulls/{pull['number']}/files")
    # A renamed file is its old name removed as well as its new one added (a baseline moved away).
    names = sorted({str(n) for f in files for n in (f["filename"], f.get("previous_filename")) if n})
    others = [name for name in names if not is_pin_file(name, pin_files)]
    if others:
        shown = ", ".join(f"`{name}`" for name in others[:3]) + (", …" if len(others) > 3 else "")
        why.append(f"it changes {len(others)} file(s) besides pin files ({shown})")
    return why


def _goalposts(gh: GitHub, pull: dict[str, Any]) -> str:
    """The baselines and tolerances the pull request moves, from the API (its merge base and head)."""
    files = gh.list(f"pulls/{pull['number']}/files")
    # A renamed file is its old name removed as well as its new one added (a baseline moved away).
    names = sorted({str(n) for f in files for n in (f["filename"], f.get("previous_filename")) if n})
    since = gh.get(f"compare/{pull['base']['sha']}...{pull['head']['sha']}")["merge_base_commit"]["sha"]
    # Where each side's gate reads its baselines: the project's setting, not a fixed directory.
    where = [baselines_dir(gh.raw("pyproject.toml", ref)) for ref in (since, pull["head"]["sha"])]
    wanted = [name for name in names if name == "pyproject.toml" or under(name, where) or is_config(name)]
    if not wanted:
        return ""
    texts = {name: (gh.raw(name, since), gh.raw(name, pull["head"]["sha"])) for name in wanted}
    return goalposts_markdown(moves(texts, where))


def post(args: Any, gh: GitHub, run: dict[str, Any]) -> str:
    """Check the artifact against the API and create or update the comment; returns what was done."""
    binding_file, summary_file = args.binding or args.artifact / "binding.json", args.artifact / "summary.md"
    if not binding_file.is_file() or not summary_file.is_file():
        return "that run left no verdict: nothing to post"
    binding = read_binding(binding_file)
    pull = _check_binding(gh, run, binding, args.label)
    summary = read_summary(summary_file)
    number = binding.pull_request
    if pull["head"]["sha"] != binding.head_sha:
        marked = mark_stale(gh, number, pull["head"]["sha"], only=summary.marker)
        return f"#{number}'s head moved past {binding.head_sha[:7]}: not posted; {marked} verdict(s) marked stale"
    pin_files = [p.strip() for p in args.pin_files.split(",") if p.strip()]
    body = render(
        summary,
        head_sha=binding.head_sha,
        run_url=str(run["html_url"]),
        unverified=_unverified(gh, pull, pin_files),
        goalposts=_goalposts(gh, pull),
    )
    existing = [c for c in _verdicts(gh, number) if str(c["body"]).startswith(summary.marker + "\n")]
    if existing:
        gh.send("PATCH", f"issues/comments/{int(existing[0]['id'])}", body)
        return f"updated the verdict on #{number}"
    if summary.nothing_compared:
        return f"#{number} moves no exact pin and has no verdict yet: none opened"
    gh.send("POST", f"issues/{number}/comments", body)
    return f"commented on #{number}"


_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
"""A commit as GitHub names one: 40 hex digits (SHA-1), or 64 (SHA-256)."""


def workflow_run(event_path: str) -> dict[str, Any]:
    """The event's ``workflow_run``, each field this step reads checked: the event is data, and its
    ``head_sha`` goes into API paths. A bad one raises ``ValueError`` naming the file and the field."""
    try:
        text = Path(event_path).read_text()
    except OSError as exc:
        raise ValueError(f"{event_path}: cannot read the event file ({exc.strerror or exc})") from None
    try:
        run = json.loads(text)["workflow_run"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{event_path} is not a workflow_run event") from None
    if not isinstance(run, dict) or not isinstance(run.get("event"), str):
        raise ValueError(f"{event_path}: workflow_run is not an object naming its event: not a workflow_run event")
    if run["event"] not in _EVENTS:
        return run
    for key in ("path", "head_sha", "html_url"):
        if key not in run:
            raise ValueError(f"{event_path}: workflow_run has no {key!r}: not a workflow_run event")
        if not isinstance(run[key], str):
            raise ValueError(f"{event_path}: workflow_run.{key} is {run[key]!r:.60}, not a string")
    if not _SHA.fullmatch(run["head_sha"]):
        raise ValueError(f"{event_path}: workflow_run.head_sha is {run['head_sha']!r:.60}, not a commit")
    if not isinstance(run.get("conclusion"), (str, type(None))):
        raise ValueError(f"{event_path}: workflow_run.conclusion is {run['conclusion']!r:.60}, not a string")
    if not isinstance(run.get("head_repository"), (dict, type(None))):
        raise ValueError(f"{event_path}: workflow_run.head_repository is {run['head_repository']!r:.60}, not an object")
    return run


def run(args: Any) -> int:
    event_path = args.event or os.environ.get("GITHUB_EVENT_PATH")
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY")
    if not event_path or not repo:
        print("perfsuite: error: needs the workflow_run event (--event) and the repository (--repo)", file=sys.stderr)
        return 2
    try:
        run = workflow_run(event_path)
    except ValueError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    if run["event"] not in _EVENTS:
        print(f"a {run['event']} run: no pull request to comment on")
        return 0
    if shutil.which("gh") is None:
        print(
            "perfsuite: error: `perfsuite comment` needs the GitHub CLI (gh) on PATH: https://cli.github.com",
            file=sys.stderr,
        )
        return 2
    if args.dry_run is not None:
        try:
            args.dry_run.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"perfsuite: error: --dry-run {args.dry_run}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    gh = GitHub(repo, args.dry_run)
    dry = " (dry run: nothing sent)" if args.dry_run is not None else ""
    path = run["path"].split("@", 1)[0]
    try:
        if path in args.stale_on and run["event"] == "pull_request":
            current = _pull_requests_of(gh, run["head_sha"], head=True)
            marked = sum(mark_stale(gh, int(p["number"]), run["head_sha"]) for p in current)
            print(f"{marked} verdict(s) of an older head marked stale{dry}")
        elif path not in args.workflow:
            raise Refused(
                f"a run of {path or 'no workflow file'}, not of a comparing workflow ({', '.join(args.workflow)})"
            )
        elif run.get("conclusion") in ("cancelled", "skipped"):
            print(f"that run was {run['conclusion']}: nothing to post")
        else:
            print(post(args, gh, run) + dry)
    except Refused as exc:
        print(f"::error::{exc}")
        return 1
    return 0
