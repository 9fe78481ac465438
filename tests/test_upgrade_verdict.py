"""A dependency bump's verdict: ``perfsuite ab --pins`` on the command line (its one-line refusals,
``--show-sides``, the sides it asks for), the summary a pull request's comment shows, and the
workflows that run it read-only, bind the verdict before any of the pull request's code and post
it only through ``perfsuite comment``. Every repository here is a local one, built in the test."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pin_repos import bump as _bump
from pin_repos import made_up_packages_installed, new_repo
from tools import ROOT

from perfsuite.ab import comparison, envs
from perfsuite.ab.pins import PIN_FILES, upgrade
from perfsuite.cli import main
from perfsuite.cli.scaffold import init, template
from perfsuite.reports.ab import NOTHING_COMPARED, markdown, marker

repo = pytest.fixture(new_repo, name="repo")
_packages = pytest.fixture(made_up_packages_installed, autouse=True)


def _ab(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["ab", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pins", "nope..HEAD"], "'nope' is not a commit of this repository"),
        (["--pins", "HEAD~5..HEAD"], "'HEAD~5' is not a commit of this repository"),
        (["--pins", "HEAD~1..HEAD", "--base", "current"], "--pins chooses both sides"),
        (["--base", "current", "--candidate", "current", "--pin-files", "x.txt"], "--pin-files goes with --pins"),
        (["--base", "current"], "the following arguments are required: --candidate"),
    ],
)
def test_bad_pins_are_one_line_and_exit_2(
    repo: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bump(repo, {"requirements.txt": "a==1\n"}, {"requirements.txt": "a==2\n"})
    monkeypatch.chdir(repo)
    code, _, err = _ab(args, capsys)
    assert code == 2
    assert err.count("\n") == 1, err
    assert err.startswith("perfsuite: error: ")
    assert message in err


def test_outside_a_git_repository_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    code, _, err = _ab(["--pins", "HEAD~1..HEAD"], capsys)
    assert code == 2
    assert err.strip() == f"perfsuite: error: --pins HEAD~1..HEAD: {tmp_path} is not in a git repository"


def test_show_sides_says_them_and_what_they_move_and_runs_nothing(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bump(repo, {"requirements.txt": "a==1\nb>=1\n"}, {"requirements.txt": "a==2\nb>=2\n"})
    monkeypatch.chdir(repo)
    monkeypatch.setattr(comparison.AbRun, "start", _never)
    monkeypatch.setattr(envs, "resolve", _resolved({"a==1": [], "a==2": ["a==2", "c==3"]}))
    code, out, err = _ab(["--pins", "HEAD~1..HEAD", "--show-sides"], capsys)
    assert code == 0
    assert out.splitlines() == [  # what each overlay changes here, as its set-up resolves it
        "base: a==1",
        "  over this environment: nothing to change",
        "candidate: a==2",
        "  over this environment: moves a 1 → 2; adds c 3",
    ]
    assert "  a 1 → 2" in err
    assert "skipped b: not an exact pin" in err
    # A side that cannot be set up is said (with what --with holds on it), and the exit code is a run's: 3.
    monkeypatch.setattr(envs, "resolve", _resolved({"a==1": []}))
    code, out, err = _ab(["--pins", "HEAD~1..HEAD", "--show-sides", "--with", "d<2"], capsys)
    assert code == 3
    assert out.splitlines() == ["base: a==1", "  over this environment: nothing to change", "candidate: a==2"]
    assert "perfsuite: cannot test: candidate: a==2, d<2 does not resolve: no a==2 here" in err


def _resolved(answers: dict[str, list[str]]) -> Any:
    """:func:`perfsuite.ab.envs.resolve` answering from ``answers`` by the side's own pin, the held ones after it."""

    def resolve(requirements: list[Any]) -> list[str]:
        asked = str(requirements[0])
        if asked not in answers:
            raise envs.EnvError(f"{', '.join(map(str, requirements))} does not resolve: no {asked} here")
        return answers[asked]

    return resolve


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("a comparison was started")


def test_no_pin_changed_is_exit_0_and_a_summary_that_opens_no_comment(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bump(repo, {"requirements.txt": "a==1\nb>=1\n"}, {"requirements.txt": "a==1\nb>=2\n"})
    monkeypatch.chdir(repo)
    monkeypatch.setattr(comparison.AbRun, "start", _never)
    code, _, err = _ab(["--pins", "HEAD~1..HEAD", "--device", "cpu", "--report", "out"], capsys)
    assert code == 0
    assert "HEAD~1..HEAD changes no exact pin: nothing to compare" in err
    summary = (repo / "out" / "summary.md").read_text().splitlines()
    assert summary[:2] == [marker("cpu"), NOTHING_COMPARED]
    assert "**nothing compared: `HEAD~1..HEAD` changes no exact dependency pin**" in summary
    assert any(line.startswith("- skipped b: not an exact pin") for line in summary)


def test_the_pins_become_both_sides_of_the_comparison(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end up to the overlays: the sides asked for are the pins, and a side that cannot be
    set up still leaves a summary for the pull request."""
    _bump(repo, {"requirements.txt": "transformers==4.57.6\n"}, {"requirements.txt": "transformers==4.58.0\n"})
    monkeypatch.chdir(repo)
    asked: dict[str, Any] = {}

    def start(args: Any, specs: Any, say: Any) -> None:
        asked.update(base=args.base, candidate=args.candidate, cases=len(specs))
        raise comparison.Failed(
            "candidate: transformers==4.58.0 does not resolve with the installed stack", "candidate"
        )

    monkeypatch.setattr(comparison.AbRun, "start", start)
    args = ["--pins", "HEAD~1..HEAD", "--device", "cpu", "--models", "tiny-bert", "--strategies", "vanilla"]
    code, _, err = _ab([*args, "--report", "out", "--json", "ab.json"], capsys)
    assert code == 3
    assert asked == {"base": "transformers==4.57.6", "candidate": "transformers==4.58.0", "cases": 1}
    summary = (repo / "out" / "summary.md").read_text()
    assert summary.startswith(marker("cpu") + "\n")
    assert NOTHING_COMPARED not in summary
    # The headline names the side; the reason is said whole under it (the table's cell is cut at 200
    # characters); no time was measured, so there is no reading of time verdicts.
    assert "**nothing compared: 1 cannot test (base → candidate: the candidate cannot be tested)**" in summary
    assert "\n> cannot test: candidate: transformers==4.58.0 does not resolve with the installed stack\n" in summary
    assert "| cannot test | cannot test: candidate: transformers==4.58.0 does not resolve" in summary
    assert "Time: *slower*" not in summary
    assert "- base: `transformers==4.57.6`\n- candidate: `transformers==4.58.0`\n" in summary
    assert "requirements.txt: transformers 4.57.6 → 4.58.0" in summary
    # A script reading --json finds the verdict the exit code gives, in a file perfsuite report reads.
    (case,) = json.loads((repo / "ab.json").read_text())["cases"]
    assert (case["case"], case["verdict"]) == ("tiny-bert-vanilla", "cannot test")
    assert case["error"].startswith("cannot test: candidate: transformers==4.58.0 does not resolve")
    assert main(["report", str(repo / "ab.json"), "-o", str(repo / "again")]) == 0


def _payload(pins: dict[str, Any] | None) -> dict[str, Any]:
    libraries = {"base": {"transformers": {"version": "4.57.6"}}, "candidate": {"transformers": {"version": "4.58.0"}}}
    case = {
        "case": "tiny-llama-grad_accum-trainer",
        "verdict": "regressed",
        "error": None,
        "time": {"ratio": 1.01, "low": 0.99, "high": 1.03, "verdict": "same", "pairs": 11},
        "mode": "duet",
        "memory": {"a": 2**20, "b": 2**20, "breakdown_a": {}, "breakdown_b": {}},
        "loss": {"max_abs_diff": 25.1},
    }
    payload: dict[str, Any] = {
        "device_type": "cpu",
        "sides": {
            name: {"env": env, "probe": {"libraries": libraries[name]}}
            for name, env in (("base", "transformers==4.57.6"), ("candidate", "transformers==4.58.0"))
        },
        "cases": [case],
        "verdicts": {"regressed": 1, "improved": 0, "same": 0, "undecided": 0, "cannot test": 0},
    }
    if pins is not None:
        payload["pins"] = pins
    return payload


def test_the_comment_names_the_pins_and_keeps_its_table_whole(repo: Path) -> None:
    _bump(
        repo, {"requirements.txt": "transformers==4.57.6\nx>=1\n"}, {"requirements.txt": "transformers==4.58.0\nx<2\n"}
    )
    text = markdown(_payload(upgrade("HEAD~1..HEAD", repo).as_json()))
    lines = text.splitlines()
    assert lines[0] == "<!-- perfsuite-ab cpu -->"
    assert "**REGRESSED: 1 regressed (base → candidate: transformers 4.57.6 → 4.58.0)**" in lines
    assert "- base: `transformers==4.57.6`" in lines
    assert "- candidate: `transformers==4.58.0`" in lines
    assert any(line.startswith("- pins of `HEAD~1` (") and "transformers 4.57.6 → 4.58.0" in line for line in lines)
    assert any(line.startswith("- skipped x: not an exact pin: x>=1") and "x&lt;2" in line for line in lines)
    table = [line for line in lines if line.startswith("|")]
    assert len({line.replace("\\|", "").count("|") for line in table}) == 1, "a cell's | splits no column"
    assert "| tiny-llama-grad_accum-trainer | regressed |" in table[2]


def test_a_comparison_without_pins_has_the_marker_and_its_sides() -> None:
    text = markdown(_payload(None))
    assert text.startswith("<!-- perfsuite-ab cpu -->\n### perfsuite ab on cpu\n")
    assert "- base: `transformers==4.57.6`\n- candidate: `transformers==4.58.0`\n" in text
    assert "- pins of" not in text


WORKFLOWS = ROOT / ".github" / "workflows"
TEMPLATES = ROOT / "perfsuite" / "templates"
UPGRADE = {
    "ours": (WORKFLOWS / "upgrade-ab.yml", WORKFLOWS / "upgrade-ab-gpu.yml", WORKFLOWS / "upgrade-ab-comment.yml"),
    "template": (
        TEMPLATES / "perfsuite-upgrade.yml",
        TEMPLATES / "perfsuite-upgrade-gpu.yml",
        TEMPLATES / "perfsuite-upgrade-comment.yml",
    ),
}


def _load(path: Path) -> dict[Any, Any]:
    workflow: dict[Any, Any] = yaml.safe_load(path.read_text())
    return workflow


def _steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


@pytest.mark.parametrize("which", UPGRADE)
def test_the_upgrade_workflows_compare_read_only_and_comment_without_the_code(which: str) -> None:
    cpu_path, gpu_path, comment_path = UPGRADE[which]
    cpu, gpu, comment = _load(cpu_path), _load(gpu_path), _load(comment_path)
    assert cpu[True]["pull_request"]["paths"] == list(PIN_FILES), "the trigger's files are the ones --pins reads"
    for workflow, device in ((cpu, "cpu"), (gpu, "cuda")):
        assert workflow["permissions"] == {}
        assert [job["permissions"] for job in workflow["jobs"].values()] == [{"contents": "read"}]
        run = "\n".join(step.get("run", "") for step in _steps(workflow))
        assert "perfsuite ab --pins " in run
        assert f"--device {device}" in run
        assert "--report results" in run
        assert marker(device) in run, "the fallback summary carries the device's marker"
        uploads = [s["with"]["name"] for s in _steps(workflow) if str(s.get("uses", "")).startswith("actions/upload")]
        assert uploads == ["perfsuite-upgrade-binding", "perfsuite-upgrade"]
    assert comment[True]["workflow_run"]["workflows"][:2] == [cpu["name"], gpu["name"]]
    assert comment["permissions"] == {}
    steps = _steps(comment)
    for step in steps:  # at most the default branch's own checkout, never a pull request's commit
        assert not set(step.get("with", {})) & {"ref", "repository"}, step
    script = "\n".join(step.get("run", "") for step in steps)
    assert "perfsuite comment --artifact" in script
    assert f"--workflow .github/workflows/{cpu_path.name} --workflow .github/workflows/{gpu_path.name}" in script


def test_init_writes_the_upgrade_workflows(tmp_path: Path) -> None:
    init(tmp_path)
    for path in UPGRADE["template"]:
        assert (tmp_path / ".github" / "workflows" / path.name).read_text() == template(path.name)
    assert "__VERSION__" not in template("perfsuite-upgrade-comment.yml")


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _jobs(path: Path) -> dict[str, Any]:
    jobs: dict[str, Any] = _load(path)["jobs"]
    return jobs


UPGRADE_AB = ROOT / ".github/workflows/upgrade-ab.yml"


# -- the upgrade verdict: bound before any of the pull request's code, checked by `perfsuite comment` --

COMMENTERS = {
    ROOT / ".github/workflows/upgrade-ab-comment.yml": ROOT / ".github/workflows",
    ROOT / "perfsuite/templates/perfsuite-upgrade-comment.yml": ROOT / "perfsuite/templates",
}


@pytest.mark.parametrize("path", COMMENTERS, ids=_name)
def test_the_comment_workflow_posts_only_through_perfsuite_comment(path: Path) -> None:
    workflow = yaml.safe_load(path.read_text())
    (job,) = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"actions": "read", "contents": "read", "pull-requests": "write"}
    assert workflow["permissions"] == {}
    for step in job["steps"]:
        assert "head_sha" not in str(step.get("with", {})), "never a pull request's commit checked out"
    run = str(job["steps"][-1]["run"])
    named = {Path(p).name for p in re.findall(r"--(?:workflow|stale-on) \.github/workflows/(\S+)", run)}
    names = {yaml.safe_load((COMMENTERS[path] / n).read_text())["name"] for n in named}
    assert names == set(workflow[True]["workflow_run"]["workflows"]), "every name it listens to, checked by path"
    assert "perfsuite comment" in run
    assert "${{" not in run


COMPARING = [
    UPGRADE_AB,
    ROOT / ".github/workflows/upgrade-ab-gpu.yml",
    ROOT / "perfsuite/templates/perfsuite-pr.yml",
] + [p for p in sorted(ROOT.glob("perfsuite/templates/perfsuite-upgrade*.yml")) if "comment" not in p.name]


@pytest.mark.parametrize("path", COMPARING, ids=_name)
def test_a_comparing_run_binds_its_verdict_before_any_pull_request_code(path: Path) -> None:
    (job,) = _jobs(path).values()
    bind, upload = job["steps"][:2]
    assert '"pull_request": %d, "head_sha": "%s"' in bind["run"]
    assert bind["env"] == {
        "PR_NUMBER": "${{ github.event.pull_request.number }}",
        "HEAD_SHA": "${{ github.event.pull_request.head.sha }}",
    }
    assert upload["with"]["name"] == "perfsuite-upgrade-binding"
    assert "pull-request" not in path.read_text().replace("pull-requests", "")  # the old number file, gone


def test_pins_with_no_pin_file_changed_read_as_one_sentence() -> None:
    from perfsuite.reports.ab import _pins_lines

    pins = {"files": [], "moved": [], "skipped": [], "base_ref": "HEAD~1", "head_ref": "HEAD"}
    pins |= {"base_commit": "e5a5722", "head_commit": "eb38990"}
    assert _pins_lines(None, None, pins) == ["- pins of `HEAD~1` (e5a5722) → `HEAD` (eb38990): no pin file changed"]
