"""``perfsuite bisect PACKAGE --good V1 --bad V2 --case ID``: which release changed the case;
``perfsuite bisect --own --good REF --bad REF --case ID``: which commit of the project's own code did.

Exit codes: 0 found (or the two ends do not differ: said so), 1 untestable releases or commits leave
a range, 2 bad arguments, 3 an end cannot be tested or the ends' time comparison stayed undecided,
130 Ctrl-C and 143 SIGTERM (what was compared is said, and written to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.ab.pairs import LOSS_SEEDS
from perfsuite.cli.options import at_least, fraction, loss_seeds, output_file, positive_fraction, positive_seconds
from perfsuite.core.results import write_results

if TYPE_CHECKING:
    from perfsuite.ab.bisect import Found
    from perfsuite.ab.bisecting import Bisection
    from perfsuite.ab.options import BisectOptions
    from perfsuite.core.changed_code import ChangedCode
    from perfsuite.core.spec import CaseSpec

METRICS = ("time", "memory", "loss")


def add_parser(sub: Any) -> None:
    bisect = sub.add_parser(
        "bisect",
        help="find the release of a package, or the commit of the project's own code (--own), that changed a case's "
        "time, memory or loss",
    )
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
        "--repo",
        type=Path,
        metavar="PATH",
        help="a local clone of the package: once the first bad release (or a range's first judged bad) is "
        "found, go on commit by commit between its tag and the last good release's, each commit built from the "
        "clone (a pure-Python build where the package allows) over the last good release's dependencies; a "
        "commit that does not build or import is stepped around",
    )
    bisect.add_argument(
        "--commits",
        action="store_true",
        help="with --repo: --good and --bad are revisions of the clone (tags, commits): bisect its commits only",
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
    bisect.add_argument(
        "--no-explain",
        dest="explain",
        action="store_false",
        help="do not explain the answer (by default the first bad release or commit, or the first judged bad of a "
        "range, is run instrumented against the last good, A B A B, and the cause of the change in the metric "
        "searched is said)",
    )
    bisect.add_argument(
        "--loss-seeds",
        type=loss_seeds,
        metavar="N",
        help="where a point starts from other initial weights than the good end, the good end runs the case at N "
        f"other seeds and the point's loss is judged against their spread, as perfsuite ab judges it (default "
        f"{LOSS_SEEDS} with --own; else 0: a release that draws other initial weights changed the loss)",
    )
    bisect.add_argument("--json", type=output_file, help="write the steps and the answer to this JSON file")


def run(args: argparse.Namespace) -> int:
    import sys

    from perfsuite.ab.bisecting import BisectInterrupted
    from perfsuite.cli.interrupt import terminate_as_interrupt

    with terminate_as_interrupt() as interrupt:
        try:
            return _run(args, lambda: interrupt.name if interrupt.signum is not None else None)
        except BisectInterrupted:  # it said what it had judged
            return interrupt.exit_code
        except KeyboardInterrupt:
            print(f"perfsuite bisect: interrupted by {interrupt.name}", file=sys.stderr)
            return interrupt.exit_code


def _run(args: argparse.Namespace, heard: Callable[[], str | None]) -> int:
    """The bisection; ``heard``: the signal that stopped it, once one has (see ``Bisection.heard``)."""
    from packaging.utils import canonicalize_name

    from perfsuite.ab.bisect import BisectError, between, check_order, index_versions
    from perfsuite.ab.bisecting import Bisection, case_spec
    from perfsuite.ab.comparison import cap_problem
    from perfsuite.ab.envs import EnvError, make_env, parse_held
    from perfsuite.ab.options import BisectOptions
    from perfsuite.reports.tables import log_console
    from perfsuite.worker.device import default_device_type

    console = log_console(stderr=True)

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        if args.own and args.package is not None:
            raise ValueError("name the package to bisect, or give --own to bisect the project's commits, not both")
        if not args.own and args.package is None:
            raise ValueError("name the package to bisect, or give --own to bisect the project's commits")
        if args.own and args.repo:
            raise ValueError("--repo is a package's clone; --own bisects the project's own repository")
        problem = cap_problem(args.pairs, args.max_pairs) if args.metric == "time" else None
        if problem is not None:
            raise ValueError(problem)
        if args.commits and not args.repo:
            raise ValueError("--commits bisects a clone's commits: give the clone with --repo")
        if args.pre and (args.own or args.commits):
            raise ValueError("--pre adds a package's pre-releases between two releases; commits have none")
        if args.repo is not None:
            from perfsuite.ab.commits import check_clone

            check_clone(args.repo, "--repo")  # a bare clone will do; a GitError is a ValueError
        options = BisectOptions(
            package=args.package,
            metric=args.metric,
            device_type=default_device_type(),
            floor=args.floor,
            alpha=args.alpha,
            pairs=args.pairs,
            max_pairs=args.max_pairs,
            timeout=args.timeout,
            held=parse_held(args.with_),
            json=args.json,
            explain=args.explain,
            loss_seeds=args.loss_seeds if args.loss_seeds is not None else LOSS_SEEDS if args.own else 0,
        )
        bisected = canonicalize_name(args.package) if args.package else None
        if any(canonicalize_name(r.name) == bisected for r in options.held):
            raise ValueError(f"--with holds {args.package}, the package bisected: each side installs its own release")
        if args.own:
            points, env_for, scratch, spec, changed = _project_commits(args, options)
            return _commits(options, spec, say, heard, points, env_for, "commit", scratch, changed=changed)[0]
        spec = case_spec(args.case, steps=args.steps, threads=args.threads)
        if args.commits:
            return _commits(
                options,
                spec,
                say,
                heard,
                *_clone_commits(args, args.good, args.bad, make_env("current", name="good", held=options.held)),
            )[0]
        check_order(args.good, args.bad)
        versions = between(index_versions(args.package), args.good, args.bad, pre=args.pre)
    except (BisectError, ValueError, EnvError) as exc:
        say(f"perfsuite: error: {exc}")
        return 2
    say(f"perfsuite: {args.package}: {len(versions)} releases from {versions[0]} (good) to {versions[-1]} (bad)")
    releases = Bisection(options, spec, versions, say, heard=heard, explains=args.repo is None)  # else the commit's
    code = releases.run()
    found = releases.found
    if args.repo is None or found is None:
        return code
    return _releases_commits(args, options, spec, say, heard, releases, code)


def _releases_commits(
    args: argparse.Namespace,
    options: BisectOptions,
    spec: Any,
    say: Callable[[str], None],
    heard: Callable[[], str | None],
    releases: Bisection,
    code: int,
) -> int:
    """``--repo``: the commits between the last good release's tag and the first judged bad's (a range
    of untestable releases too: a commit may build where its release did not install). Where they
    give no answer (no tag, an end that does not build, source builds that do not differ), the
    releases' answer stands, explained, with its exit code; ``--json`` keeps the commits' attempt."""
    from perfsuite.ab import commits
    from perfsuite.ab.bisecting import BisectInterrupted
    from perfsuite.ab.builds import release_tag
    from perfsuite.ab.envs import EnvError, make_env

    assert releases.found is not None
    last_good, known_bad = releases.found.last_good, releases.found.known_bad
    released = json.loads(args.json.read_text()) if args.json else None

    def add(key: str, value: Any) -> None:
        """``--json``: ``key`` added to what the file holds."""
        if args.json:
            write_results({**json.loads(args.json.read_text()), key: value}, json_file=args.json, say=None)

    try:
        good, bad = (release_tag(args.repo, args.package, v, "--repo") for v in (last_good, known_bad))
        base = make_env(f"{args.package}=={last_good}", name="good", held=options.held)
        # The releases' metric (the first failing run, if they turned to it), kept: a commit built from a tag
        # may fail where its wheel ran, which is no answer to what the releases were searched for.
        commit_code, answer = _commits(
            releases.options, spec, say, heard, *_clone_commits(args, good.sha, bad.sha, base), may_switch=False
        )
    except BisectInterrupted:
        add("releases", released)  # with what the interrupt left of the commits' search
        raise
    except (commits.GitError, EnvError) as exc:
        why, searched = str(exc), None
    else:
        if answer is not None:  # a first bad commit, or a range of them: narrower than the releases'
            add("releases", released)
            return commit_code
        why = f"their search gave no answer (exit {commit_code})"
        searched = json.loads(args.json.read_text()) if args.json else None
    span = f"the commits between {last_good} and {known_bad}"
    say(f"perfsuite: {span} were not bisected: {why}; the releases' answer stands")
    if options.explain:
        releases.explain_found()  # writes the releases' answer, explained
    elif args.json and released is not None:
        write_results(released, json_file=args.json, say=None)
    add("commits", searched or {"error": why})
    return code


def _project_commits(
    args: argparse.Namespace, options: BisectOptions
) -> tuple[dict[str, Any], Any, Path, CaseSpec, ChangedCode]:
    """``--own``: the project's commits from ``--good`` to ``--bad``, each written into a tree of its own
    under a scratch directory when it is tested (:mod:`perfsuite.ab.own`), in this environment; that
    directory; what the project's code changes between the ends (watched in their comparison); and
    ``--case`` as the bad commit declares it (its tree written now: the working tree has
    no say)."""
    from perfsuite.ab import commits
    from perfsuite.ab.bisecting import case_spec
    from perfsuite.ab.envs import EnvError, make_env
    from perfsuite.ab.own import at_commit, changed_between, importing_from, project_root

    project = project_root()
    top = commits.check_repository(project, "--own")
    found = _first_parents(top, args.good, args.bad, "--own")
    inside = project.resolve().relative_to(top.resolve())
    scratch = Path(tempfile.mkdtemp(prefix="perfsuite-bisect-"))

    def env_for(point: str, name: str) -> Any:
        try:
            tree = at_commit(top, found[point], inside, scratch, "--own")
        except commits.GitError as exc:  # a commit without the project: untestable, stepped around
            raise EnvError(str(exc)) from None
        return tree.env(make_env("current", name=name, held=options.held))

    try:
        bad = at_commit(top, found[list(found)[-1]], inside, scratch, "--bad")
        with importing_from(bad):
            spec = case_spec(args.case, steps=args.steps, threads=args.threads, project=bad.project)
        shas = [c.sha for c in found.values()]
        changed = changed_between(top, shas[0], shas[-1], inside, "--own")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return found, env_for, scratch, spec, changed


def _clone_commits(args: argparse.Namespace, good: str, bad: str, base: Any) -> tuple[dict[str, Any], Any, str, None]:
    """``--repo``: the package's commits from ``good`` to ``bad`` in its clone, each built over ``base``."""
    from perfsuite.ab import commits
    from perfsuite.ab.builds import commit_env

    top = commits.check_clone(args.repo, "--repo")  # a bare clone will do: nothing is checked out
    found = _first_parents(top, good, bad, "--repo")
    return found, lambda point, name: commit_env(top, args.package, found[point], base), f"{args.package} commit", None


def _first_parents(top: Path, good: str, bad: str, what: str) -> dict[str, Any]:
    """Short hash → :class:`~perfsuite.ab.commits.Commit` of ``good`` and each commit after it on ``bad``'s
    first parents, in order."""
    from perfsuite.ab import commits

    first = commits.describe(top, commits.commit(top, commits.check_revision(good, "--good"), f"{what} --good"))
    last = commits.commit(top, commits.check_revision(bad, "--bad"), f"{what} --bad")
    return {c.short: c for c in [first, *commits.first_parent_range(top, first.sha, last, what)]}


def _commits(
    options: BisectOptions,
    spec: Any,
    say: Any,
    heard: Callable[[], str | None],
    found: dict[str, Any],
    env_for: Any,
    what: str,
    scratch: Path | None,
    may_switch: bool = True,
    changed: Any = None,
) -> tuple[int, Found | None]:
    """Bisect the commits ``found`` (good first), each side's environment from ``env_for``: the exit
    code and the answer (``None`` where the ends did not differ or could not be tested); ``may_switch``:
    :attr:`~perfsuite.ab.bisecting.Bisection.may_switch`."""
    from perfsuite.ab.bisecting import Bisection

    points = list(found)
    say(f"perfsuite: {what}s: {len(points) - 1} after {points[0]} (good), up to {points[-1]} (bad)")
    bisection = Bisection(
        options, spec, points, say, env_for=env_for, what=what, describe=lambda p: found[p].describe(), heard=heard,
        may_switch=may_switch, changed_code=changed,
    )  # fmt: skip
    try:
        return bisection.run(), bisection.found
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
