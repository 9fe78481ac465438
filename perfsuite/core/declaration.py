"""A project's own models, strategies and matrix, read from ``[tool.perfsuite]`` of its ``pyproject.toml``.

Its tables: ``models`` (a transformers config, or a factory, a batch maker and their arguments),
``engines`` (a training step of the project's own), ``strategies`` (composed and changed fields) and
``matrix`` (models × strategies × engines, markers, scope, ranks); docs/your-repository.md shows
each key with an example, and ``perfsuite list`` what was read.

Paths are relative to the ``pyproject.toml``. Every mistake is a :class:`DeclarationError`
naming the file and the key, raised before anything runs. Pure: reading a config class
name asks ``transformers`` whether it exists, nothing imports torch; a factory's, batch
maker's or engine's module is found and read, not imported (:mod:`perfsuite.core.project_code`;
the worker side checks what they return before the first case, :mod:`perfsuite.worker.project`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfsuite.core.engines import EngineSpec
from perfsuite.core.models import ModelSpec
from perfsuite.core.project_code import (
    BATCH,
    FACTORY,
    Definition,
    batch_check,
    engine_step_problem,
    factory_check,
    locate,
)
from perfsuite.core.registry import (
    DeclarationError,
    register_cases,
    register_engine,
    register_model,
    register_strategy,
    use_builtin_matrix,
)
from perfsuite.core.scopes import check_scope
from perfsuite.core.strategies import Strategy, compose, resolve
from perfsuite.core.tolerance import ConfigError, validate_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SETTINGS_KEYS = ("baselines", "tests", "tolerance", "overrides")
"""``[tool.perfsuite]`` keys about running and gating (read by :mod:`perfsuite.session`)."""
DECLARATION_KEYS = ("models", "strategies", "engines", "matrix")
KEYS = SETTINGS_KEYS + DECLARATION_KEYS

_MODEL_KEYS = (
    "config",
    "config_fields",
    "model_class",
    "task",
    "num_labels",
    "batch_size",
    "seq_len",
    "target_len",
    "data",
    "tokenizer",
    "pretrained",
    "first_token_id",
    "tiny",
)
_FACTORY_MODEL_KEYS = ("factory", "batch", "factory_args", "batch_size", "seq_len", "tiny")
_SHAPE_KEYS = ("batch_size", "seq_len", "target_len")
_STRATEGY_FIELDS = tuple(f.name for f in dataclasses.fields(Strategy) if f.name != "name")
_MATRIX_KEYS = ("builtin", "cases")
_CASE_KEYS = ("models", "strategies", "engines", "markers", "world_sizes", "scope")


def read_pyproject(path: Path) -> dict[str, Any]:
    """``[tool.perfsuite]`` of ``path`` (empty when the file or the table is absent), its settings checked:
    a file that cannot be read or is not UTF-8 TOML, a setting of the wrong type, a tolerance out of range
    or a ``baselines`` that is not a directory is a :class:`DeclarationError` naming the file and the key."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeclarationError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DeclarationError(f"{path}: not UTF-8 text (byte {exc.start}), as TOML must be") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{path}: not valid TOML: {exc}") from None
    settings = data.get("tool", {}).get("perfsuite", {})
    if not isinstance(settings, dict):
        raise DeclarationError(f"{path}: tool.perfsuite must be a table")
    _unknown(path, "tool.perfsuite", settings, KEYS)
    for key in ("baselines", "tests"):
        if key in settings and not (isinstance(settings[key], str) and settings[key]):
            raise DeclarationError(f"{path}: tool.perfsuite.{key} must be a path (a string), not {settings[key]!r}")
    baselines = _local(path.parent, settings.get("baselines", "baselines"))
    if "baselines" in settings and baselines.exists() and not baselines.is_dir():
        raise DeclarationError(f"{path}: tool.perfsuite.baselines: {baselines} is not a directory")
    try:
        validate_config(settings)
    except ConfigError as exc:
        raise DeclarationError(f"{path}: {exc}") from None
    return settings


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` (how ``perfsuite run`` finds the project); one
    that is not a readable file is found too, so that reading it says what is wrong."""
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").exists():
            return directory / "pyproject.toml"
    return None


def _unknown(path: Path, key: str, table: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    extra = [k for k in table if k not in valid]
    if extra:
        raise DeclarationError(
            f"{path}: {key}: unknown key{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))}; "
            f"valid: {', '.join(valid)}"
        )


def _table(path: Path, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DeclarationError(f"{path}: {key} must be a table, not {type(value).__name__}")
    return value


def _names(path: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DeclarationError(f"{path}: {key} must be a list of names")
    return tuple(value)


def load(path: Path, settings: Mapping[str, Any] | None = None) -> bool:
    """Register the models, strategies and matrix ``path`` declares; whether it declared any."""
    settings = read_pyproject(path) if settings is None else settings
    root = path.parent
    for name, value in _table(path, "tool.perfsuite.models", settings.get("models", {})).items():
        _load_model(path, root, name, _table(path, f"tool.perfsuite.models.{name}", value))
    for name, value in _table(path, "tool.perfsuite.strategies", settings.get("strategies", {})).items():
        _load_strategy(path, name, _table(path, f"tool.perfsuite.strategies.{name}", value))
    for name, value in _table(path, "tool.perfsuite.engines", settings.get("engines", {})).items():
        _load_engine(path, root, name, _table(path, f"tool.perfsuite.engines.{name}", value))
    matrix = _table(path, "tool.perfsuite.matrix", settings.get("matrix", {}))
    _unknown(path, "tool.perfsuite.matrix", matrix, _MATRIX_KEYS)
    if "builtin" in matrix:
        if not isinstance(matrix["builtin"], bool):
            raise DeclarationError(f"{path}: tool.perfsuite.matrix.builtin must be true or false")
        use_builtin_matrix(matrix["builtin"])
    cases = matrix.get("cases", [])
    if not isinstance(cases, list):
        raise DeclarationError(f"{path}: tool.perfsuite.matrix.cases must be an array of tables ([[...]])")
    for index, entry in enumerate(cases):
        key = f"tool.perfsuite.matrix.cases[{index}]"
        entry = _table(path, key, entry)
        _unknown(path, key, entry, _CASE_KEYS)
        for required in ("models", "strategies"):
            if required not in entry:
                raise DeclarationError(f"{path}: {key}: {required} is required")
        register_cases(
            _names(path, f"{key}.models", entry["models"]),
            _names(path, f"{key}.strategies", entry["strategies"]),
            engines=_names(path, f"{key}.engines", entry.get("engines", ["loop"])),
            markers=_names(path, f"{key}.markers", entry.get("markers", [])),
            source=f"{path}: {key}",
            world_sizes=_sizes(path, f"{key}.world_sizes", entry.get("world_sizes", [1])),
            scope=_scope(path, f"{key}.scope", entry["scope"]) if "scope" in entry else None,
        )
    return any(settings.get(k) for k in DECLARATION_KEYS)


def _scope(path: Path, key: str, value: Any) -> str:
    try:
        return check_scope(value, key)
    except ValueError as exc:
        raise DeclarationError(f"{path}: {exc}") from None


def _sizes(path: Path, key: str, value: Any) -> list[int]:
    if not isinstance(value, list) or not value or not all(type(v) is int and v >= 1 for v in value):
        raise DeclarationError(f"{path}: {key} must be a non-empty array of positive integers, e.g. [1, 2]")
    if twice := sorted({str(v) for v in value if value.count(v) > 1}):
        raise DeclarationError(f"{path}: {key} names {', '.join(twice)} twice: each world size once")
    return value


def _local(root: Path, value: str) -> Path:
    return path if (path := Path(value)).is_absolute() else root / path


def _config_source(path: Path, root: Path, key: str, value: Any) -> dict[str, Any]:
    """ModelSpec fields for ``config``: a directory, a hub id in the local cache, or a class and its fields."""
    if isinstance(value, dict):
        fields = dict(value)
        name = fields.pop("class", None)
        if not isinstance(name, str):
            raise DeclarationError(f'{path}: {key}: a config table needs class = "<transformers config class>"')
        if not name.endswith("Config") or name not in _transformers_names():
            raise DeclarationError(f"{path}: {key}.class: transformers has no config class {name!r}")
        return {"config_class": name, "config": fields}
    if not isinstance(value, str):
        raise DeclarationError(f"{path}: {key} must be a directory, a hub id or a table with a class")
    directory = _local(root, value)
    if directory.is_dir():
        if not (directory / "config.json").is_file():
            raise DeclarationError(f"{path}: {key}: no config.json in {value} (relative to {path.name})")
        return {"config_dir": str(directory)}
    if value.count("/") <= 1 and not value.startswith("."):
        cached = _hub_cache_config(value)
        if cached is not None:
            return {"config_dir": str(cached.parent)}
    raise DeclarationError(
        f"{path}: {key}: {value!r} is neither a directory holding config.json (relative to {path.name}) "
        "nor a hub id in the local Hugging Face cache (nothing is downloaded)"
    )


@functools.cache
def _transformers_names() -> frozenset[str]:
    """The names transformers exports, read without resolving any: its module is lazy, and resolving a
    config class imports torch (a second on 2 cores, at every collection of a project's tests)."""
    import transformers

    return frozenset(dir(transformers))


def _hub_cache_config(repo_id: str) -> Path | None:
    if importlib.util.find_spec("huggingface_hub") is None:
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def _reference(
    path: Path,
    root: Path,
    key: str,
    table: dict[str, Any],
    expected: str,
    check: Callable[[Definition], str | None] | None = None,
) -> str:
    """The ``module:attribute`` reference at ``key``, its module found and read (never imported), and
    what it names checked by ``check`` where its source shows it."""
    option = key.rpartition(".")[2]
    if option not in table:
        raise DeclarationError(f'{path}: {key} is required: "package.module:name" of {expected}')
    problem = locate(table[option], str(root), check)
    if problem is not None:
        raise DeclarationError(f"{path}: {key}: {problem}; expected {expected}")
    return str(table[option])


_SHAPE = ("batch_size", "seq_len")
"""A factory model's shape keys; its ``tiny`` table's others change its factory's arguments."""


def _load_factory_model(path: Path, root: Path, name: str, table: dict[str, Any]) -> None:
    key = f"tool.perfsuite.models.{name}"
    _unknown(path, key, table, _FACTORY_MODEL_KEYS)
    factory_args = _table(path, f"{key}.factory_args", table.get("factory_args", {}))
    tiny = table.get("tiny")
    passed = ["seed", *factory_args, *(k for k in (tiny if isinstance(tiny, dict) else ()) if k not in _SHAPE)]
    fields: dict[str, Any] = {
        "task": "custom",
        "factory": _reference(path, root, f"{key}.factory", table, FACTORY, factory_check(passed)),
        "batch": _reference(path, root, f"{key}.batch", table, BATCH, batch_check),
        "factory_args": factory_args,
        "root": str(root),
        "declared_at": f"{path}: {key}",
    }
    fields.update({option: table[option] for option in _SHAPE if option in table})
    _register_model(path, key, name, table, fields, shape_keys=_SHAPE, changes_into="factory_args")


def _load_engine(path: Path, root: Path, name: str, table: dict[str, Any]) -> None:
    key = f"tool.perfsuite.engines.{name}"
    _unknown(path, key, table, ("class",))
    expected = "a class implementing perfsuite's engine interface (perfsuite.Engine)"
    reference = _reference(path, root, f"{key}.class", table, expected, engine_step_problem)
    try:
        spec = EngineSpec(name=name, engine_class=reference, root=str(root), declared_at=f"{path}: {key}")
    except ValueError as exc:
        raise DeclarationError(f"{path}: {key}: {exc}") from None
    register_engine(spec, source=f"{path}: {key}")


def _load_model(path: Path, root: Path, name: str, table: dict[str, Any]) -> None:
    key = f"tool.perfsuite.models.{name}"
    if "factory" in table or "batch" in table:
        _load_factory_model(path, root, name, table)
        return
    _unknown(path, key, table, _MODEL_KEYS)
    if "config" not in table:
        raise DeclarationError(f"{path}: {key}: config is required (a directory, a hub id or a class table)")
    fields: dict[str, Any] = _config_source(path, root, f"{key}.config", table["config"])
    extra = table.get("config_fields", {})
    if extra:
        if "config_class" in fields:
            raise DeclarationError(f"{path}: {key}.config_fields: put the fields in the config table itself")
        fields["config"] = dict(_table(path, f"{key}.config_fields", extra))
    for option in ("model_class", "task", "num_labels", "batch_size", "seq_len", "target_len", "first_token_id"):
        if option in table:
            fields[option] = table[option]
    for option in ("data", "tokenizer"):
        if option in table:
            local = _local(root, table[option])
            if not local.exists():
                raise DeclarationError(
                    f"{path}: {key}.{option}: {table[option]} does not exist (relative to {path.name})"
                )
            fields[option] = str(local)
    if "pretrained" in table:
        value = table["pretrained"]
        if value != "hub-cache":
            local = _local(root, value)
            if not (local / "config.json").is_file():
                raise DeclarationError(f"{path}: {key}.pretrained: no config.json in {value}")
            value = str(local)
        fields["pretrained"] = value
    if "task" not in fields:
        raise DeclarationError(f"{path}: {key}: task is required (classification, seq2seq or causal_lm)")
    _register_model(path, key, name, table, fields, shape_keys=_SHAPE_KEYS, changes_into="config")


def _register_model(
    path: Path,
    key: str,
    name: str,
    table: dict[str, Any],
    fields: dict[str, Any],
    *,
    shape_keys: tuple[str, ...],
    changes_into: str,
) -> None:
    """Register the model and, where ``tiny`` is a table, its CPU variant ``name-tiny``: the table's
    shape keys replace the model's, its other keys go into ``changes_into`` (the config's fields, or
    the factory's arguments)."""
    tiny = table.get("tiny", False)
    if not isinstance(tiny, (bool, dict)):
        raise DeclarationError(f"{path}: {key}.tiny must be true, false or a table of the CPU variant's fields")
    spec = _model_spec(path, key, name, fields, tiny=tiny is True)
    variant = None
    if isinstance(tiny, dict):
        changes = dict(tiny)
        shape = {k: changes.pop(k) for k in shape_keys if k in changes}
        variant_fields = {**fields, **shape, changes_into: {**fields.get(changes_into, {}), **changes}}
        variant_fields.pop("pretrained", None)  # a smaller architecture cannot load the full weights
        variant = _model_spec(path, f"{key}.tiny", f"{name}-tiny", variant_fields, tiny=True)
    register_model(spec, source=f"{path}: {key}", cpu_variant=variant)


def _model_spec(path: Path, key: str, name: str, fields: dict[str, Any], *, tiny: bool) -> ModelSpec:
    try:
        return ModelSpec(name=name, tiny=tiny, **fields)
    except (TypeError, ValueError) as exc:  # the key names the model: the spec's own "name: " is not said again
        raise DeclarationError(f"{path}: {key}: {str(exc).removeprefix(f'{name}: ')}") from None


def _load_strategy(path: Path, name: str, table: dict[str, Any]) -> None:
    key = f"tool.perfsuite.strategies.{name}"
    _unknown(path, key, table, ("compose", *_STRATEGY_FIELDS))
    fields = dict(table)
    parts_named = _names(path, f"{key}.compose", fields.pop("compose", []))
    try:
        parts = [resolve(part) for part in parts_named]
        own = Strategy(name=name, **fields)
        # Undescribed: its parts' descriptions and the fields it sets itself, not its own name among them.
        set_here = ", ".join(f"{k}={v!r}" for k, v in fields.items() if k != "description")
        said = " + ".join(p.description or p.name for p in parts) + (f" ({set_here})" if set_here else "")
        strategy = compose(*parts, own, name=name, description=own.description or said) if parts else own
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"{path}: {key}: {exc}") from None
    register_strategy(strategy, source=f"{path}: {key}")


def project_baselines_dir(
    project: Path, settings: Mapping[str, Any], option: str | os.PathLike[str] | None = None
) -> Path:
    """Where a project's baselines live: ``option`` (``--perfsuite-baselines``) or ``[tool.perfsuite] baselines``
    (default ``baselines``), relative to the project's root unless absolute."""
    chosen = Path(option or settings.get("baselines", "baselines"))
    return chosen if chosen.is_absolute() else (project / chosen).resolve()


def load_project(start: Path | None = None) -> None:
    """Read the declarations of the project around ``start`` (default: the working directory),
    from its nearest ``pyproject.toml``."""
    pyproject = find_pyproject(start or Path.cwd())
    if pyproject is not None:
        load(pyproject)
