"""A project's own code checked before any case runs: each model it builds with a factory and each
engine of its own, imported and called in a worker (:func:`perfsuite.worker.project.check_case`), and
each model it declares from a config, its fields checked against its config class.

The pytest session calls :func:`preflight` once its cases are collected, ``perfsuite run`` and
``perfsuite ab`` once they are selected; a problem stops them with one line naming the
declaration, the key and what was expected. Nothing here imports torch: a session without
such cases pays nothing, and one with them one worker per model and engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from perfsuite.core.spec import CaseSpec


def uses_project_code(spec: CaseSpec) -> bool:
    """Whether ``spec`` trains a model the project builds or through an engine of the project's."""
    return spec.model_spec.factory is not None or spec.engine_spec is not None


def checked_first(spec: CaseSpec) -> bool:
    """Whether :func:`preflight` checks ``spec``'s model or engine: the project's own code, or a model it
    declares from a config (perfsuite's own are checked by its tests)."""
    from perfsuite.core.matrix import BUILTIN
    from perfsuite.core.registry import source_of

    return uses_project_code(spec) or source_of("model", spec.model) not in (None, BUILTIN)


def _check(spec: CaseSpec) -> dict[str, Any]:
    from perfsuite.worker.project import check_case  # in the worker: torch and the project's code

    return check_case(spec)


def preflight(specs: Iterable[CaseSpec], *, timeout_s: float = 300.0) -> str | None:
    """The project's code ``specs`` use, checked once per model and engine, each in a worker of its
    own; the first problem as one line, or ``None`` (always, without such cases)."""
    first: dict[tuple[str, str], CaseSpec] = {}
    for spec in specs:
        if checked_first(spec):
            first.setdefault((spec.model, spec.engine), spec)
    if not first:
        return None
    from perfsuite.worker.process import run_isolated

    for spec in first.values():
        record = run_isolated(spec, timeout_s=timeout_s, target=_check)
        if record.status == "failed":  # a skip (a missing package) is the case's own to report
            return str(record.error)
    return None
