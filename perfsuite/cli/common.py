"""What the subcommands share: comma-separated names, the project around the working directory,
and the one-line error every bad input gets."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from perfsuite.core.declaration import find_pyproject, project_baselines_dir, read_pyproject
from perfsuite.core.declaration import load_project as load_project
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSpec


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one line (``perfsuite: error: ...``) and exit code 2,
    not the usage block; ``--help`` shows the usage. An option is spelled whole: a prefix argparse would
    accept (``--pin`` for ``--pins``) becomes ambiguous, and a CI script that used it breaks, the day
    another option starts the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """A subcommand refuses what it does not know itself, so that the line names it (``perfsuite: error:
        run: unrecognized arguments: --mod``); argparse leaves them to ``perfsuite``, which cannot say whose."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog.strip():  # a subcommand's parser: perfsuite's own takes no option of its
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("perfsuite").strip()
        self.exit(2, f"perfsuite: error: {command + ': ' if command else ''}{message}\n")


def names(value: str) -> list[str]:
    """An option's comma-separated names, blanks dropped; none at all is an error (an empty list would
    read as "the default", a different and often longer run than the one asked for)."""
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    if not chosen:
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated names, got {value!r}")
    return chosen


def fail(message: str) -> int:
    """``perfsuite: error: <message>`` on stderr; the exit code of bad input."""
    print(f"perfsuite: error: {message}", file=sys.stderr)
    return 2


def project_baselines() -> tuple[dict[str, Any], Path]:
    """The nearest project's ``[tool.perfsuite]`` and where its baselines directory is (it may not exist:
    a project's first refresh makes it); a mistake in the settings is a :class:`DeclarationError`
    (:func:`~perfsuite.core.declaration.read_pyproject`)."""
    pyproject = find_pyproject(Path.cwd())
    settings = read_pyproject(pyproject) if pyproject is not None else {}
    return settings, project_baselines_dir(pyproject.parent if pyproject else Path.cwd(), settings)


def no_baselines_directory(root: Path) -> str:
    """What a command that reads the baselines says where ``root`` is no directory."""
    shown = Path(os.path.relpath(root, Path.cwd())).as_posix()
    return (
        f"no baselines directory at {shown}: run this from the repository's root, where `[tool.perfsuite] "
        "baselines` (default `baselines/`) names it (`perfsuite init` makes one)"
    )


def check_project_code(specs: Sequence[CaseSpec]) -> None:
    """The project's own models and engines ``specs`` use, checked in a worker before anything runs
    (:mod:`perfsuite.worker.preflight`): a :class:`DeclarationError` saying what is wrong."""
    from perfsuite.core.preloads import preload_for
    from perfsuite.worker.preflight import checked_first, preflight

    if any(checked_first(spec) for spec in specs):
        preload_for(specs)  # the forkserver the check boots serves the cases after it
        problem = preflight(specs)
        if problem is not None:
            raise DeclarationError(problem)
