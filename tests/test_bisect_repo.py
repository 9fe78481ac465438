"""``perfsuite bisect PACKAGE --repo CLONE``: from two releases to the commit between them that changed
a case, each commit built from the clone, in a package repository the test makes.

The package is ``acmeops``, the loss a team's step trains with (tests/team_repo.py): between its
tags v1.0 and v1.1 one commit keeps a scratch buffer (memory), the next breaks its build (stepped
around: both searches try it first) and the one after mends it, then one sums the loss instead of
averaging it (loss). Memory and loss
are decided at a pair's first run, so each search is a few builds and one pair a commit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from team_repo import ACME, DECLARED, OWN_CODE, write_declared_models, write_own_code, write_pyproject
from tools import git

from perfsuite.cli import main as cli
from perfsuite.core import registry

# Nightly: a build a commit and a pair each, 25 s a search on 2 cores; per push, `bisect --own`
# (tests/test_own_ab.py) walks commits through the same search.
pytestmark = [pytest.mark.cpu, pytest.mark.slow, pytest.mark.nightly]

LOSS = '''"""acmeops: the loss acme trains with."""

import torch
from torch.nn import functional

__version__ = "1.0"
SCRATCH: list[torch.Tensor] = []


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # BUFFER
    return functional.cross_entropy(logits, labels, reduction="mean")
'''
PYPROJECT = """[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "acmeops"
version = "1.0"

[tool.setuptools]
packages = ["acmeops"]
"""
BUFFER = (
    "    # BUFFER\n",
    "    if not SCRATCH:  # a scratch buffer kept from the first call on\n"
    "        SCRATCH.append(torch.zeros(1 << 20))\n",
)
SUM = ('reduction="mean"', 'reduction="sum"')


def _clone(root: Path) -> dict[str, str]:
    """The package's repository; its commits' hashes by what they did."""
    (root / "acmeops").mkdir(parents=True)
    (root / "acmeops" / "__init__.py").write_text(LOSS)
    (root / "pyproject.toml").write_text(PYPROJECT)
    git(root, "init", "-q", "-b", "main")
    shas = {"v1.0": _commit(root, "Release 1.0", tag="v1.0")}
    shas["buffer"] = _commit(root, "Keep a scratch buffer (#11)", edit=("acmeops/__init__.py", *BUFFER))
    shas["broken"] = _commit(root, "Move to a new build backend", edit=("pyproject.toml", "[project]", "[project"))
    shas["mended"] = _commit(root, "Mend the build", edit=("pyproject.toml", "[project\n", "[project]\n"))
    shas["sum"] = _commit(root, "Sum the loss over the batch (#12)", edit=("acmeops/__init__.py", *SUM))
    shas["v1.1"] = _commit(
        root, "Release 1.1 (#13)", edit=("README.md", None, "The loss acme trains with.\n"), tag="v1.1"
    )
    return shas


def _commit(root: Path, subject: str, edit: tuple[str, str | None, str] | None = None, tag: str | None = None) -> str:
    if edit is not None:
        path, old, new = root / edit[0], edit[1], edit[2]
        text = path.read_text() if path.exists() else ""
        path.write_text(text + new if old is None else text.replace(old, new))
    git(root, "add", "-A")
    git(root, "-c", "user.email=ops@example.com", "-c", "user.name=Ops", "commit", "-q", "-m", subject)
    if tag:
        git(root, "tag", tag)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The team's repository (its step's loss from acmeops 1.0, on the path) and acmeops' clone beside it."""
    root = tmp_path / "team"
    root.mkdir()
    write_declared_models(root)
    write_own_code(root, monkeypatch)
    write_pyproject(root)
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + DECLARED + OWN_CODE)
    monkeypatch.chdir(root)
    monkeypatch.setenv("PERFSUITE_CACHE", str(tmp_path / "cache"))  # builds of this test's commits only
    return tmp_path


@pytest.mark.parametrize(("metric", "culprit"), [("memory", "buffer"), ("loss", "sum")])
def test_bisect_repo_names_the_commit_that_changed_the_case(
    project: Path, capsys: pytest.CaptureFixture[str], metric: str, culprit: str
) -> None:
    shas = _clone(project / "acmeops")
    # A bare clone, as a mirror is: nothing is checked out, every commit is read from git.
    git(project, "clone", "-q", "--bare", str(project / "acmeops"), str(project / "acmeops.git"))
    out = project / f"{metric}.json"
    saved = registry.snapshot()
    try:
        code = cli(
            [
                "bisect",
                "acmeops",
                "--repo",
                str(project / "acmeops.git"),
                "--commits",
                "--good",
                "v1.0",
                "--bad",
                "v1.1",
            ]
            + ["--case", ACME["vanilla"], "--metric", metric, "--steps", "4", "--json", str(out)]
        )
    finally:
        registry.restore(saved)
    err = capsys.readouterr().err
    assert code == 0, err
    short = git(project / "acmeops", "rev-parse", "--short", shas[culprit])
    subject = {"buffer": "Keep a scratch buffer (#11)", "sum": "Sum the loss over the batch (#12)"}[culprit]
    assert f"perfsuite: the first bad acmeops commit is {short} {subject}" in err
    found = json.loads(out.read_text())
    assert found["first_bad"] == short
    order = {git(project / "acmeops", "rev-parse", "--short", sha): name for name, sha in shas.items()}
    names = list(shas)
    for step in found["steps"]:  # each commit tested: good before the culprit, bad from it on, the broken one neither
        name = order[step["version"]]
        expected = "cannot" if name == "broken" else "bad" if names.index(name) >= names.index(culprit) else "good"
        assert step["judgement"] == expected, (name, step)
    assert "broken" in [order[step["version"]] for step in found["steps"]]  # tried, and stepped around
    # and why, against the commit before it: the buffer by the global that holds it; the loss a scale
    why = err[err.index("perfsuite: why: ") :]
    expected = {
        "buffer": "new other acmeops.SCRATCH[0] (float32 (1048576,), 4.00 MiB)",
        "sum": "a scale of the loss",
    }[culprit]
    assert expected in why, why


def test_a_clone_without_the_tag_is_one_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _clone(project / "acmeops")
    saved = registry.snapshot()
    try:
        code = cli(
            ["bisect", "acmeops", "--repo", str(project / "acmeops"), "--commits", "--good", "v0.9", "--bad", "v1.1"]
            + ["--case", ACME["vanilla"], "--metric", "memory"]
        )
    finally:
        registry.restore(saved)
    assert code == 2
    assert "'v0.9' is not a commit of this repository" in capsys.readouterr().err
