"""Small git repositories whose commits bump pins, for the tests of ``perfsuite ab --pins``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools import git


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(tmp_path: Path) -> Path:
    """An empty git repository."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    return path


def bump(repo: Path, before: dict[str, str], after: dict[str, str]) -> None:
    commit(repo, before, "base")
    commit(repo, after, "bump")


def made_up_packages_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The made-up packages these repositories pin (a, b, ...) count as installed: ``--pins`` skips the others."""
    from perfsuite.ab import envs

    real = envs.installed
    monkeypatch.setattr(envs, "installed", lambda: {**real(), **dict.fromkeys(("a", "b", "old", "new", "tool"), "1")})
