"""A project's own model and engine in the worker: its code imported, checked and built into a case.

A model a project declares with a ``factory`` and a ``batch`` maker, and an engine it declares
with a ``class`` (:mod:`perfsuite.core.declaration`), are the project's code. Here they are
imported (the project's root after the installed packages on the path) and checked against
what perfsuite expects of them: the factory builds a ``torch.nn.Module`` from a seed, the batch
maker returns a dict of tensors, the engine class implements the interface version this
perfsuite speaks (:mod:`perfsuite.worker.engines.interface`). Whatever cannot be imported,
returns the wrong thing or raises is a :class:`~perfsuite.core.registry.DeclarationError`
naming the declaration, the key and what was expected.

:func:`check_case` runs those checks without training, in a worker before any case runs
(:mod:`perfsuite.worker.preflight`); every case's build (:func:`build_model`,
:func:`build_engine`) checks them again.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from perfsuite.core.project_code import BATCH, BATCH_ARGUMENTS, FACTORY, split_reference
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.worker.capture import raised_at
from perfsuite.worker.engines.interface import ENGINE_API_VERSION, EngineCase, case_fields

if TYPE_CHECKING:
    from perfsuite.core.engines import EngineSpec
    from perfsuite.core.models import ModelSpec
    from perfsuite.worker.device import Device
    from perfsuite.worker.engines.interface import Engine

ENGINE = (
    f"a class implementing perfsuite's engine interface version {ENGINE_API_VERSION} "
    "(perfsuite.Engine): EngineClass(case) with model, optimizer, step(), evidence(), close()"
)


def load(reference: str, root: str | None, where: str, expected: str) -> Any:
    """The object ``reference`` (``module:attribute``) names, its module imported with ``root`` on the path."""
    module_name, attribute = split_reference(reference)
    if root and root not in sys.path:
        sys.path.append(root)  # after the installed packages: an installed project wins
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # anything the project's module raises at import
        raise DeclarationError(
            f"{where}: cannot import {module_name}: {type(exc).__name__}: {exc}; expected {expected}"
        ) from None
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise DeclarationError(f"{where}: {module_name} has no {attribute}; expected {expected}")
        found = getattr(found, part)
    return found


def _call(fn: Any, reference: str, where: str, expected: str, kwargs: Mapping[str, Any]) -> Any:
    """``fn(**kwargs)``, its signature checked first; what it raises, as one line (a skip stays a skip)."""
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    if not callable(fn):
        raise DeclarationError(f"{where}: {reference} is a {type(fn).__name__}, not callable; expected {expected}")
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError as exc:
        raise DeclarationError(
            f"{where}: {reference} cannot be called as ({shown}): {exc}; expected {expected}"
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): the call decides
    try:
        return fn(**kwargs)
    except CaseSkipped:
        raise
    except Exception as exc:
        raise DeclarationError(
            f"{where}: {reference}({shown}) raised {type(exc).__name__}: {exc}{raised_at(exc)}; expected {expected}"
        ) from None


def build_model(spec: ModelSpec, *, seed: int, meta: bool = False) -> torch.nn.Module:
    """The project's model, built by its factory from ``seed`` (torch seeded with it first). ``meta``:
    on the meta device where the factory allows (a check that allocates nothing)."""
    assert spec.factory is not None
    where = f"{spec.declared_at}.factory"
    factory = load(spec.factory, spec.root, where, FACTORY)
    kwargs = {"seed": seed, **spec.factory_args}
    torch.manual_seed(seed)
    model: Any = None
    if meta:
        try:
            with torch.device("meta"):
                model = factory(**kwargs)
        except Exception:
            model = None  # a factory that needs real tensors (weights from a file): built for real below
    if model is None:
        model = _call(factory, spec.factory, where, FACTORY, kwargs)
    if not isinstance(model, torch.nn.Module):
        raise DeclarationError(
            f"{where}: {spec.factory}(seed={seed}) returned {type(model).__name__}; expected {FACTORY}"
        )
    return model


def batch_maker(spec: ModelSpec, *, batch_size: int, seq_len: int, seed: int) -> Callable[..., dict[str, torch.Tensor]]:
    """The project's batch maker, called with what it takes of ``batch_size``, ``seq_len``, ``step`` and ``seed``
    (an image model's takes no ``seq_len``), its first batch checked; what it returns later is checked for its type."""
    assert spec.batch is not None
    reference, where = spec.batch, f"{spec.declared_at}.batch"
    make = load(reference, spec.root, where, BATCH)
    taken = _taken(make, BATCH_ARGUMENTS)
    offered = {"batch_size": batch_size, "seq_len": seq_len, "step": 0, "seed": seed}
    first = _call(make, reference, where, BATCH, {k: v for k, v in offered.items() if k in taken})
    _check_batch(first, reference, where)

    def checked(**kwargs: Any) -> dict[str, torch.Tensor]:
        batch = make(**{k: v for k, v in kwargs.items() if k in taken})
        _check_batch(batch, reference, where)
        return dict(batch)

    return checked


def takes_seq_len(spec: ModelSpec) -> bool:
    """Whether the project's batch maker takes a ``seq_len`` (makes sequences, whose positions are tokens)."""
    assert spec.batch is not None
    make = load(spec.batch, spec.root, f"{spec.declared_at}.batch", BATCH)
    return "seq_len" in _taken(make, BATCH_ARGUMENTS)


def _taken(fn: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``names`` ``fn`` takes by keyword (all of them where it takes ``**kwargs`` or shows no signature)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return names
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return names
    keyword = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return tuple(name for name in names if name in keyword)


def _check_batch(batch: Any, reference: str, where: str) -> None:
    if not isinstance(batch, Mapping) or not batch:
        raise DeclarationError(f"{where}: {reference} returned {type(batch).__name__}; expected {BATCH}")
    wrong = [f"{k!r}: {type(v).__name__}" for k, v in batch.items() if not isinstance(v, torch.Tensor)]
    if wrong:
        raise DeclarationError(f"{where}: {reference} returned {', '.join(wrong)}; expected {BATCH}")


def engine_class(spec: EngineSpec) -> type:
    """The project's engine class, checked against the interface (nothing is built)."""
    where = f"{spec.declared_at}.class"
    found = load(spec.engine_class, spec.root, where, ENGINE)
    if not isinstance(found, type):
        raise DeclarationError(
            f"{where}: {spec.engine_class} is a {type(found).__name__}, not a class; expected {ENGINE}"
        )
    version = getattr(found, "api_version", None)
    if version != ENGINE_API_VERSION:
        said = "declares no api_version" if version is None else f"implements interface version {version!r}"
        raise DeclarationError(
            f"{where}: {spec.engine_class} {said}; this perfsuite implements version {ENGINE_API_VERSION} "
            "(set api_version, or subclass perfsuite.BaseEngine)"
        )
    missing = [name for name in ("step", "evidence", "close") if not callable(getattr(found, name, None))]
    if missing:
        raise DeclarationError(f"{where}: {spec.engine_class} has no {', '.join(missing)}; expected {ENGINE}")
    step = getattr(found, "step")  # noqa: B009 - any class that has one, not only an Engine
    try:
        inspect.signature(step).bind(None)  # an unbound method: ``self`` alone
    except TypeError as exc:
        signature = f"step{inspect.signature(step)}"
        raise DeclarationError(
            f"{where}: {spec.engine_class}.{signature} cannot be called as step(): {exc}; perfsuite calls step() "
            f"with no argument (a step takes its batches from self.case.batch(step, batch_size)); expected {ENGINE}"
        ) from None
    except ValueError:
        pass
    try:
        inspect.signature(found).bind(None)
    except TypeError as exc:
        raise DeclarationError(
            f"{where}: {spec.engine_class} cannot be built as {found.__name__}(case): {exc}; expected {ENGINE}"
        ) from None
    except ValueError:
        pass
    return found


def build_engine(
    spec: CaseSpec, model: torch.nn.Module, device: Device, *, batch_size: int, seq_len: int, lr: float
) -> Engine:
    """The project's engine for ``spec``, built from its :class:`EngineCase` with torch seeded; a strategy
    it refuses raises :class:`~perfsuite.worker.engines.interface.Unsupported` (the case is skipped)."""
    engine_spec = spec.engine_spec
    assert engine_spec is not None
    cls = engine_class(engine_spec)
    case = EngineCase(
        **case_fields(spec, model, torch.device(device.placement()), batch_size=batch_size, seq_len=seq_len, lr=lr),
        strategy=spec.strategy_spec,
        make_batch=batch_maker(spec.model_spec, batch_size=batch_size, seq_len=seq_len, seed=spec.seed),
    )
    where = f"{engine_spec.declared_at}.class"
    torch.manual_seed(spec.seed)
    try:
        engine: Any = cls(case)
    except CaseSkipped:
        raise
    except Exception as exc:  # the project's constructor, whatever it raises
        raise DeclarationError(
            f"{where}: {engine_spec.engine_class}(case) raised {type(exc).__name__}: {exc}{raised_at(exc)}; "
            f"expected {ENGINE}"
        ) from None
    if not isinstance(getattr(engine, "model", None), torch.nn.Module):
        raise DeclarationError(
            f"{where}: {engine_spec.engine_class}(case) has no model (a torch.nn.Module); expected {ENGINE}"
        )
    optimizer = getattr(engine, "optimizer", None)
    if not isinstance(getattr(optimizer, "state", None), Mapping) or not callable(
        getattr(optimizer, "zero_grad", None)
    ):
        raise DeclarationError(
            f"{where}: {engine_spec.engine_class}(case) has no optimizer (a torch.optim.Optimizer); expected {ENGINE}"
        )
    return engine  # type: ignore[no-any-return]


def check_case(spec: CaseSpec) -> dict[str, Any]:
    """``spec``'s factory, batch maker and engine class imported and checked, nothing trained: a record
    whose status is ``ok``, or ``failed`` with the one line that says what is wrong."""
    model_spec = spec.model_spec
    record: dict[str, Any] = {"model": spec.model, "strategy": spec.strategy, "engine": spec.engine}
    try:
        if model_spec.factory is not None:
            build_model(model_spec, seed=spec.seed, meta=True)
            batch_size = spec.batch_size or spec.strategy_spec.batch_size or model_spec.batch_size
            batch_maker(model_spec, batch_size=batch_size, seq_len=spec.seq_len or model_spec.seq_len, seed=spec.seed)
        else:  # declared from a config: its fields, checked as its case's build checks them
            from perfsuite.worker.modeling import build_config

            build_config(model_spec)
        if spec.engine_spec is not None:
            engine_class(spec.engine_spec)
    except DeclarationError as exc:
        return {**record, "status": "failed", "error": str(exc)}
    return {**record, "status": "ok", "error": None}
