"""A profiled Python frame named by its function's qualified name (``BagOfTokens.forward``), read
from the functions alive in the worker (:func:`qualifier`); the profiler knows only a frame's file,
line and bare function name (:mod:`perfsuite.worker.step_profile`)."""

from __future__ import annotations

import contextlib
import gc
import inspect
import sys
import types
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from perfsuite.core.explain.frames import python_parts

_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
"""Code the profiler may name by the line it resumes at (a generator), not by its first."""


def qualifier() -> Callable[[str], str]:
    """Names a Python frame (``path(line): name``) by its function's qualified name and first line
    (``model.py(24): BagOfTokens.forward``, as ``perfsuite ab`` names a changed function): a file's
    ``forward``s told apart, and a generator, which the profiler names by the line it resumes at
    each time, one function. The names are those of the functions alive in this process now, read
    before the profiler runs, whose events would make it several times longer (about 0.4 s in a
    worker with transformers loaded). A closure, a lambda or a comprehension is named by the function
    it is made in (``Module._call_impl.inner``), whether or not one is alive. Any other frame (a
    module's body, code made by ``exec``), or one no such code of that name holds, as it was."""
    index = _live_functions()
    last_lines: dict[int, int] = {}

    def last(code: types.CodeType) -> int:
        if id(code) not in last_lines:
            last_lines[id(code)] = max((line for *_, line in code.co_lines() if line is not None), default=0)
        return last_lines[id(code)]

    def named(raw: str) -> str:
        parts = python_parts(raw)
        if parts is None:
            return raw
        file, line, function = parts
        found = [
            (code, name)
            for path, code, name in index.get((file.rpartition("/")[2], function), ())
            if path == file or path.endswith(f"/{file}")
        ]
        for code, name in sorted(found, key=lambda f: f[0].co_firstlineno != line):  # where it starts first
            resumed = code.co_flags & _RESUMABLE and code.co_firstlineno < line <= last(code)
            if code.co_firstlineno == line or resumed:
                return f"{file}({code.co_firstlineno}): {name}"
        return raw

    return named


def _live_functions() -> dict[tuple[str, str], list[tuple[str, types.CodeType, str]]]:
    """Every live Python function's code, and the code made inside it, as ``(file name, function name)
    → [(its path, its code, its qualified name)]``, a nested one's as ``outer.inner`` (the
    interpreter's ``outer.<locals>.inner``): those of every module and its classes (and what a
    decorator wrapped), and those the collector tracks (a closure kept as a hook; not what a worker's
    forkserver froze, which the modules hold)."""
    found: dict[tuple[str, str], list[tuple[str, types.CodeType, str]]] = {}
    seen: set[int] = set()
    function, wrapped = types.FunctionType, (staticmethod, classmethod)

    def add(code: types.CodeType, qualname: str) -> None:
        """``code``, and the code of each function, lambda or comprehension made inside it (a closure
        a step makes and drops, which no live function holds: it is its function's constant)."""
        if id(code) in seen:
            return
        seen.add(id(code))
        named = str(getattr(code, "co_qualname", qualname)).replace(".<locals>.", ".")  # 3.10: no co_qualname
        file = code.co_filename
        found.setdefault((file.rpartition("/")[2], code.co_name), []).append((file, code, named))
        for inner in code.co_consts:
            if type(inner) is types.CodeType:
                add(inner, f"{named}.{inner.co_name}")

    def walk(values: Iterable[Any], depth: int) -> None:
        for value in values:
            kind = type(value)
            if kind in wrapped:
                value = value.__func__
                kind = type(value)
            if kind is function:
                if "__wrapped__" in value.__dict__:  # a decorator's wrapper (its code shared): what it wraps too
                    walk([value.__dict__["__wrapped__"]], depth)
                add(value.__code__, value.__qualname__)
            elif kind is property:
                walk([value.fget, value.fset, value.fdel], depth)
            elif issubclass(kind, type) and depth < 4 and id(value) not in seen:  # a class: its methods
                seen.add(id(value))
                walk(list(vars(value).values()), depth + 1)

    # Only types and dicts are asked: a module's odd object (a deprecated alias that warns when touched)
    # is never. A name it cannot read is the frame's own.
    with warnings.catch_warnings(), contextlib.suppress(Exception):
        warnings.simplefilter("ignore")
        for module in list(sys.modules.values()):
            walk(list(getattr(module, "__dict__", {}).values()), 0)
        walk([item for item in gc.get_objects() if type(item) is function], 0)
    return found
