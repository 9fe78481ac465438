"""The ``perfsuite`` command, one module per subcommand: ``run`` (read :mod:`perfsuite.cli.run` first),
``list`` and ``init`` (:mod:`~perfsuite.cli.scaffold` writes what ``init`` does), ``baselines refresh``,
``report`` and ``merge``, ``history``, ``overhead`` (its rounds: :mod:`~perfsuite.cli.overhead_rounds`),
``ab`` and ``bisect``, ``comment`` (the upgrade verdict comment workflow's step);
:mod:`perfsuite.cli.selection` holds the options that choose the cases, which ``run`` and ``ab``
share, and :mod:`perfsuite.cli.common` what several subcommands do. What the command and the pytest
plugin share: :mod:`~perfsuite.cli.options` (the options both take) and :mod:`~perfsuite.cli.interrupt`
(SIGTERM and Ctrl-C as one interrupt). The subcommands are imported when the command runs, so that the
plugin's import of those two stays cheap.

Every bad input ends in one line (``perfsuite: error: ...``) and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from perfsuite.cli.common import Parser, fail
from perfsuite.core.registry import DeclarationError


def _subcommands() -> tuple[list[Callable[[Any], object]], dict[str, Callable[[Any], int]]]:
    """Each subcommand's parser maker, in ``--help``'s order, and what runs it by name."""
    from perfsuite.cli import ab, baselines, catalog, comment, history, overhead, report
    from perfsuite.cli import bisect as bisect_command
    from perfsuite.cli import run as run_command

    parsers: list[Callable[[Any], object]] = [
        run_command.add_parser,
        overhead.add_parser,
        ab.add_parser,
        bisect_command.add_parser,
        catalog.add_list,
        catalog.add_init,
        baselines.add_parser,
        report.add_merge,
        report.add_report,
        history.add_parser,
        comment.add_parser,
    ]
    commands: dict[str, Callable[[Any], int]] = {
        "run": run_command.run,
        "list": catalog.run_list,
        "init": catalog.run_init,
        "baselines": baselines.run,
        "report": report.run_report,
        "merge": report.run_merge,
        "history": history.run,
        "overhead": overhead.run,
        "ab": ab.run,
        "bisect": bisect_command.run,
        "comment": comment.run,
    }
    return parsers, commands


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="perfsuite", description="Performance regression tests for training transformer models.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in _subcommands()[0]:
        add_parser(sub)
    return parser


def _as_python_m() -> None:
    """Run as ``python -m perfsuite`` does, where the ``perfsuite`` script is the main module.

    multiprocessing runs a main *script* again in every process it starts (``__mp_main__``),
    here importing this command line in every worker, about 50 ms each; a package's
    ``__main__`` module it never re-runs. The script is this module's ``main`` and nothing
    else, so it is named by the module that is.
    """
    script = sys.modules.get("__main__")
    if script is not None and getattr(script, "__spec__", None) is None and getattr(script, "main", None) is main:
        script.__spec__ = importlib.util.find_spec("perfsuite.__main__")


def main(argv: Sequence[str] | None = None) -> int:
    _as_python_m()
    args = build_parser().parse_args(argv)
    try:
        return _subcommands()[1][args.command](args)
    except DeclarationError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C outside a command's own handling (perfsuite.cli.interrupt): no traceback
        print("perfsuite: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # its reader stopped reading (`perfsuite list | head -1`): what it wanted, it has
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
