"""The engines a case can train through, by name, and what the Trainer can express. Pure.

- perfsuite's own (:data:`OWN_ENGINES`, a name → class table): ``loop``
  (:mod:`perfsuite.worker.engines.loop`), its explicit loop on accelerate, and ``trainer``
  (:mod:`perfsuite.worker.engines.hf_trainer`), the Hugging Face ``Trainer``, which is what most
  users run; every default it would pick for itself is pinned, so a case means the same training
  in both engines.
- a project's own engines (:class:`EngineSpec`, declared under ``[tool.perfsuite.engines]``):
  a class of the project's that implements the engine interface and trains the models
  the project builds with a factory (:attr:`perfsuite.core.models.ModelSpec.factory`).

Every engine implements the public interface (:mod:`perfsuite.worker.engines.interface`) and is
built the same way, ``Class(case)``: a project's from an ``EngineCase``, perfsuite's own from the
``OwnCase`` that extends it (:mod:`perfsuite.worker.engines.common`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfsuite.core.strategies import Strategy


@dataclass(frozen=True, kw_only=True)
class OwnEngine:
    """One of perfsuite's own engines, named as a project names its own (``module:Class``)."""

    engine_class: str
    """``module:Class`` of a class built as ``Class(case)`` from an ``OwnCase``, imported in the worker."""
    title: str
    """What its cases run through, in words (its pytest marker's description)."""
    cuda_at_import: bool = False
    """Whether its module's import asks CUDA about the GPUs (:data:`perfsuite.core.preloads.CUDA_AT_IMPORT`)."""

    @property
    def module(self) -> str:
        return self.engine_class.partition(":")[0]


OWN_ENGINES: dict[str, OwnEngine] = {
    "loop": OwnEngine(engine_class="perfsuite.worker.engines.loop:LoopEngine", title="perfsuite's explicit loop"),
    # transformers' Trainer module imports its bitsandbytes and peft integrations.
    "trainer": OwnEngine(
        engine_class="perfsuite.worker.engines.hf_trainer:HFTrainerEngine",
        title="the Hugging Face Trainer engine",
        cuda_at_import=True,
    ),
}
"""perfsuite's own engines by name. Adding one is a module of ``perfsuite/worker/engines/`` and its
row here; the forkserver's preloads, the pytest markers and the names a case may take follow."""

ENGINES = tuple(OWN_ENGINES)
"""perfsuite's own engine names; ``loop`` is the default, and its case ids carry no suffix."""


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """A project's own engine: a class of its code, named ``"package.module:Class"``."""

    name: str
    """Registry name: a Python identifier, also the pytest marker of its cases and the suffix of their ids."""
    engine_class: str
    """``module:attribute`` of the class (``acme.train:AcmeEngine``), imported in the worker."""
    root: str | None = None
    """The project's root, where the module is looked for when it is not installed."""
    declared_at: str = ""
    """Where it was declared (``pyproject.toml: tool.perfsuite.engines.acme_step``), for error messages."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"engine name {self.name!r} must be a Python identifier (it is its cases' marker)")
        if self.name in ENGINES:
            raise ValueError(f"engine name {self.name!r} is perfsuite's own")


PROJECT_ENGINES: dict[str, EngineSpec] = {}
"""The engines declared by the project (:func:`perfsuite.core.registry.register_engine`)."""


def engine_names() -> tuple[str, ...]:
    """perfsuite's engines, then the project's."""
    return (*ENGINES, *PROJECT_ENGINES)


def project_engine(name: str) -> EngineSpec | None:
    """The project's engine ``name``; ``None`` for perfsuite's own."""
    return PROJECT_ENGINES.get(name)


def check_engine(name: str) -> str:
    """``name`` if it is an engine; otherwise a ``ValueError`` listing the valid ones."""
    if name not in engine_names():
        raise ValueError(f"unknown engine {name!r}; valid engines: {', '.join(engine_names())}")
    return name


TRAINER_OPTIMIZERS = {
    "adamw": "adamw_torch",
    "adamw_fused": "adamw_torch_fused",
    "adafactor": "adafactor",
    "adamw_8bit": "adamw_bnb_8bit",
    "paged_adamw_8bit": "paged_adamw_8bit",
}
"""perfsuite optimizer → the Trainer's ``optim``. The others have no Trainer equivalent
with the loop's hyperparameters (lion-pytorch; bitsandbytes Lion at the loop's lr ÷ 3 and
betas; GaLore on the loop's chosen weights and rank): their cases are skipped with why."""


def trainer_unsupported(strategy: Strategy) -> str | None:
    """Why the Trainer cannot express ``strategy`` the way the loop engine runs it, or ``None``."""
    if strategy.uses_deepspeed:
        return None
    if strategy.optimizer not in TRAINER_OPTIMIZERS:
        return (
            f"the Trainer has no optim for perfsuite's {strategy.optimizer!r} with the same hyperparameters "
            f"(mapped: {', '.join(TRAINER_OPTIMIZERS)})"
        )
    if strategy.compile:
        return "torch.compile through the Trainer (torch_compile) is not in perfsuite's Trainer mapping yet"
    if strategy.quantize_4bit or strategy.activation_offload:
        return "QLoRA and activation offloading are mapped for the loop engine only"
    return None


__all__ = [
    "ENGINES",
    "OWN_ENGINES",
    "PROJECT_ENGINES",
    "TRAINER_OPTIMIZERS",
    "EngineSpec",
    "OwnEngine",
    "check_engine",
    "engine_names",
    "project_engine",
    "trainer_unsupported",
]
