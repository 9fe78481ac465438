"""``perfsuite list`` (the declared models, strategies and matrix) and ``perfsuite init`` (set a repository up)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfsuite.cli.common import fail, load_project
from perfsuite.cli.options import existing_dir
from perfsuite.core import registry
from perfsuite.core.engines import PROJECT_ENGINES
from perfsuite.core.matrix import BUILTIN
from perfsuite.core.models import MODELS
from perfsuite.core.strategies import STRATEGIES


def add_list(sub: Any) -> None:
    """``perfsuite list``."""
    sub.add_parser("list", help="list the declared models, strategies and the matrix, with where each was declared")


def add_init(sub: Any) -> None:
    """The subcommand's arguments."""
    init = sub.add_parser(
        "init",
        help="set up perfsuite in this repository",
        description="Writes the [tool.perfsuite] section of pyproject.toml (with a commented example), the matrix "
        "test, the workflows (CPU tier, GPU nightly, baseline refresh, the side-by-side verdict of a pull "
        "request, and the upgrade verdict of a dependency bump, on CPU and GPU, with its comment), "
        "dependabot.yml, baselines/ and a README section. An "
        "existing file is kept unless --force; every path written or kept is printed.",
    )
    init.add_argument("--force", action="store_true", help="overwrite files perfsuite init wrote before")
    init.add_argument(
        "--example",
        action="store_true",
        help="also write a model and a training step of the project's own to start from (perfsuite_example/: "
        "a plain torch module, its batch maker and an engine), declared in pyproject.toml",
    )
    init.add_argument("--dir", type=existing_dir, default=Path(), help="the repository's root (default: here)")


def _where(source: str | None) -> str:
    """Where a name was declared, shown unless it is perfsuite's own."""
    return "" if source == BUILTIN else f"  [{source}]"


def run_list(args: Any) -> int:
    load_project()
    declared = registry.describe()
    print("models:")
    for spec in MODELS.values():
        where = _where(declared["models"][spec.name])
        print(f"  {spec.name:<26} {spec.task:<15} {'tiny (CPU)' if spec.tiny else 'full size':<10}{where}")
    print("strategies:")
    for strategy in STRATEGIES.values():
        print(f"  {strategy.name:<26} {strategy.description}{_where(declared['strategies'][strategy.name])}")
    if declared["engines"]:
        print("engines of the project's own:")
        for name, source in declared["engines"].items():
            print(f"  {name:<26} {PROJECT_ENGINES[name].engine_class}{_where(source)}")
    cases = registry.matrix_cases()
    builtin = "perfsuite's built-in cases and " if declared["builtin_matrix"] else ""
    entries = len(declared["entries"])
    print(f"matrix: {len(cases)} cases ({builtin}{entries} declared entr{'y' if entries == 1 else 'ies'})")
    for entry in declared["entries"]:
        marks = f" [{', '.join(entry['markers'])}]" if entry["markers"] else ""
        print(
            f"  {', '.join(entry['models'])} × {', '.join(entry['strategies'])} × {', '.join(entry['engines'])}"
            f"{marks}  ({entry['source']})"
        )
    return 0


def run_init(args: Any) -> int:
    from perfsuite.cli.scaffold import InitError, init

    try:
        lines = init(args.dir, force=args.force, example=args.example, gpu=_has_gpu())
    except InitError as exc:
        return fail(str(exc))
    except OSError as exc:  # what the check before writing could not foresee (a disk filling up)
        return fail(f"perfsuite init stopped writing: {exc}; files written before it are kept")
    for line in lines:
        print(line)
    return 0


def _has_gpu() -> bool:
    """Whether torch sees a CUDA GPU here (then ``init`` writes a GPU's step-time gates too)."""
    try:
        from perfsuite.worker.device import cuda_usable
    except ImportError:  # no torch yet: the CPU tier's gates only
        return False
    return cuda_usable()
