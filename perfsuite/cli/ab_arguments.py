"""``perfsuite ab``'s arguments: the two sides, the cases, the statistics, the outputs
(:mod:`perfsuite.cli.ab` runs the comparison)."""

from __future__ import annotations

import argparse

from perfsuite.ab.pairs import LOSS_SEEDS, MODES
from perfsuite.cli.common import names
from perfsuite.cli.options import (
    at_least,
    fraction,
    loss_seeds,
    not_a_file,
    output_file,
    positive_fraction,
)
from perfsuite.cli.selection import add_selection


def add_arguments(ab: argparse.ArgumentParser) -> None:
    """Every argument of ``perfsuite ab`` on its parser."""
    ab.add_argument(
        "--base",
        metavar="ENV",
        help="an interpreter, a virtual environment, 'current', or pins over this environment "
        "(transformers==4.57.6, or 'torch==2.12.0,accelerate==1.10.0')",
    )
    ab.add_argument("--candidate", metavar="ENV", help="the same kinds as --base")
    ab.add_argument(
        "--pins",
        metavar="BASE..HEAD",
        help="instead of --base and --candidate: the exact pins that the commits BASE..HEAD of this git "
        "repository change in requirements*.txt, pyproject.toml, uv.lock or poetry.lock, BASE's versions as the "
        "base and HEAD's as the candidate, each over this environment (BASE...HEAD: from their merge base; "
        "BASE alone: BASE..HEAD; a range is skipped, saying so; no pin changed: nothing to compare, exit 0)",
    )
    ab.add_argument(
        "--pin-files",
        type=names,
        metavar="GLOBS",
        help="with --pins: more files to read as requirements files, comma-separated globs as GitHub's paths "
        "filters write them (.github/gpu-pinned.txt, 'constraints/**')",
    )
    ab.add_argument(
        "--base-ref",
        metavar="REF",
        help="compare the project's own code (its models, batch makers, steps and declarations) at commit REF, "
        "as the base, with the working tree as it is, as the candidate: each side's server runs in its own copy "
        "of the project and imports the project's modules from it first (with --base/--candidate: in those "
        "environments; default: this one)",
    )
    ab.add_argument(
        "--own",
        metavar="BASE..HEAD",
        help="the same as --base-ref with both sides commits: BASE's code as the base, HEAD's as the candidate "
        "(BASE...HEAD: from their merge base; BASE alone: BASE..HEAD)",
    )
    ab.add_argument(
        "--with",
        dest="with_",
        metavar="SPECS",
        help="requirements laid over this environment on both sides ('torch==2.13.0,numpy<2'): each side's own "
        "pins resolve with them, so an old release that needs an older companion can be compared",
    )
    ab.add_argument(
        "--show-sides",
        action="store_true",
        help="say the two sides (with --pins: what moved) and what each overlay would change in this environment, "
        "resolved as its set-up would (exit 3 where one cannot be), and exit; nothing is installed and no case "
        "runs, though a project's own model and engine code is still imported once to check the selection",
    )
    add_selection(ab)
    ab.add_argument("--floor", type=fraction, default=0.03, help="smallest time change called (default 0.03: 3%%)")
    ab.add_argument(
        "--alpha", type=positive_fraction, default=0.05, help="false-alarm rate over all cases together (default 0.05)"
    )
    ab.add_argument(
        "--pairs",
        type=at_least(1),
        help="pairs before the first verdict (default: the first alarm look, 15 for 35 cases; docs/ab.md)",
    )
    ab.add_argument(
        "--max-pairs",
        type=at_least(1),
        help="cap while undecided (default 60)",
    )
    ab.add_argument(
        "--stop-on-regression",
        action="store_true",
        help="finish a case whose memory or loss regressed (both are decided at its first pair) at its time's "
        "first look, with the time verdict that look reached",
    )
    ab.add_argument(
        "--loss-seeds",
        type=loss_seeds,
        metavar="N",
        help="where a case's sides start from other initial weights, the base runs it at N other seeds and the "
        f"candidate's loss is judged against their spread (default {LOSS_SEEDS} comparing the project's own code, "
        "--base-ref or --own; else 0: an upgrade that draws other initial weights regressed)",
    )
    ab.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="duet: both sides at once, one core each (CPU cases in one process); alternate: one side, then "
        "the other; auto (default): duet where a case fits, else alternate",
    )
    ab.add_argument(
        "--jobs",
        type=at_least(1),
        default=1,
        metavar="K",
        help="at most K cases at once: K duets on two cores each (leave the machine's other work a core; the "
        "cases that alternate run on the cores left over, else after the duets), or K cases on K GPUs, one each. "
        "Default 1, until an A/A and an injected 5%% slowdown show the same false-alarm rate and sensitivity "
        "with one duet as with the most a large machine allows (docs/ab.md)",
    )
    explaining = ab.add_mutually_exclusive_group()
    explaining.add_argument(
        "--explain",
        dest="explain",
        action="store_const",
        const="all",
        default="auto",
        help="explain every case's time, memory and loss (default: a case's time when its verdict is not same, "
        "its memory or loss when they moved; docs/explain.md)",
    )
    explaining.add_argument("--no-explain", dest="explain", action="store_const", const="none", help="explain nothing")
    ab.add_argument("--json", type=output_file, help="write every pair, figure and verdict to this JSON file")
    ab.add_argument("--report", type=not_a_file, metavar="DIR", help="write report.html and summary.md there")
