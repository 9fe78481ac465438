"""The dependency pins two commits differ in, as the two sides of ``perfsuite ab --pins BASE..HEAD``.

A pull request that bumps a pin (Dependabot's, Renovate's or a person's) changes a requirements
file, ``pyproject.toml`` or a lock file. This reads each pin file the two commits differ in, at
both commits (``git cat-file blob REF:PATH``), and keeps the packages whose *exact* pin (``==``) moved, was
added or was removed: the base side is their versions at BASE, the candidate their versions at
HEAD, each laid over this environment as an overlay (:mod:`perfsuite.ab.envs`), so the two sides
differ in what the commits changed and in nothing else. A range (``>=4.46``) names no version to
compare; a changed one is reported as skipped, with why, and so is a pin whose marker does not
hold on this interpreter.

Read: requirements files (``-r`` and ``-c`` includes within the repository followed), a
``pyproject.toml``'s ``[project]`` dependencies and optional dependencies, ``[dependency-groups]``
and ``[tool.uv]``'s lists, and ``uv.lock`` and ``poetry.lock`` package versions (:mod:`perfsuite.ab.pinfiles`).
A package this environment does not have (a lock's package for another platform, a tool nothing
here imports) is skipped, saying so (:meth:`Upgrade.installed_only`). Only git and packaging are
used; nothing is installed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from perfsuite.ab import commits
from perfsuite.ab.envs import NOT_RESOLVED
from perfsuite.ab.pinfiles import Pin, PinError, file_pins

__all__ = ["PIN_FILES", "Change", "Pin", "PinError", "Upgrade", "compare", "is_pin_file", "split_range", "upgrade"]


PIN_FILES = (
    "**/*requirements*.txt",
    "**/requirements/*.txt",
    "**/*constraints*.txt",
    "**/pyproject.toml",
    "**/uv.lock",
    "**/poetry.lock",
)
"""The files read, as GitHub's ``paths`` filters write them (the upgrade workflows list the same)."""


@dataclass(frozen=True)
class Change:
    """A package whose exact pin moved: ``None`` on the side that does not pin it."""

    name: str
    base: str | None
    head: str | None

    def describe(self) -> str:
        if self.base is None:
            return f"{self.name} {self.head} added"
        if self.head is None:
            return f"{self.name} removed (was {self.base})"
        return f"{self.name} {self.base} → {self.head}"


@dataclass(frozen=True)
class Upgrade:
    """What the commits BASE..HEAD change in the pins, and the two sides that compare it."""

    base_ref: str
    head_ref: str
    base_commit: str
    head_commit: str
    files: tuple[str, ...]
    """The pin files the commits differ in."""
    changes: tuple[Change, ...]
    skipped: tuple[tuple[str, str], ...]
    """(package, why) for each changed requirement that is not compared."""

    def installed_only(self, installed: Iterable[str]) -> Upgrade:
        """The changes of packages this environment has; the others (a lock's packages for other
        platforms, a tool nothing here imports) skipped, saying so."""
        have = {canonicalize_name(name) for name in installed}
        gone = tuple(
            (c.name, "not installed in this environment: nothing here imports it")
            for c in self.changes
            if c.name not in have
        )
        kept = tuple(c for c in self.changes if c.name in have)
        return replace(self, changes=kept, skipped=self.skipped + gone)

    def side(self, which: str) -> str:
        """``--base``/``--candidate``'s text: the side's pins, or ``current`` when it pins none of them."""
        pins = [f"{c.name}=={getattr(c, which)}" for c in self.changes if getattr(c, which) is not None]
        return ",".join(pins) or "current"

    @property
    def base(self) -> str:
        return self.side("base")

    @property
    def candidate(self) -> str:
        return self.side("head")

    @property
    def span(self) -> str:
        return f"{self.base_ref} ({self.base_commit}) → {self.head_ref} ({self.head_commit})"

    def lines(self) -> list[str]:
        """For the reader: the files, each change, each package skipped and why."""
        files = f" ({', '.join(self.files)})" if self.files else ": no pin file changed"
        out = [f"perfsuite ab: {self.span}: {len(self.changes)} exact pin(s) changed{files}"]
        out += [f"  {change.describe()}" for change in self.changes]
        out += [f"  skipped {name}: {why}" for name, why in self.skipped]
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "base_ref": self.base_ref,
            "head_ref": self.head_ref,
            "base_commit": self.base_commit,
            "head_commit": self.head_commit,
            "files": list(self.files),
            "changes": [{"name": c.name, "base": c.base, "head": c.head} for c in self.changes],
            "moved": [c.describe() for c in self.changes],
            "skipped": [{"name": name, "why": why} for name, why in self.skipped],
            "base": self.base,
            "candidate": self.candidate,
        }


def _glob(pattern: str) -> re.Pattern[str]:
    """A ``paths`` filter as a regex: ``**/`` any directories (none included), ``**`` anything below,
    ``*`` and ``?`` within one name."""
    out = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
    return re.compile(out.replace(r"\*", "[^/]*").replace(r"\?", "[^/]"))


def is_pin_file(path: str, extra: Iterable[str] = ()) -> bool:
    """Whether ``path`` (relative to the repository) is read for pins: :data:`PIN_FILES` or ``extra``."""
    return any(_glob(pattern).fullmatch(path) for pattern in (*PIN_FILES, *extra))


def split_range(text: str) -> tuple[str, str, bool]:
    """``BASE..HEAD`` → (BASE, HEAD, False); ``BASE...HEAD`` → from their merge base (True);
    ``BASE`` alone → BASE..HEAD."""
    try:
        return commits.split_range(text, "--pins")
    except commits.GitError as exc:
        raise PinError(str(exc)) from None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return commits.git(repo, *args, what="--pins")
    except commits.GitError as exc:
        raise PinError(str(exc)) from None


def _show(repo: Path, commit: str, path: str) -> str | None:
    """The file at that commit, or ``None`` where it does not exist there."""
    done = _git(repo, "cat-file", "blob", f"{commit}:{path}")
    return done.stdout if done.returncode == 0 else None


def _texts(pins: Iterable[Pin]) -> str:
    return ", ".join(sorted({f"{p.text} ({p.source})" for p in pins})) or "nothing"


def _one_release(versions: set[str]) -> set[str]:
    """One release pinned twice, once with a local label (``2.5.0`` in pyproject.toml, ``2.5.0+cpu``
    in uv.lock, as the PyTorch index names its builds) is the labelled version: the one installed."""
    try:
        parsed = {Version(v) for v in versions}
    except InvalidVersion:
        return versions
    labelled = {v for v in parsed if v.local}
    if len(versions) > 1 and len({v.public for v in parsed}) == 1 and len(labelled) == 1:
        return {str(labelled.pop())}
    return versions


def compare(base: list[Pin], head: list[Pin]) -> tuple[list[Change], list[tuple[str, str]]]:
    """The packages whose exact pin moved, was added or removed, and every other changed one, skipped with why."""
    changes: list[Change] = []
    skipped: list[tuple[str, str]] = []
    by_name: dict[str, tuple[list[Pin], list[Pin]]] = {}
    for index, pins in enumerate((base, head)):
        for pin in pins:
            by_name.setdefault(pin.name, ([], []))[index].append(pin)
    for name, (a_all, b_all) in sorted(by_name.items()):
        if set(a_all) == set(b_all):
            continue
        a, b = [p for p in a_all if p.applies], [p for p in b_all if p.applies]
        if {(p.source, p.text) for p in a} == {(p.source, p.text) for p in b}:
            skipped.append((name, "changed only where its marker does not hold on this interpreter"))
            continue
        if name in NOT_RESOLVED:
            skipped.append((name, "an installer or perfsuite itself: both sides run this environment's"))
            continue
        va, vb = (_one_release({p.version for p in pins if p.version}) for pins in (a, b))
        several = [f"{side} pins {' and '.join(sorted(v))}" for side, v in (("base", va), ("head", vb)) if len(v) > 1]
        if several:
            skipped.append((name, f"pinned to several versions ({'; '.join(several)}): {_texts(a + b)}"))
        elif va and vb:
            if va != vb:
                changes.append(Change(name, va.pop(), vb.pop()))
        elif (va and b) or (vb and a):
            skipped.append((name, f"an exact pin on one side only: {_texts(a)} → {_texts(b)}"))
        elif va or vb:
            changes.append(Change(name, va.pop() if va else None, vb.pop() if vb else None))
        else:
            skipped.append((name, f"not an exact pin: {_texts(a)} → {_texts(b)}"))
    return changes, skipped


def _check_globs(repo: Path, spec: str, globs: tuple[str, ...], sides: tuple[str, str]) -> None:
    """Each ``--pin-files`` glob names a file at BASE or HEAD: one that names none (a typo, a moved
    file) would read nothing, and a bump of the file it meant would pass as "no pin file changed"."""
    if not globs:
        return
    paths: set[str] = set()
    for commit in sides:
        listed = _git(repo, "ls-tree", "-r", "--name-only", "-z", commit)
        if listed.returncode != 0:
            reason = (listed.stderr.strip().splitlines() or ["no reason given"])[0]
            raise PinError(f"--pins {spec}: git could not list the files at {commits.short(repo, commit)}: {reason}")
        paths.update(f for f in listed.stdout.split("\0") if f)
    patterns = [(glob, _glob(glob)) for glob in globs]
    unmatched = [glob for glob, pattern in patterns if not any(map(pattern.fullmatch, paths))]
    if unmatched:
        at = " or ".join(dict.fromkeys(commits.short(repo, c) for c in sides))
        raise PinError(
            f"--pin-files {', '.join(unmatched)}: no file at {at} matches "
            f"(globs are paths from the repository's root, as GitHub's paths filters write them)"
        )


def upgrade(spec: str, repo: Path | None = None, extra_files: Iterable[str] = ()) -> Upgrade:
    """What ``--pins spec`` compares in the git repository around ``repo`` (the working directory)."""
    repo = repo or Path.cwd()
    base_ref, head_ref, from_merge_base = split_range(spec)
    what = f"--pins {spec}"
    try:
        commits.check_repository(repo, what)
        base, head = commits.commit(repo, base_ref, what), commits.commit(repo, head_ref, what)
        if from_merge_base:
            base = commits.merge_base(repo, base, head, what)
    except commits.GitError as exc:
        raise PinError(str(exc)) from None
    extra = tuple(extra_files)
    _check_globs(repo, spec, extra, (base, head))
    diff = _git(repo, "diff", "--name-only", "--no-renames", "-z", base, head, "--")
    if diff.returncode != 0:
        reason = (diff.stderr.strip().splitlines() or ["no reason given"])[0]
        raise PinError(f"--pins {spec}: git could not list the files the commits differ in: {reason}")
    files = tuple(f for f in diff.stdout.split("\0") if f and is_pin_file(f, extra))
    sides: list[list[Pin]] = []
    for commit in (base, head):
        cache: dict[str, str | None] = {}

        def read(path: str, commit: str = commit, cache: dict[str, str | None] = cache) -> str | None:
            if path not in cache:
                cache[path] = _show(repo, commit, path)
            return cache[path]

        try:
            sides.append([pin for path in files for pin in file_pins(path, read)])
        except PinError as exc:
            raise PinError(f"--pins {spec}: at {commits.short(repo, commit)}, {exc}") from None
    changes, skipped = compare(*sides)
    return Upgrade(
        base_ref, head_ref, commits.short(repo, base), commits.short(repo, head), files, tuple(changes), tuple(skipped)
    )
