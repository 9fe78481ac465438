"""perfsuite's own matrix: which model × strategy × engine cases it runs, and in which tier. Pure.

The policy is chosen by measured cost: what runs on every push (``python -m pytest``
within its budget on 2 cores) and what runs nightly (``pytest -m nightly``). The
registry (:mod:`perfsuite.core.registry`) adds it to the declared matrix; nothing here
imports the registry.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from perfsuite.core.engines import ENGINES, trainer_unsupported
from perfsuite.core.models import FULL_SIZE, TINY, get_model_spec
from perfsuite.core.scopes import SCOPES, builtin_scope, check_scope
from perfsuite.core.spec import MATRIX_WORLD_SIZE, MULTI_RANK_STRATEGIES
from perfsuite.core.strategies import BUILTIN_STRATEGIES, resolve

BUILTIN = "perfsuite's built-in declaration"
"""The source named for perfsuite's own models, strategies and matrix."""


@dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    """Cases to run: every model × every strategy × every engine, with these markers."""

    models: tuple[str, ...]
    """Declared model names; a model with a CPU variant brings that variant's cases too."""
    strategies: tuple[str, ...]
    """Declared strategy names, or ``a+b`` compositions of them."""
    engines: tuple[str, ...] = ("loop",)
    """``loop`` and/or ``trainer`` (see :mod:`perfsuite.core.engines`)."""
    markers: tuple[str, ...] = ()
    """pytest markers of these cases, e.g. ``nightly`` (deselected by default) or the project's own."""
    source: str = ""
    """Where the entry was declared, for error messages."""
    world_sizes: tuple[int, ...] = (1,)
    """Ranks each case trains on; beyond 1 its strategies must say how ranks share the work
    (``ddp``, ``fsdp2``, ``zero2``, ``zero3``, alone or combined)."""
    scope: str = "push"
    """The smallest run these cases belong to (:mod:`perfsuite.core.scopes`): ``push`` (default:
    every run), ``nightly`` or ``weekly``."""

    def __post_init__(self) -> None:
        check_scope(self.scope, f"{self.source or 'a matrix entry'}: scope")


MATRIX_ENGINES = ENGINES
"""Every case runs through each engine (the Trainer's where it can express the strategy)."""

MATRIX_PAIRS: tuple[str, ...] = ("fp16+grad_ckpt",)
"""Combinations the matrix runs besides ``all``: the pairs the practitioners' write-ups publish."""

_EVERY_PUSH_BEYOND_TINY_BERT = frozenset({"vanilla", "grad_accum", "grad_ckpt", "adafactor", "dynamic_padding"})
"""fp32 strategies the other tiny encoder/decoder models run on every push (the original matrix,
less DeepSpeed's two, 13-19 s a case there, and 8-bit AdamW, the DataLoader and smart
batching, which tiny-bert runs on every push: they moved to nightly when the Trainer
engine's cases came)."""
_EVERY_PUSH_ON_TINY_LLAMA = frozenset({"vanilla", "grad_accum", "grad_ckpt", "lora"})
"""The tiny Llama's core: what a modern decoder is fine-tuned with (eager attention and fused
AdamW, which tiny-bert covers on every push, run nightly)."""


def matrix_strategies(model: str, engine: str = "loop") -> list[str]:
    """The strategies the test matrix pairs with ``model`` through ``engine``: every registered
    one its device can run (GPU-only ones are left out of the CPU tier), plus :data:`MATRIX_PAIRS`;
    through the Trainer, those it can express (:func:`perfsuite.core.engines.trainer_unsupported`)."""
    names = [n for n in (*BUILTIN_STRATEGIES, *MATRIX_PAIRS) if n not in MULTI_RANK_STRATEGIES]
    if get_model_spec(model).tiny:
        names = [n for n in names if resolve(n).gpu_only is None]
        if model != "tiny-bert":
            # Measured, not yet understood: MemTracker followed no compiled step of tiny-gpt2
            # or tiny-llama (no memory breakdown, so no CPU peak), and tiny-t5's compiled
            # peak differed by 4.45% between repeats. tiny-bert-compile records and gates.
            names.remove("compile")
    if engine == "trainer":
        names = [n for n in names if trainer_unsupported(resolve(n)) is None]
        if get_model_spec(model).tiny and model != "tiny-bert":
            # The other tiny models through the Trainer (nightly): what the loop runs for them on every push.
            names = [n for n in names if not nightly_only(model, n)]
    return names


_NIGHTLY_ON_TINY_BERT = frozenset(
    {"fused_adamw", "lion", "lion_8bit", "galore", "eager_attention", "fp16+grad_ckpt", "zero3_offload"}
)
"""Newer optimizers and the attention switch, nightly since the project test (tests/test_own_project.py,
about 75 s) came: each cost 10-16 s a push with its without-the-strategy claim (measured in a full run).
``fp16+grad_ckpt`` (20 s: fp16 runs 4-6× vanilla on a CPU without fp16 kernels; ``all`` still
runs both on every push) and ZeRO-3 nightly since the report's tests came and a full run
reached 17 minutes; ZeRO-2 with offload runs on every push (15 s), in place of its
accumulation interaction (100 s), which moved to nightly."""

_TRAINER_EVERY_PUSH = frozenset({"vanilla", "fp16", "grad_accum", "grad_ckpt", "smart_batching"})
"""tiny-bert through the Trainer on every push: the write-ups' core strategies, each with a
claim that has caught the Trainer doing something else (fp16 on CPU, accumulation's loss)."""


MULTI_RANK_MATRIX: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "tiny-bert": (("ddp", "fsdp2", "zero2", "zero3", "ddp+grad_accum", "fsdp2+grad_ckpt"), (MATRIX_WORLD_SIZE,)),
    "tiny-gpt2": (("ddp", "fsdp2"), (MATRIX_WORLD_SIZE,)),
    "tiny-llama": (("ddp", "fsdp2"), (MATRIX_WORLD_SIZE,)),
    "bert-base-uncased": (MULTI_RANK_STRATEGIES, (MATRIX_WORLD_SIZE,)),
    "smollm2-135m": (("ddp", "fsdp2"), (MATRIX_WORLD_SIZE,)),
}
"""Multi-rank cases (loop engine): model → (strategies, world sizes). The GPU tier also runs
bert-base-uncased's ``ddp`` at world size 1 (NCCL in a world of one: what DDP costs alone)."""

_MULTI_RANK_EVERY_PUSH = frozenset({("tiny-bert", "ddp"), ("tiny-bert", "fsdp2"), ("tiny-bert", "zero2")})
"""Multi-rank cases of every push (with their claims); the rest of the CPU tier's run nightly."""


def nightly_only(model: str, strategy: str, engine: str = "loop", world_size: int = 1) -> bool:
    """Whether a CPU-tier case runs only in the nightly tier (``pytest -m nightly``), not on every push.

    Chosen by measured cost, so that ``python -m pytest`` stays within 15 minutes on 2 cores:
    tiny-bert runs every strategy on every push except ``compile`` (inductor compiles a
    tiny-bert step in about a minute on 2 cores, per case) and
    :data:`_NIGHTLY_ON_TINY_BERT`; the other tiny models run
    the fp32 strategies of the original matrix but DeepSpeed's (tiny-llama: its core
    set), because on a CPU without native fp16/bf16 kernels their half-precision cases
    ran 21-44 s each and their ZeRO cases 13-19 s.
    Through the Trainer, tiny-bert runs :data:`_TRAINER_EVERY_PUSH` on every push.
    Everything else runs nightly.
    """
    if model not in TINY:
        return False
    if world_size > 1:
        return (model, strategy) not in _MULTI_RANK_EVERY_PUSH
    if engine != "loop":
        return model != "tiny-bert" or strategy not in _TRAINER_EVERY_PUSH
    chosen = resolve(strategy)
    if chosen.compile:
        return True
    if model == "tiny-bert":
        return strategy in _NIGHTLY_ON_TINY_BERT
    if model == "tiny-llama":
        return strategy not in _EVERY_PUSH_ON_TINY_LLAMA
    return chosen.precision != "fp32" or strategy not in _EVERY_PUSH_BEYOND_TINY_BERT


@functools.cache
def builtin_matrix() -> tuple[MatrixEntry, ...]:
    """perfsuite's own matrix as declaration entries: each built-in model × :func:`matrix_strategies`
    through each engine, the cases :func:`nightly_only` picks marked ``nightly``."""
    entries = []
    for engine in MATRIX_ENGINES:
        for model in (*TINY, *FULL_SIZE):
            entries += _entries(model, matrix_strategies(model, engine), engine, 1)
    for model, (strategies, sizes) in MULTI_RANK_MATRIX.items():
        for size in sizes:
            entries += _entries(model, strategies, "loop", size)
    entries += _entries("bert-base-uncased", ("ddp",), "loop", 1)
    return tuple(entries)


def _entries(model: str, names: tuple[str, ...] | list[str], engine: str, size: int) -> list[MatrixEntry]:
    """One entry per (tier, scope) of ``model``'s ``names``, the nightly tier's marked ``nightly``:
    the every-push tier first, each tier's scopes from the smallest."""
    tiny = get_model_spec(model).tiny
    groups: dict[tuple[bool, int], list[str]] = {}
    for name in names:
        nightly = nightly_only(model, name, engine, size)
        scope = builtin_scope(model, name, engine, tiny=tiny, nightly=nightly, world_size=size)
        groups.setdefault((nightly, SCOPES.index(scope)), []).append(name)
    return [
        MatrixEntry(
            models=(model,),
            strategies=tuple(chosen),
            engines=(engine,),
            markers=("nightly",) if nightly else (),
            source=BUILTIN,
            world_sizes=(size,),
            scope=SCOPES[scope],
        )
        for (nightly, scope), chosen in sorted(groups.items())
    ]


FIRST_RUN_STRATEGIES: tuple[tuple[str, str], ...] = (
    ("vanilla", "loop"),
    ("fp16", "loop"),
    ("bf16", "loop"),
    ("grad_accum", "loop"),
    ("grad_ckpt", "loop"),
    ("adafactor", "loop"),
    ("adamw_8bit", "loop"),
    ("dynamic_padding", "loop"),
    ("lora", "loop"),
    ("vanilla", "trainer"),
)
"""What ``perfsuite run`` runs with no selection, on the first model of each device's matrix (tiny-bert on
a CPU, bert-base-uncased on a GPU): a strategy of each kind the write-ups publish (precision, accumulation,
checkpointing, two memory-saving optimizers, padding, LoRA) and the Trainer: 47 s on a 2-core EPYC
(measured with ``time perfsuite run``). ``perfsuite run --all`` runs the whole matrix (122 cases on a CPU, about
12 minutes)."""


def first_run(cases: list[tuple[str, str, str, int]]) -> list[tuple[str, str, str, int]]:
    """The quick set of perfsuite's built-in ``cases`` (model, strategy, engine, world size):
    :data:`FIRST_RUN_STRATEGIES` on the first model (all of ``cases`` when it has none of them)."""
    if not cases:
        return []
    model = cases[0][0]
    chosen = [c for c in cases if c[0] == model and c[3] == 1 and (c[1], c[2]) in FIRST_RUN_STRATEGIES]
    return chosen or cases
