"""perfsuite: performance regression tests for training transformer models.

What a team imports, all from here: the registries and the case description (importable without
torch), and the engine interface a team's own training step implements (``Engine``, ``BaseEngine``,
``EngineCase``, ``StepOutput``, ``Unsupported``, ``refuse_unless``, ``ENGINE_API_VERSION``; docs/engines.md),
which imports torch when one of its names is first asked for. Training happens in worker processes
(:mod:`perfsuite.worker.process`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfsuite.core.models import MODELS, ModelSpec, get_model_spec
from perfsuite.core.registry import DeclarationError, register_cases, register_model, register_strategy
from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.core.strategies import STRATEGIES, Strategy, UnknownNameError, compose, resolve

if TYPE_CHECKING:
    from perfsuite.worker.engines.interface import (
        ENGINE_API_VERSION,
        BaseEngine,
        Engine,
        EngineCase,
        StepOutput,
        Unsupported,
        refuse_unless,
    )

_ENGINE_INTERFACE = frozenset(
    {"ENGINE_API_VERSION", "BaseEngine", "Engine", "EngineCase", "StepOutput", "Unsupported", "refuse_unless"}
)
"""Names of :mod:`perfsuite.worker.engines.interface`, imported on first use: ``import perfsuite`` (the
pytest plugin's, the command's) stays free of torch."""


def __getattr__(name: str) -> Any:
    if name in _ENGINE_INTERFACE:
        from perfsuite.worker.engines import interface

        return getattr(interface, name)
    raise AttributeError(f"module 'perfsuite' has no attribute {name!r}")


__all__ = [
    "ENGINE_API_VERSION",
    "MODELS",
    "STRATEGIES",
    "BaseEngine",
    "CaseSkipped",
    "CaseSpec",
    "DeclarationError",
    "Engine",
    "EngineCase",
    "ModelSpec",
    "StepOutput",
    "Strategy",
    "UnknownNameError",
    "Unsupported",
    "compose",
    "get_model_spec",
    "refuse_unless",
    "register_cases",
    "register_model",
    "register_strategy",
    "resolve",
]
