"""What ``perfsuite run`` and ``perfsuite ab`` run: the options that choose and shape the cases, and
the cases they select (the named ones, else the matrix's on this device), checked."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from perfsuite.cli.common import check_project_code, load_project, names
from perfsuite.cli.options import at_least, positive_seconds
from perfsuite.core.engines import ENGINES, PROJECT_ENGINES, check_engine
from perfsuite.core.matrix import BUILTIN, first_run
from perfsuite.core.models import get_model_spec
from perfsuite.core.registry import matrix_cases
from perfsuite.core.scopes import SCOPES, in_scope
from perfsuite.core.spec import DEFAULTS, launches_ranks
from perfsuite.core.strategies import STRATEGIES, resolve


def add_selection(parser: Any) -> None:
    """The options that choose and shape the cases: ``perfsuite run``'s, and ``perfsuite ab``'s."""
    parser.add_argument(
        "--models",
        type=names,
        help="comma-separated (`perfsuite list` names them); default: the project's own cases and a quick set of "
        "the matrix's on this device (tiny models on a CPU, full-size ones on a GPU; --all: the whole matrix)",
    )
    parser.add_argument(
        "--strategies",
        type=names,
        help="comma-separated, 'a+b' composes; with --models, default: every registered one; without, the matrix's",
    )
    parser.add_argument(
        "--engine",
        type=names,
        help=f"comma-separated engines ({', '.join(ENGINES)}, and those the project declares: `perfsuite list`); "
        "default: the matrix's, or with --models/--strategies loop (a model the project's factory builds: "
        "the engines the matrix pairs it with, or the project's only one)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="without --models/--strategies: the whole matrix on this device (perfsuite's own: 122 cases on a CPU, "
        "about 12 minutes); by default the project's own cases and a quick set of perfsuite's (10 tiny-bert cases "
        "on a CPU, under a minute; none with builtin = false)",
    )
    parser.add_argument(
        "--scope",
        choices=SCOPES,
        help="without --models/--strategies: the matrix's cases of this scope and the smaller ones (push: a pull "
        "request's, perfsuite's own 35 on a CPU and 14 on a GPU; nightly; weekly: all; perfsuite.core.scopes)",
    )
    parser.add_argument(
        "--every-push",
        action="store_true",
        help="the same as --scope push: the cases `pytest` runs on every push (perfsuite's own: 35 on a CPU)",
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
    parser.add_argument(
        "--dataset", help="a local csv/json/jsonl/parquet file, or a `datasets` name already in this machine's cache"
    )
    parser.add_argument("--tokenizer", help="local tokenizer directory for --dataset")
    parser.add_argument(
        "--no-profile", dest="profile", action="store_false", help="skip the profile step (memory breakdown and FLOPs)"
    )
    parser.add_argument(
        "--threads",
        type=at_least(1),
        help="torch intra-op threads per case (default: on a CPU 1, as the CPU tier's gate times its cases; "
        "on a GPU torch's)",
    )
    parser.add_argument(
        "--world-size",
        type=at_least(1),
        default=1,
        help="ranks per named case (--models/--strategies; default 1): needs ddp, fsdp2, zero2 or zero3",
    )


def select(
    args: argparse.Namespace, *, here: bool = True, threads: int | None = None, project: Path | None = None
) -> tuple[list[Any], str, Any, str | None]:
    """The cases ``args`` select (checked: a ``ValueError`` says what is wrong), their device type,
    its defaults, and a note for the reader when the selection is the quick set. ``here``: the
    cases run on this interpreter's torch, so ``--device cuda`` needs it to see a GPU (``perfsuite
    ab``'s sides are interpreters of their own, which each say so). ``threads``: the cases' torch
    threads where ``--threads`` gives none (``None``: one on a CPU, as the gate times them, else torch's).
    ``project``: the directory whose declarations name the cases (default: the working directory's)."""
    from perfsuite.worker.device import asked_device_type

    load_project(project)
    for name in args.models or ():
        get_model_spec(name)
    for name in args.strategies or ():
        resolve(name)
    for name in args.engine or ():
        check_engine(name)
    device_type = asked_device_type(args.device) if here or args.device == "auto" else args.device
    if device_type == "cuda" and not here and not any(Path("/dev").glob("nvidia[0-9]*")):
        # The sides' own torch may see a GPU this one does not, but none sees one the machine lacks.
        raise ValueError("--device cuda: this machine has no NVIDIA GPU (no /dev/nvidia*)")
    for flag, chosen in (("--all", args.all), ("--every-push", args.every_push), ("--scope", args.scope)):
        if chosen and (args.models or args.strategies):
            raise ValueError(f"{flag} runs the matrix's cases; it takes no --models or --strategies")
    if args.world_size > 1 and not (args.models or args.strategies):
        raise ValueError("--world-size is the ranks of the cases --models/--strategies name; the matrix has its own")
    if args.all and args.every_push:
        raise ValueError("--all already holds --every-push's cases; give one of them")
    if args.scope and (args.all or args.every_push):
        raise ValueError(f"--scope {args.scope} chooses the cases; give no --all or --every-push with it")
    selection = matrix_selection(args, device_type)
    if not selection:
        raise ValueError(f"the matrix has no case for this device ({device_type}); `perfsuite list`")
    note = None
    if not (args.all or scope_of(args) or args.models or args.strategies):
        whole = len(matrix_selection(argparse.Namespace(**{**vars(args), "all": True}), device_type))
        if whole > len(selection):
            note = (
                f"perfsuite: a quick set of {len(selection)} of the matrix's {whole} cases on this device; "
                f"`perfsuite {args.command} --all` runs them all"
            )
    if args.pretrained and args.pretrained != "hub-cache" and len({m for m, _, _, _ in selection}) != 1:
        raise ValueError("--pretrained PATH needs exactly one --models name")
    _check_inputs(args, [m for m, _, _, _ in selection])
    defaults = DEFAULTS[device_type]
    specs = _specs(args, selection, device_type, defaults, threads)
    check_project_code(specs)
    return specs, device_type, defaults, note


_DATA_FILES = (".csv", ".json", ".jsonl", ".parquet", ".txt")
"""Suffixes that make ``--dataset`` a local file (anything else may be a cached ``datasets`` name)."""


def _check_inputs(args: argparse.Namespace, models: list[str]) -> None:
    """The files and directories the cases would read, checked before any of them runs."""
    if args.pretrained == "hub-cache":
        without = sorted({m for m in models if get_model_spec(m).hub_id is None})
        if without:
            raise ValueError(f"--pretrained hub-cache: {', '.join(without)} has no hub id to look up")
    elif args.pretrained and not (Path(args.pretrained) / "config.json").is_file():
        raise ValueError(f"--pretrained {args.pretrained}: no config.json there (a directory save_pretrained wrote)")
    if args.tokenizer and not args.dataset:
        raise ValueError("--tokenizer is the tokenizer of --dataset; give --dataset too")
    if args.tokenizer and not Path(args.tokenizer).is_dir():
        raise ValueError(f"--tokenizer {args.tokenizer}: no such directory")
    if args.dataset and Path(args.dataset).suffix in _DATA_FILES and not Path(args.dataset).is_file():
        raise ValueError(f"--dataset {args.dataset}: no such file")
    if args.dataset and Path(args.dataset).suffix not in _DATA_FILES and not _cached_dataset(args.dataset):
        raise ValueError(
            f"--dataset {args.dataset}: no such file or directory, nor a `datasets` name in this machine's cache "
            "(a case reads no network: load it once with `datasets.load_dataset`, or give a csv/json/jsonl/parquet "
            "file)"
        )


def _cached_dataset(name: str) -> bool:
    """Whether ``datasets.load_dataset(name)`` finds ``name`` without the network: a local directory, or a
    name the Hugging Face hub cache or ``datasets``' own cache holds (``ns___name``, the name in snake case,
    as ``datasets`` names its cache's directories)."""
    import os
    import re

    if Path(name).is_dir():
        return True
    home = Path(os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "huggingface")
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub").expanduser()
    own = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets").expanduser()
    *namespace, last = name.split("/")
    snake = re.sub(r"([a-z\d])([A-Z])", r"\1_\2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", last)).lower()
    return (hub / f"datasets--{name.replace('/', '--')}").is_dir() or (own / "___".join([*namespace, snake])).is_dir()


def matrix_selection(args: argparse.Namespace, device_type: str) -> list[tuple[str, str, str, int]]:
    """(model, strategy, engine, world size) of what ``perfsuite run`` runs: the named ones, else the
    matrix on this device (its quick set, :func:`perfsuite.core.matrix.first_run`, without ``--all``)."""
    on_device = [c for c in matrix_cases() if (get_model_spec(c.model).tiny) == (device_type == "cpu")]
    if not args.models and not args.strategies:
        scope = scope_of(args)
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
    engines = {m: args.engine or _engines_of(m) for m in models}
    named: list[tuple[str, str, str, int]] = []
    for engine in dict.fromkeys(e for chosen in engines.values() for e in chosen):
        strategies = args.strategies or _every_strategy(engine, args.world_size)
        if not strategies:
            told = f"--engine {engine}" if args.engine else f"{engine} (the engine of {_models_of(engines, engine)})"
            raise ValueError(
                f"{told} runs no case of {args.world_size} ranks: ranks launched as processes of "
                "their own run through the loop engine only"
            )
        named += [(m, s, engine, args.world_size) for m in models if engine in engines[m] for s in strategies]
    return named


def _models_of(engines: dict[str, list[str]], engine: str) -> str:
    return ", ".join(m for m, chosen in engines.items() if engine in chosen)


def _engines_of(model: str) -> list[str]:
    """The engines a model named without ``--engine`` trains through: the loop for a transformers model;
    for one the project's factory builds, the project's engines the matrix pairs it with, else its only
    engine (a ``ValueError`` naming them where it has several, or none)."""
    if get_model_spec(model).factory is None:
        return ["loop"]
    paired = list(dict.fromkeys(c.engine for c in matrix_cases() if c.model == model and c.engine in PROJECT_ENGINES))
    if paired:
        return paired
    if len(PROJECT_ENGINES) == 1:
        return list(PROJECT_ENGINES)
    declared = ", ".join(PROJECT_ENGINES) or "none is declared in [tool.perfsuite.engines]"
    raise ValueError(
        f"{model} is built by the project's factory and trains through an engine of its own: "
        f"name it with --engine ({declared})"
    )


def _every_strategy(engine: str, world_size: int) -> list[str]:
    """The registered strategies a case of ``world_size`` ranks through ``engine`` can take (ranks
    launched as processes of their own run through the loop engine only)."""
    return [
        name
        for name in STRATEGIES
        if (world_size == 1 or resolve(name).distributed)
        and (engine == "loop" or not launches_ranks(resolve(name), world_size))
    ]


def scope_of(args: argparse.Namespace) -> str | None:
    """The scope chosen (``--every-push`` is ``push``), or ``None``."""
    return getattr(args, "scope", None) or ("push" if args.every_push else None)


def _specs(
    args: argparse.Namespace,
    selection: list[tuple[str, str, str, int]],
    device_type: str,
    defaults: Any,
    default_threads: int | None,
) -> list[Any]:
    from perfsuite.core.spec import TIER_THREADS, CaseSpec, dropout_for

    # A CPU case times as the gate times it (one thread), so that the table's figures are the gate's.
    threads = args.threads if args.threads is not None else default_threads
    if threads is None and device_type == "cpu":
        threads = TIER_THREADS
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
            threads=threads,
            engine=engine,
            world_size=world_size,
            dropout=dropout_for(world_size),
        )
        for model, strategy, engine, world_size in selection
    ]
