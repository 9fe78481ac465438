"""The functions a change to the project's own code touches, on each side: what ``perfsuite ab
--base-ref`` / ``--own`` asks each side's step about (:mod:`perfsuite.core.reach`).

A diff's hunks name the lines it removed (on the base) and added (on the candidate). Each side's
version of the file is parsed (``ast``) and every changed line is filed under the innermost function
that holds it, by qualified name (``Net.forward``); a line outside every function is the module's
own code, run when it is imported. A function is then looked up on each side by that name, at the
line its code starts on that side (its first decorator's, else its ``def``'s: the line the
interpreter names its code by), so a function that moved, or exists on one side only, is still
found where it is. Pure: standard library only.
"""

from __future__ import annotations

import ast
import copy
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.core.typed_json import read_as

MODULE_LEVEL = "(module level)"
"""The name of a file's changed lines outside every function: run when the module is imported."""

_NOT_RUN_BY_CASES = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$|setup\.py$|noxfile\.py$)")
"""Files a project keeps beside the code its cases run: its tests and its packaging."""


def python_files(changed: Sequence[str], inside: str = "") -> tuple[str, ...]:
    """The Python files among ``changed`` (paths from the repository's top) that lie in the project
    (``inside``: its directory from the top, ``""`` or ``.`` at the top), as paths from the project's
    directory; its tests and packaging files (``tests/``, ``test_*.py``, ``conftest.py``, ``setup.py``)
    left out."""
    prefix = f"{inside.strip('/')}/" if inside.strip("/") not in ("", ".") else ""
    inner = [n.removeprefix(prefix) for n in changed if n.endswith(".py") and n.startswith(prefix)]
    return tuple(n for n in inner if not _NOT_RUN_BY_CASES.search(n))


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", re.MULTILINE)


def changed_lines(diff: str) -> tuple[set[int], set[int]]:
    """The lines a one-file ``git diff -U0`` removed (base) and added (candidate). A pure insertion
    removes no line of the base's, a pure deletion adds none to the candidate's."""
    old: set[int] = set()
    new: set[int] = set()
    for hunk in _HUNK.finditer(diff):
        start, count = int(hunk[1]), int(hunk[2] or 1)
        old.update(range(start, start + count))
        start, count = int(hunk[3]), int(hunk[4] or 1)
        new.update(range(start, start + count))
    return old, new


@dataclass(frozen=True)
class Parsed:
    """A Python file's functions and the lines of its module-level code."""

    functions: dict[str, tuple[int, int, str]]
    """Every function by qualified name (a nested one's after its enclosing function's, ``outer.inner``; a
    name defined again, a property's setter, ``name (2)``): the line its code starts, its last line, and
    its code as ``ast.dump`` reads it, docstrings left out (the same where only comments, docstrings or
    layout changed)."""
    module: frozenset[int]
    """The lines of the statements run when the module is imported (a class's header and body among
    them), its functions, docstrings, comments and blank lines aside."""


def parse(source: str) -> Parsed | None:
    """``source``'s :class:`Parsed`; ``None`` where it does not parse (or nests too deep to walk)."""
    found: dict[str, tuple[int, int, str]] = {}
    module: set[int] = set()

    def walk(node: ast.AST, prefix: str, at_import: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = given = f"{prefix}{child.name}"
                for n in itertools.count(2):  # a name defined again: numbered in the order of definition
                    if name not in found:
                        break
                    name = f"{given} ({n})"
                first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                found[name] = (first, child.end_lineno or child.lineno, _code(child))
                walk(child, f"{name}.", False)
            elif isinstance(child, ast.ClassDef):
                if at_import:  # its decorators, bases and keywords run at import
                    first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                    module.update(range(first, child.body[0].lineno))
                walk(child, f"{prefix}{child.name}.", at_import)
            elif isinstance(child, ast.stmt):
                if at_import and not _docstring(child):
                    module.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
                walk(child, prefix, at_import)

    try:
        walk(ast.parse(source), "", True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return Parsed(found, frozenset(module))


def _code(node: ast.AST) -> str:
    """``node``'s code as ``ast.dump`` reads it, without the docstrings of the functions and classes in it."""
    bare = copy.deepcopy(node)
    for inner in ast.walk(bare):
        body = getattr(inner, "body", None)
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body and _docstring(body[0]):
            inner.body = body[1:] or [ast.Pass()]
    return ast.dump(bare)


def _docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def enclosing(parsed: Parsed, lines: Iterable[int]) -> list[str]:
    """The innermost function of ``parsed`` holding each of ``lines`` (:data:`MODULE_LEVEL` for one of
    its module-level code; a comment, a docstring or a blank line outside every function: none), each
    once, in the order of the lines."""
    named: dict[str, None] = {}
    for line in sorted(lines):
        holding = [(first, name) for name, (first, last, _) in parsed.functions.items() if first <= line <= last]
        if holding:
            named[max(holding)[1]] = None
        elif line in parsed.module:
            named[MODULE_LEVEL] = None
    return list(named)


@dataclass(frozen=True)
class ChangedFunction:
    """A function (or a file's module-level code) the change touches."""

    file: str
    """The file's path from the project's directory."""
    name: str
    """Its qualified name, or :data:`MODULE_LEVEL`."""
    lines: tuple[int | None, int | None]
    """The line its code starts at on the base and on the candidate (``None``: not there, or module level)."""

    @property
    def label(self) -> str:
        return f"{self.file}:{self.name}" if self.name != MODULE_LEVEL else f"{self.file} {MODULE_LEVEL}"

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "name": self.name, "lines": list(self.lines)}


@dataclass(frozen=True)
class ChangedCode:
    """The project's Python files that differ between the sides, and the functions the change touches."""

    files: tuple[str, ...] = ()
    functions: tuple[ChangedFunction, ...] = ()
    same: tuple[str, ...] = ()
    """Files whose code is the same on both sides (only comments, docstrings or layout changed)."""

    def watched(self, side: int) -> tuple[str, ...]:
        """What side ``side`` (0: base, 1: candidate) watches of the functions: ``file:line`` each."""
        return tuple(f"{f.file}:{f.lines[side]}" for f in self.functions if f.lines[side] is not None)

    def as_json(self) -> dict[str, Any]:
        return {"files": list(self.files), "functions": [f.as_json() for f in self.functions], "same": list(self.same)}

    @classmethod
    def from_json(cls, data: Any) -> ChangedCode | None:
        """:meth:`as_json`'s object, which always has its ``files``; ``None`` for anything else (a results
        file is data)."""
        if not isinstance(data, dict) or "files" not in data:
            return None
        try:
            return read_as(cls, data, "changed_code")
        except ValueError:
            return None


def changed_code(sides: Mapping[str, tuple[str | None, str | None, str]]) -> ChangedCode:
    """Per Python file (its path from the project's directory): its text on the base and on the
    candidate (``None``: not there) and its one-file ``git diff -U0`` (a file on one side only
    changes every line of it). A file that does not parse on a side is watched as a file alone; one
    whose code is the same on both sides (its comments or layout changed) is no change."""
    touched: list[ChangedFunction] = []
    unparsed: list[str] = []
    for file, (old, new, diff) in sides.items():
        parsed = [parse(text) if text is not None else Parsed({}, frozenset()) for text in (old, new)]
        spans = [found for found in parsed if found is not None]
        if len(spans) < 2:  # a side's text does not parse: no function can be named in it
            unparsed.append(file)
            continue
        removed, added = changed_lines(diff)
        if old is None:
            added = set(range(1, (new or "").count("\n") + 2))
        if new is None:
            removed = set(range(1, (old or "").count("\n") + 2))
        names = dict.fromkeys([*enclosing(spans[0], removed), *enclosing(spans[1], added)])
        for name in names:
            found = [span.functions.get(name) for span in spans]
            if found[0] is not None and found[1] is not None and found[0][2] == found[1][2]:
                continue  # only its comments or layout changed: the same code on both sides
            first = [f[0] if f is not None else None for f in found]
            touched.append(ChangedFunction(file, name, (first[0], first[1])))
    changed = {f.file for f in touched}.union(unparsed)  # a file whose code is the same on both sides is none
    files = tuple(f for f in sides if f in changed)
    return ChangedCode(files, tuple(touched), tuple(f for f in sides if f not in changed))
