"""A project's own code named in its declaration (``"package.module:attribute"``), found without running it. Pure.

A factory, a batch maker or an engine class is named by the module that holds it and the
attribute's name. When the declaration is read, :func:`locate` finds the module's source
file on the path the workers import from (the installed packages, then the project's root)
and reads it for a top-level ``def``, ``class``, assignment or import of that name, without
importing it: a team's module imports torch and its own model code, which the pure core
never does. Whether the name really is what it should be (a callable returning a module, a
class implementing the engine interface) is checked where torch lives, once before any
case runs (:mod:`perfsuite.worker.project`).
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
from collections.abc import Sequence
from pathlib import Path


def split_reference(value: object) -> tuple[str, str]:
    """``(module, attribute)`` of ``"module:attribute"``; a ``ValueError`` says what a reference is."""
    if isinstance(value, str):
        module, _, attribute = value.partition(":")
        dotted = module.split(".") + attribute.split(".")
        if module and attribute and all(part.isidentifier() for part in dotted):
            return module, attribute
    raise ValueError(f'{value!r} is not a reference "package.module:name" to the project\'s code')


def import_path(root: str | None) -> list[str]:
    """Where a project's module is imported from: the interpreter's path, then the project's root."""
    return [*sys.path, *([root] if root and root not in sys.path else [])]


def _source(module: str, path: Sequence[str]) -> Path | None:
    """The source file of ``module`` on ``path``, found package by package; nothing is imported or run."""
    locations: Sequence[str] | None = [p or "." for p in path]
    found = None
    for part in module.split("."):
        if locations is None:  # a module, not a package, stands above this part
            return None
        found = importlib.machinery.PathFinder.find_spec(part, list(locations))
        if found is None:
            return None
        locations = found.submodule_search_locations
    if found is None:
        return None
    if found.origin is None:  # a namespace package: no source of its own
        return Path()
    return Path(found.origin)


def _binds(body: list[ast.stmt], name: str) -> bool | None:
    """Whether statements ``body`` bind ``name`` at their level (``None``: the source cannot tell: a
    star import, a module ``__getattr__``, or a binding under a condition that the import decides)."""
    unsure = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
            unsure |= node.name == "__getattr__"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    unsure = True
                elif (alias.asname or alias.name.split(".")[0]) == name:
                    return True
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                return True
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            nested = [s for field in ("body", "orelse", "finalbody") for s in getattr(node, field, [])]
            nested += [s for handler in getattr(node, "handlers", []) for s in handler.body]
            unsure |= _binds(nested, name) is not False  # bound there, perhaps: the import decides
    return None if unsure else False


def locate(value: object, root: str | None) -> str | None:
    """What is wrong with the reference ``value`` (one phrase), or ``None`` when its module and name were found."""
    try:
        module, attribute = split_reference(value)
    except ValueError as exc:
        return str(exc)
    source = _source(module, import_path(root))
    if source is None:
        where = f"the installed packages or the project's root {root}" if root else "the installed packages"
        return f"no module {module} in {where}"
    if source.suffix != ".py":
        return None  # compiled, or a namespace package: the import will tell
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        return f"cannot read {module} ({source.name}): {exc}"
    name = attribute.split(".")[0]
    if _binds(tree.body, name) is False:
        return f"{module} ({source}) defines no {name}"
    return None
