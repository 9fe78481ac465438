"""``perfsuite baselines pool``: one time class's step times from several sessions' results files
(:mod:`perfsuite.core.pooled`), written into the baselines that already hold the cases' memory and loss."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfsuite.cli.common import fail, no_baselines_directory, project_baselines
from perfsuite.core.baselines import BaselineError, baseline_path, load_baseline, write_texts_atomic
from perfsuite.core.drift import drift_group
from perfsuite.core.observation import observe
from perfsuite.core.pinned import pinned_path, read_pinned, without
from perfsuite.core.pooled import MIN_SESSIONS, SPEC_KEYS, Pool, Reading, Session, Target, differing, pool
from perfsuite.core.pooled_aa import held_out
from perfsuite.core.results import Results, load_results
from perfsuite.core.results_file import ResultsError
from perfsuite.core.tolerance import ConfigError, resolve_tolerance
from perfsuite.core.untimed import timed, untimed_on, withdrawn
from perfsuite.reports.pooled import case_lines, held_out_lines, plural, session_lines


def add_parser(actions: Any) -> None:
    """``baselines pool``'s arguments."""
    pooled = actions.add_parser(
        "pool",
        help="set one time class's step times from several sessions' results files (hours or nights apart)",
        description="Reads the first run of each case in each results file (pytest --perfsuite-json, perfsuite run "
        "--json; one file per session, all of one stack) and stores, per case, the per-step medians over the "
        "sessions as this time class's step time, with their spread read as the gate reads it (each session "
        "against the others, its drift taken out). A case whose sessions spread too wide for its gate is refused, "
        "and the class's time removed from its baseline, `untimed` kept in its place (its gate says so). "
        "Memory and loss are not touched: each case needs its baseline already, and a session whose run differs "
        f"from it ran another stack. At least {MIN_SESSIONS} sessions.",
    )
    pooled.add_argument("results", type=Path, nargs="+", help="the sessions' results files")
    pooled.add_argument(
        "-k",
        dest="pattern",
        metavar="GLOB",
        help="write only this case, or the cases a glob or word matches (tiny-bert-*)",
    )
    pooled.add_argument("--time-class", help="the class to pool where the files hold several")
    pooled.add_argument("--dry-run", action="store_true", help="show what would be stored, write nothing")


def run(args: Any) -> int:
    """Read, check and pool the files; print each case; write unless ``--dry-run``. 0, 1 (a case refused), 2."""
    if len(args.results) < MIN_SESSIONS:
        return fail(f"pooling needs at least {MIN_SESSIONS} sessions' results files, got {len(args.results)}")
    try:
        files = [load_results(path) for path in args.results]
    except ResultsError as exc:
        return fail(str(exc))
    problem = _one_stack(files) or _distinct(files)
    if problem is not None:
        return fail(problem)
    settings, root = project_baselines()
    if not root.is_dir():
        return fail(no_baselines_directory(root))
    classes = sorted(
        {str(c.record.time_class) for f in files for c in f.cases if c.ran and c.record and c.record.time_class}
    )
    if not classes:
        return fail("no case in these files ran to the end with a time class: nothing to pool")
    time_class = args.time_class or (classes[0] if len(classes) == 1 else None)
    if time_class not in classes:
        named = f"--time-class {args.time_class}: no case of that class" if args.time_class else "several classes"
        pick = "" if args.time_class else "; name one with --time-class"
        return fail(f"{named} in these files (they hold: {', '.join(classes) or 'none'}){pick}")
    try:
        sessions = [_session(f, time_class, name) for f, name in zip(files, _short_names(files), strict=True)]
    except ValueError as exc:
        return fail(str(exc))
    try:
        targets = _targets(sessions, root, settings)
    except ConfigError as exc:
        return fail(str(exc))

    # -k picks what is written; every case of the class counts towards each session's drift, the others
    # against the time their baseline holds, as a later gate counts them.
    written = _selection(args.pattern, targets)
    result = pool(sessions, targets, time_class, written=written)
    if not result.cases:
        return fail(f"-k {args.pattern}: no case of {time_class} in these files matches (a glob matches whole ids)")
    kept = {c.case for c in result.cases if c.entry is not None}
    checks = held_out(sessions, targets, time_class, written=written, kept=kept)
    for line in [*session_lines(result, sessions, targets), *case_lines(result, targets, len(sessions))]:
        print(line)
    # Cases -k leaves out that hold no time of the class count towards no session's drift, as in a later gate;
    # once pooled, they would (those the drift leaves out, and those kept untimed, never do).
    unsettled = [
        c
        for c in targets
        if not written(c)
        and not (targets[c].stored or {}).get("time", {}).get(time_class)
        and targets[c].tolerance.time_drift_limit > 0
        and not _untimed(targets[c], time_class)
    ]
    if unsettled:
        print(
            f"{plural(len(unsettled), 'case')} of the class not written (-k) and holding no time of it count towards "
            "no session's drift, as in a later gate: pool every case of a class first"
        )
    for line in held_out_lines(checks, len(sessions)):
        print(line)
    if unsettled and any(c.untimed is not None for c in result.cases):  # a spread read without them
        print("no time withdrawn: without those cases, the sessions' drift is not read as a later gate will read it")
        for case in result.cases:
            case.untimed = None
    return _write(result, targets, root, dry_run=args.dry_run)


def _untimed(target: Target, time_class: str) -> bool:
    return target.stored is not None and untimed_on(target.stored, time_class) is not None


def _selection(pattern: str | None, targets: Mapping[str, Target]) -> Callable[[str], bool]:
    """``-k``: a case id exactly, else a glob over whole ids, else a word anywhere in one; any case."""
    if pattern is None:
        return lambda case: True
    wanted = pattern.lower()
    if wanted in (c.lower() for c in targets):
        return lambda case: case.lower() == wanted
    glob = wanted if any(c in wanted for c in "*?[") else f"*{wanted}*"
    return lambda case: fnmatch.fnmatchcase(case.lower(), glob)


def _one_stack(files: Sequence[Results]) -> str | None:
    """Why these files do not come from one stack (``None`` when they do)."""
    first = files[0]
    for f in files:
        if not isinstance(f.env.get("versions"), dict):
            return f"{f.path}: its env names no package versions, so which stack it ran cannot be told"
    for f in files[1:]:
        theirs, ours = f.env["versions"], first.env["versions"]
        changed = [f"{k} {ours.get(k)} vs {theirs.get(k)}" for k in differing(ours, theirs)]
        if f.env.get("python") != first.env.get("python"):
            changed.insert(0, f"python {first.env.get('python')} vs {f.env.get('python')}")
        if changed:
            return f"{first.path} and {f.path} ran different stacks ({'; '.join(changed)}): pool one stack's sessions"
    return None


def _distinct(files: Sequence[Results]) -> str | None:
    """Why these files are not as many sessions (``None`` when they are): a file given twice, or two copies
    of one session (the same date, commit and host), would pool as repeats that agree by construction."""
    seen: dict[object, str] = {}
    for f in files:
        keys: list[tuple[object, ...]] = [("path", Path(f.path).resolve())]
        if f.env.get("date") is not None:  # a file that names no date says nothing of its session
            keys.append(("env", f.env.get("date"), f.env.get("commit"), f.env.get("host")))
        for key in keys:
            if key in seen:
                return f"{seen[key]} and {f.path} are the same session: pool different sessions' files"
            seen[key] = f.path
    return None


def _short_names(files: Sequence[Results]) -> list[str]:
    """Each file's path below the directory they all lie in (``push-1.json``, or ``1234/perfsuite.json``
    for artifacts downloaded one directory each): what the output names the sessions by."""
    paths = [Path(f.path).absolute() for f in files]
    common = Path(os.path.commonpath([p.parent for p in paths]))
    return [p.relative_to(common).as_posix() for p in paths]


def _session(results: Results, time_class: str, name: str) -> Session:
    """One file's readings of ``time_class``: the first run of each case, as the gate observes it."""
    readings: dict[str, Reading] = {}
    for case in results.cases:
        record = case.record
        if not case.ran or record is None or record.time_class != time_class or case.id in readings:
            continue
        try:
            observed = observe(record, time_unit="calibrated" if record.device == "cpu" else "s")
        except ValueError as exc:
            raise ValueError(f"{results.path}: {exc}") from None
        readings[case.id] = Reading(
            observed=observed,
            group=drift_group(record),
            hardware=str(record.hardware or "cpu"),
            precision=str(record.precision or "fp32"),
            spec={key: getattr(record, key) for key in SPEC_KEYS} | {"world_size": record.world_size or 1},
            device=record.device_name,
        )
    env = results.env
    return Session(
        name=name,
        date=env.get("date"),
        commit=env.get("commit"),
        host=env.get("host"),
        versions=env.get("versions") or {},
        readings=readings,
    )


def _targets(sessions: Sequence[Session], root: Path, settings: Mapping[str, Any]) -> dict[str, Target]:
    """Each case's stored baseline (or why it cannot be read) and resolved tolerance."""
    targets = {}
    for case_id in sorted({c for s in sessions for c in s.readings}):
        reading = next(s.readings[case_id] for s in sessions if case_id in s.readings)
        hardware = reading.hardware
        tolerance = resolve_tolerance(
            settings,
            hardware=hardware,
            case_id=case_id,
            precision=reading.precision,
            time_class=reading.observed.time_class,
        )
        try:
            stored = load_baseline(baseline_path(root, hardware, case_id), case_id=case_id, hardware=hardware)
            targets[case_id] = Target(stored=stored, tolerance=tolerance, hardware=hardware)
        except BaselineError as exc:
            targets[case_id] = Target(stored=None, tolerance=tolerance, hardware=hardware, error=str(exc))
    return targets


def _write(result: Pool, targets: Mapping[str, Target], root: Path, *, dry_run: bool) -> int:
    """Every pooled case's baseline with the class's new time (all at once, atomically); the exit code."""
    texts: dict[Path, str] = {}
    for case in result.cases:
        target = targets[case.case]
        if target.stored is None:
            continue
        if case.entry is not None:
            stored = timed(target.stored, result.time_class, case.entry)
        elif case.untimed is not None:  # too noisy on the class: its time there is withdrawn, and why kept
            stored = withdrawn(target.stored, result.time_class, case.untimed)
        else:
            continue
        text = json.dumps(stored, indent=2, sort_keys=False, allow_nan=False) + "\n"
        texts[baseline_path(root, target.hardware, case.case)] = text
    refused = sum(c.entry is None for c in result.cases)
    noisy = [c.case for c in result.cases if c.entry is None and c.untimed is not None and targets[c.case].stored]
    for hardware in sorted({targets[case].hardware for case in noisy}):
        path = pinned_path(root, hardware, result.time_class)
        try:
            left = without(read_pinned(path), noisy)
        except BaselineError as exc:  # before anything is written
            return fail(f"{exc} (its entries of {', '.join(noisy)} are to be removed)")
        if left is not None:
            texts[path] = json.dumps(left, indent=2, sort_keys=False, allow_nan=False) + "\n"
    if not dry_run:
        write_texts_atomic(texts)
    what = "would be written (--dry-run: nothing written)" if dry_run else f"written under {root}"
    pooled = sum(c.entry is not None and targets[c.case].stored is not None for c in result.cases)
    print(
        f"{plural(pooled, 'case')} pooled and {len(noisy)} withdrawn, {what}: their {result.time_class} step time "
        f"only, memory and loss untouched; {refused} refused"
    )
    if noisy:
        print(
            f"withdrawn, too noisy on {result.time_class} to gate: {', '.join(noisy)}. The class's time "
            f"{'would be' if dry_run else 'is'} removed from each baseline (and the pinned pytest-benchmark file) and "
            "`untimed` written in its place: the gate says so, a refresh keeps it, and a later pool whose sessions "
            "fit stores their time"
        )
    return 1 if refused else 0
