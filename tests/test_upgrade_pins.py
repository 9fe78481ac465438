"""``perfsuite ab --pins BASE..HEAD``: the pins two commits of a git repository differ in, as the two
sides of a comparison (tests/test_upgrade_verdict.py: the command, its summary and the workflows).
Every repository here is a local one, built in the test; nothing is installed or fetched."""

from __future__ import annotations

from pathlib import Path

import pytest
from pin_repos import bump as _bump
from pin_repos import commit as _commit
from pin_repos import made_up_packages_installed, new_repo
from tools import git

from perfsuite.ab.envs import Env, EnvError
from perfsuite.ab.pins import Change, PinError, Upgrade, is_pin_file, split_range, upgrade
from perfsuite.ab.sides import Side

repo = pytest.fixture(new_repo, name="repo")
_packages = pytest.fixture(made_up_packages_installed, autouse=True)


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
    assert [change.describe() for change in found.changes] == ["new 1.0 added", "old removed (was 1.0)"]
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
    assert split_range("main..") == ("main", "HEAD", False)
    with pytest.raises(PinError, match="not a git revision"):
        split_range("--output=x..HEAD")
    # An empty base is an empty variable ("$BASE_SHA...HEAD"), not HEAD: HEAD..HEAD would pass, comparing nothing.
    for empty in ("", " ", "..HEAD", "...HEAD"):
        with pytest.raises(PinError, match="no BASE before"):
            split_range(empty)
    with pytest.raises(PinError, match="one range, two revisions"):
        split_range("a..b..c")


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


def test_a_pin_files_glob_that_names_no_file_is_refused(repo: Path) -> None:
    """A typo in ``--pin-files`` would read nothing: the bump of the file it meant would be "no pin file changed"."""
    _bump(repo, {".github/gpu-pinned.txt": "torch==2.5.0\n"}, {".github/gpu-pinned.txt": "torch==2.6.0\n"})
    assert upgrade("HEAD~1..HEAD", repo, [".github/gpu-pinned.txt"]).files == (".github/gpu-pinned.txt",)
    assert upgrade("HEAD~1..HEAD", repo, [".github/*.txt"]).files == (".github/gpu-pinned.txt",)
    refused = r"^--pin-files .github/gpu-pined.txt, gpu-pinned.txt: no file at \w+ or \w+ matches"
    with pytest.raises(PinError, match=refused):
        upgrade("HEAD~1..HEAD", repo, [".github/gpu-pined.txt", "gpu-pinned.txt", ".github/**"])


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
