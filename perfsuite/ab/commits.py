"""A git repository's commits as ``perfsuite ab`` and ``bisect`` read them: revisions and ranges
checked, first-parent history between two commits, and a commit's tree written out whole.

Only ``git`` is run, with revisions that cannot be taken for options. Every problem is a
:class:`GitError` whose message starts with the option it came from (``--pins main..HEAD: ...``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path


class GitError(ValueError):
    """A revision, range or repository git cannot read as asked: one line saying why."""


def git(repo: Path, *args: str, what: str = "git", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``git -C repo args`` (text), its failures as :class:`GitError` naming ``what``."""
    try:
        return subprocess.run(  # noqa: S603 - git, with revisions checked by split_range
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=timeout
        )
    except FileNotFoundError:
        raise GitError(f"{what} reads the commits with git, which is not installed") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"{what}: git {args[0]} did not answer within {timeout:g} s") from None


def check_repository(repo: Path, what: str) -> Path:
    """The top of the work tree around ``repo``; a :class:`GitError` where there is none."""
    found = git(repo, "rev-parse", "--show-toplevel", what=what)
    if found.returncode != 0:
        why = found.stderr.strip().splitlines()[:1]
        if why and "not a git repository" not in why[0]:  # dubious ownership, say
            raise GitError(f"{what}: git cannot read {repo}: {why[0]}")
        raise GitError(f"{what}: {repo} is not in a git repository")
    return Path(found.stdout.strip())


def check_clone(repo: Path, what: str) -> Path:
    """``repo``, where git reads a repository there (a bare clone included); a :class:`GitError` where not."""
    found = git(repo, "rev-parse", "--git-dir", what=what)
    if found.returncode != 0:
        why = (found.stderr.strip().splitlines() or ["not a git repository"])[0]
        raise GitError(f"{what}: git cannot read {repo}: {why}")
    return repo


def split_range(text: str, what: str) -> tuple[str, str, bool]:
    """``BASE..HEAD`` → (BASE, HEAD, False); ``BASE...HEAD`` → from their merge base (True);
    ``BASE`` alone → BASE..HEAD."""
    base, dots, head = re.split(r"(\.\.\.?)", text, maxsplit=1) if ".." in text else (text, "..", "HEAD")
    base, head = base.strip() or "HEAD", head.strip() or "HEAD"
    for ref in (base, head):
        check_revision(ref, f"{what} {text!r}")
    return base, head, dots == "..."


def check_revision(ref: str, what: str) -> str:
    """``ref``, unless git could take it for an option or it holds a space."""
    if not ref or ref.startswith("-") or any(c.isspace() for c in ref):
        raise GitError(f"{what}: {ref!r} is not a git revision; give BASE..HEAD (main..HEAD, HEAD^1..HEAD)")
    return ref


def commit(repo: Path, ref: str, what: str) -> str:
    """The full hash of the commit ``ref`` names."""
    done = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", what=what)
    if done.returncode != 0:
        raise GitError(f"{what}: {ref!r} is not a commit of this repository (in a shallow clone, fetch more history)")
    return done.stdout.strip()


def merge_base(repo: Path, base: str, head: str, what: str) -> str:
    done = git(repo, "merge-base", base, head, what=what)
    if done.returncode != 0:
        raise GitError(f"{what}: no merge base (in a shallow clone, fetch more history)")
    return done.stdout.strip()


def short(repo: Path, sha: str) -> str:
    return git(repo, "rev-parse", "--short", sha).stdout.strip() or sha[:12]


@dataclass(frozen=True)
class Commit:
    """One commit as a reader sees it."""

    sha: str
    short: str
    subject: str

    @property
    def pull_request(self) -> int | None:
        """The pull request its subject names (``... (#1234)``, ``Merge pull request #1234``), if any."""
        found = re.search(r"(?:\(#|pull request #)(\d+)\)?", self.subject)
        return int(found.group(1)) if found else None

    def describe(self) -> str:
        pr = f" (#{self.pull_request})" if self.pull_request and f"#{self.pull_request}" not in self.subject else ""
        return f"{self.short} {self.subject}{pr}"


def describe(repo: Path, sha: str) -> Commit:
    shown = git(repo, "show", "-s", "--format=%H%x00%h%x00%s", sha).stdout.strip().split("\0")
    if len(shown) != 3:
        return Commit(sha, sha[:12], "")
    return Commit(*shown)


def first_parent_range(repo: Path, good: str, bad: str, what: str) -> list[Commit]:
    """The commits after ``good`` up to ``bad`` along ``bad``'s first parents, oldest first (a merged
    pull request is one step): the candidates a bisection chooses among, ``bad`` last."""
    done = git(repo, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}", what=what)
    if done.returncode != 0:
        raise GitError(f"{what}: git cannot list the commits {good[:12]}..{bad[:12]}")
    shas = done.stdout.split()
    if not shas:
        raise GitError(f"{what}: {bad[:12]} has no commit after {good[:12]} on its first-parent history")
    return [describe(repo, sha) for sha in shas]


def write_tree(repo: Path, sha: str, into: Path, what: str) -> Path:
    """The files of commit ``sha`` written under ``into`` (``git archive``: tracked files only, no
    ``.git``, so nothing there runs a hook), whole or not at all; returns ``into``."""
    partial = into.with_name(f"{into.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with subprocess.Popen(  # noqa: S603 - git, with a checked commit hash
        ["git", "-C", str(repo), "archive", "--format=tar", sha], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as archive:
        assert archive.stdout is not None
        try:
            with tarfile.open(fileobj=archive.stdout, mode="r|") as tar:
                tar.extractall(partial, filter="data")  # a tree's own paths: nothing outside it, no devices
        except tarfile.TarError:
            pass  # git's own message says why
        error = archive.stderr.read().decode(errors="replace").strip() if archive.stderr else ""
    if archive.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise GitError(f"{what}: git archive {sha[:12]} failed: {(error.splitlines() or ['no reason given'])[0]}")
    partial.replace(into)
    return into
