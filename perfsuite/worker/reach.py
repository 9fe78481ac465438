"""Which code one step runs of some installed distributions and of some files of the project's own:
what ``perfsuite ab`` asks of the code that differs between its sides (:mod:`perfsuite.core.reach`).

A profile function (``sys.setprofile``), set in the thread that runs the step, counts each call of
a Python function by its code's file and each call of a built-in by the module that defines it.
After the step those files are matched to each distribution's installed files (its ``RECORD``) and
to the project's watched files.
It is entered around the memory profile's step (:meth:`Driven.watch_next_step
<perfsuite.worker.engines.driven.Driven.watch_next_step>`), after the timed steps: nothing timed
runs under it, and it holds no tensor. What it cannot see: threads other than the step's, the
DataLoader's worker processes, and a native library called from another package's compiled code
(cuDNN from torch's).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import os
import sys
import urllib.parse
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from perfsuite.core.provenance import direct_url
from perfsuite.core.reach import WATCH_ENV, Ask

_EXTENSIONS = tuple(s for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so")
"""A compiled module's file endings (``.cpython-311-x86_64-linux-gnu.so``, ``.abi3.so``): a bare
``.so`` is left out, as most of those a wheel ships are libraries no Python code imports."""


def asked(blind: tuple[str, ...] = ()) -> Watch | None:
    """The watch this worker's environment asks for (:data:`~perfsuite.core.reach.WATCH_ENV`), if any,
    taken out of the environment; ``blind``: what it cannot see of this case's step."""
    ask = Ask.read(os.environ.pop(WATCH_ENV, ""))
    return Watch(ask, blind) if ask else None


class Watch:
    """The calls of one step, counted by :meth:`watching`; :meth:`ran` says whose code they were."""

    def __init__(self, ask: Ask, blind: tuple[str, ...] = ()) -> None:
        self.ask = ask
        self.blind = blind
        self.files: dict[tuple[str, int], int] = {}
        """Python calls per function: its code's file, as the code names it, and first line."""
        self.modules: dict[str, int] = {}
        """Built-in calls per defining module."""
        self.complete = False
        """Whether a watched step ended without an error."""

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        files, modules = self.files, self.modules

        def count(frame: Any, event: str, arg: Any) -> None:
            # An error raised here would surface in the step's own code: none may leave.
            try:
                if event == "call":
                    code = frame.f_code
                    key = (code.co_filename, code.co_firstlineno)
                    files[key] = files.get(key, 0) + 1
                elif event == "c_call":
                    owner = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
                    modules[owner] = modules.get(owner, 0) + 1
            except Exception:  # noqa: S110 - a call not counted is all it costs
                pass

        before = sys.getprofile()
        sys.setprofile(count)
        try:
            yield
        finally:
            sys.setprofile(before)
        self.complete = True

    def ran(self) -> dict[str, Any]:
        """What the step ran, as a :class:`~perfsuite.core.record.StepRan`'s JSON; where it cannot be
        told (a package's metadata that does not read), an incomplete watch that says why."""
        try:
            return {**self._ran(), "blind": list(self.blind)}
        except Exception as exc:  # the case's own figures stand whatever this finds
            return {"complete": False, "error": f"{type(exc).__name__}: {exc}", "blind": list(self.blind)}

    def _ran(self) -> dict[str, Any]:
        python: dict[str, int] = {}
        by_line: dict[tuple[str, int], int] = {}
        real = functools.lru_cache(maxsize=None)(os.path.realpath)
        for (file, line), calls in self.files.items():
            python[real(file)] = python.get(real(file), 0) + calls
            by_line[real(file), line] = by_line.get((real(file), line), 0) + calls
        native: dict[str, int] = {}
        for module, calls in self.modules.items():
            found = _module_file(module) if isinstance(module, str) else None
            if found is not None:
                native[found] = native.get(found, 0) + calls
        root = os.path.realpath(self.ask.root) if self.ask.root else None
        files, functions = {}, {}
        if root is not None:
            files = {name: python.get(os.path.normpath(f"{root}/{name}"), 0) for name in self.ask.files}
            for function in self.ask.functions:
                name, _, first = function.rpartition(":")
                if first.isdigit():
                    functions[function] = by_line.get((os.path.normpath(f"{root}/{name}"), int(first)), 0)
        loaded = {real(file) for file in _module_files()} if files else set()
        imported = [name for name in files if os.path.normpath(f"{root}/{name}") in loaded]
        packages = [self._one(name, python, native) for name in self.ask.packages]
        return {
            "complete": self.complete,
            "packages": packages,
            "files": files,
            "functions": functions,
            "imported": imported,
        }

    def _one(self, name: str, python: dict[str, int], native: dict[str, int]) -> dict[str, Any]:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return {"name": name, "version": None}
        source = _editable_source(dist)
        if source is not None:  # its code runs from its source directory, which RECORD does not list
            inside = [n for f, n in python.items() if f.startswith(source + os.sep)]
            built = [n for f, n in native.items() if f.startswith(source + os.sep)]
            calls = {"python_calls": sum(inside), "native_calls": sum(built)}
            return {"name": name, "version": dist.version, **calls, "has_code": Path(source).is_dir()}
        try:
            listed = dist.files
        except Exception:  # a RECORD that does not read: its files cannot be told
            listed = None
        root = os.path.realpath(str(dist.locate_file("")))
        code = [f for f in listed or () if _code_file(str(f))]
        owned = {os.path.normpath(f"{root}/{f}") for f in code}
        return {
            "name": name,
            "version": dist.version,
            "python_calls": sum(n for f, n in python.items() if f in owned),
            "native_calls": sum(n for f, n in native.items() if f in owned),
            "has_code": None if listed is None else any(not _empty_init(f) for f in code),
        }


def _editable_source(dist: metadata.Distribution) -> str | None:
    """The directory an editable install runs its code from (its ``direct_url.json``), if it is one."""
    told = direct_url(dist)
    editable = isinstance(told.get("dir_info"), dict) and bool(told["dir_info"].get("editable"))
    url = str(told.get("url", ""))
    if not editable or not url.startswith("file://"):
        return None
    return os.path.realpath(urllib.parse.unquote(urllib.parse.urlparse(url).path))


def _code_file(path: str) -> bool:
    """Whether a step could show a call of this installed file: a Python module or a compiled one."""
    return path.endswith((".py", *_EXTENSIONS))


def _empty_init(file: metadata.PackagePath) -> bool:
    """An empty ``__init__.py`` (as RECORD sizes it): what a wheel of native libraries alone ships
    (``nvidia/cudnn/__init__.py``), with nothing in it to call."""
    return PurePosixPath(str(file)).name == "__init__.py" and file.size == 0


def _module_files() -> list[str]:
    """The file of every module this process has imported (a module object that will not say: none)."""
    found = []
    for module in list(sys.modules.values()):
        try:
            file = getattr(module, "__file__", None)
        except Exception:  # noqa: S112 - a lazy module's loader may raise: it says nothing of the watched files
            continue
        if isinstance(file, str):
            found.append(file)
    return found


def _module_file(module: str) -> str | None:
    """The file of ``module``, or of the nearest enclosing module that has one (``torch._C._nn`` is
    in ``torch/_C…so``); ``None`` for the interpreter's own."""
    parts = module.split(".")
    while parts:
        file = getattr(sys.modules.get(".".join(parts)), "__file__", None)
        if isinstance(file, str):
            return os.path.realpath(file)
        parts.pop()
    return None
