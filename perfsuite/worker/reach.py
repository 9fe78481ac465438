"""Which code a case's build and one step run of some installed distributions and of some files of
the project's own: what ``perfsuite ab`` asks of the code that differs between its sides
(:mod:`perfsuite.core.reach`).

A profile function (``sys.setprofile``), set in the thread that runs the code watched, counts each
call of a Python function by its code's file and each call of a built-in by the module that defines
it. Afterwards those files are matched to each distribution's installed files (its ``RECORD``) and
to the project's watched files.
It is set around the case's build (:func:`perfsuite.worker.run.train`), around the first warm-up
step where another unwatched one follows it (what an engine makes as it starts: the Trainer's
optimizer and DataLoader), and around the memory profile's step (:meth:`Driven.watch_next_step
<perfsuite.worker.engines.driven.Driven.watch_next_step>`), after the timed steps: nothing timed
runs under it (a process forked under it, a DataLoader's worker, takes it off at once), and it
holds no tensor. What it cannot see: threads other than the watched code's, the DataLoader's
worker processes, and a native library called from another package's compiled code (cuDNN from
torch's).
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


def asked() -> Watch | None:
    """The watch this worker's environment asks for (:data:`~perfsuite.core.reach.WATCH_ENV`), if any,
    taken out of the environment."""
    ask = Ask.read(os.environ.pop(WATCH_ENV, ""))
    return Watch(ask) if ask else None


_COUNTING: set[int] = set()
"""The profile functions counting now, by ``id``."""


def _off_in_child() -> None:
    """A process forked while a watch counts (a DataLoader's workers, started as the engine is built)
    keeps the forking thread's profile function: taken off there, where nothing reads its counts and
    every call of the worker's, through the timed steps, would pay for it."""
    if id(sys.getprofile()) in _COUNTING:
        sys.setprofile(None)


os.register_at_fork(after_in_child=_off_in_child)


class _Calls:
    """The calls some code made: Python calls by the called code's file, as the code names it, and first
    line; built-in calls by defining module."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, int], int] = {}
        self.modules: dict[str, int] = {}

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Counts the calls of the thread it is entered in, those an import runs left out: a module
        imported is not one used (the Trainer's build imports peft and bitsandbytes to ask what they
        are). Code that ``exec`` or ``eval`` runs is counted."""
        files, modules = self.files, self.modules
        bodies: list[bool] = []  # per module body running, innermost last: whether an import runs it
        importing = [0]  # how many of them an import runs

        def count(frame: Any, event: str, arg: Any) -> None:
            # An error raised here would surface in the step's own code: none may leave.
            try:
                code = frame.f_code
                if code.co_name == "<module>" and event == "call":
                    back = frame.f_back  # an import runs a module's body from importlib's frozen code
                    imported = back is not None and back.f_code.co_filename.startswith("<frozen importlib")
                    bodies.append(imported)
                    importing[0] += imported
                elif code.co_name == "<module>" and event == "return" and bodies:
                    importing[0] -= bodies.pop()  # a return fires on an error's unwind too
                if importing[0]:
                    return
                if event == "call":
                    key = (code.co_filename, code.co_firstlineno)
                    files[key] = files.get(key, 0) + 1
                elif event == "c_call":
                    owner = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
                    modules[owner] = modules.get(owner, 0) + 1
            except Exception:  # noqa: S110 - a call not counted is all it costs
                pass

        before = sys.getprofile()
        sys.setprofile(count)
        _COUNTING.add(id(count))
        try:
            yield
        finally:
            sys.setprofile(before)
            _COUNTING.discard(id(count))

    def by_file(self) -> tuple[dict[str, int], dict[tuple[str, int], int], dict[str, int]]:
        """Python calls per real file and per (real file, first line); built-in calls per the real file
        of their module (the interpreter's own left out)."""
        python: dict[str, int] = {}
        by_line: dict[tuple[str, int], int] = {}
        for (file, line), calls in self.files.items():
            python[_real(file)] = python.get(_real(file), 0) + calls
            by_line[_real(file), line] = by_line.get((_real(file), line), 0) + calls
        native: dict[str, int] = {}
        for module, calls in self.modules.items():
            found = _module_file(module) if isinstance(module, str) else None
            if found is not None:
                native[found] = native.get(found, 0) + calls
        return python, by_line, native


class Watch:
    """The calls of a case's build and of its steps watched, counted by :meth:`building`, :meth:`starting`
    and :meth:`watching`; :meth:`ran` says whose code they were."""

    def __init__(self, ask: Ask, blind: tuple[str, ...] = ()) -> None:
        self.ask = ask
        self.blind = blind
        """What it cannot see of the case's step (set once the case's device is known)."""
        self.step = _Calls()
        self.build: _Calls | None = None
        """The build's calls, where :meth:`building` watched it."""
        self.complete = False
        """Whether a watched step ended without an error."""
        self.first_step = False
        """Whether the case's first step was watched (:meth:`starting`)."""

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """Around the case's build, in the thread that builds it (a build that raises fails the case)."""
        self.build = _Calls()
        with self.build.counting():
            yield

    @contextlib.contextmanager
    def starting(self) -> Iterator[None]:
        """Around the case's first step, in the thread that runs it: counted with the profile step's."""
        self.first_step = True
        with self.step.counting():
            yield

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Around the profile's step, in the thread that runs it (the step whose end completes the watch)."""
        with self.step.counting():
            yield
        self.complete = True

    def ran(self) -> dict[str, Any]:
        """What the step and the build ran, as a :class:`~perfsuite.core.record.StepRan`'s JSON; where it
        cannot be told (a package's metadata that does not read), an incomplete watch that says why."""
        try:
            return {**self._ran(), "blind": list(self.blind), "first_step": self.first_step}
        except Exception as exc:  # the case's own figures stand whatever this finds
            error = f"{type(exc).__name__}: {exc}"
            return {"complete": False, "error": error, "blind": list(self.blind), "first_step": self.first_step}

    def _ran(self) -> dict[str, Any]:
        root = os.path.realpath(self.ask.root) if self.ask.root else None
        step = self.step.by_file()
        built = self.build.by_file() if self.build is not None else None
        owners = [_Owner(name) for name in self.ask.packages]
        files, functions = self._own(root, step)
        loaded = {_real(file) for file in _module_files()} if files else set()
        imported = [name for name in files if os.path.normpath(f"{root}/{name}") in loaded]
        found: dict[str, Any] = {
            "complete": self.complete,
            "packages": [owner.run(step) for owner in owners],
            "files": files,
            "functions": functions,
            "imported": imported,
        }
        if built is not None:
            packages = {o.name: c for o in owners if (c := o.calls(built)) is not None}
            files, functions = self._own(root, built)
            found["built"] = {"packages": packages, "files": files, "functions": functions}
        return found

    def _own(self, root: str | None, calls: _ByFile) -> tuple[dict[str, int], dict[str, int]]:
        """The calls of each watched file of the project's own, and of each watched function."""
        if root is None:
            return {}, {}
        python, by_line, _ = calls
        files = {name: python.get(os.path.normpath(f"{root}/{name}"), 0) for name in self.ask.files}
        functions = {}
        for function in self.ask.functions:
            name, _, first = function.rpartition(":")
            if first.isdigit():
                functions[function] = by_line.get((os.path.normpath(f"{root}/{name}"), int(first)), 0)
        return files, functions


_ByFile = tuple[dict[str, int], dict[tuple[str, int], int], dict[str, int]]
"""What :meth:`_Calls.by_file` returns."""


class _Owner:
    """An installed distribution, asked which calls ran its code: its files (RECORD), or an editable
    install's source directory, read once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dist: metadata.Distribution | None
        try:
            self.dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            self.dist = None
            return
        self.source = _editable_source(self.dist)
        self.has_code: bool | None
        if self.source is not None:  # its code runs from its source directory, which RECORD does not list
            self.has_code = Path(self.source).is_dir()
            return
        try:
            listed = self.dist.files
        except Exception:  # a RECORD that does not read: its files cannot be told
            listed = None
        root = os.path.realpath(str(self.dist.locate_file("")))
        code = [f for f in listed or () if _code_file(str(f))]
        self.owned = {os.path.normpath(f"{root}/{f}") for f in code}
        self.has_code = None if listed is None else any(not _empty_init(f) for f in code)

    def _mine(self, file: str) -> bool:
        return file.startswith(self.source + os.sep) if self.source is not None else file in self.owned

    def _counts(self, calls: _ByFile) -> tuple[int, int]:
        python, _, native = calls
        return sum(n for f, n in python.items() if self._mine(f)), sum(n for f, n in native.items() if self._mine(f))

    def calls(self, calls: _ByFile) -> int | None:
        """Its calls among ``calls``, Python and compiled (``None``: not installed)."""
        return None if self.dist is None else sum(self._counts(calls))

    def run(self, calls: _ByFile) -> dict[str, Any]:
        """A :class:`~perfsuite.core.record.PackageRun`'s JSON."""
        if self.dist is None:
            return {"name": self.name, "version": None}
        python, native = self._counts(calls)
        return {
            "name": self.name,
            "version": self.dist.version,
            "python_calls": python,
            "native_calls": native,
            "has_code": self.has_code,
        }


_real = functools.lru_cache(maxsize=8192)(os.path.realpath)


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
