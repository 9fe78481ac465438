"""``perfsuite ab --pins BASE..HEAD``: the pins two commits of a git repository differ in, as the two
sides of a comparison; the summary a pull request's comment shows; the upgrade workflows that run it.
Every repository here is a local one, built in the test; nothing is installed or fetched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tools import ROOT, git

from perfsuite.ab import comparison
from perfsuite.ab.envs import Env, EnvError
from perfsuite.ab.pins import PIN_FILES, Change, PinError, Upgrade, is_pin_file, split_range, upgrade
from perfsuite.ab.sides import Side
from perfsuite.cli import main
from perfsuite.cli.scaffold import init, template
from perfsuite.reports.ab import NOTHING_COMPARED, markdown, marker


def _commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    return path


def _bump(repo: Path, before: dict[str, str], after: dict[str, str]) -> None:
    _commit(repo, before, "base")
    _commit(repo, after, "bump")


def test_a_requirements_bump_is_the_two_sides(repo: Path) -> None:
    _bump(
        repo,
        {
            "requirements.txt": "# training\ntransformers==4.57.6  # pinned\naccelerate>=1.0\n"
            "-r requirements/extra.txt\n",
            "requirements/extra.txt": "peft==0.13.2 \\\n    --hash=sha256:abc\nrich\n",
            "README.md": "not a pin file\n",
        },
        {
            "requirements.txt": "# training\ntransformers==4.58.0  # pinned\naccelerate>=1.1\n"
            "-r requirements/extra.txt\n",
            "requirements/extra.txt": "peft==0.14.0 \\\n    --hash=sha256:def\nrich\n",
            "README.md": "changed\n",
        },
    )
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.files == ("requirements.txt", "requirements/extra.txt")
    assert found.changes == (Change("peft", "0.13.2", "0.14.0"), Change("transformers", "4.57.6", "4.58.0"))
    assert found.base == "peft==0.13.2,transformers==4.57.6"
    assert found.candidate == "peft==0.14.0,transformers==4.58.0"
    [(name, why)] = found.skipped
    assert name == "accelerate"
    assert why.startswith("not an exact pin: accelerate>=1.0 (requirements.txt) → accelerate>=1.1")
    assert found.base_commit == git(repo, "rev-parse", "--short", "HEAD~1")


def test_pyproject_lists_and_groups_are_read(repo: Path) -> None:
    before = """
[project]
name = "demo"
dependencies = ["torch>=2.4", "transformers==4.57.6"]
[project.optional-dependencies]
train = ["accelerate==1.10.0"]
[dependency-groups]
dev = ["pytest==8.3.0", {include-group = "lint"}]
lint = ["ruff==0.8.0"]
"""
    after = before.replace("1.10.0", "1.11.0").replace("0.8.0", "0.9.0").replace("torch>=2.4", "torch>=2.5")
    _bump(repo, {"pyproject.toml": before}, {"pyproject.toml": after})
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.changes == (Change("accelerate", "1.10.0", "1.11.0"), Change("ruff", "0.8.0", "0.9.0"))
    assert [name for name, _ in found.skipped] == ["torch"]
    assert "pyproject.toml [project] dependencies" in found.skipped[0][1]


UV_LOCK = """
version = 1
requires-python = ">=3.10"

[[package]]
name = "demo"
version = "0.1.0"
source = {{ editable = "." }}

[[package]]
name = "transformers"
version = "{transformers}"
source = {{ registry = "https://pypi.org/simple" }}

[[package]]
name = "huggingface-hub"
version = "{hub}"
source = {{ registry = "https://pypi.org/simple" }}

[[package]]
name = "numpy"
version = "1.0.0"
source = {{ registry = "https://pypi.org/simple" }}
resolution-markers = ["python_full_version < '3.0'"]

[[package]]
name = "numpy"
version = "{numpy}"
source = {{ registry = "https://pypi.org/simple" }}
resolution-markers = ["python_full_version >= '3.0'"]

[[package]]
name = "tool"
version = "{tool}"
source = {{ git = "https://example.com/tool.git" }}
"""


def test_a_uv_lock_bump_moves_every_package_it_moved(repo: Path) -> None:
    versions = {"transformers": "4.57.6", "hub": "0.36.0", "numpy": "2.1.0", "tool": "1.0"}
    _bump(
        repo,
        {"uv.lock": UV_LOCK.format(**versions)},
        {"uv.lock": UV_LOCK.format(**{**versions, "transformers": "4.58.0", "hub": "0.36.2", "tool": "1.1"})},
    )
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.base == "huggingface-hub==0.36.0,transformers==4.57.6"
    assert found.candidate == "huggingface-hub==0.36.2,transformers==4.58.0"
    assert found.skipped == (("tool", "not an exact pin: tool==1.0 from git (uv.lock) → tool==1.1 from git (uv.lock)"),)


def test_a_lock_version_for_another_interpreter_only_is_skipped_saying_so(repo: Path) -> None:
    versions = {"transformers": "4.57.6", "hub": "0.36.0", "numpy": "2.1.0", "tool": "1.0"}
    moved = UV_LOCK.format(**versions).replace('version = "1.0.0"', 'version = "1.5.0"')
    _bump(repo, {"uv.lock": UV_LOCK.format(**versions)}, {"uv.lock": moved})
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.changes == ()
    assert found.skipped == (("numpy", "changed only where its marker does not hold on this interpreter"),)


def test_a_poetry_lock_is_read_as_a_lock(repo: Path) -> None:
    lock = '[[package]]\nname = "peft"\nversion = "{v}"\n\n[[package]]\nname = "mine"\nversion = "1"\n'
    lock += '[package.source]\ntype = "directory"\nurl = "mine"\n'
    _bump(repo, {"poetry.lock": lock.format(v="0.13.2")}, {"poetry.lock": lock.format(v="0.14.0")})
    assert upgrade("HEAD~1..HEAD", repo).changes == (Change("peft", "0.13.2", "0.14.0"),)


def test_added_removed_and_one_sided_pins(repo: Path) -> None:
    _bump(
        repo,
        {"requirements.txt": "old==1.0\nloose==2.0\nsame==3.0\n", "requirements-dev.txt": "x; sys_platform == 'x'\n"},
        {
            "requirements.txt": "new==1.0\nloose>=2.0\nsame==3.0\n",
            "requirements-dev.txt": "x==1; sys_platform == 'x'\n",
        },
    )
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.changes == (Change("new", None, "1.0"), Change("old", "1.0", None))
    assert found.base == "old==1.0"
    assert found.candidate == "new==1.0"
    assert [change.describe() for change in found.changes] == ["new added, 1.0", "old removed (was 1.0)"]
    skipped = dict(found.skipped)
    assert skipped["loose"].startswith("an exact pin on one side only: loose==2.0")
    assert skipped["x"] == "changed only where its marker does not hold on this interpreter"


def test_unchanged_pins_are_nothing_to_compare(repo: Path) -> None:
    _bump(
        repo,
        {"requirements.txt": "transformers==4.57.6\n", "pyproject.toml": '[project]\nname = "a"\n'},
        {"requirements.txt": "# a comment\ntransformers==4.57.6\n", "pyproject.toml": '[project]\nname = "b"\n'},
    )
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.files == ("pyproject.toml", "requirements.txt")
    assert (found.changes, found.skipped) == ((), ())
    assert (found.base, found.candidate) == ("current", "current")


def test_three_dots_compare_from_the_merge_base(repo: Path) -> None:
    _commit(repo, {"requirements.txt": "a==1\nb==1\n"}, "base")
    branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    git(repo, "checkout", "-q", "-b", "bump")
    _commit(repo, {"requirements.txt": "a==2\nb==1\n"}, "bump a")
    git(repo, "checkout", "-q", branch)
    _commit(repo, {"requirements.txt": "a==1\nb==3\n"}, "the base moves on")
    assert upgrade(f"{branch}...bump", repo).changes == (Change("a", "1", "2"),)
    assert {c.name for c in upgrade(f"{branch}..bump", repo).changes} == {"a", "b"}


def test_a_pin_file_that_does_not_parse_is_one_line(repo: Path) -> None:
    _bump(repo, {"pyproject.toml": '[project]\nname = "a"\n'}, {"pyproject.toml": "[project\n"})
    with pytest.raises(PinError, match=r"^--pins HEAD~1..HEAD: at \w+, pyproject.toml is not valid TOML \("):
        upgrade("HEAD~1..HEAD", repo)


def test_an_overlaid_distribution_whose_module_is_named_otherwise_passes_the_check() -> None:
    """A lock's pins name distributions (pyyaml) whose module has another name (yaml): the probe
    finds no file for them, and the version the side's workers see decides."""
    side = object.__new__(Side)
    side.name = "candidate"
    side.env = Env(
        label="pyyaml==6.0.2", python="python", path=("/overlay",), pins=("pyyaml==6.0.2",), moved=("pyyaml==6.0.2",)
    )
    side.probe = {"libraries": {"pyyaml": {"version": "6.0.2", "file": None}}}
    side.check_pins()
    side.probe = {"libraries": {"pyyaml": {"version": "6.0.2", "file": "/usr/lib/python3/yaml/__init__.py"}}}
    with pytest.raises(EnvError, match="not the overlay"):
        side.check_pins()
    side.probe = {"libraries": {"pyyaml": {"version": "6.0.1", "file": None}}}
    with pytest.raises(EnvError, match="the overlay did not take"):
        side.check_pins()


def test_the_spec_is_two_refs_or_one() -> None:
    assert split_range("main..HEAD") == ("main", "HEAD", False)
    assert split_range("HEAD^1..HEAD") == ("HEAD^1", "HEAD", False)
    assert split_range("abc123...def") == ("abc123", "def", True)
    assert split_range("main") == ("main", "HEAD", False)
    with pytest.raises(PinError, match="not a git revision"):
        split_range("--output=x..HEAD")


@pytest.mark.parametrize(
    "path",
    ["requirements.txt", "dev-requirements.txt", "sub/requirements-gpu.txt", "requirements/base.txt", "uv.lock"],
)
def test_pin_files_anywhere_in_the_tree(path: str) -> None:
    assert is_pin_file(path)
    assert is_pin_file(f"a/b/{path}")


def test_other_files_are_not_pin_files() -> None:
    assert not is_pin_file("README.md")
    assert not is_pin_file(".github/gpu-pinned.txt")
    assert is_pin_file(".github/gpu-pinned.txt", [".github/gpu-pinned.txt"])
    assert not is_pin_file("pyproject.toml.orig")
    assert is_pin_file("constraints/gpu/cu130.txt", ["constraints/**"])
    assert is_pin_file("pins-3.txt", ["pins-?.txt"])
    assert not is_pin_file("sub/pins-3.txt", ["pins-?.txt"])


@pytest.fixture(autouse=True)
def _made_up_packages_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up packages these repositories pin (a, b, ...) count as installed: ``--pins`` skips the others."""
    from perfsuite.ab import envs

    real = envs.installed
    monkeypatch.setattr(envs, "installed", lambda: {**real(), **dict.fromkeys(("a", "b", "old", "new", "tool"), "1")})


def test_a_package_this_environment_lacks_is_skipped_saying_so() -> None:
    found = Upgrade(
        "m", "h", "1", "2", ("uv.lock",), (Change("torch", "2.5.0", "2.6.0"), Change("pywin32", "1", "2")), ()
    )
    kept = found.installed_only(["torch"])
    assert kept.changes == (Change("torch", "2.5.0", "2.6.0"),)
    assert kept.skipped == (("pywin32", "not installed in this environment: nothing here imports it"),)


def test_a_poetry_lock_package_from_a_private_index_is_compared(repo: Path) -> None:
    source = 'type = "legacy"\nurl = "https://download.pytorch.org/whl/cpu"\nreference = "pytorch"\n'
    lock = '[[package]]\nname = "torch"\nversion = "{}"\n[package.source]\n' + source
    _bump(repo, {"poetry.lock": lock.format("2.5.0")}, {"poetry.lock": lock.format("2.6.0")})
    assert upgrade("HEAD~1..HEAD", repo).changes == (Change("torch", "2.5.0", "2.6.0"),)


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


def test_show_sides_says_them_and_runs_nothing(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bump(repo, {"requirements.txt": "a==1\nb>=1\n"}, {"requirements.txt": "a==2\nb>=2\n"})
    monkeypatch.chdir(repo)
    monkeypatch.setattr(comparison.AbRun, "start", _never)
    code, out, err = _ab(["--pins", "HEAD~1..HEAD", "--show-sides"], capsys)
    assert code == 0
    assert out == "base: a==1\ncandidate: a==2\n"
    assert "  a 1 → 2" in err
    assert "skipped b: not an exact pin" in err


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
        raise comparison.Failed("candidate: transformers==4.58.0 does not resolve with the installed stack")

    monkeypatch.setattr(comparison.AbRun, "start", start)
    args = ["--pins", "HEAD~1..HEAD", "--device", "cpu", "--models", "tiny-bert", "--strategies", "vanilla"]
    code, _, err = _ab([*args, "--report", "out"], capsys)
    assert code == 3
    assert asked == {"base": "transformers==4.57.6", "candidate": "transformers==4.58.0", "cases": 1}
    summary = (repo / "out" / "summary.md").read_text()
    assert summary.startswith(marker("cpu") + "\n")
    assert NOTHING_COMPARED not in summary
    assert "**cannot test: candidate: transformers==4.58.0 does not resolve" in summary
    assert "- base: `transformers==4.57.6`\n- candidate: `transformers==4.58.0`\n" in summary
    assert "requirements.txt: transformers 4.57.6 → 4.58.0" in summary


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


def test_a_release_pinned_with_and_without_its_local_label_is_one_version(repo: Path) -> None:
    """pyproject.toml pins ``torch==2.5.0`` and uv.lock locks the PyTorch index's ``2.5.0+cpu``: one
    version, the labelled one (what is installed), not two versions that skip the package."""
    lock = '[[package]]\nname = "torch"\nversion = "{}"\n'
    project = '[project]\nname = "t"\nversion = "0"\ndependencies = ["torch=={}"]\n'
    _bump(
        repo,
        {"pyproject.toml": project.format("2.5.0"), "uv.lock": lock.format("2.5.0+cpu")},
        {"pyproject.toml": project.format("2.6.0"), "uv.lock": lock.format("2.6.0+cpu")},
    )
    found = upgrade("HEAD~1..HEAD", repo)
    assert found.changes == (Change("torch", "2.5.0+cpu", "2.6.0+cpu"),)
    assert found.skipped == ()
    _commit(repo, {"pyproject.toml": project.format("2.7.0"), "uv.lock": lock.format("2.6.1+cpu")}, "disagree")
    ((name, why),) = upgrade("HEAD~1..HEAD", repo).skipped
    assert name == "torch"
    assert "head pins 2.6.1+cpu and 2.7.0" in why  # two releases: which one is meant is not ours to guess
