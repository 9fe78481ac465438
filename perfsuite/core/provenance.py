"""What a result was measured on, as far as it can be told without importing the stack: the date,
the repository's commit, python and the installed versions of the training stack.

One definition for every file perfsuite writes: a baseline's ``provenance``, the ``env`` of
``--perfsuite-json`` and of ``perfsuite run --json`` (which add the device's facts, see
:mod:`perfsuite.worker.env`). No torch, no pytest.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from perfsuite.core.results_file import PAGE_MARK, SUMMARY_MARK

LIBRARIES = ("torch", "transformers", "accelerate", "deepspeed", "bitsandbytes", "datasets", "numpy", "perfsuite")


def library_versions() -> dict[str, str | None]:
    """Installed versions, without importing the packages (``None`` when absent)."""
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def direct_url(dist: metadata.Distribution) -> dict[str, Any]:
    """An installed distribution's ``direct_url.json`` (PEP 610: an editable install's or a VCS
    install's source); ``{}`` where it has none, or one that is not a JSON object."""
    try:
        found = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def git(root: Path, *args: str) -> str | None:
    """``git args`` in ``root``, its output stripped; ``None`` outside a repository or without git."""
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def files_differ(top: Path, base: str, head: str | None = None) -> list[str] | None:
    """The files of the repository at ``top`` that differ between ``base`` and ``head`` (``None``: the
    working tree, with its :func:`untracked` files), a renamed file's both names, Python's bytecode
    caches aside, sorted; ``None`` where git cannot tell."""
    changed = git(top, "diff", "-z", "--name-only", "--no-renames", base, *([head] if head is not None else []))
    added = untracked(top) if head is None else []
    if changed is None or added is None:
        return None
    names = {*changed.split("\0"), *added}
    return sorted(name for name in names if name and "__pycache__" not in name.split("/"))


def untracked(root: Path, *pathspecs: str) -> list[str] | None:
    """The files of ``root``'s repository (``pathspecs`` narrow them) that git neither tracks nor ignores,
    as ``git ls-files`` names them from ``root``: bytecode caches, virtual environments (a directory
    holding ``pyvenv.cfg``: ``python -m venv`` before Python 3.13 writes no ``.gitignore`` into one) and
    perfsuite's own results files (:func:`results_file`) aside; ``None`` where git cannot tell."""
    listed = git(root, "ls-files", "-z", "--others", "--exclude-standard", *(["--", *pathspecs] if pathspecs else []))
    if listed is None:
        return None
    names = [name for name in listed.split("\0") if name and "__pycache__" not in name.split("/")]
    venvs = tuple(name.removesuffix("pyvenv.cfg") for name in names if name.endswith("/pyvenv.cfg"))
    return [name for name in names if not (venvs and name.startswith(venvs)) and not results_file(root / name)]


RESULTS_FILE_MAX_BYTES = 64 * 2**20
"""The largest ``.json`` file :func:`results_file` reads to tell whether perfsuite wrote it."""


def results_file(path: Path) -> bool:
    """Whether ``path`` is an earlier run's output left in the checkout, which is no code: a results file
    perfsuite writes (``--perfsuite-json``, ``perfsuite run``, ``ab`` or ``bisect --json``: a JSON object
    with a ``schema_version`` and a ``cases`` list), a page of a ``--report`` directory (an ``.html`` file
    whose head perfsuite marked), the ``summary.md`` written beside one (or an ``ab`` summary, which ab
    writes alone without the report's extra), or a profiler's trace (``.pt.trace.json.gz``: those an
    explanation writes beside its report or results file)."""
    if path.name.endswith((".pt.trace.json.gz", ".pt.trace.json")):  # a profiled step's trace (ab's explanations)
        return True
    if path.name == "summary.md":
        return _starts(path, SUMMARY_MARK) or _starts(path.with_name("report.html"), PAGE_MARK, within=1024)
    if path.suffix == ".html":
        return _starts(path, PAGE_MARK, within=1024)
    try:
        if path.suffix != ".json" or path.stat().st_size > RESULTS_FILE_MAX_BYTES:
            return False
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return False
    return (
        isinstance(data, dict) and isinstance(data.get("schema_version"), int) and isinstance(data.get("cases"), list)
    )


def _starts(path: Path, mark: str, within: int = 0) -> bool:
    """Whether ``path``'s first bytes hold ``mark``: at its start, or among its first ``within`` bytes."""
    try:
        with path.open("rb") as f:
            head = f.read(max(within, len(mark)))
    except OSError:
        return False
    return head.startswith(mark.encode()) or (within > 0 and mark.encode() in head)


def said_files(names: Sequence[str], shown: int = 5) -> str:
    """``2 file(s): README.md, acme/model.py``, the first ``shown`` named and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} file(s): {', '.join(names[:shown])}{more}"


def now() -> str:
    """The current UTC time, to the second, ISO 8601."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_facts(root: Path, aside: Path | None = None) -> dict[str, Any]:
    """``date``, ``commit``, ``dirty`` (tracked files changed) and ``untracked`` (:func:`untracked` files)
    of the repository at ``root``, the files under ``aside`` (the baselines) aside from both, the ``host``,
    ``python`` and the stack's ``versions``. A commit with neither is the whole code that ran."""
    top = git(root, "rev-parse", "--show-toplevel")
    rest = _rest(aside, top)
    status = git(root, "status", "--porcelain", "--untracked-files=no", "--", *rest)
    added = untracked(root, *rest)
    return {
        "date": now(),
        "commit": git(root, "rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
        "untracked": bool(added) if added is not None and top else None,
        "host": platform.node(),
        "python": platform.python_version(),
        "versions": library_versions(),
    }


def _rest(aside: Path | None, top: str | None) -> list[str]:
    """The pathspecs of the whole repository at ``top`` but what lies under ``aside`` (a directory below
    the top: the top itself sets nothing aside)."""
    if aside is None or not top or not aside.resolve().is_relative_to(Path(top).resolve()):
        return [":/"]
    under = aside.resolve().relative_to(Path(top).resolve()).as_posix()
    return [":/", f":(top,exclude){under}"] if under != "." else [":/"]
