"""``perfsuite overhead``: each case against a bare loop of the same config (:mod:`perfsuite.cli.overhead_rounds`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfsuite.cli.common import names
from perfsuite.cli.interrupt import Interrupt, terminate_as_interrupt
from perfsuite.cli.options import at_least, output_file, positive_seconds
from perfsuite.cli.overhead_rounds import DEFAULT_SELECTION, HEADERS, Overhead, table_rows
from perfsuite.worker.bare import family


def add_parser(sub: Any) -> None:
    """The subcommand's arguments."""
    overhead = sub.add_parser(
        "overhead",
        help="measure what perfsuite's harness adds to a step: each case against a bare loop of the same config",
        description="Rounds alternate (ABBA) between a case as perfsuite runs it and a hand-written loop of exactly "
        "the same model, data, optimizer, clipping and threads (perfsuite/worker/bare.py), each in its own worker; the "
        "overhead is the median over rounds of the paired step-time ratio. Default: one case per family (fp32, "
        "autocast, 8-bit, ZeRO offload, Trainer) of the tiny-bert model on a CPU, bert-base-uncased on a GPU.",
    )
    overhead.add_argument(
        "--models", type=names, help="comma-separated (default: tiny-bert on CPU, bert-base-uncased on GPU)"
    )
    overhead.add_argument(
        "--cases",
        type=names,
        help="comma-separated STRATEGY or STRATEGY:trainer with a bare loop "
        "(vanilla, fp16, bf16, adamw_8bit, zero2_offload; vanilla:trainer); default: all of them",
    )
    overhead.add_argument(
        "--pairs",
        type=at_least(0),
        default=60,
        help="pairs of steps, the case's engine and the bare loop alternately in one worker (default 60; "
        "vanilla, fp16, bf16, adamw_8bit; 0: rounds only)",
    )
    overhead.add_argument(
        "--rounds", type=at_least(0), default=6, help="rounds of separate workers per case (default 6; 0: pairs only)"
    )
    overhead.add_argument("--threads", type=at_least(1), help="torch intra-op threads (default: torch's)")
    overhead.add_argument("--steps", type=at_least(1), help="timed steps per run (default 12 on CPU, 20 on GPU)")
    overhead.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    overhead.add_argument(
        "--timeout", type=positive_seconds, help="seconds before a worker is killed (default 600 CPU, 900 GPU)"
    )
    overhead.add_argument("--json", type=output_file, help="write every round's figures to this JSON file")


def _selection(cases: Sequence[str] | None) -> list[tuple[str, str]]:
    if not cases:
        return list(DEFAULT_SELECTION)
    chosen = []
    for item in cases:
        strategy, _, engine = item.partition(":")
        engine = engine or "loop"
        if family(strategy, engine) is None:
            valid = ", ".join(s if e == "loop" else f"{s}:{e}" for s, e in DEFAULT_SELECTION)
            raise ValueError(f"no bare loop for {item!r}; cases with one: {valid}")
        chosen.append((strategy, engine))
    return chosen


def run(args: Any) -> int:
    """``perfsuite overhead``: the table, and ``--json``; exit 1 when a side failed, 2 for bad arguments."""
    import sys

    from perfsuite.cli.common import load_project
    from perfsuite.cli.overhead_rounds import measure
    from perfsuite.core.models import get_model_spec
    from perfsuite.core.registry import DeclarationError
    from perfsuite.core.spec import DEFAULTS, CaseSpec
    from perfsuite.core.strategies import UnknownNameError
    from perfsuite.worker.bare import INTERLEAVED
    from perfsuite.worker.device import asked_device_type
    from perfsuite.worker.process import run_isolated, stop_workers

    def error(message: str) -> int:
        print(f"perfsuite: error: {message}", file=sys.stderr)
        return 2

    for name, value in (("--threads", args.threads), ("--steps", args.steps)):
        if value is not None and value < 1:
            return error(f"{name} must be at least 1, got {value}")
    for name, value in (("--rounds", args.rounds), ("--pairs", args.pairs)):
        if value < 0:
            return error(f"{name} must be at least 0, got {value}")
    if args.rounds == 0 and args.pairs == 0:
        return error("--rounds 0 and --pairs 0 measure nothing")
    if args.timeout is not None and args.timeout <= 0:
        return error(f"--timeout must be positive, got {args.timeout:g}")
    try:
        device_type = asked_device_type(args.device)
    except ValueError as exc:
        return error(str(exc))
    defaults = DEFAULTS[device_type]
    try:
        load_project()  # a model the project declares from a config has a bare loop too
        models = args.models or ["tiny-bert" if device_type == "cpu" else "bert-base-uncased"]
        for model in models:
            if get_model_spec(model).factory is not None:
                return error(
                    f"no bare loop for {model}: a model the project builds with a factory trains through its own "
                    "engine, whose step is the project's code (a bare loop would be perfsuite's)"
                )
        specs = [
            CaseSpec(
                model=model,
                strategy=strategy,
                engine=engine,
                steps=args.steps or defaults.steps,
                warmup_steps=defaults.warmup,
                device=device_type,
                threads=args.threads,
            )
            for model in models
            for strategy, engine in _selection(args.cases)
        ]
        if args.rounds == 0 and (alone := [s.id for s in specs if s.engine != "loop" or s.strategy not in INTERLEAVED]):
            return error(
                f"--rounds 0: {', '.join(alone)} measured in rounds only (in-process pairs: {', '.join(INTERLEAVED)})"
            )
    except (UnknownNameError, ValueError, DeclarationError) as exc:
        return error(str(exc))

    def progress(result: Overhead, round_: int) -> None:
        print(
            f"perfsuite: {result.spec.id} round {round_ + 1}/{args.rounds}: {result.ratios[-1]:.3f} "
            f"(case {result.case_ms[-1]:.1f} ms, bare {result.bare_ms[-1]:.1f} ms)",
            file=sys.stderr,
            flush=True,
        )

    results: list[Overhead] = []
    with terminate_as_interrupt() as interrupt:
        try:
            measure(
                specs,
                rounds=args.rounds,
                pairs=args.pairs,
                timeout_s=args.timeout or defaults.timeout,
                run=run_isolated,
                progress=progress,
                results=results,
            )
        except KeyboardInterrupt:
            stop_workers()  # the one in flight went with its round, and the forkserver
            return _report(args, results, device_type, interrupt)
    return _report(args, results, device_type, None)


def _report(args: Any, results: list[Overhead], device_type: str, interrupt: Interrupt | None) -> int:
    """The table and ``--json``; under an interrupt, what finished, and the exit code of its signal."""
    from rich.console import Console
    from rich.table import Table

    from perfsuite.core.baselines import write_json_atomic

    pairs, rounds = f"{args.pairs} pairs of steps in one process", f"{args.rounds} rounds of separate processes"
    measured = {
        (True, True): f"{pairs} and of {rounds}",
        (True, False): f"{pairs} (no rounds: the columns across processes read —)",
        (False, True): f"{rounds} (no pairs: the column in one process reads —)",
    }[(args.pairs > 0, args.rounds > 0)]  # both 0 is refused up front
    table = Table(title=f"perfsuite's overhead on {device_type}: case step ÷ bare-loop step, the median of {measured}")
    for header in HEADERS:
        table.add_column(header)
    for row in table_rows(results):
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:
        console.width = 160  # a log or a pipe: no 80-column squeeze
    console.print(table)
    if interrupt is not None:
        finished = sum(not (r.error or "").startswith("interrupted") for r in results)
        print(f"perfsuite overhead: interrupted by {interrupt.name} after {finished} of {len(results)} cases")
    if args.json:
        payload = {"device": device_type, "rounds": args.rounds, "cases": [r.as_json() for r in results]}
        if interrupt is not None:
            payload["interrupted"] = interrupt.name
        write_json_atomic(args.json, payload)
        print(f"wrote {args.json}")
    if interrupt is not None:
        return interrupt.exit_code
    return 1 if any(r.error for r in results) else 0
