"""The team's own code at a commit, as a side of ``perfsuite ab --base-ref`` / ``--own`` and of
``perfsuite bisect --own``.

A project's model, batch maker and training step are its own code (``[tool.perfsuite]`` names
them). To compare that code at two commits, each side's server runs in a tree of its own: the
commit's files written out whole (:func:`perfsuite.ab.commits.write_tree`) into a temporary
directory, or a copy of the working tree as it is. The server reads that tree's ``pyproject.toml`` (its
declarations: a recipe's batch size changes with the commit too) and imports the project's
modules from it first, ahead of an installed copy of the project, so each side trains its own
commit's code in the same environment. The side's probe says which file each module imports
from, so a reader sees that each side ran its own.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from perfsuite.ab import commits
from perfsuite.ab.envs import Env
from perfsuite.core.changed_code import ChangedCode, changed_code, python_files
from perfsuite.core.declaration import find_pyproject
from perfsuite.core.provenance import files_differ, said_files, untracked

WORKING_TREE = "the working tree"


@dataclass(frozen=True)
class Tree:
    """A side's copy of the project: where its server runs and what it imports first."""

    label: str
    """``main (1a2b3c4 Add the head)`` or ``the working tree``."""
    project: Path
    """The directory of the tree's ``pyproject.toml`` (the server's working directory)."""
    commit: commits.Commit | None = None
    """The commit it holds (``None``: the working tree, uncommitted changes included)."""

    @property
    def paths(self) -> tuple[str, ...]:
        """What goes first on the path of code run from this tree: the project's root, and a ``src/`` layout's."""
        return (str(self.project), *([str(self.project / "src")] if (self.project / "src").is_dir() else []))

    def env(self, env: Env) -> Env:
        """``env`` running in this tree: its :attr:`paths` first on the path."""
        return dataclasses.replace(
            env, label=f"{env.label}, {self.label}", path=(*self.paths, *env.path), cwd=str(self.project)
        )


@contextmanager
def importing_from(tree: Tree | None) -> Iterator[None]:
    """While a commit's declarations are read and its code checked in this process (``tree``: that
    commit's copy; ``None``: the working tree, as it is), its copy comes first on the path, as on a
    side that runs it, and the working tree's is off it: its code has no say in what a commit declares.
    A ``ValueError`` raised meanwhile names the commit, and its files from the project's directory."""
    if tree is None:
        yield
        return
    here = project_root().resolve()
    skipped = {here, here / "src"}
    kept = list(sys.path)
    sys.path[:] = [*tree.paths, *(p for p in kept if Path(p or ".").resolve() not in skipped)]
    try:
        yield
    except ValueError as exc:  # what the commit declares, named by the commit, not by its copy (removed after)
        said = str(exc).replace(f"{tree.project}{os.sep}", "")
        raise ValueError(f"{tree.label}: {said}") from None
    finally:
        sys.path[:] = kept


def project_root(start: Path | None = None) -> Path:
    """The project around ``start`` (the working directory): its ``pyproject.toml``'s directory."""
    found = find_pyproject(start or Path.cwd())
    if found is None:
        raise commits.GitError(f"no pyproject.toml at or above {start or Path.cwd()}: run this in the project")
    return found.parent


@contextmanager
def trees(refs: list[str | None], what: str, start: Path | None = None) -> Iterator[list[Tree]]:
    """One :class:`Tree` per revision in ``refs`` (``None``: the working tree, copied as it is), each
    written into a temporary directory removed on exit."""
    project = project_root(start)
    top = commits.check_repository(project, what)
    inside = project.resolve().relative_to(top.resolve())
    scratch = Path(tempfile.mkdtemp(prefix="perfsuite-own-"))
    try:
        made = []
        for ref in refs:
            if ref is None:
                head = commits.describe(top, commits.commit(top, "HEAD", what))
                root = _copy_working_tree(top, scratch / f"working-tree-{head.sha[:27]}", what)
                made.append(Tree(code_label(top, None, what), root / inside))
                continue
            found = commits.describe(top, commits.commit(top, commits.check_revision(ref, what), what))
            # A commit before the project had a pyproject.toml (the pull request adopting perfsuite's base)
            # declares nothing: each case the other side declares is new there, as for one without [tool.perfsuite].
            tree = at_commit(top, found, inside, scratch, what, declares_nothing=True)
            made.append(dataclasses.replace(tree, label=code_label(top, ref, what)))
        yield made
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def code_label(top: Path, ref: str | None, what: str) -> str:
    """How a side's code is named: ``<ref> (<short> <subject>)`` (``<short> <subject>`` where ``ref`` is
    its sha), or the working tree with the commit it is at and whether it has uncommitted changes
    (``ref`` ``None``)."""
    if ref is not None:
        sha = commits.commit(top, ref, what)
        described = commits.describe(top, sha).describe()
        by_sha = re.fullmatch(r"[0-9a-fA-F]{4,40}", ref) and sha.startswith(ref.lower())  # a sha, or a merge base's
        return described if by_sha else f"{ref} ({described})"
    head = commits.describe(top, commits.commit(top, "HEAD", what))
    changed = commits.git(top, "status", "--porcelain", "--untracked-files=no", what=what).stdout.strip()
    return f"{WORKING_TREE} ({head.describe()}{', with uncommitted changes' if changed else ''})"


def _copy_working_tree(top: Path, into: Path, what: str) -> Path:
    """The working tree's files as they are (tracked ones, changed or not, and the
    :func:`~perfsuite.core.provenance.untracked` ones) copied under ``into``: a directory of the same
    length as a commit's beside it.

    Each side's server runs in, and imports from, a directory of one length: the length of a
    process's paths moves where its allocations land and so a step's time, by a few percent the same
    way in every run (an A/A of a team's convnet, the working tree in place against a commit's copy,
    called a case 4-6% faster at 120 pairs)."""
    listed = commits.git(top, "ls-files", "-z", "--cached", what=what)
    added = untracked(top)
    if listed.returncode != 0 or added is None:
        raise commits.GitError(f"{what}: git cannot list the working tree's files")
    for name in [*filter(None, listed.stdout.split("\0")), *added]:
        source = top / name
        if not source.is_file() and not source.is_symlink():
            continue  # deleted in the working tree
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(source.readlink())
        else:
            shutil.copy2(source, target)
    return into


def at_commit(
    top: Path, found: commits.Commit, inside: Path, scratch: Path, what: str, *, declares_nothing: bool = False
) -> Tree:
    """The tree of ``found`` (a commit of the repository at ``top``) under ``scratch``, its project at ``inside``.
    A commit without ``inside``'s ``pyproject.toml`` is refused, or with ``declares_nothing`` given an empty
    one in its copy (no ``pyproject.toml`` above the scratch directory is read as its)."""
    root = scratch / found.sha
    if not root.is_dir():  # written once, whichever side asks first
        commits.write_tree(top, found.sha, root, what)
    pyproject = root / inside / "pyproject.toml"
    if not pyproject.is_file() and declares_nothing:
        pyproject.parent.mkdir(parents=True, exist_ok=True)
        pyproject.write_text(f"# {found.short} has no pyproject.toml: it declares nothing to perfsuite\n")
    if not pyproject.is_file():
        raise commits.GitError(f"{what}: {found.short} has no {inside / 'pyproject.toml'}")
    return Tree(found.describe(), root / inside, found)


def changes(top: Path, refs: list[str | None], names: list[str], inside: str, what: str) -> ChangedCode:
    """The project's Python files among ``names`` (the files that differ between the revisions
    ``refs``, from the repository's top; ``inside``: the project's directory from there) and the
    functions the change touches in each: each side's text and the one-file diff, read from git (the
    working tree's from disk). A file git cannot read (or whose text is not UTF-8) is watched as a file."""
    base, head = refs
    assert base is not None  # a base is always a commit
    files = python_files(names, inside)
    sides: dict[str, tuple[str | None, str | None, str]] = {}
    for name in files:
        path = f"{inside}/{name}" if inside not in ("", ".") else name
        try:
            texts = [_text(top, base, path, what), _text(top, head, path, what)]
            diff = commits.git(
                top,
                "diff",
                "-U0",
                "--no-color",
                "--no-ext-diff",
                "--no-renames",
                base,
                *filter(None, [head]),
                "--",
                path,
                what=what,
            )
        except (commits.GitError, UnicodeDecodeError, OSError):
            continue
        sides[name] = (texts[0], texts[1], diff.stdout if diff.returncode == 0 else "")
    found = changed_code(sides)  # a file git could not read is watched as a file
    return ChangedCode(tuple(f for f in files if f not in sides or f in found.files), found.functions, found.same)


def changed_between(top: Path, good: str, bad: str, inside: Path, what: str) -> ChangedCode:
    """What the project's Python code changes from the commit ``good`` to ``bad`` (``perfsuite bisect --own``'s
    ends): its files and the functions the change touches, watched in the ends' comparison."""
    names = files_differ(top, good, bad)
    return changes(top, [good, bad], names, inside.as_posix(), what) if names else ChangedCode()


def _text(top: Path, revision: str | None, path: str, what: str) -> str | None:
    """``path`` at ``revision`` (``None``: the working tree), or ``None`` where it is not there."""
    if revision is None:
        file = top / path
        return file.read_text() if file.is_file() else None
    shown = commits.git(top, "cat-file", "blob", f"{revision}:{path}", what=what)
    return shown.stdout if shown.returncode == 0 else None


def differing_code(refs: list[str | None]) -> tuple[str, ChangedCode]:
    """Which files of the project's repository differ between the sides' code (the revisions ``refs``;
    ``None``: the working tree), said before anything runs (a reader sees what the comparison is of),
    and what the change does to the project's Python files (watched in each case's step)."""
    base, head = refs
    assert base is not None  # a base is always a commit
    top = commits.check_repository(project_root(), "--base-ref")
    names = files_differ(top, base, head)
    # --own compares two commits: what is not committed yet is in neither side.
    left = "; the working tree's uncommitted changes are in neither (--base-ref compares them)"
    left = left if head is not None and commits.uncommitted(top) else ""
    if names is None:
        return f"perfsuite ab: git cannot tell which files differ between the sides' code{left}", ChangedCode()
    if not names:
        return f"perfsuite ab: no file differs between the sides' code (an A/A){left}", ChangedCode()
    inside = project_root().resolve().relative_to(top.resolve()).as_posix()
    changed = changes(top, refs, names, inside, "--base-ref")
    return f"perfsuite ab: the sides' code differs in {said_files(names)}{left}", changed
