"""A profiled frame's name made comparable across two environments, and the package it belongs to.

torch's profiler names a Python frame ``path(line): function``, its path relative to the
``sys.path`` entry it was found under (``transformers/models/bert/modeling_bert.py(312): forward``),
so the same library in two environments (a virtual environment and an overlay) gives the same
names. What still differs between two processes is normalised here: object addresses in the names
of built-in methods, and absolute paths of files outside ``sys.path`` (an editable install's, a
checkout's): reduced to what follows ``site-packages/``, else to the path from the outermost package
directory holding the file (``acme/model.py`` wherever ``acme/`` lies), else to the path below the
working directory, else to the file's name.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

_ADDRESS = re.compile(r"(?: object)? at 0x[0-9a-fA-F]+")
_PYBIND = re.compile(r" of pybind11_builtins\.[^>]*")
_PYTHON = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")
OP = "op"
PYTHON = "python"
BUILTIN = "builtin"
MODULE = "module"
ANNOTATION = "annotation"
_BACKWARD = re.compile(r"^torch/autograd/[^(]+\(\d+\): (?:_engine_run_backward|backward|grad)$")
HARNESS = ("torch/", "<frozen ", "perfsuite/worker/")
"""Where a frame's file starts when it is the machinery between the code a case runs and an op or an
allocation: torch, Python's frozen modules and perfsuite's worker."""


def frame_name(raw: str, cwd: str = "") -> str:
    """``raw`` with what differs between processes taken out (see the module's docstring)."""
    if raw.startswith("<built-in"):
        return _PYBIND.sub("", _ADDRESS.sub("", raw))
    found = _PYTHON.match(raw)
    if found is None or not found["file"].startswith("/"):
        return raw
    path = found["file"]
    if "site-packages/" in path:
        path = path.rsplit("site-packages/", 1)[1]
    elif in_package := _from_package(path):
        path = in_package
    elif cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    else:
        path = PurePosixPath(path).name
    return f"{path}({found['line']}): {found['function']}"


@functools.lru_cache(maxsize=4096)
def _from_package(path: str) -> str | None:
    """``acme/sub/model.py`` for ``/anywhere/acme/sub/model.py`` where ``acme/`` and ``acme/sub/`` hold an
    ``__init__.py`` (the name an import of it finds); ``None`` outside a regular package."""
    file = Path(path)
    top = file.parent
    while top != top.parent and (top / "__init__.py").is_file():
        top = top.parent
    return None if top == file.parent else file.relative_to(top).as_posix()


def kind(name: str) -> str:
    """What a frame is: an ``op`` (``aten::addmm``), a ``python`` function, a ``builtin`` (a function in
    C called from Python), a ``module`` call (``nn.Module: Linear_0``) or an ``annotation`` (another
    ``record_function`` range, ``Optimizer.step#AdamW.step``)."""
    if name.startswith("<built-in"):
        return BUILTIN
    if name.startswith("nn.Module: "):
        return MODULE
    if _PYTHON.match(name):
        return PYTHON
    if "::" in name:
        return OP
    return ANNOTATION


def python_parts(name: str) -> tuple[str, int, str] | None:
    """``(file, line, function)`` of a Python frame's name; ``None`` for any other frame."""
    found = _PYTHON.match(name)
    return None if found is None else (found["file"], int(found["line"]), found["function"])


def short(name: str) -> str:
    """A Python frame as ``file.py:function``; a built-in as the function it names (a method of an
    object as ``Tensor.softmax``; of a type object, torch's functions among them, as its name alone);
    others as they are."""
    parts = python_parts(name)
    if parts is not None:
        return f"{parts[0]}:{parts[2]}"
    if name.startswith("<built-in"):
        named = name.removeprefix("<built-in ").removesuffix(">").replace("function ", "").replace("method ", "")
        function, of, owner = named.partition(" of ")
        if not of or owner == "type":
            return function
        return f"{owner}.{function}"
    return name


def package(name: str) -> str | None:
    """The top-level package a Python frame's file belongs to (``transformers``, ``perfsuite``, a team's
    own package), ``python`` for the standard library, ``torch`` for a module call; ``None`` for ops,
    built-ins and annotations (their time is their caller's)."""
    if name.startswith("nn.Module: "):
        return "torch"
    parts = python_parts(name)
    if parts is None:
        return None
    file = parts[0]
    if file.startswith("<frozen "):
        return "python"
    top = file.split("/", 1)[0].removesuffix(".py")
    return "python" if top in sys.stdlib_module_names else top


def caller(names: Sequence[str]) -> str | None:
    """The frame that asked for what the innermost of ``names`` (outermost first) does: the innermost
    Python frame of the code the case runs (a model's, a library's, a team's), not torch's, the
    standard library's or perfsuite's worker; failing that, the innermost Python frame at all
    (``torch/optim/adamw.py(…): _multi_tensor_adamw``); ``None`` where there is none. Within the
    autograd engine the search starts there: a backward's op is the backward's (its own frame, see
    :func:`is_backward`), unless Python code it runs asked for it (a checkpoint's recomputed forward)."""
    start = max((i for i, name in enumerate(names) if is_backward(name)), default=-1)
    python = [name for name in reversed(names[start + 1 :]) if python_parts(name) is not None]
    own = (n for n in python if not n.startswith(HARNESS) and package(n) != "python")
    if start >= 0:
        return next(own, names[start])
    return next(own, python[0] if python else None)


def is_backward(name: str) -> bool:
    """Whether ``name`` is the autograd engine's entry from Python (``torch/autograd/graph.py(…):
    _engine_run_backward``, or an older torch's ``backward`` and ``grad``): what runs within it is
    the backward pass."""
    return bool(_BACKWARD.match(name))
