"""The pins one file states at one commit (:class:`Pin`): requirements files (``-r`` and ``-c``
includes within the repository followed), a ``pyproject.toml``'s ``[project]`` dependencies and
optional dependencies, ``[dependency-groups]`` and ``[tool.uv]``'s lists, and ``uv.lock``'s and
``poetry.lock``'s package versions. Read by :mod:`perfsuite.ab.pins`; only packaging is used."""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


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


def _table(value: Any) -> dict[str, Any]:
    """A TOML table, or an empty one where the file has something else there (not a pin file's business)."""
    return value if isinstance(value, dict) else {}


def pyproject_pins(path: str, text: str) -> list[Pin]:
    """``[project]`` dependencies and optional dependencies, ``[dependency-groups]``, ``[tool.uv]``'s lists."""
    data = _toml(path, text)
    project = _table(data.get("project"))
    lists: dict[str, Any] = {"[project] dependencies": project.get("dependencies", [])}
    for table, groups in (
        ("[project.optional-dependencies]", _table(project.get("optional-dependencies"))),
        ("[dependency-groups]", _table(data.get("dependency-groups"))),
    ):
        lists.update({f"{table} {group}": items for group, items in groups.items()})
    uv = _table(_table(data.get("tool")).get("uv"))
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
    packages = _toml(path, text).get("package", [])
    for package in packages if isinstance(packages, list) else []:
        if not isinstance(package, dict):
            continue
        name, version, source = package.get("name"), package.get("version"), _table(package.get("source"))
        if not name or not version or "editable" in source or "virtual" in source:
            continue
        if "type" in source:  # poetry's: a private index (legacy, explicit) has a url too
            origin = source["type"] if source["type"] in _NOT_FROM_AN_INDEX else None
        else:  # uv's: {registry = ...} from an index, else {git|url|path|directory = ...}
            origin = next((k for k in _NOT_FROM_AN_INDEX if k in source), None)
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
