"""perfsuite: performance regression tests for training transformer models.

The registries and the case description are importable without torch; training
happens in worker processes (:mod:`perfsuite.worker.process`).
"""

from __future__ import annotations

from perfsuite.core.models import MODELS, ModelSpec, get_model_spec
from perfsuite.core.registry import DeclarationError, register_cases, register_model, register_strategy
from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.core.strategies import STRATEGIES, Strategy, UnknownNameError, compose, resolve

__all__ = [
    "MODELS",
    "STRATEGIES",
    "CaseSkipped",
    "CaseSpec",
    "DeclarationError",
    "ModelSpec",
    "Strategy",
    "UnknownNameError",
    "compose",
    "get_model_spec",
    "register_cases",
    "register_model",
    "register_strategy",
    "resolve",
]
