"""``perfsuite ab``: two environments side by side on this machine, case by case, with paired statistics.

Exit codes: 0 nothing regressed, 1 a case regressed (slower, more memory, another loss, or the
candidate's run failed at the first pair where the base's ran), 2 bad arguments, 3 a side cannot be
tested (it did not install or import; the error is shown), 130 stopped by Ctrl-C, 143 by SIGTERM
(what was measured is still written: the open cases undecided).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.ab.pairs import LOSS_SEEDS
from perfsuite.cli.ab_arguments import add_arguments
from perfsuite.cli.interrupt import Interrupt, terminate_as_interrupt
from perfsuite.cli.options import report_without_charts
from perfsuite.cli.selection import select

if TYPE_CHECKING:
    from perfsuite.ab.options import AbOptions
    from perfsuite.ab.own import Tree
    from perfsuite.ab.pins import Upgrade

EXIT_CANNOT_TEST = 3


def add_parser(sub: Any) -> None:
    add_arguments(
        sub.add_parser(
            "ab",
            help="compare two environments, or two commits of the project's own code (--base-ref, --own), side by "
            "side: time, memory and loss per case",
        )
    )


def run(args: argparse.Namespace) -> int:
    # SIGTERM as Ctrl-C from the start: the copies of the project's code its sides run are removed either way.
    with terminate_as_interrupt() as interrupt, contextlib.ExitStack() as trees:
        try:
            return _run(args, trees, interrupt)
        except KeyboardInterrupt:  # setting up, or writing (the comparison keeps what it measured itself)
            print(f"perfsuite ab: interrupted by {interrupt.name}", file=sys.stderr)
            return interrupt.exit_code


def _run(args: argparse.Namespace, stack: contextlib.ExitStack, interrupt: Interrupt) -> int:
    from perfsuite.ab.comparison import AbRun, Failed, cap_problem
    from perfsuite.ab.envs import EnvError, parse_env, parse_held
    from perfsuite.ab.lanes import plan_for
    from perfsuite.ab.options import AbOptions
    from perfsuite.ab.own import differing_code, importing_from
    from perfsuite.ab.pairs import check_mode
    from perfsuite.ab.pins import PinError
    from perfsuite.reports.tables import log_console

    console = log_console(stderr=True)

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    try:
        base, candidate, upgrade = _sides(args)
        own = _own_refs(args)  # the project's own code at two commits: revisions checked before anything runs
        for name, asked in (("base", base), ("candidate", candidate)):
            parse_env(asked, name=name)  # bad input: before anything is installed
        held = parse_held(args.with_)
        problem = cap_problem(args.pairs, args.max_pairs)
        if problem is not None:
            raise ValueError(problem)
        made = None
        if own is not None:  # each side's copy of the project's code, written before the cases are read
            try:
                made = _trees(stack, own)
            except ValueError as exc:  # GitError: a tree git could not write out
                say(f"perfsuite: cannot test: {exc}")
                return EXIT_CANNOT_TEST
        # One thread unless asked: the CPU tier's (the other core absorbs the machine's own work).
        # The cases are the candidate's declarations, read from its copy: the working tree's or its commit's.
        declared = made[1] if made is not None else None
        with importing_from(declared):
            project = declared.project if declared is not None else None
            specs, device_type, defaults, note = select(args, here=False, threads=1, project=project)
        check_mode(specs, device_type, args.mode)
        plan_for(specs, device_type, args.mode, args.jobs)  # more lanes than cores or GPUs: before any set-up
        options = AbOptions(
            base=base,
            candidate=candidate,
            upgrade=upgrade,
            held=held,
            device_type=device_type,
            mode=args.mode,
            jobs=args.jobs,
            floor=args.floor,
            alpha=args.alpha,
            pairs=args.pairs,
            max_pairs=args.max_pairs,
            json=args.json,
            report=args.report,
            loss_seeds=args.loss_seeds if args.loss_seeds is not None else LOSS_SEEDS if own is not None else 0,
        )
    except (ValueError, PinError, EnvError) as exc:
        say(f"perfsuite: error: {exc}")
        return 2
    if upgrade is not None:
        for line in upgrade.lines():
            say(line)
        if not upgrade.changes:
            say(f"perfsuite ab: {args.pins} changes no exact pin: nothing to compare")
            if args.report and not args.show_sides:
                headline = f"nothing compared: `{args.pins}` changes no exact dependency pin"
                say(f"wrote {_note(options, headline)}")
            return 0
    if args.show_sides:
        runs = ["", ""] if made is None else [f", the project's code: {tree.label}" for tree in made]
        return _show_sides(options, runs, say)
    for told in (note, report_without_charts("ab", args.report, "summary.md is written without it")):
        if told:
            say(told)
    if device_type == "cpu" and not all(spec.profile for spec in specs):
        # A CPU's peak memory comes from the profile step alone (no allocator to ask), and ab compares memory.
        specs = [dataclasses.replace(spec, profile=True) for spec in specs]
        say("perfsuite: --no-profile: a CPU's peak memory comes from the profile step; each case's first pair runs it")
    started = time.monotonic()
    if own is not None and made is not None:
        base_tree, candidate_tree = made
        line, changed = differing_code(own[1])
        say(line)
        options = dataclasses.replace(options, trees=(base_tree, candidate_tree), changed=changed)
    try:
        ab_run = AbRun.start(options, specs, say)
    except Failed as exc:
        return _untested(options, specs, exc, time.monotonic() - started, say)
    except KeyboardInterrupt:
        say("perfsuite ab: interrupted while setting up the sides; nothing was measured or written")
        return interrupt.exit_code
    try:
        heard = lambda: interrupt.signum is not None  # noqa: E731
        results = ab_run.compare_all(
            args.timeout or defaults.timeout, stop_on_regression=args.stop_on_regression, heard=heard
        )
        _explain(ab_run, results, args, args.timeout or defaults.timeout, say)
    except EnvError as exc:  # a side's forkserver could not import what the cases need
        return _untested(options, specs, exc, time.monotonic() - started, say, ab_run)
    finally:
        ab_run.close()
    return exit_code(ab_run.finish(results, options, time.monotonic() - started, console), results, interrupt, say)


def exit_code(code: int, results: Any, interrupt: Interrupt, say: Any) -> int:
    """The comparison's ``code``, or the signal's where one stopped it: also one that came after every
    case's verdict (as the last round ended, or while explaining), which is said."""
    cut = any(result.interrupted for result in results)
    if interrupt.signum is None and not cut:
        return code
    if not cut:
        say(f"perfsuite ab: stopped by {interrupt.name} after every case's verdict; they stand as written")
    return interrupt.exit_code


def _trees(stack: contextlib.ExitStack, own: tuple[str, list[str | None]]) -> list[Tree]:
    """The project's code at the two revisions ``own`` names, each in a copy of its own until ``stack`` ends."""
    from perfsuite.ab.own import trees

    return stack.enter_context(trees(own[1], own[0]))


def _explain(ab_run: Any, results: Any, args: argparse.Namespace, timeout_s: float, say: Any) -> None:
    """Each verdict's cause, where it calls for one (:mod:`perfsuite.ab.explain`)."""
    from perfsuite.ab.explain import explain_results, traces_dir

    traces = traces_dir(args.report, args.json)
    explain_results(
        ab_run.sides, ab_run.specs, results, choice=args.explain, timeout_s=timeout_s, traces=traces, say=say
    )


def _sides(args: argparse.Namespace) -> tuple[str, str, Upgrade | None]:
    """The base and the candidate, and with ``--pins`` the :class:`perfsuite.ab.pins.Upgrade` it reads, whose
    sides they are; else ``None``, both sides given (or, comparing the project's own code with ``--base-ref``
    or ``--own``, this environment where not). A ``ValueError`` or ``PinError`` says what is wrong."""
    for flag, value in (("--base-ref", args.base_ref), ("--own", args.own), ("--pins", args.pins)):
        if value is not None and not value.strip():
            raise ValueError(f"{flag}: an empty revision; give {'BASE..HEAD' if flag != '--base-ref' else 'REF'}")
    own = [flag for flag, value in (("--base-ref", args.base_ref), ("--own", args.own)) if value]
    if len(own) > 1 or (own and args.pins):
        raise ValueError(f"give one of --pins, --base-ref and --own, not {' and '.join([*own, '--pins'][:2])}")
    base, candidate = args.base, args.candidate
    if own:
        base, candidate = base or "current", candidate or "current"
    if args.pins is None:
        missing = [f"--{name}" for name, value in (("base", base), ("candidate", candidate)) if value is None]
        if missing:
            raise ValueError(
                f"the following arguments are required: {', '.join(missing)} "
                "(or --pins BASE..HEAD, --base-ref REF, --own BASE..HEAD)"
            )
        if args.pin_files:
            raise ValueError("--pin-files goes with --pins")
        return base, candidate, None
    if base is not None or candidate is not None:
        raise ValueError("--pins chooses both sides; give no --base or --candidate with it")
    from perfsuite.ab.envs import installed
    from perfsuite.ab.pins import upgrade

    found = upgrade(args.pins, extra_files=args.pin_files or ()).installed_only(installed())
    return found.base, found.candidate, found


def _own_refs(args: argparse.Namespace) -> tuple[str, list[str | None]] | None:
    """The option and the two revisions of the project's own code a comparison runs, each checked to
    name a commit (``None``: the working tree), or ``None`` when it compares environments only. A
    ``ValueError`` (:class:`~perfsuite.ab.commits.GitError`) says what git cannot read."""
    from perfsuite.ab import commits
    from perfsuite.ab.own import project_root

    if not (args.base_ref or args.own):
        return None
    option = "--base-ref" if args.base_ref else "--own"
    top = commits.check_repository(project_root(), option)
    if args.base_ref:
        commits.commit(top, commits.check_revision(args.base_ref, option), option)
        return option, [args.base_ref, None]
    base, head, from_merge_base = commits.split_range(args.own, option)
    shas = [commits.commit(top, ref, f"{option} {args.own}") for ref in (base, head)]
    if from_merge_base:
        base = commits.merge_base(top, shas[0], shas[1], f"{option} {args.own}")
    return option, [base, head]


def _show_sides(options: AbOptions, runs: list[str], say: Any) -> int:
    """``--show-sides``: each side, and what each overlay would lay over this environment, resolved as its
    set-up resolves it (nothing installed). 0, or 3 where a side cannot be set up (said why)."""
    from perfsuite.ab.envs import EnvError, installed, moves
    from perfsuite.reports.ab import differing

    here = installed()
    code = 0
    for index, (name, asked) in enumerate((("base", options.base), ("candidate", options.candidate))):
        print(f"{name}: {asked}{runs[index]}", flush=True)
        try:
            moved = moves(asked, name=name, held=options.held)
        except EnvError as exc:
            say(f"perfsuite: cannot test: {name}: {exc}")
            code = EXIT_CANNOT_TEST
            continue
        if moved is not None:  # an overlay; an interpreter or a virtual environment is its own
            new = dict(pin.split("==", 1) for pin in moved)
            kept = {package: version for package, version in new.items() if package in here}
            added = [f"{package} {version}" for package, version in new.items() if package not in here]
            said = [f"moves {', '.join(differing({p: here[p] for p in kept}, kept))}"] if kept else []
            said += [f"adds {', '.join(added)}"] if added else []
            print(f"  over this environment: {'; '.join(said) or 'nothing to change'}", flush=True)
    return code


def _untested(options: AbOptions, specs: list[Any], exc: Any, wall_s: float, say: Any, ab_run: Any = None) -> int:
    """A comparison whose sides could not be set up (or, set up, run a case: ``ab_run``): said, and its
    ``--json`` and ``--report`` written with every case *cannot test* and why, and which side
    (``exc``: the ``Failed`` or ``EnvError``; :func:`perfsuite.ab.comparison.untested`,
    :meth:`~perfsuite.ab.comparison.AbRun.untested`)."""
    from perfsuite.ab.comparison import untested
    from perfsuite.ab.written import write_ab

    error, side = str(exc), exc.side
    say(f"perfsuite: cannot test: {error}")
    if ab_run is None:
        payload = untested(options, specs, error, wall_s, side)
    else:
        payload = ab_run.untested(error, wall_s, side)
    if options.upgrade is not None:
        payload["pins"] = options.upgrade.as_json()
    write_ab(payload, options, say)
    return EXIT_CANNOT_TEST


def _note(options: AbOptions, headline: str) -> Path:
    """``summary.md`` of an upgrade comparison that had nothing to compare, for the pull request's comment."""
    from perfsuite.reports.ab import note_markdown, write_note

    assert options.report is not None
    assert options.upgrade is not None
    text = note_markdown(options.device_type, headline, options.upgrade.as_json())
    return write_note(Path(options.report), text)
