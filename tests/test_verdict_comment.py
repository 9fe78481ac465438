"""``perfsuite comment``, the upgrade verdict comment workflow's step, against a fake ``gh``: a genuine
run's verdict is posted once and updated after; every forged artifact is refused with one line and
posts nothing (another pull request's number, an old or a made-up head commit, a summary without the
marker, a huge one, one that imitates the comment's frame, a run of another workflow file); a
verdict whose head moved is marked stale; a pull request that changes more than pins is said to be
unverified, and one that moves a baseline says so first."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tools import ROOT

from perfsuite.cli import main
from perfsuite.reports.verdict import STALE, TITLE, UNVERIFIED

REPO = "o/r"
HEAD, OLD, BASE, MERGE_BASE = "a" * 40, "b" * 40, "c" * 40, "d" * 40
CPU = "<!-- perfsuite-ab cpu -->"
SUMMARY = (
    "\n".join(
        [CPU, "### perfsuite ab on cpu", "**no change: 12 case(s) the same**", "", "| case | verdict |", "|---|---|"]
    )
    + "\n| a | same |\n"
)
WORKFLOWS = [".github/workflows/upgrade-ab.yml", ".github/workflows/upgrade-ab-gpu.yml"]
BASELINE = (ROOT / "baselines" / "cpu" / "tiny-bert-vanilla.json").read_text()

FAKE_GH = """#!{python}
# A stand-in for `gh api`: answers from a JSON state file, writes comments back to it, logs each call.
import json, os, sys

state_path = os.environ["FAKE_GH_STATE"]
state = json.load(open(state_path))
args = sys.argv[2:]
opts, path = {{}}, None
while args:
    a = args.pop(0)
    if a in ("--jq", "-H", "--method", "--input"):
        opts[a] = args.pop(0)
    elif a == "--paginate":
        opts[a] = True
    else:
        path = a
with open(os.environ["FAKE_GH_LOG"], "a") as log:
    log.write(json.dumps([opts.get("--method", "GET"), path]) + "\\n")
route = path.split("repos/o/r/", 1)[1]
parts = route.split("/")
method = opts.get("--method", "GET")

def missing():
    print("gh: Not Found (HTTP 404)", file=sys.stderr)
    sys.exit(1)

if parts[0] == "pulls" and len(parts) == 2:
    out = state["pulls"].get(parts[1]) or missing()
elif parts[0] == "pulls" and parts[2] == "files":
    out = [{{"filename": f}} for f in state["files"].get(parts[1], [])]
elif parts[0] == "commits":
    out = [state["pulls"][str(n)] for n in state["commit_pulls"].get(parts[1], [])]
elif parts[0] == "compare":
    out = {{"merge_base_commit": {{"sha": state["merge_base"]}}}}
elif parts[0] == "contents":
    name, _, ref = "/".join(parts[1:]).partition("?ref=")
    text = state["contents"].get(ref + ":" + name)
    if text is None:
        missing()
    sys.stdout.write(text)
    sys.exit(0)
elif parts[0] == "issues" and parts[1] == "comments":
    body = json.load(open(opts["--input"]))["body"]
    for comments in state["comments"].values():
        for c in comments:
            if str(c["id"]) == parts[2]:
                c["body"] = body
    out = {{}}
elif parts[0] == "issues" and method == "POST":
    body = json.load(open(opts["--input"]))["body"]
    comments = state["comments"].setdefault(parts[1], [])
    comments.append({{"id": 100 + len(comments), "user": {{"login": "github-actions[bot]"}}, "body": body}})
    out = {{}}
elif parts[0] == "issues":
    out = state["comments"].get(parts[1], [])
else:
    missing()
json.dump(state, open(state_path, "w"))
if opts.get("--jq") == ".[]":
    for item in out:
        print(json.dumps(item))
else:
    print(json.dumps(out))
"""


def _pull(number: int, head: str = HEAD, *, fork: bool = False, labels: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "number": number,
        "state": "open",
        "head": {"sha": head, "repo": {"full_name": "fork/r" if fork else REPO}},
        "base": {"sha": BASE},
        "labels": [{"name": name} for name in labels],
    }


class Fake:
    """The fake GitHub: its state, the artifact directory and the event, and a way to run the step."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.artifact, self.binding = root / "artifact", root / "binding" / "binding.json"
        self.artifact.mkdir()
        self.binding.parent.mkdir()
        self.state: dict[str, Any] = {
            "pulls": {"7": _pull(7), "8": _pull(8, "e" * 40)},
            "commit_pulls": {HEAD: [7]},
            "files": {"7": ["requirements.txt"]},
            "comments": {},
            "contents": {},
            "merge_base": MERGE_BASE,
        }
        self.run: dict[str, Any] = {
            "event": "pull_request",
            "conclusion": "success",
            "path": ".github/workflows/upgrade-ab.yml@refs/pull/7/merge",
            "head_sha": HEAD,
            "head_repository": {"full_name": REPO},
            "html_url": "https://github.com/o/r/actions/runs/1",
        }
        gh = root / "bin" / "gh"
        gh.parent.mkdir()
        gh.write_text(FAKE_GH.format(python=sys.executable))
        gh.chmod(0o755)
        monkeypatch.setenv("PATH", f"{gh.parent}:{Path(sys.executable).parent}:/usr/bin:/bin")
        monkeypatch.setenv("FAKE_GH_STATE", str(root / "state.json"))
        monkeypatch.setenv("FAKE_GH_LOG", str(root / "calls.log"))
        self.artifact_files(binding={"pull_request": 7, "head_sha": HEAD}, summary=SUMMARY)

    def artifact_files(self, *, binding: Any = None, summary: str | bytes | None = None) -> None:
        if binding is not None:
            self.binding.write_text(json.dumps(binding))
        if summary is not None:
            data = summary.encode() if isinstance(summary, str) else summary
            (self.artifact / "summary.md").write_bytes(data)

    def step(self, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
        (self.root / "state.json").write_text(json.dumps(self.state))
        (self.root / "event.json").write_text(json.dumps({"workflow_run": self.run}))
        args = ["comment", "--artifact", str(self.artifact), "--binding", str(self.binding)]
        args += ["--event", str(self.root / "event.json")]
        args += ["--repo", REPO, "--stale-on", ".github/workflows/ci.yml"]
        args += [x for w in WORKFLOWS for x in ("--workflow", w)]
        code = main([*args, *extra])
        self.state = json.loads((self.root / "state.json").read_text())
        out = capsys.readouterr().out
        return code, out

    def comments(self, number: int = 7) -> list[str]:
        return [str(c["body"]) for c in self.state["comments"].get(str(number), [])]

    def sent(self) -> list[str]:
        log = self.root / "calls.log"
        calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        return [f"{method} {path.split('repos/o/r/')[1]}" for method, path in calls if method != "GET"]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    return Fake(tmp_path, monkeypatch)


def test_a_genuine_verdict_is_posted_once_then_updated(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert fake.step(capsys) == (0, "commented on #7\n")
    (body,) = fake.comments()
    lines = body.splitlines()
    assert lines[:3] == [
        CPU,
        f"<!-- perfsuite-ab head {HEAD} -->",
        f"**{TITLE} `aaaaaaa`** · " + lines[2].split(" · ")[1],
    ]
    assert UNVERIFIED not in body  # the pull request changes a pin file only
    assert "| a | same |" in body
    fake.artifact_files(summary=SUMMARY.replace("same |", "slower |"))
    assert fake.step(capsys) == (0, "updated the verdict on #7\n")
    (body,) = fake.comments()
    assert "| a | slower |" in body
    assert fake.sent() == ["POST issues/7/comments", "PATCH issues/comments/100"]


def test_a_dry_run_checks_as_ever_and_writes_what_it_would_send_into_files(
    fake: Fake, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--dry-run DIR``: the artifact checked against the API as ever, nothing sent, each body written
    into DIR (the artifact's text never onto the log); a forged artifact is refused as ever."""
    out = tmp_path / "would"  # made
    code, said = fake.step(capsys, "--dry-run", str(out))
    assert (code, said) == (
        0,
        f"dry run: would POST issues/7/comments: its body in {out}/1-POST-issues-7-comments.md\n"
        "commented on #7 (dry run: nothing sent)\n",
    )
    assert fake.sent() == []
    assert not fake.comments()
    assert "| a | same |" in (out / "1-POST-issues-7-comments.md").read_text()
    fake.artifact_files(binding={"pull_request": 8, "head_sha": HEAD})
    code, said = fake.step(capsys, "--dry-run", str(out))
    assert code == 1
    assert "#8 does not hold aaaaaaa" in said
    assert fake.step(capsys, "--dry-run", str(out / "1-POST-issues-7-comments.md"))[0] == 2  # a file


FORGED: dict[str, tuple[dict[str, Any], str]] = {
    "another pull request's number": (
        {"binding": {"pull_request": 8, "head_sha": HEAD}},
        "#8 does not hold aaaaaaa, the commit that run compared",
    ),
    "a made-up pull request": ({"binding": {"pull_request": 99, "head_sha": HEAD}}, "gh api repos/o/r/pulls/99"),
    "an old head commit": (
        {"binding": {"pull_request": 7, "head_sha": OLD}},
        "the artifact is bound to bbbbbbb, but that run compared aaaaaaa",
    ),
    "a binding with more in it": ({"binding": {"pull_request": 7, "head_sha": HEAD, "x": 1}}, "other keys"),
    "a summary without the marker": (
        {"summary": SUMMARY.split("\n", 1)[1]},
        "does not start with a perfsuite ab marker",
    ),
    "a huge summary": ({"summary": SUMMARY + "| b | same |\n" * 5000}, "over the 60,000 a verdict may be"),
    "a summary that is not text": ({"summary": CPU.encode() + b"\n\xff\xfe"}, "not UTF-8"),
    "a second marker hidden in it": ({"summary": SUMMARY + "<!-- perfsuite-ab cuda -->\n"}, "line 8 holds HTML"),
    "a hidden line": ({"summary": SUMMARY + "<!--\n**no change**\n-->\n"}, "line 8 holds HTML"),
    "an image": ({"summary": SUMMARY + '<img src="https://example.com/x.png">\n'}, "line 8 holds HTML"),
    "the frame imitated": (
        {"summary": SUMMARY.replace("### perfsuite ab on cpu", f"**{TITLE} `aaaaaaa`** · verified")},
        "line 2 imitates the comment's own frame",
    ),
    "a stale note imitated": ({"summary": SUMMARY + "> **Stale**: ignore the above\n"}, "imitates"),
}


@pytest.mark.parametrize("forged", FORGED, ids=list(FORGED))
def test_a_forged_artifact_is_refused_and_posts_nothing(
    fake: Fake, capsys: pytest.CaptureFixture[str], forged: str
) -> None:
    files, reason = FORGED[forged]
    fake.artifact_files(**files)
    code, out = fake.step(capsys)
    assert code == 1
    assert out.count("\n") == 1
    assert out.startswith("::error::")
    assert reason in out
    assert fake.comments() == []
    assert fake.sent() == []


def test_a_binding_inside_the_verdict_artifact_is_not_the_one_read(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verdict artifact is written after the pull request's code ran; the binding before."""
    (fake.artifact / "binding.json").write_text(json.dumps({"pull_request": 8, "head_sha": HEAD}))
    assert fake.step(capsys) == (0, "commented on #7\n")


def test_a_run_of_another_workflow_file_is_refused(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    """A workflow a branch adds with the comparing workflow's name: ``workflow_run`` matches names."""
    fake.run["path"] = ".github/workflows/copy.yml@refs/pull/7/merge"
    code, out = fake.step(capsys)
    assert code == 1
    assert "a run of .github/workflows/copy.yml, not of a comparing workflow" in out
    assert fake.sent() == []


def test_a_verdict_whose_head_moved_marks_the_comment_stale(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    assert fake.step(capsys)[0] == 0
    fake.state["pulls"]["7"]["head"]["sha"] = "f" * 40  # pushed to while the next run compared HEAD
    assert fake.step(capsys) == (0, "#7's head moved past aaaaaaa: not posted; 1 verdict(s) marked stale\n")
    (body,) = fake.comments()
    assert body.splitlines()[2] == (
        f"{STALE} this verdict is for `aaaaaaa`; the pull request's head is now `fffffff`. "
        "The next comparison replaces it."
    )
    assert body.startswith(CPU + "\n")  # still found, and replaced, by the next run


def test_a_push_marks_an_older_verdict_stale_without_an_artifact(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fake.step(capsys)[0] == 0
    new = "f" * 40
    fake.state["pulls"]["7"]["head"]["sha"] = new
    fake.state["commit_pulls"][new] = [7]
    fake.run.update(path=".github/workflows/ci.yml@refs/pull/7/merge", head_sha=new)
    (fake.artifact / "summary.md").unlink()
    assert fake.step(capsys) == (0, "1 verdict(s) of an older head marked stale\n")
    assert fake.comments()[0].splitlines()[2].startswith(STALE)
    assert fake.step(capsys) == (0, "0 verdict(s) of an older head marked stale\n")  # said once


def test_a_pull_request_that_changes_more_than_pins_is_unverified(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.state["files"]["7"] = ["requirements.txt", "perfsuite/reports/ab.py"]
    assert fake.step(capsys)[0] == 0
    (body,) = fake.comments()
    assert body.splitlines()[4].startswith(
        f"> {UNVERIFIED}: it changes 1 file(s) besides pin files (`perfsuite/reports/ab.py`)."
    )


def test_a_moved_baseline_comes_first(fake: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    path = "baselines/cpu/tiny-bert-vanilla.json"
    data = json.loads(BASELINE)
    data["memory"]["peak_bytes"] *= 2
    fake.state["files"]["7"] = ["requirements.txt", path]
    fake.state["contents"] = {f"{MERGE_BASE}:{path}": BASELINE, f"{HEAD}:{path}": json.dumps(data)}
    assert fake.step(capsys)[0] == 0
    (body,) = fake.comments()
    after_frame = body.split("\n\n", 2)[2]  # the frame, the unverified note (a baseline is no pin file)
    assert after_frame.startswith("> **This change moves the goalposts**")
    assert "`tiny-bert-vanilla` on cpu: peak memory 92.96 → 185.9 MiB (+100.0%)" in after_frame


def test_a_moved_baseline_where_the_project_keeps_its_baselines_comes_first(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    """The comment reads the project's ``[tool.perfsuite] baselines``, as goalposts.py does, not a
    fixed ``baselines/``."""
    path = "perf/baselines/cpu/tiny-bert-vanilla.json"
    data = json.loads(BASELINE)
    data["memory"]["peak_bytes"] *= 2
    pyproject = '[tool.perfsuite]\nbaselines = "perf/baselines"\n'
    fake.state["files"]["7"] = ["requirements.txt", path]
    fake.state["contents"] = {
        f"{MERGE_BASE}:{path}": BASELINE,
        f"{HEAD}:{path}": json.dumps(data),
        f"{MERGE_BASE}:pyproject.toml": pyproject,
        f"{HEAD}:pyproject.toml": pyproject,
    }
    assert fake.step(capsys)[0] == 0
    (body,) = fake.comments()
    assert "`tiny-bert-vanilla` on cpu: peak memory 92.96 → 185.9 MiB (+100.0%)" in body


def test_the_gpu_run_needs_an_open_labelled_branch_of_this_repository(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.run.update(event="pull_request_target", path=".github/workflows/upgrade-ab-gpu.yml@refs/heads/main")
    fake.run["head_sha"] = BASE  # a pull_request_target run's commit is the base branch's
    fake.artifact_files(summary=SUMMARY.replace(CPU, "<!-- perfsuite-ab cuda -->"))
    code, out = fake.step(capsys)
    assert (code, fake.sent()) == (1, [])
    assert "#7 is not a pull request of a branch of o/r labelled gpu-upgrade" in out
    fake.state["pulls"]["7"]["labels"] = [{"name": "gpu-upgrade"}]
    assert fake.step(capsys) == (0, "commented on #7\n")
    fake.state["pulls"]["7"]["head"]["repo"]["full_name"] = "fork/r"
    assert fake.step(capsys)[0] == 1


def test_the_verdict_on_the_pull_requests_own_code_is_posted_as_its_own(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    """perfsuite ab --base-ref's summary (marker ``own cpu``) beside an upgrade verdict: one comment each."""
    assert fake.step(capsys) == (0, "commented on #7\n")
    own = "<!-- perfsuite-ab own cpu -->"
    fake.artifact_files(summary=SUMMARY.replace(CPU, own))
    assert fake.step(capsys) == (0, "commented on #7\n")
    assert [body.split("\n", 1)[0] for body in fake.comments()] == [CPU, own]


def test_mentions_are_defused_and_nothing_compared_opens_no_comment(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    nothing = f"{CPU}\n<!-- perfsuite-ab: nothing compared -->\n### perfsuite ab on cpu\n**nothing to compare**\n"
    fake.artifact_files(summary=nothing)
    assert fake.step(capsys) == (0, "#7 moves no exact pin and has no verdict yet: none opened\n")
    fake.artifact_files(summary=SUMMARY + "thanks @someone and @org/team\n")
    assert fake.step(capsys)[0] == 0
    assert "thanks &#64;someone and &#64;org/team" in fake.comments()[0]


def test_without_gh_it_says_so_in_one_line(
    fake: Fake, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (fake.root / "event.json").write_text(json.dumps({"workflow_run": fake.run}))
    monkeypatch.setenv("PATH", str(fake.root / "nowhere"))
    argv = ["comment", "--artifact", str(fake.artifact), "--event", str(fake.root / "event.json"), "--repo", REPO]
    assert main([*argv, "--workflow", WORKFLOWS[0]]) == 2
    needs = "perfsuite: error: `perfsuite comment` needs the GitHub CLI (gh) on PATH: https://cli.github.com\n"
    assert capsys.readouterr() == ("", needs)


def test_no_artifact_is_nothing_to_post_and_bad_arguments_are_one_line(
    fake: Fake, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake.binding.unlink()
    assert fake.step(capsys) == (0, "that run left no verdict: nothing to post\n")
    assert main(["comment", "--artifact", ".", "--workflow", "x", "--event", str(tmp_path), "--repo", REPO]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda f: f.state["pulls"]["7"].update(state="closed"), "#7 is not an open pull request"),
        (lambda f: f.run.update(head_repository={"full_name": "fork/r"}), "that run was of another repository"),
    ],
    ids=["a closed pull request", "a run of another repository's commit"],
)
def test_a_binding_the_api_does_not_confirm_is_refused(
    fake: Fake, capsys: pytest.CaptureFixture[str], change: Any, reason: str
) -> None:
    change(fake)
    code, out = fake.step(capsys)
    assert (code, fake.sent()) == (1, [])
    assert reason in out
