"""``perfsuite bisect PACKAGE --good V1 --bad V2 --case ID``: which release changed the case;
``perfsuite bisect --own --good REF --bad REF --case ID``: which commit of the project's own code did.

Exit codes: 0 found (or the two ends do not differ: said so), 1 untestable releases or commits leave
a range, 2 bad arguments, 3 an end cannot be tested.
"""

from __future__ import annotations

import argparse
from typing import Any

from perfsuite.options import at_least, fraction, output_file, positive_fraction, positive_seconds

METRICS = ("time", "memory", "loss")


def add_parser(sub: Any) -> None:
    bisect = sub.add_parser("bisect", help="find the release of a package that changed a case's time, memory or loss")
    bisect.add_argument(
        "package", nargs="?", help="the package to bisect (transformers, accelerate, peft, ...); none with --own"
    )
    bisect.add_argument(
        "--own",
        action="store_true",
        help="bisect the project's own commits instead: --good and --bad are git revisions, and each commit on "
        "--bad's first-parent history after --good is compared with --good, both in this environment, each "
        "running in its own copy of the project (perfsuite ab --own)",
    )
    bisect.add_argument(
        "--good", required=True, metavar="V1", help="a release (with --own: a commit) where the case is as it should be"
    )
    bisect.add_argument("--bad", required=True, metavar="V2", help="a release (with --own: a commit) where it changed")
    bisect.add_argument("--case", required=True, help="a case id, as `perfsuite run` and the tests name it")
    bisect.add_argument("--metric", choices=METRICS, default="time", help="what changed (default: time)")
    bisect.add_argument("--pre", action="store_true", help="also test pre-releases between the two")
    bisect.add_argument(
        "--with",
        dest="with_",
        metavar="SPECS",
        help="requirements held on every side ('torch==2.13.0,numpy<2'): each release resolves with them, so "
        "an old one that needs an older companion is tested rather than refused",
    )
    bisect.add_argument("--steps", type=at_least(1), help="timed optimizer steps per run (default: the device's)")
    bisect.add_argument("--threads", type=at_least(1), default=1, help="torch threads per case (default 1)")
    bisect.add_argument("--floor", type=fraction, default=0.03, help="smallest time change called (default 3%%)")
    bisect.add_argument(
        "--alpha", type=positive_fraction, default=0.05, help="false-alarm rate per comparison (default 0.05)"
    )
    bisect.add_argument("--pairs", type=at_least(2), help="pairs before the first verdict (default: the fewest)")
    bisect.add_argument("--max-pairs", type=at_least(2), help="cap while undecided (default 60)")
    bisect.add_argument("--timeout", type=positive_seconds, help="seconds before a run is killed")
    bisect.add_argument("--json", type=output_file, help="write the steps and the answer to this JSON file")


def run(args: argparse.Namespace) -> int:
    from perfsuite.ab.bisect import BisectError, between, check_order, index_versions
    from perfsuite.ab.envs import EnvError, parse_held
    from perfsuite.ab.runner import Bisection, case_spec
    from perfsuite.reports.tables import log_console
    from perfsuite.worker.device import default_device_type

    console = log_console(stderr=True)

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        if args.own != (args.package is None):
            raise ValueError("name the package to bisect, or give --own to bisect the project's commits, not both")
        spec = case_spec(args.case, steps=args.steps, threads=args.threads)
        args.device_type = default_device_type()
        args.held = parse_held(args.with_)
        if args.own:
            return _own(args, spec, say)
        check_order(args.good, args.bad)
        versions = between(index_versions(args.package), args.good, args.bad, pre=args.pre)
    except (BisectError, ValueError, EnvError) as exc:
        say(f"perfsuite: error: {exc}")
        return 2
    say(f"perfsuite: {args.package}: {len(versions)} releases from {versions[0]} (good) to {versions[-1]} (bad)")
    return Bisection(args, spec, versions, say).run()


def _own(args: argparse.Namespace, spec: Any, say: Any) -> int:
    """``--own``: the project's commits from ``--good`` to ``--bad`` (first parents), each written into a
    tree of its own when it is tested (:mod:`perfsuite.ab.own`), in this environment."""
    import shutil
    import tempfile
    from pathlib import Path

    from perfsuite.ab import commits
    from perfsuite.ab.envs import EnvError, make_env
    from perfsuite.ab.own import at_commit, project_root
    from perfsuite.ab.runner import Bisection

    project = project_root()
    top = commits.check_repository(project, "--own")
    good = commits.describe(top, commits.commit(top, commits.check_revision(args.good, "--good"), "--good"))
    bad = commits.commit(top, commits.check_revision(args.bad, "--bad"), "--bad")
    found = {c.short: c for c in [good, *commits.first_parent_range(top, good.sha, bad, "--own")]}
    inside = project.resolve().relative_to(top.resolve())
    scratch = Path(tempfile.mkdtemp(prefix="perfsuite-bisect-"))

    def env_for(point: str, name: str) -> Any:
        try:
            tree = at_commit(top, found[point], inside, scratch, "--own")
        except commits.GitError as exc:  # a commit without the project: untestable, stepped around
            raise EnvError(str(exc)) from None
        return tree.env(make_env("current", name=name, held=args.held))

    points = list(found)
    say(f"perfsuite: the project's code: {len(points)} commits from {points[0]} (good) to {points[-1]} (bad)")
    try:
        return Bisection(
            args, spec, points, say, env_for=env_for, what="commit", describe=lambda p: found[p].describe()
        ).run()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
