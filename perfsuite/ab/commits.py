"""A git repository's commits as ``perfsuite ab`` and ``bisect`` read them: revisions and ranges
checked, first-parent history between two commits, and a commit's tree written out whole.

Only ``git`` is run, with revisions that cannot be taken for options. Every problem is a
:class:`GitError` whose message starts with the option it came from (``--pins main..HEAD: ...``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
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
    except UnicodeDecodeError:  # a file at a commit (git show REV:PATH) that is not text
        raise GitError(f"{what}: `git {' '.join(args)}` is not UTF-8 text") from None
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
    ``BASE`` alone or ``BASE..`` → BASE..HEAD. No BASE is refused, not read as HEAD as git reads it:
    it is what an empty variable (``"$BASE_SHA...HEAD"``) gives, and HEAD..HEAD compares nothing."""
    base, dots, head = re.split(r"(\.\.\.?)", text, maxsplit=1) if ".." in text else (text, "..", "HEAD")
    if not base.strip():
        raise GitError(f"{what} {text!r}: no BASE before {dots!r}; give BASE..HEAD (main..HEAD, HEAD^1..HEAD)")
    if ".." in head:
        raise GitError(f"{what} {text!r}: one range, two revisions; give BASE..HEAD or BASE...HEAD")
    base, head = base.strip(), head.strip() or "HEAD"
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
        raise GitError(f"{what}: {ref!r} is not a commit of this repository{_shallow(repo)}")
    return done.stdout.strip()


def merge_base(repo: Path, base: str, head: str, what: str) -> str:
    done = git(repo, "merge-base", base, head, what=what)
    if done.returncode != 0:
        raise GitError(f"{what}: no merge base{_shallow(repo)}")
    return done.stdout.strip()


def uncommitted(repo: Path) -> bool:
    """Whether a file git tracks in ``repo`` has changes not committed (staged or not)."""
    done = git(repo, "status", "--porcelain", "--untracked-files=no")
    return done.returncode == 0 and bool(done.stdout.strip())


def _shallow(repo: Path) -> str:
    """What to do where a commit is missing because the clone is shallow (a CI checkout's); ``""`` elsewhere."""
    done = git(repo, "rev-parse", "--is-shallow-repository")
    return " (this clone is shallow: fetch more history)" if done.stdout.strip() == "true" else ""


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
        raise GitError(
            f"{what}: {bad[:12]} has no commit after {good[:12]} on its first-parent history "
            "(--good must be an earlier commit than --bad, one it descends from)"
        )
    return [describe(repo, sha) for sha in shas]


def write_tree(repo: Path, sha: str, into: Path, what: str) -> Path:
    """The files of commit ``sha`` written under ``into``, whole or not at all; returns ``into``.

    Read from git's objects (``ls-tree`` and ``cat-file --batch``): tracked files only, no ``.git``,
    so nothing there runs a hook. A blob the clone lacks (a mirror that leaves out its largest
    files) is left out, not a failure: what a build or an import needs is code. A path that would
    leave ``into`` is refused."""
    partial = into.with_name(f"{into.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    listed = git(repo, "ls-tree", "-r", "-z", "--full-tree", sha, what=what)
    if listed.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise GitError(f"{what}: git cannot list {sha[:12]}: {(listed.stderr.strip().splitlines() or ['?'])[0]}")
    entries = []
    for item in filter(None, listed.stdout.split("\0")):
        meta, _, name = item.partition("\t")
        mode, kind, blob = meta.split()
        if kind != "blob":
            continue  # a submodule's commit: not in this clone
        if name.startswith("/") or ".." in Path(name).parts:
            shutil.rmtree(partial, ignore_errors=True)
            raise GitError(f"{what}: {sha[:12]} names a path outside its tree: {name!r}")
        entries.append((mode, blob, name))
    try:
        _write_blobs(repo, entries, partial)
    except (OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise GitError(f"{what}: writing {sha[:12]}'s files failed: {exc}") from None
    partial.replace(into)
    return into


def _write_blobs(repo: Path, entries: list[tuple[str, str, str]], root: Path) -> None:
    """Each ``(mode, blob, path)`` written under ``root`` from ``git cat-file --batch`` (one process)."""
    with subprocess.Popen(  # noqa: S603 - git, fed object names it listed itself
        ["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as batch:
        assert batch.stdin is not None
        assert batch.stdout is not None
        for mode, blob, name in entries:
            batch.stdin.write(f"{blob}\n".encode())
            batch.stdin.flush()
            header = batch.stdout.readline().decode().split()
            if len(header) < 3 or header[1] != "blob":  # "<sha> missing": left out of a partial clone
                continue
            content = batch.stdout.read(int(header[2]))
            batch.stdout.read(1)  # the newline after each object
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if mode == "120000":
                path.symlink_to(content.decode())
            else:
                path.write_bytes(content)
                if mode == "100755":
                    path.chmod(0o755)
        batch.stdin.close()
