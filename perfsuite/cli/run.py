"""``perfsuite run``: the matrix (or the named cases) on this machine, each in its own worker, then the table."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from perfsuite.cli.common import check_project_code, load_project, names, project_baselines
from perfsuite.core.baselines import write_json_atomic
from perfsuite.core.engines import ENGINES, check_engine
from perfsuite.core.matrix import BUILTIN, first_run
from perfsuite.core.models import get_model_spec
from perfsuite.core.preloads import preload_for
from perfsuite.core.registry import matrix_cases
from perfsuite.core.scopes import SCOPES, in_scope
from perfsuite.core.spec import DEFAULTS
from perfsuite.core.strategies import STRATEGIES, resolve
from perfsuite.interrupt import Interrupt, terminate_as_interrupt
from perfsuite.options import GPUS, at_least, not_a_file, output_file, positive_seconds
from perfsuite.reports.walltime import wall_time_line


def add_selection(parser: Any) -> None:
    """The options that choose and shape the cases: ``perfsuite run``'s, and ``perfsuite ab``'s."""
    parser.add_argument(
        "--models",
        type=names,
        help="comma-separated (`perfsuite list` names them); default: the matrix's cases that run on this device "
        "(tiny models on a CPU, full-size ones on a GPU)",
    )
    parser.add_argument(
        "--strategies",
        type=names,
        help="comma-separated, 'a+b' composes; with --models, default: every registered one; without, the matrix's",
    )
    parser.add_argument(
        "--engine",
        type=names,
        help=f"comma-separated engines ({', '.join(ENGINES)}); "
        "default: the matrix's, or loop with --models/--strategies",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="without --models/--strategies: the whole matrix on this device (122 cases on a CPU, about 12 "
        "minutes); by default a quick set of 10 cases (tiny-bert on a CPU, under a minute)",
    )
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        help="without --models/--strategies: the matrix's cases of this scope and the smaller ones (push: a pull "
        "request's, 35 on a CPU and 14 on a GPU; nightly; weekly: all; perfsuite.core.scopes)",
    )
    parser.add_argument(
        "--every-push",
        action="store_true",
        help="the same as --scope push: the cases `pytest` runs on every push (35 on a CPU)",
    )
    parser.add_argument(
        "--steps", type=at_least(1), help="timed optimizer steps per case (default 12 on CPU, 20 on GPU)"
    )
    parser.add_argument("--warmup", type=at_least(0), help="untimed warm-up steps (default 2 on CPU, 5 on GPU)")
    parser.add_argument("--batch-size", type=at_least(1), help="samples per optimizer step (default: the model's)")
    parser.add_argument("--seq-len", type=at_least(1), help="maximum sequence length (default: the model's)")
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument(
        "--timeout", type=positive_seconds, help="seconds before a case's worker is killed (default 600 CPU, 900 GPU)"
    )
    parser.add_argument("--pretrained", help="a save_pretrained directory (one model only), or 'hub-cache'")
    parser.add_argument("--dataset", help="a local csv/json/parquet file or a cached datasets name")
    parser.add_argument("--tokenizer", help="local tokenizer directory for --dataset")
    parser.add_argument(
        "--no-profile", dest="profile", action="store_false", help="skip the memory-breakdown and FLOP steps"
    )
    parser.add_argument(
        "--threads",
        type=at_least(1),
        help="torch intra-op threads per case (default: torch's; the CPU test tier uses 1)",
    )
    parser.add_argument(
        "--world-size",
        type=at_least(1),
        default=1,
        help="ranks per named case (--models/--strategies; default 1): needs ddp, fsdp2, zero2 or zero3",
    )


def add_parser(sub: Any) -> None:
    """The subcommand's arguments."""
    run = sub.add_parser("run", help="run the model × strategy matrix and print the table")
    add_selection(run)
    run.add_argument("--gpus", **GPUS)
    run.add_argument("--json", type=output_file, help="write every figure to this JSON file")
    run.add_argument(
        "--report",
        type=not_a_file,
        metavar="DIR",
        help="also write report.html and summary.md there, each case compared with its baseline when one exists",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="after each case, show the warnings and output its worker captured (always kept in --json)",
    )


def _matrix_selection(args: argparse.Namespace, device_type: str) -> list[tuple[str, str, str, int]]:
    """(model, strategy, engine, world size) of what ``perfsuite run`` runs: the named ones, else the
    matrix on this device (its quick set, :func:`perfsuite.core.matrix.first_run`, without ``--all``)."""
    on_device = [c for c in matrix_cases() if (get_model_spec(c.model).tiny) == (device_type == "cpu")]
    if not args.models and not args.strategies:
        scope = _scope(args)
        chosen = [
            c
            for c in on_device
            if (args.engine is None or c.engine in args.engine) and (scope is None or in_scope(c.scope, scope))
        ]
        builtin = [(c.model, c.strategy, c.engine, c.world_size) for c in chosen if c.source == BUILTIN]
        declared = [(c.model, c.strategy, c.engine, c.world_size) for c in chosen if c.source != BUILTIN]
        # A project's own cases always run; perfsuite's built-in matrix is cut to its quick set.
        return (builtin if args.all or scope else first_run(builtin)) + declared
    models = args.models or list(dict.fromkeys(c.model for c in on_device))
    strategies = args.strategies or [n for n in STRATEGIES if args.world_size == 1 or resolve(n).distributed]
    return [(m, s, e, args.world_size) for e in (args.engine or ["loop"]) for m in models for s in strategies]


def _scope(args: argparse.Namespace) -> str | None:
    """The scope chosen (``--every-push`` is ``push``), or ``None``."""
    return getattr(args, "scope", None) or ("push" if args.every_push else None)


def _time_left(elapsed: float, done: int, total: int) -> str:
    """`` · about N min left``, from the cases done so far (nothing before the first is done)."""
    if done == 0:
        return ""
    left = elapsed / done * (total - done)
    return f" · about {left / 60:.0f} min left" if left >= 90 else f" · about {left:.0f} s left"


def _gpu_pool(args: argparse.Namespace, device_type: str) -> Any:
    """The GPUs cases share, or ``None`` where they run one after another (a CPU, one GPU)."""
    if device_type != "cuda":
        return None
    from perfsuite.pool import GPUPool, machine_gpus

    gpus = machine_gpus(args.gpus)
    return GPUPool(gpus) if len(gpus) > 1 else None


def _specs(
    args: argparse.Namespace, selection: list[tuple[str, str, str, int]], device_type: str, defaults: Any
) -> list[Any]:
    from perfsuite.core.spec import CaseSpec, dropout_for

    return [
        CaseSpec(
            model=model,
            strategy=strategy,
            steps=args.steps or defaults.steps,
            warmup_steps=defaults.warmup if args.warmup is None else args.warmup,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            seed=args.seed,
            device=device_type,
            pretrained=args.pretrained,
            dataset=args.dataset,
            tokenizer=args.tokenizer,
            profile=args.profile,
            threads=args.threads,
            engine=engine,
            world_size=world_size,
            dropout=dropout_for(world_size),
        )
        for model, strategy, engine, world_size in selection
    ]


def _run_on_pool(
    specs: list[Any], pool: Any, timeout: float, done: Any, progress: Any, task: Any, records: dict[Any, Any]
) -> list[Any]:
    """``specs`` on the GPU pool, as many at once as it has GPUs (the widest first); records in ``specs`` order.
    ``records`` gets each as it finishes (what an interrupt keeps), and ``None`` for each case as it starts."""
    from concurrent.futures import as_completed

    from perfsuite.pool import PoolRunner, submit_cases
    from perfsuite.worker.process import run_isolated

    runner = PoolRunner(pool)
    progress.update(task, description=f"{len(pool.gpus)} GPUs: {', '.join(pool.gpus)}", refresh=True)

    def run(spec: Any, env: dict[str, str]) -> dict[str, Any]:
        records.setdefault(spec, None)
        return run_isolated(spec, timeout_s=timeout, env=env)

    futures = {future: spec for spec, future in submit_cases(runner, pool, specs, run).items()}
    try:
        for future in as_completed(futures):
            spec = futures[future]
            records[spec] = future.result()
            done(spec, records[spec])
    finally:
        runner.close(cancel=True)
    return [records[spec] for spec in specs]


def select(args: argparse.Namespace) -> tuple[list[Any], str, Any, str | None]:
    """The cases ``args`` select (checked: a ``ValueError`` says what is wrong), their device type,
    its defaults, and a note for the reader when the selection is the quick set."""
    from perfsuite.worker.device import default_device_type

    load_project()
    for name in args.models or ():
        get_model_spec(name)
    for name in args.strategies or ():
        resolve(name)
    for name in args.engine or ():
        check_engine(name)
    device_type = default_device_type() if args.device == "auto" else args.device
    for flag, chosen in (("--all", args.all), ("--every-push", args.every_push), ("--scope", args.scope)):
        if chosen and (args.models or args.strategies):
            raise ValueError(f"{flag} runs the matrix's cases; it takes no --models or --strategies")
    if args.all and args.every_push:
        raise ValueError("--all already holds --every-push's cases; give one of them")
    if args.scope and (args.all or args.every_push):
        raise ValueError(f"--scope {args.scope} chooses the cases; give no --all or --every-push with it")
    selection = _matrix_selection(args, device_type)
    if not selection:
        raise ValueError(f"the matrix has no case for this device ({device_type}); `perfsuite list`")
    note = None
    if not (args.all or _scope(args) or args.models or args.strategies):
        whole = len(_matrix_selection(argparse.Namespace(**{**vars(args), "all": True}), device_type))
        if whole > len(selection):
            note = (
                f"perfsuite: a quick set of {len(selection)} of the matrix's {whole} cases on this device; "
                f"`perfsuite {args.command} --all` runs them all"
            )
    if args.pretrained and args.pretrained != "hub-cache" and len({m for m, _, _, _ in selection}) != 1:
        raise ValueError("--pretrained PATH needs exactly one --models name")
    defaults = DEFAULTS[device_type]
    specs = _specs(args, selection, device_type, defaults)
    check_project_code(specs)
    return specs, device_type, defaults, note


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from perfsuite.core.spec import CaseSpec
    from perfsuite.reports.tables import log_console
    from perfsuite.worker.process import run_isolated, stop_workers

    console = log_console(stderr=True)
    try:
        specs, device_type, defaults, note = select(args)
    except ValueError as exc:  # UnknownNameError and DeclarationError included
        console.print(f"perfsuite: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if note:
        console.print(note, markup=False, highlight=False)
    preload_for(specs)
    try:
        pool = _gpu_pool(args, device_type)
    except ValueError as exc:
        console.print(f"perfsuite: error: --gpus: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    timeout = args.timeout or defaults.timeout
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    records: dict[CaseSpec, dict[str, Any] | None] = {}  # the GPU pool's: finished, or None while running
    in_flight: CaseSpec | None = None  # one at a time: the case whose worker runs
    with terminate_as_interrupt() as interrupt:
        try:
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                console=console,
                # Redrawn when a case starts or ends, not by a thread 10 times a second: nothing of
                # perfsuite's runs while a case's steps are timed, the parent included.
                auto_refresh=False,
            ) as progress:
                task = progress.add_task("starting", total=len(specs))

                def done(spec: CaseSpec, record: dict[str, Any]) -> None:
                    line = f"{spec.id}: {record['status']}"
                    if record["status"] == "ok":
                        line += f", {record['step_time_s']['median'] * 1e3:.1f} ms/step, {record['wall_s']:.1f} s"
                        if record.get("gpus"):
                            line += f", GPU {','.join(record['gpus'])}"
                    else:
                        line += f" ({record['error']})"
                    progress.console.print(line, markup=False, highlight=False)
                    if args.verbose:
                        _print_diagnostics(progress.console, record)
                    progress.advance(task)
                    progress.refresh()

                if pool is None:
                    for i, spec in enumerate(specs):
                        left = _time_left(time.monotonic() - started, i, len(specs))
                        progress.update(task, description=f"{spec.id}{left}")
                        progress.refresh()
                        in_flight = spec
                        results.append(run_isolated(spec, timeout_s=timeout))
                        in_flight = None
                        done(spec, results[-1])
                else:
                    results = _run_on_pool(specs, pool, timeout, done, progress, task, records)
        except KeyboardInterrupt:
            stop_workers()  # the one in flight went with its run; the GPU pool's, and the forkserver
            if pool is not None:
                results = [records[s] or _not_run(s, True) if s in records else _not_run(s, False) for s in specs]
            else:
                results += [_not_run(spec, spec is in_flight) for spec in specs[len(results) :]]
            return _finish(args, results, time.monotonic() - started, device_type, interrupt)
    return _finish(args, results, time.monotonic() - started, device_type, None)


def _not_run(spec: Any, started: bool) -> dict[str, Any]:
    """The record of a case an interrupt stopped or left out (skipped: nothing is wrong with it)."""
    from perfsuite.worker.record import failed_record

    error = "interrupted while it ran; its worker was stopped" if started else "interrupted before it ran"
    return {**failed_record(spec, status="skipped", error=error), "interrupted": True}


def _finish(
    args: argparse.Namespace, results: list[dict[str, Any]], wall: float, device_type: str, interrupt: Interrupt | None
) -> int:
    """The table and summary of what finished, then ``--json`` and ``--report`` with every case."""
    from perfsuite.reports.tables import render

    finished = [r for r in results if not r.get("interrupted")]
    render(finished)
    failed = sum(r["status"] == "failed" for r in finished)
    skipped = sum(r["status"] == "skipped" for r in finished)
    startups = [r["worker_startup_s"] for r in finished if r.get("worker_startup_s") is not None]
    startup = ""
    if startups:
        # The first launch also boots the forkserver (imports torch and friends once).
        startup = f"; first worker {startups[0]:.1f} s (forkserver boot)"
        if len(startups) > 1:
            startup += f", later workers median {1e3 * statistics.median(startups[1:]):.0f} ms"
    ok = len(finished) - failed - skipped
    print(f"{len(finished)} cases: {ok} ok, {skipped} skipped, {failed} failed in {wall:.0f} s{startup}")
    spent = wall_time_line(finished)
    if spent is not None:
        print(spent)
    if interrupt is not None:
        print(f"perfsuite run: interrupted by {interrupt.name} after {len(finished)} of {len(results)} cases")
    if args.json or args.report:
        from perfsuite.core.provenance import run_facts
        from perfsuite.results import RUN_RESULTS_SCHEMA_VERSION
        from perfsuite.worker.env import environment

        env = {**environment(device_type), **run_facts(Path.cwd())}
        payload = {"schema_version": RUN_RESULTS_SCHEMA_VERSION, "env": env, "wall_s": wall, "cases": results}
        if interrupt is not None:
            payload["interrupted"] = interrupt.name
        if args.json:
            write_json_atomic(args.json, payload)
            print(f"wrote {args.json}")
        if args.report:
            _write_run_report(payload, args.report)
    return interrupt.exit_code if interrupt is not None else 1 if failed else 0


def _write_run_report(payload: dict[str, Any], out: Path) -> None:
    """``perfsuite run --report``: the report of this run, each case compared with its baseline when one exists."""
    from perfsuite.reports import write_report
    from perfsuite.reports.charts import ReportExtraMissing
    from perfsuite.results import parse_results

    settings, baselines = project_baselines()
    try:
        written = write_report(parse_results(payload, "perfsuite run"), out, baselines=baselines, settings=settings)
    except ReportExtraMissing as exc:
        print(f"perfsuite: no report: {exc}", file=sys.stderr)
        return
    for path in written:
        print(f"wrote {path}")


def _print_diagnostics(console: Any, record: dict[str, Any]) -> None:
    warned = record.get("warnings") or []
    for w in warned:
        times = f" (×{w['count']})" if w["count"] > 1 else ""
        console.print(f"  {w['category']}{times}: {w['message']} [{w['where']}]", markup=False, highlight=False)
    output = (record.get("output") or "").strip()
    if output:
        console.print("  " + output.replace("\n", "\n  "), markup=False, highlight=False)
