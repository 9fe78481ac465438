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
from collections.abc import Callable, Sequence
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


def module_file(reference: str, root: str | None) -> str | None:
    """The file the module of ``reference`` is imported from by a worker (``None``: not found), read
    without importing it."""
    found = _source(split_reference(reference)[0], import_path(root))
    return None if found is None or found == Path() else str(found)


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


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
"""What a reference names, where its source defines it at the module's top level."""


def locate(value: object, root: str | None, check: Callable[[Definition], str | None] | None = None) -> str | None:
    """What is wrong with the reference ``value`` (one phrase), or ``None`` when its module and name were found.

    ``check`` reads the ``def`` or ``class`` the name is bound by, where the module's top level has one
    (a signature, say: :func:`engine_step_problem`), and says what is wrong with it."""
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
    definition = _definition(tree.body, name) if "." not in attribute else None
    if check is not None and definition is not None:
        problem = check(definition)
        if problem is not None:
            return f"{value} ({source}, line {definition.lineno}): {problem}"
    return None


def _definition(body: list[ast.stmt], name: str) -> Definition | None:
    """The last top-level ``def`` or ``class`` of ``name`` in ``body``, when nothing else binds it there."""
    found: Definition | None = None
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            found = node
        elif _binds([node], name):
            found = None  # rebound by an assignment or an import: the source cannot tell what it is
    if found is not None and not isinstance(found, ast.ClassDef) and found.decorator_list:
        return None  # a decorator may change the signature
    return found


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], list[str], bool]:
    """``(every keyword-passable name, the required ones, whether it takes **kwargs)``; the positional-only
    and ``self`` parameters are left out of the first two."""
    args = function.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    named = [a.arg for a in args.args]
    required = [a.arg for i, a in enumerate(positional) if i >= len(args.posonlyargs) and i < first_default]
    required += [a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True) if default is None]
    return named + [a.arg for a in args.kwonlyargs], required, args.kwarg is not None


def call_problem(definition: Definition, given: Sequence[str], *, optional: Sequence[str] = ()) -> str | None:
    """What stops ``definition`` (a function) being called with keyword arguments ``given``, those of
    ``optional`` it takes passed too: a required parameter perfsuite does not pass, or one it passes
    that the function does not take. ``None`` when the call binds, or the source cannot tell."""
    if isinstance(definition, ast.ClassDef):
        return None
    args = definition.args
    if args.posonlyargs:
        return None  # positional-only parameters: the import will tell
    names, required, any_keyword = _parameters(definition)
    signature = f"{definition.name}({ast.unparse(args)})"
    missing = [name for name in required if name not in given and name not in optional]
    if missing:
        return (
            f"{signature} requires {', '.join(missing)}, which perfsuite does not pass "
            f"(it passes {', '.join(f'{n}=' for n in (*given, *optional))})"
        )
    unknown = [name for name in given if name not in names]
    if unknown and not any_keyword:
        return f"{signature} takes no {', '.join(unknown)}, which perfsuite passes"
    return None


def engine_step_problem(definition: Definition) -> str | None:
    """What is wrong with an engine class's own ``step`` (interface version 1: ``step()``, optionally
    ``step(before_micro_batch=None, within=None)``), or ``None`` (a ``step`` it inherits is checked
    when it is imported)."""
    if not isinstance(definition, ast.ClassDef):
        return None
    for node in definition.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "step":
            if node.decorator_list:
                return _applies_problem(definition)
            args = node.args
            positional = args.posonlyargs + args.args
            first_default = len(positional) - len(args.defaults)
            needed = [a.arg for i, a in enumerate(positional) if 0 < i < first_default]
            needed += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
            if needed:
                return (
                    f"{definition.name}.step({ast.unparse(args)}) requires {', '.join(needed)}; perfsuite calls "
                    "step() with no argument (interface version 1: a step takes its batches from "
                    "self.case.batch(step, batch_size))"
                )
    return _applies_problem(definition)


def _applies_problem(definition: ast.ClassDef) -> str | None:
    """What is wrong with an engine class's literal ``applies`` (:func:`not_strategy_fields`); a computed
    one is checked when the engine starts."""
    for node in definition.body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if not (isinstance(target, ast.Name) and target.id == "applies") or value is None:
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and len(value.args) == 1:
            value = value.args[0]  # frozenset({...}), set((...))
        try:
            names = ast.literal_eval(value)
        except ValueError:
            return None
        if isinstance(names, (set, list, tuple, frozenset)):
            return not_strategy_fields(f"{definition.name}.applies", [str(n) for n in names])
    return None


def not_strategy_fields(owner: str, names: Sequence[str]) -> str | None:
    """``owner names 'grad_ckpt' (did you mean 'grad_checkpointing'?): not a strategy field; the fields:
    ...`` for the ``names`` that are no field of :class:`~perfsuite.core.strategies.Strategy` an engine
    could apply (a strategy's name, most often); ``None`` where each is one."""
    import dataclasses
    import difflib

    from perfsuite.core.strategies import Strategy

    fields = [f.name for f in dataclasses.fields(Strategy) if f.name not in ("name", "description")]
    unknown = sorted({n for n in names if n not in fields})
    if not unknown:
        return None
    near = {n: difflib.get_close_matches(n, fields, n=1, cutoff=0.5) for n in unknown}
    said = ", ".join(f"{n!r}" + (f" (did you mean {m[0]!r}?)" if m else "") for n, m in near.items())
    return f"{owner} names {said}: not a strategy field; the fields: {', '.join(fields)}"


BATCH_ARGUMENTS = ("batch_size", "seq_len", "step", "seed")
"""What perfsuite passes a batch maker, each only where it takes it (an image model's takes no ``seq_len``)."""
FACTORY = "a callable building a torch.nn.Module from a seed, factory(seed=..., **factory_args)"
BATCH = "a callable making one step's batch of tensors from what it takes of " + ", ".join(
    f"{name}=" for name in BATCH_ARGUMENTS
)


def factory_check(passed: Sequence[str]) -> Callable[[Definition], str | None]:
    """The check of a factory perfsuite calls with keyword arguments ``passed``."""
    return lambda found: call_problem(found, passed)


def batch_check(found: Definition) -> str | None:
    """The check of a batch maker: each parameter it requires is one perfsuite passes."""
    return call_problem(found, [], optional=BATCH_ARGUMENTS)
