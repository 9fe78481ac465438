"""``perfsuite init``: what a repository needs to guard its own training with perfsuite.

Writes the ``[tool.perfsuite]`` section of ``pyproject.toml`` (live settings plus a
commented example of a model, a recipe and the matrix), the matrix test, the
workflows (CPU tier on every push, GPU tier nightly, baseline refresh as a pull request, the
upgrade verdict on a pull request that bumps a pin, with its comment and GPU variant, and the
side-by-side verdict on a pull request that changes the project's own code; Dependabot keeping the
actions' commit pins current),
``baselines/`` and a README section; with ``example``, a model and a training step
of the project's own to start from (``perfsuite_example/``) and their declarations. Nothing
that exists is overwritten without ``force``; a section is appended to an existing
``pyproject.toml`` or README only when it is not there yet; a path it cannot write, or a
``pyproject.toml`` or README it cannot read and parse, stops it before it writes anything
(:class:`InitError`). Pure: no torch, no pytest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from perfsuite.cli.options import writable

TESTS = "tests/test_perfsuite.py"
"""Where the matrix test goes (``[tool.perfsuite] tests`` names it for ``perfsuite baselines refresh``)."""

_FILES = {
    TESTS: "test_perfsuite.py",
    ".github/workflows/perfsuite-cpu.yml": "perfsuite-cpu.yml",
    ".github/workflows/perfsuite-gpu-nightly.yml": "perfsuite-gpu-nightly.yml",
    ".github/workflows/perfsuite-refresh.yml": "perfsuite-refresh.yml",
    ".github/workflows/perfsuite-upgrade.yml": "perfsuite-upgrade.yml",
    ".github/workflows/perfsuite-upgrade-comment.yml": "perfsuite-upgrade-comment.yml",
    ".github/workflows/perfsuite-upgrade-gpu.yml": "perfsuite-upgrade-gpu.yml",
    ".github/workflows/perfsuite-pr.yml": "perfsuite-pr.yml",
    ".github/dependabot.yml": "dependabot.yml",
    "baselines/README.md": "baselines-README.md",
}
"""Files written whole: destination → template."""

EXAMPLE_PACKAGE = "perfsuite_example"
_EXAMPLE_FILES = {
    f"{EXAMPLE_PACKAGE}/__init__.py": None,
    f"{EXAMPLE_PACKAGE}/model.py": "example_model.py",
    f"{EXAMPLE_PACKAGE}/engine.py": "example_engine.py",
}
"""``--example``'s files: destination → template (``None``: empty)."""
_EXAMPLE_TABLE = "[tool.perfsuite.models.example-mlp]"


def template(name: str) -> str:
    """A template's text, with the matrix test's path and this perfsuite's version filled in."""
    text = files("perfsuite").joinpath("templates").joinpath(name).read_text()
    return text.replace("__TESTS__", TESTS).replace("__VERSION__", version("perfsuite"))


class InitError(ValueError):
    """What stops ``perfsuite init`` before it writes anything (:func:`refusal`)."""


def _has_tool_table(text: str) -> bool:
    """Whether ``text``, a ``pyproject.toml`` that parses (:func:`refusal` checked it), has ``[tool.perfsuite]``."""
    return "perfsuite" in tomllib.loads(text).get("tool", {})


def refusal(root: Path, destinations: list[str]) -> str | None:
    """Why ``init`` cannot write ``destinations`` under ``root`` as it would (``None``: it can): a file's
    place that is a directory or lies under a file, or a file it appends to that it cannot read, that is
    not UTF-8, or, for ``pyproject.toml``, that is not valid TOML (its sections could not be told apart);
    a place nothing can be written in (tried as the commands' output options try theirs)."""
    for destination in destinations:
        path = root / destination
        for parent in reversed(Path(destination).parents[:-1]):
            if (root / parent).exists() and not (root / parent).is_dir():
                return f"{path}: {root / parent} is not a directory"
        if path.is_dir():
            return f"{path}: is a directory, where perfsuite init writes a file"
        try:
            writable(path.parent)  # a directory it cannot write in (made where missing)
            if path.exists() and not os.access(path, os.W_OK):
                return f"{path}: cannot write it"
        except (OSError, ValueError) as exc:
            return f"{path}: {getattr(exc, 'strerror', None) or exc}"
        if destination not in ("pyproject.toml", "README.md") or not path.exists():
            continue
        try:
            text = path.read_text(encoding="utf-8")
            if path.suffix == ".toml":
                tomllib.loads(text)
        except OSError as exc:
            return f"{path}: cannot read it: {exc.strerror or exc}"
        except UnicodeDecodeError as exc:
            return f"{path}: not UTF-8 text (byte {exc.start})"
        except tomllib.TOMLDecodeError as exc:
            return f"{path}: not valid TOML: {exc}"
    return None


def _append_section(path: Path, marker: str, text: str) -> str:
    """Append ``text`` to ``path`` unless it already holds ``marker``; what was done, as one line."""
    if not path.exists():
        path.write_text(text.lstrip("\n"), encoding="utf-8")
        return f"wrote     {path.name}"
    current = path.read_text(encoding="utf-8")
    present = _has_tool_table(current) if path.suffix == ".toml" else marker in current
    if present:
        # A section in a hand-edited file is the user's: even --force leaves it to them.
        return f"kept      {path.name} (it has {marker} already; edit it there)"
    path.write_text(current.rstrip("\n") + "\n" + text, encoding="utf-8")
    return f"appended  {path.name} ({marker})"


def _append_example(path: Path) -> str:
    """Append the example's declarations to ``path``'s ``[tool.perfsuite]``, unless they are there or
    would not be valid TOML there (a matrix written inline); what was done, as one line."""
    current = path.read_text(encoding="utf-8")
    if _EXAMPLE_TABLE in current:
        return f"kept      {path.name} (it declares the example already)"
    text = current.rstrip("\n") + "\n" + template("example-section.toml")
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return f"kept      {path.name} (the example's declarations would not fit it: {exc}; add them by hand)"
    path.write_text(text, encoding="utf-8")
    return f"appended  {path.name} ({_EXAMPLE_TABLE} and its engine and cases)"


def _write_files(root: Path, files: Mapping[str, str | None], force: bool) -> list[str]:
    lines = []
    for destination, name in files.items():
        path = root / destination
        if path.exists() and not force:
            lines.append(f"kept      {destination} (exists; --force overwrites it)")
            continue
        verb = "rewrote  " if path.exists() else "wrote    "
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template(name) if name is not None else "", encoding="utf-8")
        lines.append(f"{verb} {destination}")
    return lines


def section(*, gpu: bool = False) -> str:
    """The ``[tool.perfsuite]`` section: settings, the step-time gates of the CPU tier, a GPU's where
    ``gpu`` (the machine ``init`` runs on has one), and the commented example."""
    gates = template("tolerance-cpu.toml") + (template("tolerance-gpu.toml") if gpu else "")
    head, marker, example = template("pyproject-section.toml").partition("\n# An example to adapt.")
    return head + gates + "\n" + marker.lstrip("\n") + example


def init(root: Path, *, force: bool = False, example: bool = False, gpu: bool = False) -> list[str]:
    """Set perfsuite up in the repository at ``root``; one line per path, saying what was done.
    ``example``: also a model and an engine of the project's own, declared, to start from; ``gpu``: the
    machine has a GPU, whose step-time gates are written too."""
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    problem = refusal(root, ["pyproject.toml", *_FILES, *(_EXAMPLE_FILES if example else ()), "README.md"])
    if problem is not None:
        raise InitError(f"{problem}; nothing written")
    pyproject = root / "pyproject.toml"
    lines = [_append_section(pyproject, "[tool.perfsuite]", section(gpu=gpu))]
    if example and lines[0].startswith("kept"):
        lines = []  # the section is there: the example's line says what became of the file
    lines += _write_files(root, _FILES, force)
    if example:
        lines += _write_files(root, _EXAMPLE_FILES, force)
        lines.append(_append_example(pyproject))
    lines.append(_append_section(root / "README.md", "## Performance tests", template("readme-section.md")))
    # Recorded on committed code, a baseline's change can be explained later against that commit.
    record = "`perfsuite baselines refresh` to record baselines and `pytest " + TESTS + "` to gate them"
    if example:  # the example's model, engine and cases are declared already
        yours = "then declare your own models and cases beside the example's"
        lines.append(f"next: commit these files, then {record}; {yours}")
    else:
        lines.append(
            f"next: declare your models, recipes and cases in pyproject.toml's [tool.perfsuite], commit, then {record}"
        )
    return lines
