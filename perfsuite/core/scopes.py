"""Scopes: how much of the matrix a run takes on, each sized for a time budget. Pure.

Every case has one scope, the smallest run it belongs to; a larger scope includes the smaller
ones (Megatron-LM's and NeMo's merge-request, nightly and weekly suites work the same way):

- ``push``: what a pull request can afford. On a CPU, the cases ``python -m pytest`` runs on
  every push; on a GPU, bert-base-uncased's :data:`SEED_STRATEGIES` and its Trainer vanilla
  (the table of the write-up "Efficient Training"), 14 cases;
- ``nightly``: on a CPU, the nightly tier's cases too (``pytest -m nightly``); on a GPU, every
  full-size model's seed strategies and its Trainer vanilla;
- ``weekly``: the whole matrix.

A team's declared cases say their scope (``scope = "nightly"`` in a matrix entry); without one,
those marked ``nightly`` are in the nightly scope and the rest in every scope.
:func:`perfsuite.core.registry.matrix_cases` carries each case's scope; pytest's
``--perfsuite-scope``, ``perfsuite run --scope`` and ``perfsuite baselines refresh --scope``
select by it. On a CPU, pytest's default ``-m "not nightly"`` still applies: ``pytest -m cpu
--perfsuite-scope nightly`` takes the nightly tier too.
"""

from __future__ import annotations

SCOPES = ("push", "nightly", "weekly")
"""From the smallest to the whole matrix; each includes the ones before it."""

SEED_STRATEGIES = (
    "vanilla",
    "fp16",
    "bf16",
    "grad_accum",
    "grad_ckpt",
    "adafactor",
    "adamw_8bit",
    "zero2_offload",
    "zero3_offload",
    "dataloader",
    "dynamic_padding",
    "smart_batching",
    "all",
)
"""The strategies of the table in the write-up "Efficient Training", each alone, and ``all`` of them."""

PUSH_MODEL = "bert-base-uncased"
"""The full-size model of the GPU push scope: the write-up's own."""


def check_scope(name: object, where: str = "scope") -> str:
    """``name`` when it is a scope; a ``ValueError`` listing the valid ones otherwise."""
    if not isinstance(name, str) or name not in SCOPES:
        raise ValueError(f"{where}: unknown scope {name!r}; valid: {', '.join(SCOPES)}")
    return name


def in_scope(case_scope: str, chosen: str) -> bool:
    """Whether a case of ``case_scope`` runs in a run of scope ``chosen``."""
    return SCOPES.index(case_scope) <= SCOPES.index(chosen)


def builtin_scope(model: str, strategy: str, engine: str, *, tiny: bool, nightly: bool, world_size: int = 1) -> str:
    """The scope of one of perfsuite's built-in cases: a CPU-tier case by its tier (``nightly``
    marks the nightly tier's), a full-size case by model and strategy (module docstring)."""
    if tiny:
        return "nightly" if nightly else "push"
    seed = world_size == 1 and (
        (engine == "loop" and strategy in SEED_STRATEGIES) or (engine == "trainer" and strategy == "vanilla")
    )
    if not seed:
        return "weekly"
    return "push" if model == PUSH_MODEL else "nightly"
