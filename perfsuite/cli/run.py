"""``perfsuite run``: the matrix (or the named cases) on this machine, each in its own worker, then the table."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from perfsuite.cli.common import project_baselines
from perfsuite.cli.interrupt import Interrupt, terminate_as_interrupt
from perfsuite.cli.options import GPUS, not_a_file, output_file, report_without_charts
from perfsuite.cli.selection import add_selection, select
from perfsuite.core.preloads import preload_for
from perfsuite.core.record import CaseRecord
from perfsuite.reports.walltime import wall_time_line


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


def _time_left(elapsed: float, done: int, total: int) -> str:
    """`` · about N min left``, from the cases done so far (nothing before the first is done)."""
    if done == 0:
        return ""
    left = elapsed / done * (total - done)
    return f" · about {left / 60:.0f} min left" if left >= 90 else f" · about {left:.0f} s left"


def _gpu_pool(args: argparse.Namespace, device_type: str, specs: list[Any]) -> Any:
    """The GPUs ``--gpus`` selects, which the cases share (one GPU: one case after another, each
    holding it, so that another run on the machine waits), or ``None`` on a CPU. A ``ValueError``
    says what is wrong: the option, or a case wider than the selection."""
    if device_type != "cuda":
        return None
    from perfsuite.worker.pool import GPUPool, machine_gpus, too_wide

    gpus = machine_gpus(args.gpus)
    if (why := too_wide(specs, gpus)) is not None:
        raise ValueError(why)
    return GPUPool(gpus)


def _run_on_pool(
    specs: list[Any], pool: Any, timeout: float, done: Any, progress: Any, task: Any, records: dict[Any, Any]
) -> list[CaseRecord]:
    """``specs`` on the GPU pool, as many at once as it has GPUs (the widest first); records in ``specs`` order.
    ``records`` gets each as it finishes (what an interrupt keeps), and ``None`` for each case as it starts."""
    from concurrent.futures import as_completed

    from perfsuite.worker.pool import PoolRunner, submit_cases
    from perfsuite.worker.process import run_isolated

    runner = PoolRunner(pool)
    progress.update(task, description=f"GPUs {', '.join(pool.gpus)}", refresh=True)

    def run(spec: Any, env: dict[str, str]) -> CaseRecord:
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


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from perfsuite.core.spec import CaseSpec
    from perfsuite.reports.tables import log_console
    from perfsuite.worker.process import run_isolated, stop_workers

    console = log_console(stderr=True)
    try:
        project = project_baselines()  # what --report compares with, checked before any case runs
        specs, device_type, defaults, note = select(args)
    except ValueError as exc:  # UnknownNameError and DeclarationError included
        console.print(f"perfsuite: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    for line in (note, report_without_charts("run", args.report, "the report is not written")):
        if line:
            console.print(line, markup=False, highlight=False)
    preload_for(specs)
    try:
        pool = _gpu_pool(args, device_type, specs)
    except ValueError as exc:
        console.print(f"perfsuite: error: --gpus: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    timeout = args.timeout or defaults.timeout
    started = time.monotonic()
    results: list[CaseRecord] = []
    records: dict[CaseSpec, CaseRecord | None] = {}  # the GPU pool's: finished, or None while running
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
                # Where output is a pipe, a file or a CI log, a bar's frames are noise: the lines say each case.
                disable=not console.is_terminal,
            ) as progress:
                task = progress.add_task("starting", total=len(specs))

                def done(spec: CaseSpec, record: CaseRecord) -> None:
                    line = f"{spec.id}: {record.status}"
                    if record.ok:
                        line += f", {record.timed().median * 1e3:.1f} ms/step, {record.wall_s:.1f} s"
                        if record.gpus:
                            line += f", GPU {','.join(record.gpus)}"
                    else:
                        line += f" ({record.error})"
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
            return _finish(args, results, time.monotonic() - started, device_type, interrupt, project)
    return _finish(args, results, time.monotonic() - started, device_type, None, project)


def _not_run(spec: Any, started: bool) -> CaseRecord:
    """The record of a case an interrupt stopped or left out (skipped: nothing is wrong with it)."""
    error = "interrupted while it ran; its worker was stopped" if started else "interrupted before it ran"
    return CaseRecord.failed(spec, status="skipped", error=error).updated(interrupted=True)


def _finish(
    args: argparse.Namespace,
    results: list[CaseRecord],
    wall: float,
    device_type: str,
    interrupt: Interrupt | None,
    project: tuple[dict[str, Any], Path | None],
) -> int:
    """The table and summary of what finished, then ``--json`` and ``--report`` with every case (compared
    with ``project``'s baselines: its ``[tool.perfsuite]`` and their directory)."""
    from perfsuite.reports.tables import render

    finished = [r for r in results if not r.interrupted]
    render(finished)
    failed = sum(r.status == "failed" for r in finished)
    skipped = sum(r.status == "skipped" for r in finished)
    startups = [r.worker_startup_s for r in finished if r.worker_startup_s is not None]
    startup = ""
    if startups:
        # The first launch also boots the forkserver (imports torch and friends once).
        startup = f"; first worker {startups[0]:.1f} s (forkserver boot)"
        if len(startups) > 1:
            startup += f", later workers median {1e3 * statistics.median(startups[1:]):.0f} ms"
    ok = len(finished) - failed - skipped
    counted = f"{len(finished)} cases" if interrupt is None else f"{len(finished)} of {len(results)} cases finished"
    print(f"{counted}: {ok} ok, {skipped} skipped, {failed} failed in {wall:.0f} s{startup}")
    threads = sorted({r.threads for r in finished if r.threads})
    if threads:
        tier = " (as the CPU tier's gate times them)" if device_type == "cpu" and threads == [1] else ""
        print(f"timed on {'/'.join(map(str, threads))} torch thread(s) per case{tier}; --threads N for another count")
    for record in finished:  # a dash in the table's memory columns, said why (a gate would refuse the case)
        if record.status == "ok" and record.peak_memory_bytes is None and record.memory_breakdown_error:
            print(f"{record.case_id}: no peak memory measured: {record.memory_breakdown_error}")
    spent = wall_time_line(finished)
    if spent is not None:
        print(spent)
    if interrupt is not None:
        unfinished = len(results) - len(finished)
        said = f"; --json marks the other {unfinished} interrupted" if args.json and unfinished else ""
        print(f"perfsuite run: interrupted by {interrupt.name} after {len(finished)} of {len(results)} cases{said}")
    if args.json or args.report:
        from perfsuite.core.provenance import run_facts
        from perfsuite.core.results import write_results
        from perfsuite.core.results_file import RUN_RESULTS_SCHEMA_VERSION
        from perfsuite.worker.env import environment

        env = {**environment(device_type), **run_facts(Path.cwd())}
        cases = [r.to_json() for r in results]
        payload = {"schema_version": RUN_RESULTS_SCHEMA_VERSION, "env": env, "wall_s": wall, "cases": cases}
        if interrupt is not None:
            payload["interrupted"] = interrupt.name
        compared: list[str | None] = []
        write_results(
            payload,
            json_file=args.json,
            report_dir=args.report,
            render=lambda out: _run_report(payload, out, project, compared),
        )
        for line in filter(None, compared):
            print(line)
    return interrupt.exit_code if interrupt is not None else 1 if failed else 0


def _run_report(
    payload: dict[str, Any], out: Path, project: tuple[dict[str, Any], Path | None], said: list[str | None]
) -> list[Path]:
    """``perfsuite run --report``: the report of this run, each case compared with its baseline when one exists
    (``said``: given what the comparison found, for the terminal)."""
    from perfsuite.core.results import parse_results
    from perfsuite.core.results_file import ResultsError
    from perfsuite.reports import write_report
    from perfsuite.reports.charts import ReportExtraMissing

    settings, baselines = project
    try:
        results = parse_results(payload, "perfsuite run")
        written = write_report(results, out, baselines=baselines, settings=settings)
    except (ResultsError, ReportExtraMissing) as exc:
        print(f"perfsuite: no report: {exc}", file=sys.stderr)
        return []
    said.append(results.run_compared())  # what the report's headline says, said here too
    return written


def _print_diagnostics(console: Any, record: CaseRecord) -> None:
    for w in record.warnings:
        times = f" (×{w.count})" if w.count > 1 else ""
        console.print(f"  {w.category}{times}: {w.message} [{w.where}]", markup=False, highlight=False)
    output = (record.output or "").strip()
    if output:
        console.print("  " + output.replace("\n", "\n  "), markup=False, highlight=False)
