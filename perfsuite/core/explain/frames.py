"""A profiled frame's name made comparable across two environments, and the package it belongs to.

torch's profiler names a Python frame ``path(line): function``, its path relative to the
``sys.path`` entry it was found under (``transformers/models/bert/modeling_bert.py(312): forward``),
so the same library in two environments (a virtual environment and an overlay) gives the same
names. What still differs between two processes is normalised here: object addresses in the names
of built-in methods, and absolute paths of files outside ``sys.path`` (reduced to what follows
``site-packages/``, else to the path below the working directory, else to the file's name).
"""

from __future__ import annotations

import re
import sys
from pathlib import PurePosixPath

_ADDRESS = re.compile(r"(?: object)? at 0x[0-9a-fA-F]+")
_PYBIND = re.compile(r" of pybind11_builtins\.[^>]*")
_PYTHON = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.+)$")
OP = "op"
PYTHON = "python"
BUILTIN = "builtin"
MODULE = "module"
ANNOTATION = "annotation"


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
    elif cwd and path.startswith(cwd.rstrip("/") + "/"):
        path = path[len(cwd.rstrip("/")) + 1 :]
    else:
        path = PurePosixPath(path).name
    return f"{path}({found['line']}): {found['function']}"


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
