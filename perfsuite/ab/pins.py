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
and ``[tool.uv]``'s lists, and ``uv.lock`` and ``poetry.lock`` package versions (the lock's
registry packages; one listed for other platforms only is left out). Only git and packaging are
used; nothing is installed.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from perfsuite.ab.envs import NOT_RESOLVED

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PIN_FILES = (
    "**/*requirements*.txt",
    "**/requirements/*.txt",
    "**/*constraints*.txt",
    "**/pyproject.toml",
    "**/uv.lock",
    "**/poetry.lock",
)
"""The files read, as GitHub's ``paths`` filters write them (the upgrade workflows list the same)."""


class PinError(Exception):
    """Refs or files that cannot be read: one line saying why."""


@dataclass(frozen=True)
class Pin:
    """One requirement as a file at one commit states it."""

    name: str
    """The normalised distribution name."""
    text: str
    """As written (``transformers>=4.46``), or ``name==version`` from a lock."""
    source: str
    """The file, and the table within it."""
    version: str | None = None
    """The exact version (``==``/``===``, no wildcard); ``None`` for a range, a URL or a path."""
    applies: bool = True
    """Its marker holds on this interpreter (a lock's: one of its resolution markers)."""


@dataclass(frozen=True)
class Change:
    """A package whose exact pin moved: ``None`` on the side that does not pin it."""

    name: str
    base: str | None
    head: str | None

    def describe(self) -> str:
        if self.base is None:
            return f"{self.name} added, {self.head}"
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
        files = ", ".join(self.files) or "no pin file"
        out = [f"perfsuite ab: {self.span}: {len(self.changes)} exact pin(s) changed ({files})"]
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
    base, dots, head = re.split(r"(\.\.\.?)", text, maxsplit=1) if ".." in text else (text, "..", "HEAD")
    base, head = base.strip() or "HEAD", head.strip() or "HEAD"
    for ref in (base, head):
        if ref.startswith("-") or any(c.isspace() for c in ref):
            raise PinError(
                f"--pins {text!r}: {ref!r} is not a git revision; give BASE..HEAD (main..HEAD, HEAD^1..HEAD)"
            )
    return base, head, dots == "..."


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(  # noqa: S603 - git, with refs checked by split_range
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError:
        raise PinError("--pins reads the commits with git, which is not installed") from None


def _commit(repo: Path, ref: str, spec: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise PinError(
            f"--pins {spec}: {ref!r} is not a commit of this repository (in a shallow clone, fetch more history)"
        )
    return done.stdout.strip()


def _short(repo: Path, commit: str) -> str:
    return _git(repo, "rev-parse", "--short", commit).stdout.strip() or commit[:12]


def _show(repo: Path, commit: str, path: str) -> str | None:
    """The file at that commit, or ``None`` where it does not exist there."""
    done = _git(repo, "cat-file", "blob", f"{commit}:{path}")
    return done.stdout if done.returncode == 0 else None


def _applies(marker: Marker | str | None) -> bool:
    if marker is None:
        return True
    try:
        return (marker if isinstance(marker, Marker) else Marker(marker)).evaluate()
    except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
        return True  # a marker this packaging cannot judge: read the pin rather than lose it


def requirement_pin(text: str, source: str) -> Pin | None:
    """One requirement string as a :class:`Pin` (``None`` when it is not one)."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return None
    specifiers = list(requirement.specifier)
    version = None
    if requirement.url is None and len(specifiers) == 1:
        only = specifiers[0]
        if only.operator == "===" or (only.operator == "==" and not only.version.endswith(".*")):
            version = only.version
    return Pin(canonicalize_name(requirement.name), text.strip(), source, version, _applies(requirement.marker))


_INCLUDE = re.compile(r"^(?:-[rc]\s*|--(?:requirement|constraint)(?:\s*=\s*|\s+))(\S+)$")


def requirements_pins(
    path: str, text: str, read: Callable[[str], str | None], seen: set[str] | None = None
) -> list[Pin]:
    """A requirements file's pins, its ``-r``/``-c`` includes within the repository followed
    (``read`` gives a file at the same commit)."""
    seen = seen if seen is not None else set()
    seen.add(path)
    pins: list[Pin] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        include = _INCLUDE.match(line)
        if include:
            target = posixpath.normpath(posixpath.join(posixpath.dirname(path), include.group(1)))
            if "://" in include.group(1) or target.startswith(("../", "/")) or target in seen:
                continue
            included = read(target)
            if included is not None:
                pins += requirements_pins(target, included, read, seen)
            continue
        if not line or line.startswith("-"):
            continue  # an option (--index-url, -e, --hash on a line of its own)
        pin = requirement_pin(re.split(r"\s+--?[A-Za-z]", line, maxsplit=1)[0], path)
        if pin is not None:
            pins.append(pin)
    return pins


def _toml(path: str, text: str) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PinError(f"{path} is not valid TOML ({exc})") from None
    return data


def pyproject_pins(path: str, text: str) -> list[Pin]:
    """``[project]`` dependencies and optional dependencies, ``[dependency-groups]``, ``[tool.uv]``'s lists."""
    data = _toml(path, text)
    project = data.get("project", {})
    lists: dict[str, Any] = {"[project] dependencies": project.get("dependencies", [])}
    for table, groups in (
        ("[project.optional-dependencies]", project.get("optional-dependencies", {})),
        ("[dependency-groups]", data.get("dependency-groups", {})),
    ):
        lists.update({f"{table} {group}": items for group, items in groups.items()})
    uv = data.get("tool", {}).get("uv", {})
    for key in ("dev-dependencies", "constraint-dependencies", "override-dependencies"):
        lists[f"[tool.uv] {key}"] = uv.get(key, [])
    pins = []
    for where, items in lists.items():
        for item in items if isinstance(items, list) else []:
            pin = requirement_pin(item, f"{path} {where}") if isinstance(item, str) else None
            if pin is not None:  # an {include-group = ...} table includes what is read anyway
                pins.append(pin)
    return pins


_NOT_FROM_AN_INDEX = ("git", "url", "path", "directory", "file")


def lock_pins(path: str, text: str) -> list[Pin]:
    """``uv.lock``'s or ``poetry.lock``'s ``[[package]]`` versions; the project itself (editable,
    virtual) is left out, and a package from git, a URL or a path is kept without a version."""
    pins = []
    for package in _toml(path, text).get("package", []):
        name, version, source = package.get("name"), package.get("version"), package.get("source") or {}
        if not name or not version or "editable" in source or "virtual" in source:
            continue
        origin = next((k for k in _NOT_FROM_AN_INDEX if k in source), None) or (
            source.get("type") if source.get("type") in _NOT_FROM_AN_INDEX else None
        )
        markers = package.get("resolution-markers") or []
        applies = not markers or any(_applies(m) for m in markers)
        text_ = f"{name}=={version}" + (f" from {origin}" if origin else "")
        pins.append(Pin(canonicalize_name(name), text_, path, None if origin else version, applies))
    return pins


def file_pins(path: str, read: Callable[[str], str | None]) -> list[Pin]:
    """The pins of the file ``path`` as ``read`` gives it (none where it does not exist)."""
    text = read(path)
    if text is None:
        return []
    name = posixpath.basename(path)
    if name == "pyproject.toml":
        return pyproject_pins(path, text)
    if name.endswith(".lock"):
        return lock_pins(path, text)
    return requirements_pins(path, text, read)


def _texts(pins: Iterable[Pin]) -> str:
    return ", ".join(sorted({f"{p.text} ({p.source})" for p in pins})) or "nothing"


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
        va, vb = {p.version for p in a if p.version}, {p.version for p in b if p.version}
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


def upgrade(spec: str, repo: Path | None = None, extra_files: Iterable[str] = ()) -> Upgrade:
    """What ``--pins spec`` compares in the git repository around ``repo`` (the working directory)."""
    repo = repo or Path.cwd()
    base_ref, head_ref, from_merge_base = split_range(spec)
    found = _git(repo, "rev-parse", "--git-dir")
    if found.returncode != 0:
        why = found.stderr.strip().splitlines()[:1]
        if why and "not a git repository" not in why[0]:  # dubious ownership, say
            raise PinError(f"--pins {spec}: git cannot read {repo}: {why[0]}")
        raise PinError(f"--pins {spec}: {repo} is not in a git repository")
    base, head = _commit(repo, base_ref, spec), _commit(repo, head_ref, spec)
    if from_merge_base:
        done = _git(repo, "merge-base", base, head)
        if done.returncode != 0:
            raise PinError(f"--pins {spec}: no merge base (in a shallow clone, fetch more history)")
        base = done.stdout.strip()
    extra = tuple(extra_files)
    diff = _git(repo, "diff", "--name-only", "--no-renames", "-z", base, head, "--")
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
            raise PinError(f"--pins {spec}: at {_short(repo, commit)}, {exc}") from None
    changes, skipped = compare(*sides)
    return Upgrade(base_ref, head_ref, _short(repo, base), _short(repo, head), files, tuple(changes), tuple(skipped))
