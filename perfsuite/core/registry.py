"""What the matrix runs: declared models, strategies and cases, from every declaration.

A *declaration* names models (:class:`~perfsuite.core.models.ModelSpec`), strategies
(:class:`~perfsuite.core.strategies.Strategy`), engines of the project's own
(:class:`~perfsuite.core.engines.EngineSpec`) and matrix entries (:class:`MatrixEntry`:
models × strategies × engines, with the pytest markers that choose their tier).
perfsuite's own models, strategies and matrix are one declaration (``BUILTIN``); a
project's ``[tool.perfsuite]`` in its ``pyproject.toml`` is another
(:mod:`perfsuite.core.declaration`); a ``conftest.py`` may add more through
:func:`register_model`, :func:`register_strategy` and :func:`register_cases`. All of them
land here, and the pytest plugin and ``perfsuite run`` read the matrix from
:func:`matrix_cases`.

Pure: no torch, no pytest. Names are checked when they are declared, so a mistake is
reported at start-up with where it was made, not as a failing case later.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from perfsuite.core.engines import ENGINES, PROJECT_ENGINES, EngineSpec, engine_names, trainer_unsupported
from perfsuite.core.matrix import BUILTIN, MatrixEntry, builtin_matrix
from perfsuite.core.models import MODELS, ModelSpec
from perfsuite.core.strategies import EXTRAS, STRATEGIES, Strategy, UnknownNameError, resolve

TIER_MARKERS = ("cpu", "gpu")
"""Markers the device decides (a tiny model runs on the CPU tier, a full-size one on a GPU)."""


class DeclarationError(ValueError):
    """A declaration that cannot be used; the message names where it was made."""


@dataclass(frozen=True)
class MatrixCase:
    """One case of the expanded matrix."""

    model: str
    strategy: str
    engine: str
    markers: tuple[str, ...]
    source: str
    world_size: int = 1
    scope: str = "push"
    """The smallest run the case belongs to (:mod:`perfsuite.core.scopes`)."""


@dataclass
class _State:
    sources: dict[str, str]
    entries: list[MatrixEntry]
    variants: dict[str, str]
    builtin_matrix: bool = True


_STATE = _State(
    sources={
        **{f"model {n}": BUILTIN for n in MODELS},
        **{f"strategy {n}": BUILTIN for n in STRATEGIES},
        **{f"engine {n}": BUILTIN for n in ENGINES},
    },
    entries=[],
    variants={},
)


@dataclass(frozen=True)
class Snapshot:
    """The registry at one moment (:func:`snapshot`), to go back to with :func:`restore`."""

    models: dict[str, ModelSpec]
    strategies: dict[str, Strategy]
    state: _State
    engines: dict[str, EngineSpec] = dataclasses.field(default_factory=dict)


def snapshot() -> Snapshot:
    """The registry as it is now: a pytest session restores it when it ends, so declarations stay its own."""
    state = dataclasses.replace(
        _STATE, sources=dict(_STATE.sources), entries=list(_STATE.entries), variants=dict(_STATE.variants)
    )
    return Snapshot(dict(MODELS), dict(STRATEGIES), state, dict(PROJECT_ENGINES))


def restore(saved: Snapshot) -> None:
    """Go back to ``saved``: declarations made since are forgotten."""
    MODELS.clear()
    MODELS.update(saved.models)
    STRATEGIES.clear()
    STRATEGIES.update(saved.strategies)
    PROJECT_ENGINES.clear()
    PROJECT_ENGINES.update(saved.engines)
    _STATE.sources = dict(saved.state.sources)
    _STATE.entries = list(saved.state.entries)
    _STATE.variants = dict(saved.state.variants)
    _STATE.builtin_matrix = saved.state.builtin_matrix


def source_of(kind: str, name: str) -> str | None:
    """Where the model, strategy or engine ``name`` was declared (``kind``: ``model``, ``strategy`` or ``engine``)."""
    return _STATE.sources.get(f"{kind} {name}")


def _claim(kind: str, name: str, source: str) -> None:
    if not name or name != name.strip() or "+" in name:
        raise DeclarationError(f"{source}: {kind} name {name!r} must be non-empty, without spaces around it or '+'")
    earlier = _STATE.sources.get(f"{kind} {name}")
    if earlier is not None:
        raise DeclarationError(f"{source}: {kind} {name!r} is already declared by {earlier}; pick another name")
    _STATE.sources[f"{kind} {name}"] = source


def register_model(spec: ModelSpec, *, source: str = "register_model()", cpu_variant: ModelSpec | None = None) -> None:
    """Declare a model; ``cpu_variant``, a tiny model of the same architecture, is the one the CPU tier runs.

    A matrix entry naming the model also runs its variant's cases (on the CPU tier).
    """
    if cpu_variant is not None and not cpu_variant.tiny:
        raise DeclarationError(f"{source}: the CPU variant {cpu_variant.name!r} must be declared tiny")
    _claim("model", spec.name, source)
    if cpu_variant is not None:
        try:
            _claim("model", cpu_variant.name, source)
        except DeclarationError:
            del _STATE.sources[f"model {spec.name}"]
            raise
        MODELS[cpu_variant.name] = cpu_variant
        _STATE.variants[spec.name] = cpu_variant.name
    MODELS[spec.name] = spec


def register_strategy(strategy: Strategy, *, source: str = "register_strategy()") -> None:
    """Declare a strategy (:func:`perfsuite.core.strategies.compose` builds one from registered ones)."""
    _claim("strategy", strategy.name, source)
    STRATEGIES[strategy.name] = strategy


_TAKEN_MARKERS = frozenset(
    ("skip", "skipif", "xfail", "usefixtures", "filterwarnings", "parametrize", "slow", "nightly", "scope")
    + ("distributed", *ENGINES, *EXTRAS.values())
)
"""Markers with a meaning already: pytest's own, and perfsuite's (:data:`perfsuite.plugin.MARKERS`: its engines'
and its optional packages' among them)."""


def register_engine(spec: EngineSpec, *, source: str = "register_engine()") -> None:
    """Declare an engine of the project's own: its cases carry its name as their id's suffix and marker."""
    if spec.name in TIER_MARKERS:
        raise DeclarationError(f"{source}: engine name {spec.name!r} is a tier marker; pick another name")
    if spec.name in _TAKEN_MARKERS:  # its cases carry its name as a marker: skip would skip them
        raise DeclarationError(f"{source}: engine name {spec.name!r} is a marker pytest or perfsuite gives a meaning")
    _claim("engine", spec.name, source)
    PROJECT_ENGINES[spec.name] = spec


def register_cases(
    models: Iterable[str],
    strategies: Iterable[str],
    *,
    engines: Iterable[str] = ("loop",),
    markers: Iterable[str] = (),
    source: str = "register_cases()",
    world_sizes: Iterable[int] = (1,),
    scope: str | None = None,
) -> MatrixEntry:
    """Add the cases ``models`` × ``strategies`` × ``engines`` × ``world_sizes`` to the matrix, marked
    ``markers``, in ``scope`` and every larger one (:mod:`perfsuite.core.scopes`). Without a scope:
    ``nightly`` for cases marked ``nightly`` (the CPU tier's nightly run), else ``push`` (every run)."""
    markers = tuple(markers)
    if scope is None:
        scope = "nightly" if "nightly" in markers else "push"
    try:
        entry = MatrixEntry(
            models=tuple(models),
            strategies=tuple(strategies),
            engines=tuple(engines),
            markers=markers,
            source=source,
            world_sizes=tuple(world_sizes),
            scope=scope,
        )
    except ValueError as exc:
        raise DeclarationError(str(exc)) from None
    _check_entry(entry)
    _expand([*_active_entries(), entry])  # a case declared twice is an error now, where it was declared
    _STATE.entries.append(entry)
    return entry


def use_builtin_matrix(enabled: bool) -> None:
    """Whether the matrix includes perfsuite's built-in cases (default) or only the declared ones."""
    _STATE.builtin_matrix = enabled


def _check_entry(entry: MatrixEntry) -> None:
    where = entry.source
    if not entry.models or not entry.strategies or not entry.engines:
        raise DeclarationError(f"{where}: a matrix entry needs at least one model, strategy and engine")
    for name in entry.models:
        if name not in MODELS:
            raise DeclarationError(f"{where}: unknown model {name!r}; valid: {', '.join(MODELS)}")
    for name in entry.strategies:
        try:
            resolve(name)
        except (UnknownNameError, ValueError) as exc:
            raise DeclarationError(f"{where}: {exc}") from None
    for size in entry.world_sizes:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise DeclarationError(f"{where}: world sizes must be positive integers, not {size!r}")
        if size > 1:
            for strategy in entry.strategies:
                if not resolve(strategy).distributed:
                    raise DeclarationError(
                        f"{where}: {strategy} at world size {size}: the strategy must say how ranks share "
                        "the work (combine it with ddp, fsdp2, zero2 or zero3)"
                    )
    for name in entry.engines:
        if name not in engine_names():
            raise DeclarationError(f"{where}: unknown engine {name!r}; valid: {', '.join(engine_names())}")
        _check_pairing(where, entry, name)
        if name == "trainer":
            if any(size > 1 for size in entry.world_sizes):
                raise DeclarationError(f"{where}: multi-rank cases run through the loop engine only")
            for strategy in entry.strategies:
                reason = trainer_unsupported(resolve(strategy))
                if reason is not None:
                    raise DeclarationError(f"{where}: {strategy} cannot run through the trainer engine: {reason}")
    for marker in entry.markers:
        if not marker.isidentifier() or marker in TIER_MARKERS:
            raise DeclarationError(
                f"{where}: marker {marker!r} must be a Python identifier other than {', '.join(TIER_MARKERS)} "
                "(a case's device decides those)"
            )


def _check_pairing(where: str, entry: MatrixEntry, engine: str) -> None:
    """A model a project builds with its own factory trains through an engine of the project's, and
    such an engine trains only those (perfsuite's engines train a transformers model from its config)."""
    for model in entry.models:
        built_by_factory = MODELS[model].factory is not None
        if built_by_factory and engine in ENGINES:
            raise DeclarationError(
                f"{where}: {model} is built by the project's factory: its cases need an engine of the project's "
                f"([tool.perfsuite.engines]), not {engine}, which trains a transformers model from its config"
            )
        if not built_by_factory and engine in PROJECT_ENGINES:
            raise DeclarationError(
                f"{where}: the engine {engine} trains models the project builds with a factory; "
                f"{model} is built from a transformers config (train it through loop or trainer)"
            )
    if engine in PROJECT_ENGINES and any(size > 1 for size in entry.world_sizes):
        raise DeclarationError(f"{where}: multi-rank cases run through the loop engine only")


def _active_entries() -> list[MatrixEntry]:
    return [*(builtin_matrix() if _STATE.builtin_matrix else ()), *_STATE.entries]


def _expand(entries: Sequence[MatrixEntry]) -> list[MatrixCase]:
    cases: dict[tuple[str, str, str, int], MatrixCase] = {}
    for entry in entries:
        for engine in entry.engines:
            for declared in entry.models:
                variant = _STATE.variants.get(declared)
                for model in (declared, variant) if variant else (declared,):
                    for strategy in entry.strategies:
                        for size in entry.world_sizes:
                            key = (model, strategy, engine, size)
                            if key in cases:
                                ranks = "" if size == 1 else f" at world size {size}"
                                raise DeclarationError(
                                    f"{entry.source}: the case {model} × {strategy} × {engine}{ranks} is already "
                                    f"declared by {cases[key].source}"
                                )
                            # A project engine's name marks its cases, as `trainer` marks the Trainer's.
                            markers = (*entry.markers, engine) if engine in PROJECT_ENGINES else entry.markers
                            cases[key] = MatrixCase(model, strategy, engine, markers, entry.source, size, entry.scope)
    return list(cases.values())


def matrix_cases() -> list[MatrixCase]:
    """Every case of the matrix, in declaration order: perfsuite's built-in ones unless
    :func:`use_builtin_matrix` turned them off, then the declared ones."""
    return _expand(_active_entries())


def describe() -> dict[str, Any]:
    """Who declared what, for ``perfsuite list``."""
    return {
        "models": {name: source_of("model", name) for name in MODELS},
        "strategies": {name: source_of("strategy", name) for name in STRATEGIES},
        "engines": {name: source_of("engine", name) for name in PROJECT_ENGINES},
        "builtin_matrix": _STATE.builtin_matrix,
        "entries": [dataclasses.asdict(e) for e in _STATE.entries],
    }
