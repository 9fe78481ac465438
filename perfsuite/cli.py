"""The ``perfsuite`` command: ``perfsuite run`` measures the matrix and prints the table."""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfsuite import registry
from perfsuite.baselines import write_json_atomic
from perfsuite.case import DEFAULTS
from perfsuite.declaration import find_pyproject, read_pyproject
from perfsuite.declaration import load as load_declaration
from perfsuite.engines import ENGINES, check_engine
from perfsuite.models import MODELS, get_model_spec
from perfsuite.registry import DeclarationError
from perfsuite.strategies import STRATEGIES, UnknownNameError, resolve

SCHEMA_VERSION = 1


def _names(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfsuite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the model × strategy matrix and print the table")
    run.add_argument(
        "--models",
        type=_names,
        help="comma-separated (`perfsuite list` names them); default: the matrix's cases that run on this device "
        "(tiny models on a CPU, full-size ones on a GPU)",
    )
    run.add_argument(
        "--strategies",
        type=_names,
        help="comma-separated, 'a+b' composes; with --models, default: every registered one; without, the matrix's",
    )
    run.add_argument(
        "--engine",
        type=_names,
        help=f"comma-separated engines ({', '.join(ENGINES)}); "
        "default: the matrix's, or loop with --models/--strategies",
    )
    run.add_argument("--steps", type=int, help="timed optimizer steps per case (default 12 on CPU, 20 on GPU)")
    run.add_argument("--warmup", type=int, help="untimed warm-up steps (default 2 on CPU, 5 on GPU)")
    run.add_argument("--batch-size", type=int, help="samples per optimizer step (default: the model's)")
    run.add_argument("--seq-len", type=int, help="maximum sequence length (default: the model's)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    run.add_argument(
        "--timeout", type=float, help="seconds before a case's worker is killed (default 600 CPU, 900 GPU)"
    )
    run.add_argument("--pretrained", help="a save_pretrained directory (one model only), or 'hub-cache'")
    run.add_argument("--dataset", help="a local csv/json/parquet file or a cached datasets name")
    run.add_argument("--tokenizer", help="local tokenizer directory for --dataset")
    run.add_argument(
        "--no-profile", dest="profile", action="store_false", help="skip the memory-breakdown and FLOP steps"
    )
    run.add_argument(
        "--threads", type=int, help="torch intra-op threads per case (default: torch's; the CPU test tier uses 1)"
    )
    run.add_argument(
        "--world-size",
        type=int,
        default=1,
        help="ranks per named case (--models/--strategies; default 1): needs ddp, fsdp2, zero2 or zero3",
    )
    run.add_argument(
        "--gpus",
        default="all",
        help="GPUs the cases share: all (default), a count, or ids (0,2); single-GPU cases run side by side, "
        "one per GPU, and a case on N ranks gets N (perfsuite.distributed.pool)",
    )
    run.add_argument("--json", type=Path, help="write every figure to this JSON file")
    run.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="also write report.html and summary.md there, each case compared with its baseline when one exists",
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="after each case, show the warnings and output its worker captured (always kept in --json)",
    )
    overhead = sub.add_parser(
        "overhead",
        help="measure what perfsuite's harness adds to a step: each case against a bare loop of the same config",
        description="Rounds alternate (ABBA) between a case as perfsuite runs it and a hand-written loop of exactly "
        "the same model, data, optimizer, clipping and threads (perfsuite/bare.py), each in its own worker; the "
        "overhead is the median over rounds of the paired step-time ratio. Default: one case per family (fp32, "
        "autocast, 8-bit, ZeRO offload, Trainer) of the tiny-bert model on a CPU, bert-base-uncased on a GPU.",
    )
    overhead.add_argument(
        "--models", type=_names, help="comma-separated (default: tiny-bert on CPU, bert-base-uncased on GPU)"
    )
    overhead.add_argument(
        "--cases",
        type=_names,
        help="comma-separated STRATEGY or STRATEGY:trainer with a bare loop "
        "(vanilla, fp16, bf16, adamw_8bit, zero2_offload; vanilla:trainer); default: all of them",
    )
    overhead.add_argument("--rounds", type=int, default=6, help="rounds per case (default 6)")
    overhead.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's, as perfsuite run)")
    overhead.add_argument("--steps", type=int, help="timed steps per run (default 12 on CPU, 20 on GPU)")
    overhead.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    overhead.add_argument("--timeout", type=float, help="seconds before a worker is killed (default 600 CPU, 900 GPU)")
    overhead.add_argument("--json", type=Path, help="write every round's figures to this JSON file")
    sub.add_parser("list", help="list the declared models, strategies and the matrix, with where each was declared")
    init = sub.add_parser(
        "init",
        help="set up perfsuite in this repository",
        description="Writes the [tool.perfsuite] section of pyproject.toml (with a commented example), the matrix "
        "test, the CPU CI, GPU nightly and baseline-refresh workflows, baselines/ and a README section. An "
        "existing file is kept unless --force; every path written or kept is printed.",
    )
    init.add_argument("--force", action="store_true", help="overwrite files perfsuite init wrote before")
    init.add_argument("--dir", type=Path, default=Path(), help="the repository's root (default: here)")
    baselines = sub.add_parser("baselines", help="manage the stored baselines")
    actions = baselines.add_subparsers(dest="action", required=True)
    refresh = actions.add_parser(
        "refresh",
        help="re-measure the selected cases N times and rewrite their baselines",
        description="Runs the matrix test of this machine's tier with --perfsuite-refresh: each selected case "
        "N times, refusing a case whose repeats spread too wide, printing old -> new per metric, and writing "
        "each file atomically at the end (an interrupted refresh writes nothing). Arguments after -- go to pytest.",
    )
    refresh.add_argument("-k", dest="expression", metavar="EXPR", help="select cases like pytest -k (e.g. tiny-bert)")
    refresh.add_argument("--repeats", type=int, default=3, help="runs per case (default 3)")
    refresh.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="tier to refresh: cpu (tiny models) or cuda (full-size); default: cuda when a GPU is visible",
    )
    refresh.add_argument("--markdown", type=Path, help="also write the old -> new table as markdown (a PR body)")
    refresh.add_argument(
        "--tests",
        type=Path,
        help="the matrix test (default: [tool.perfsuite] tests, else tests/test_matrix.py)",
    )
    refresh.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")

    merge = sub.add_parser(
        "merge",
        help="merge the shards' pytest --perfsuite-json files into one (the nightly's machines each run a shard)",
    )
    merge.add_argument("results", type=Path, nargs="+")
    merge.add_argument("-o", "--out", type=Path, required=True, metavar="FILE")
    merge.add_argument("--expect", type=int, metavar="N", help="fail unless there are N files (a shard lost)")

    report = sub.add_parser(
        "report",
        help="write report.html (charts, offline) and summary.md (a CI job summary) from a results file",
        description="RESULTS is `pytest --perfsuite-json`'s file or `perfsuite run --json`'s. report.html is one "
        "self-contained file (inline SVG, no JavaScript); summary.md fits a GitHub job summary. Charts need "
        "matplotlib: pip install 'perfsuite[report]'. No torch needed.",
    )
    report.add_argument("results", type=Path)
    report.add_argument("-o", "--out", type=Path, required=True, metavar="DIR")
    report.add_argument("--history", type=Path, metavar="DIR", help="nightly records: trends, heatmap, sparklines")
    report.add_argument(
        "--baselines",
        type=Path,
        metavar="DIR",
        help="compare a `perfsuite run` file's cases with these (default: [tool.perfsuite] baselines when present)",
    )

    history = sub.add_parser("history", help="keep and judge nightly results (the perf-history branch)")
    steps = history.add_subparsers(dest="action", required=True)
    record = steps.add_parser("record", help="append tonight's record of a `pytest --perfsuite-json` file")
    record.add_argument("results", type=Path)
    record.add_argument("--dir", type=Path, required=True, help="the history directory")
    record.add_argument("--night", help="the night's date, YYYY-MM-DD (default: the results' date)")
    judge = steps.add_parser(
        "judge",
        help="judge every series; exit 1 when one regressed",
        description="Step time is a regression when its last 2 nights are out of tolerance on the same side, "
        "suspicious after 3 in a row earlier; memory and loss regress on their first night out. Drift (the last "
        "7 nights against the segment's first 7) is reported and never fails.",
    )
    judge.add_argument("--dir", type=Path, required=True, help="the history directory")
    judge.add_argument("--markdown", type=Path, help="also write the verdicts as markdown")
    judge.add_argument(
        "--results",
        type=Path,
        help="tonight's `pytest --perfsuite-json` file: also fail on a case that crashed or has no baseline",
    )
    track = steps.add_parser(
        "track", help="open, update and close one GitHub issue per regressed series (needs gh and a token)"
    )
    track.add_argument("--dir", type=Path, required=True, help="the history directory")
    track.add_argument("--repo", required=True, help="OWNER/NAME")
    track.add_argument("--dry-run", action="store_true", help="print what would be done")
    return parser


def _load_project() -> None:
    """Read the declarations of the project around the working directory (its nearest pyproject.toml)."""
    pyproject = find_pyproject(Path.cwd())
    if pyproject is not None:
        load_declaration(pyproject)


def _where(source: str | None) -> str:
    """Where a name was declared, shown unless it is perfsuite's own."""
    return "" if source == registry.BUILTIN else f"  [{source}]"


def _cmd_list() -> int:
    declared = registry.describe()
    print("models:")
    for spec in MODELS.values():
        where = _where(declared["models"][spec.name])
        print(f"  {spec.name:<26} {spec.task:<15} {'tiny (CPU)' if spec.tiny else 'full size':<10}{where}")
    print("strategies:")
    for strategy in STRATEGIES.values():
        print(f"  {strategy.name:<26} {strategy.description}{_where(declared['strategies'][strategy.name])}")
    cases = registry.matrix_cases()
    builtin = "perfsuite's built-in cases and " if declared["builtin_matrix"] else ""
    print(f"matrix: {len(cases)} cases ({builtin}{len(declared['entries'])} declared entries)")
    for entry in declared["entries"]:
        marks = f" [{', '.join(entry['markers'])}]" if entry["markers"] else ""
        print(
            f"  {', '.join(entry['models'])} × {', '.join(entry['strategies'])} × {', '.join(entry['engines'])}"
            f"{marks}  ({entry['source']})"
        )
    return 0


def _matrix_selection(args: argparse.Namespace, device_type: str) -> list[tuple[str, str, str, int]]:
    """(model, strategy, engine, world size) of what ``perfsuite run`` runs: the named ones, else the
    matrix on this device."""
    on_device = [c for c in registry.matrix_cases() if (get_model_spec(c.model).tiny) == (device_type == "cpu")]
    if not args.models and not args.strategies:
        return [
            (c.model, c.strategy, c.engine, c.world_size)
            for c in on_device
            if args.engine is None or c.engine in args.engine
        ]
    models = args.models or list(dict.fromkeys(c.model for c in on_device))
    strategies = args.strategies or [n for n in STRATEGIES if args.world_size == 1 or resolve(n).distributed]
    return [(m, s, e, args.world_size) for e in (args.engine or ["loop"]) for m in models for s in strategies]


def _gpu_pool(args: argparse.Namespace, device_type: str) -> Any:
    """The GPUs cases share, or ``None`` where they run one after another (a CPU, one GPU)."""
    if device_type != "cuda":
        return None
    import torch

    from perfsuite.distributed.pool import GPUPool, parse_gpus, visible_gpus

    gpus = parse_gpus(args.gpus, visible_gpus(torch.cuda.device_count))
    return GPUPool(gpus) if len(gpus) > 1 else None


def _specs(
    args: argparse.Namespace, selection: list[tuple[str, str, str, int]], device_type: str, defaults: Any
) -> list[Any]:
    from perfsuite.case import CaseSpec

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
        )
        for model, strategy, engine, world_size in selection
    ]


def _run_on_pool(specs: list[Any], pool: Any, timeout: float, done: Any, progress: Any, task: Any) -> list[Any]:
    """``specs`` on the GPU pool, as many at once as it has GPUs (the widest first); records in ``specs`` order."""
    from concurrent.futures import as_completed

    from perfsuite.distributed.pool import PoolRunner, with_gpus
    from perfsuite.worker import run_isolated

    runner = PoolRunner(pool)
    progress.update(task, description=f"{len(pool.gpus)} GPUs: {', '.join(pool.gpus)}")

    def run(spec: Any, env: dict[str, str]) -> dict[str, Any]:
        return with_gpus(run_isolated(spec, timeout_s=timeout, env=env), env, pool)

    futures = {
        runner.submit(spec.world_size, functools.partial(run, spec)): spec
        for spec in sorted(specs, key=lambda s: -s.world_size)
    }
    records = {}
    try:
        for future in as_completed(futures):
            spec = futures[future]
            records[spec] = future.result()
            done(spec, records[spec])
    finally:
        runner.close(cancel=True)
    return [records[spec] for spec in specs]


def _cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from perfsuite.case import CaseSpec
    from perfsuite.device import default_device_type
    from perfsuite.reports.tables import render
    from perfsuite.worker import run_isolated

    console = Console(stderr=True)
    try:
        _load_project()
        for name in args.models or ():
            get_model_spec(name)
        for name in args.strategies or ():
            resolve(name)
        for name in args.engine or ():
            check_engine(name)
    except (UnknownNameError, ValueError) as exc:  # DeclarationError included
        console.print(f"perfsuite: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    if args.threads is not None and args.threads < 1:
        console.print("perfsuite: error: --threads must be at least 1")
        return 2
    device_type = default_device_type() if args.device == "auto" else args.device
    defaults = DEFAULTS[device_type]
    selection = _matrix_selection(args, device_type)
    if not selection:
        console.print(f"perfsuite: error: the matrix has no case for this device ({device_type}); `perfsuite list`")
        return 2
    if args.pretrained and args.pretrained != "hub-cache" and len({m for m, _, _, _ in selection}) != 1:
        console.print("perfsuite: error: --pretrained PATH needs exactly one --models name")
        return 2
    try:
        specs = _specs(args, selection, device_type, defaults)
    except ValueError as exc:
        console.print(f"perfsuite: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return 2
    try:
        pool = _gpu_pool(args, device_type)
    except ValueError as exc:
        console.print(f"perfsuite: error: --gpus: {exc}", markup=False, highlight=False)
        return 2
    timeout = args.timeout or defaults.timeout
    started = time.monotonic()
    results: list[dict[str, Any]] = []
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
            for spec in specs:
                progress.update(task, description=spec.id, refresh=True)
                results.append(run_isolated(spec, timeout_s=timeout))
                done(spec, results[-1])
        else:
            results = _run_on_pool(specs, pool, timeout, done, progress, task)
    wall = time.monotonic() - started
    render(results)
    failed = sum(r["status"] == "failed" for r in results)
    skipped = sum(r["status"] == "skipped" for r in results)
    startups = [r["worker_startup_s"] for r in results if r.get("worker_startup_s") is not None]
    startup = ""
    if startups:
        # The first launch also boots the forkserver (imports torch and friends once).
        startup = f"; first worker {startups[0]:.1f} s (forkserver boot)"
        if len(startups) > 1:
            startup += f", later workers median {1e3 * statistics.median(startups[1:]):.0f} ms"
    ok = len(results) - failed - skipped
    print(f"{len(results)} cases: {ok} ok, {skipped} skipped, {failed} failed in {wall:.0f} s{startup}")
    if args.json or args.report:
        import datetime

        from perfsuite.env import environment

        env = environment(device_type)
        env["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        payload = {"schema_version": SCHEMA_VERSION, "env": env, "wall_s": wall, "cases": results}
        if args.json:
            write_json_atomic(args.json, payload)
            print(f"wrote {args.json}")
        if args.report:
            _write_run_report(payload, args.report)
    return 1 if failed else 0


def _project_baselines() -> tuple[dict[str, Any], Path | None]:
    """The nearest project's ``[tool.perfsuite]`` and its baselines directory (``None`` when there is none)."""
    pyproject = find_pyproject(Path.cwd())
    settings = read_pyproject(pyproject) if pyproject is not None else {}
    baselines = (pyproject.parent if pyproject else Path.cwd()) / settings.get("baselines", "baselines")
    return settings, baselines if baselines.is_dir() else None


def _write_run_report(payload: dict[str, Any], out: Path) -> None:
    """``perfsuite run --report``: the report of this run, each case compared with its baseline when one exists."""
    from perfsuite.reports import write_report
    from perfsuite.reports.charts import ReportExtraMissing
    from perfsuite.reports.results import parse_results

    settings, baselines = _project_baselines()
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


def _cmd_refresh(args: argparse.Namespace) -> int:
    from perfsuite.device import default_device_type

    if args.tests is None:
        args.tests = Path(read_pyproject(Path("pyproject.toml")).get("tests", "tests/test_matrix.py"))
    if not args.tests.is_file():
        print(
            f"perfsuite: error: no matrix test at {args.tests}; run this from the repository's root, "
            "pass --tests, or write one with `perfsuite init`",
            file=sys.stderr,
        )
        return 2
    if args.repeats < 1:
        print("perfsuite: error: --repeats must be at least 1", file=sys.stderr)
        return 2
    device = default_device_type() if args.device == "auto" else args.device
    argv = [str(args.tests), "-m", "cpu" if device == "cpu" else "gpu", "--perfsuite-refresh"]
    argv += [f"--perfsuite-repeats={args.repeats}", "-p", "no:cacheprovider"]
    if args.expression:
        argv += ["-k", args.expression]
    if args.markdown:
        argv += ["--perfsuite-markdown", str(args.markdown)]
    # A fresh interpreter: pytest must import perfsuite itself (to load the plugin and
    # rewrite its asserts), which it cannot do in a process that already imported it.
    return subprocess.run([sys.executable, "-m", "pytest", *argv, *args.pytest_args], check=False).returncode


def _cmd_report(args: argparse.Namespace) -> int:
    from perfsuite.reports import write_report
    from perfsuite.reports.charts import ReportExtraMissing
    from perfsuite.reports.results import ResultsError

    settings, found = _project_baselines()
    baselines = args.baselines or found
    try:
        written = write_report(args.results, args.out, history=args.history, baselines=baselines, settings=settings)
    except (ResultsError, ReportExtraMissing) as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1024:,.0f} KiB)")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    from perfsuite.reports.results import ResultsError, merge_results

    try:
        merged = merge_results(args.results, expect=args.expect)
    except ResultsError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(args.out, merged)
    print(f"wrote {args.out}: {len(merged['cases'])} cases from {len(args.results)} shard(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "list":
            _load_project()
            return _cmd_list()
        if args.command == "init":
            from perfsuite.scaffold import init

            for line in init(args.dir, force=args.force):
                print(line)
            return 0
        if args.command == "baselines":
            return _cmd_refresh(args)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "merge":
            return _cmd_merge(args)
        if args.command == "overhead":
            from perfsuite.overhead import run_overhead

            return run_overhead(args)
        if args.command == "history":
            from perfsuite.history.command import run_history

            return run_history(args)
    except DeclarationError as exc:
        print(f"perfsuite: error: {exc}", file=sys.stderr)
        return 2
    return _cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
