"""What the cases ran of the code that differs between two sides (``perfsuite ab``): the packages
whose versions differ, and the project's own Python files that differ between two commits and the
functions the change touches in them (:mod:`perfsuite.core.changed_code`).

A comparison's verdict speaks of the cases it ran: a bumped package, or a changed file, whose code
no case calls comes out *same*, true of those cases and nothing about that code. So each side's
worker watches its first pair's build, first step and profile step (:mod:`perfsuite.worker.reach`, asked
through :data:`WATCH_ENV`) and counts the calls of that code; :func:`reach` reads the records back
into one answer per package or file, and :func:`described` says it in a line. What only a build
ran (an ``__init__``) is in the figures through what it built, not through its own time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name

from perfsuite.core.changed_code import MODULE_LEVEL, ChangedCode
from perfsuite.core.engines import ENGINES, trainer_unsupported
from perfsuite.core.pooled import differing
from perfsuite.core.record import PackageRun, StepRan
from perfsuite.core.strategies import BUILTIN_STRATEGIES, OPTIONAL_PACKAGES, STRATEGIES
from perfsuite.core.typed_json import read_as

WATCH_ENV = "PERFSUITE_WATCH"
"""What a worker watches in its build and steps, set by a side as :func:`request` writes it."""


MOST_WATCHED = 1000
"""The most files, and the most functions, one request watches."""


@dataclass(frozen=True)
class Ask:
    """What a side's workers watch: installed distributions by name, and files of the project's own
    by their path under ``root`` (the side's copy of the project)."""

    packages: tuple[str, ...] = ()
    root: str | None = None
    files: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    """Functions of those files, each as ``file:line`` (the line its code starts at in this side's copy)."""

    def __bool__(self) -> bool:
        return bool(self.packages or (self.root and self.files))

    def request(self) -> str:
        """As :data:`WATCH_ENV` carries it: at most :data:`MOST_WATCHED` files and as many functions (an
        environment variable's length is bounded; what is left out reads *not watched*)."""
        files, functions = self.files[:MOST_WATCHED], self.functions[:MOST_WATCHED]
        fields = {"packages": self.packages, "root": self.root, "files": files, "functions": functions}
        return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()})

    @classmethod
    def read(cls, request: str) -> Ask:
        """:meth:`request`'s text; anything else is nothing to watch (a side's own perfsuite wrote it)."""
        try:
            return read_as(cls, json.loads(request), WATCH_ENV)
        except ValueError:  # json's errors among them
            return cls()


def to_watch(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> tuple[str, ...]:
    """The packages two sides' probes (name: version) hold at different versions, perfsuite itself
    left out (its code is the harness around every step)."""
    return tuple(name for name in differing(a, b) if name != "perfsuite")


@dataclass(frozen=True)
class Reach:
    """One watched package or file over a comparison's cases."""

    name: str
    versions: tuple[str | None, str | None] | None
    """A package's version on the base and on the candidate (``None``: not installed there); ``None``
    for a file."""
    watched: int
    """Cases whose step was watched to its end on both sides, or that ran its code."""
    ran: tuple[int, int]
    """Cases whose watched steps ran its code, on the base and on the candidate."""
    either: int
    """Cases whose step ran its code on either side."""
    has_code: bool | None = True
    """Whether either side's copy ships code a step could show calling (``None``: neither lists its files)."""
    kind: str = "code"
    """``code`` (a package, a file or a function); ``module``: a file's module-level code, which a step
    never runs (it runs when the module is imported: ``ran`` counts the cases that imported it);
    ``same``: a file whose code is the same on both sides."""
    blind: tuple[tuple[str, int], ...] = ()
    """Among the cases watched that did not call it, how many had each blind spot (``compiled``, ...)."""
    built: int = 0
    """Cases whose build ran its code on either side (an ``__init__``, a model factory)."""
    builds_watched: bool = False
    """Whether every case watched had its build watched too, on both sides (a side's older perfsuite
    watches the step alone)."""

    def strategies(
        self,
        device_type: str,
        engines: Sequence[str] = (),
        using: Mapping[str, Mapping[str, Mapping[str, Sequence[str]]]] | None = None,
    ) -> dict[str, dict[str, tuple[str, ...]]]:
        """The strategies that need it (an optional package's) and run on ``device_type``, perfsuite's
        (``built-in``) and the project's (``project``), each with those of ``engines`` that apply it:
        where a case would run its code. ``using``: a comparison's file's :func:`strategies_using`;
        ``None`` (an older file), this process's registry's."""
        using = strategies_using(device_type, engines) if using is None else using
        found = next((v for k, v in using.items() if canonicalize_name(k) == canonicalize_name(self.name)), {})
        return {group: {s: tuple(e) for s, e in found.get(group, {}).items()} for group in STRATEGY_GROUPS}


STRATEGY_GROUPS = ("built-in", "project")
"""Whose the strategies :func:`strategies_using` names are: perfsuite's, or the project's recipes."""


def strategies_using(device_type: str, engines: Sequence[str] = ()) -> dict[str, dict[str, dict[str, list[str]]]]:
    """Per optional package (its distribution's name), the registered strategies that need it and run
    on ``device_type``, perfsuite's (``built-in``) and the project's (``project``), each with those of
    ``engines`` that apply it (perfsuite's ``trainer`` maps only some; a project's own engine is not
    known to refuse any; none: only perfsuite's ``loop``, not compared, would). A comparison's file
    keeps it, so that a report rendered where the project is not loaded (a pull request's comment),
    or by another perfsuite, names the same strategies, each as whose it was."""
    found: dict[str, dict[str, dict[str, list[str]]]] = {}
    for package in OPTIONAL_PACKAGES:
        for s in STRATEGIES.values():
            if package.module in s.requires and (device_type != "cpu" or s.gpu_only is None):
                applying = [e for e in engines if e != "trainer" or trainer_unsupported(s) is None]
                group = "built-in" if s.name in BUILTIN_STRATEGIES else "project"
                found.setdefault(package.distribution, {}).setdefault(group, {})[s.name] = applying
    return found


def _step(case: Any, side: str) -> StepRan | None:
    """A case's watched steps on ``side``; what is not one (an old or hand-made file) is none."""
    ran = case.get("ran") if isinstance(case, Mapping) else None
    entry = ran.get(side) if isinstance(ran, Mapping) else None
    try:
        return None if entry is None else StepRan.from_json(entry, "ran")
    except ValueError:
        return None


def reach(cases: Sequence[Mapping[str, Any]], changed: ChangedCode | None = None) -> list[Reach]:
    """Per watched package, then per function the change to the project's code touches (``changed``),
    then per watched file no such function names, in the order the records name them: each case's
    ``ran`` (``{"a": ..., "b": ...}``, each a :class:`~perfsuite.core.record.StepRan` as JSON) counted."""
    steps = [(_step(c, "a"), _step(c, "b")) for c in cases]
    done = [a is not None and b is not None and a.complete and b.complete for a, b in steps]
    # A side whose perfsuite watched no first step (first_step None) was as blind there.
    blind = [tuple(dict.fromkeys(spot for s in pair if s is not None for spot in _spots(s))) for pair in steps]
    # Whether every case watched to its end had its build watched on both sides (an older side's was not).
    watched_builds = [s.built is not None for pair, d in zip(steps, done, strict=True) if d for s in pair if s]
    builds_watched = all(watched_builds)
    packages = dict.fromkeys(p.name for pair in steps for s in pair if s is not None for p in s.packages)
    touched = changed.functions if changed is not None else ()
    named = {f.file for f in touched}
    files = dict.fromkeys(f for pair in steps for s in pair if s is not None for f in s.files if f not in named)
    found = []
    for name in packages:
        runs = [tuple(_package(step, name) for step in pair) for pair in steps]
        called = [tuple(bool(r and r.python_calls + r.native_calls) for r in pair) for pair in runs]
        versions = [next((r.version for r in (pair[i] for pair in runs) if r is not None), None) for i in (0, 1)]
        code = [r.has_code for pair in runs for r in pair if r is not None and r.has_code is not None]
        asked = [d and all(r is not None for r in pair) for d, pair in zip(done, runs, strict=True)]
        built = _built(steps, "packages", (name, name))
        has_code = any(code) if code else None
        found.append(
            _counted(
                name,
                called,
                asked,
                blind,
                (versions[0], versions[1]),
                has_code,
                built=built,
                builds_watched=builds_watched,
            )
        )
    for function in touched:
        if function.name == MODULE_LEVEL:  # run when imported: no step runs it; which cases imported it
            imported = [tuple(bool(s and function.file in s.imported) for s in pair) for pair in steps]
            found.append(_counted(function.label, imported, done, blind, None, True, kind="module"))
            continue
        keys = [f"{function.file}:{line}" if line is not None else None for line in function.lines]
        called = [
            tuple(bool(s and k and s.functions.get(k)) for s, k in zip(pair, keys, strict=True)) for pair in steps
        ]
        asked = [  # a request past its bound left it out: not watched there
            d and all(s is not None and (k is None or k in s.functions) for s, k in zip(pair, keys, strict=True))
            for d, pair in zip(done, steps, strict=True)
        ]
        built = _built(steps, "functions", (keys[0], keys[1]))
        found.append(
            _counted(function.label, called, asked, blind, None, True, built=built, builds_watched=builds_watched)
        )
    for name in changed.same if changed is not None else ():
        found.append(Reach(name, None, watched=0, ran=(0, 0), either=0, kind="same"))
    for name in files:
        called = [tuple(bool(s and s.files.get(name)) for s in pair) for pair in steps]
        asked = [
            d and all(s is not None and name in s.files for s in pair) for d, pair in zip(done, steps, strict=True)
        ]
        built = _built(steps, "files", (name, name))
        found.append(_counted(name, called, asked, blind, None, True, built=built, builds_watched=builds_watched))
    return found


def _spots(step: StepRan) -> tuple[str, ...]:
    return step.blind if step.first_step is not None else (*step.blind, "first step")


def _built(steps: list[tuple[StepRan | None, StepRan | None]], kind: str, keys: tuple[str | None, str | None]) -> int:
    """The cases whose build, on either side, called the code named ``keys`` (the base's, the
    candidate's) among its ``kind`` (:class:`~perfsuite.core.record.BuildRan`'s field; a build not
    watched: not)."""

    def called(step: StepRan | None, key: str | None) -> bool:
        calls = getattr(step.built, kind) if step is not None and step.built is not None else {}
        return key is not None and bool(calls.get(key))

    return sum(any(called(s, k) for s, k in zip(pair, keys, strict=True)) for pair in steps)


def _package(step: StepRan | None, name: str) -> PackageRun | None:
    return next((p for p in step.packages if p.name == name), None) if step is not None else None


def _counted(
    name: str,
    called: list[tuple[bool, ...]],
    done: list[bool],
    blind: list[tuple[str, ...]],
    versions: tuple[str | None, str | None] | None,
    has_code: bool | None,
    kind: str = "code",
    *,
    built: int = 0,
    builds_watched: bool = False,
) -> Reach:
    missed = [spots for d, c, spots in zip(done, called, blind, strict=True) if d and not any(c)]
    return Reach(
        name,
        versions,
        watched=sum(d or any(c) for d, c in zip(done, called, strict=True)),
        ran=(sum(c[0] for c in called), sum(c[1] for c in called)),
        either=sum(any(c) for c in called),
        has_code=has_code,
        kind=kind,
        blind=tuple((spot, sum(spot in spots for spots in missed)) for spot in dict.fromkeys(sum(missed, ()))),
        built=built,
        builds_watched=builds_watched,
    )


def described(
    found: Reach,
    cases: int,
    device_type: str = "cpu",
    name: Callable[[str], str] = str,
    engines: Sequence[str] = (),
    using: Mapping[str, Mapping[str, Mapping[str, Sequence[str]]]] | None = None,
) -> str:
    """``found`` for a reader, out of ``cases`` compared on ``device_type`` through ``engines``
    (``name``: how its name is written, markdown's code span in a summary): in how many cases' watched
    steps it was seen called; where in none, in how many builds; where in neither, what the watch
    could not see, or why it cannot be told, and which strategies would run it (``using``:
    :meth:`Reach.strategies`')."""
    head = name(found.name)
    if found.versions is not None:
        head += f" {found.versions[0] or 'not installed'} → {found.versions[1] or 'not installed'}"
    if found.kind == "same":
        return f"{head}: only comments, docstrings or layout changed: no code to watch"
    if found.kind == "module":
        said = f"{head}: changed outside any function, which runs when the module is imported, not in a step"
        if found.either:
            return f"{said} (imported in {found.either} of {cases} case(s))"
        return f"{said}; no case imported it (of {found.watched} watched)" if found.watched else said
    if found.either:
        sides = f" (base {found.ran[0]}, candidate {found.ran[1]})" if found.ran[0] != found.ran[1] else ""
        return f"{head}: called in the watched steps of {found.either} of {cases} case(s){sides}"
    spots = ", ".join(f"{spot} in {n}" for spot, n in found.blind)
    blind = f"; the watch was partly blind ({spots})" if spots else ""
    if found.built:
        step = f"seen in no watched step (of {found.watched})" if found.watched else "no step was watched to its end"
        return (
            f"{head}: called while the case was built ({found.built} of {cases} case(s)), {step}{blind}: "
            "what it left for the steps is in the memory and loss checks"
        )
    if found.has_code is False:
        return f"{head}: ships no code a step shows calling (a native library: what calls it is not seen)"
    if found.has_code is None:
        return f"{head}: not seen: no side lists its installed files"
    if not found.watched:
        return f"{head}: not watched (no case's profile step ran to its end on both sides)"
    hint = _strategies_said(found.strategies(device_type, engines, using), engines)
    where = "build or step" if found.builds_watched else "step"
    return f"{head}: seen called in no case's {where} (of {found.watched} watched){blind}{hint}"


def _strategies_said(groups: Mapping[str, Mapping[str, tuple[str, ...]]], engines: Sequence[str]) -> str:
    """``; built-in strategies that use it: adamw_8bit (loop, trainer), lion_8bit (loop); the project's:
    acme-8bit (loop)``; with a project's engine, that it would run them if it applies them; ``""`` for
    none (``groups``: :meth:`Reach.strategies`')."""
    project = [e for e in engines if e not in ENGINES]
    parts = []
    for whose, using in zip(("built-in strategies that use it", "the project's"), groups.values(), strict=True):
        if not using:
            continue
        if not engines or len(project) == len(engines):  # a project's engines alone apply or refuse any
            parts.append(f"{whose}: {', '.join(using)}")
        else:
            named = ", ".join(f"{s} ({', '.join(e) or 'loop, not in this comparison'})" for s, e in using.items())
            parts.append(f"{whose}: {named}")
    if not parts:
        return ""
    if not engines:
        tail = " (with an engine that applies them)"
    elif len(project) == len(engines):
        tail = f" (if {' or '.join(project)} applies them)"
    else:
        tail = f" ({', '.join(project)}: if it applies them)" if project else ""
    return f"; {'; '.join(parts)}{tail}"


def unreached(found: Sequence[Reach]) -> list[str]:
    """The watched packages, functions and files no case was seen calling, in its build or its step,
    among those a step could show."""
    return [r.name for r in found if not r.either and not r.built and r.watched and r.has_code and r.kind == "code"]


def unreached_said(found: Sequence[Reach], shown: int = 3, name: Callable[[str], str] = str) -> str:
    """:func:`unreached` for a headline: its first ``shown`` names and how many more; ``""`` for none."""
    names = unreached(found)
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    where = "build or step" if all(r.builds_watched for r in found if r.name in names) else "step"
    return f"not seen in any case's {where}: {', '.join(name(n) for n in names[:shown])}{more}"
