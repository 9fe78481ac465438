"""JSON objects read into typed fields: the checks each value passes as it is read; :class:`JsonObject`,
the base of every typed record (:mod:`perfsuite.core.record`), written back as it came; and
:func:`read_as`, a plain dataclass read by its fields' types (an explanation's request and record,
:mod:`perfsuite.core.explain`, written by ``dataclasses.asdict``).

What is read is untrusted data (a worker's answer, a results file): a value of the wrong type is a
``ValueError`` naming its key, never a traceback deep inside a reader. Pure: standard library only.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

Check = Callable[[Any, str], Any]
"""Checks a JSON value (``where``: its key, ``step_time_s.median``) and returns it as the field holds it."""
J = TypeVar("J", bound="JsonObject")
T = TypeVar("T")
EMPTY: Mapping[str, Any] = types.MappingProxyType({})
"""An object field's value where the key is absent (a record that has the key holds an object there)."""


class Wrong(ValueError):
    """A value of the wrong type, named by its key; :meth:`JsonObject.from_json` says whose."""


def shown(value: Any) -> str:
    """``value`` as a refusal quotes it: its repr, cut at 60 characters (what is read is untrusted)."""
    return repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."


def fail(where: str, value: Any, expected: str) -> Wrong:
    said, kind = shown(value), type(value).__name__
    return Wrong(f"{where} is {said} ({kind}), not {expected}" if where else f"{said} ({kind}) is not {expected}")


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise fail(where, value, "a string")
    return value


def integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(where, value, "an integer")
    return value


def number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(where, value, "a number")
    return value


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise fail(where, value, "true or false")
    return value


def json_object(value: Any, where: str) -> Mapping[str, Any]:
    """A JSON object kept as it came (what it holds is the reader's: a strategy's evidence, a config)."""
    if not isinstance(value, dict):
        raise fail(where, value, "an object")
    return value


def optional(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def list_of(check: Check) -> Check:
    def checked(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise fail(where, value, "a list")
        return tuple(check(item, f"{where}[{i}]") for i, item in enumerate(value))

    return checked


def values_of(check: Check) -> Check:
    """An object whose every value ``check`` accepts (the counts per category, the seconds per phase)."""

    def checked(value: Any, where: str) -> Mapping[str, Any]:
        for key, item in json_object(value, where).items():
            check(item, f"{where}.{key}")
        return value  # type: ignore[no-any-return]

    return checked


def nested(kind: type[JsonObject]) -> Check:
    return lambda value, where: kind.read(value, where)


def from_key(check: Check, default: Any = None) -> Any:
    """A field read from the JSON key of its name by ``check``; ``default`` where the key is absent."""
    if default is EMPTY:  # shared, read-only: a dataclass default may not be a mapping
        return field(default_factory=lambda: EMPTY, metadata={"check": check})
    return field(default=default, metadata={"check": check})


def _out(value: Any) -> Any:
    if isinstance(value, JsonObject):
        return value.to_json()
    if isinstance(value, tuple):
        return [_out(item) for item in value]
    return value


@dataclass(frozen=True, kw_only=True)
class JsonObject:
    """A JSON object read into typed fields (each named as its key), written back as it came."""

    keys: tuple[str, ...] = ()
    """The object's keys in their order: the fields it had (an absent one holds its default) and
    :attr:`extra`'s. :meth:`to_json` writes these, and only these."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys no field names, with their values as they came."""

    @classmethod
    def from_json(cls: type[J], data: Any, where: str) -> J:
        """``data`` checked and typed; a ``ValueError`` names ``where`` (whose it is: a file and a case)
        and the key of a missing or wrong value."""
        try:
            return cls.read(data, "")
        except Wrong as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def read(cls: type[J], data: Any, where: str) -> J:
        """:meth:`from_json` of the value at key ``where`` of an object being read."""
        if not isinstance(data, dict):
            raise fail(where, data, "an object")
        fields = cls._named()
        required = [
            f for f in fields.values() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [f.name for f in required if f.name not in data]
        if missing:
            raise Wrong(f"{where + ' has ' if where else ''}no {', '.join(repr(name) for name in missing)}")
        inside = f"{where}." if where else ""
        values = {k: fields[k].metadata["check"](v, f"{inside}{k}") for k, v in data.items() if k in fields}
        extra = {k: v for k, v in data.items() if k not in fields}
        return cls(keys=tuple(data), extra=extra, **values)

    def to_json(self) -> dict[str, Any]:
        """The object read, key for key and in its order (lists where the fields hold tuples)."""
        return {key: self.extra[key] if key in self.extra else _out(getattr(self, key)) for key in self.keys}

    @classmethod
    def _named(cls) -> dict[str, dataclasses.Field[Any]]:
        """The fields read from JSON keys, by name."""
        return {f.name: f for f in dataclasses.fields(cls) if "check" in f.metadata}

    def updated(self: J, **values: Any) -> J:
        """A copy with ``values`` set, as a dict's keys are: one it had stays where it was, a new one goes last.
        A field takes its value as it holds one (a :class:`Summary`, a tuple); a key no field names goes to
        :attr:`extra` as JSON."""
        named = self._named()
        keys = self.keys + tuple(key for key in values if key not in self.keys)
        extra = {**self.extra, **{k: v for k, v in values.items() if k not in named}}
        return dataclasses.replace(self, keys=keys, extra=extra, **{k: v for k, v in values.items() if k in named})

    def without(self: J, *keys: str) -> J:
        """A copy without ``keys``, as a dict's keys are popped: absent, as in an object that never had them
        (a field at its default). A key it does not have is no error; a required field is a ``ValueError``."""
        named = self._named()
        defaults: dict[str, Any] = {}
        for key in keys:
            if key not in named:
                continue
            default, factory = named[key].default, named[key].default_factory
            if default is dataclasses.MISSING and factory is dataclasses.MISSING:
                raise ValueError(f"{key!r} is required: it cannot be left out")
            defaults[key] = factory() if factory is not dataclasses.MISSING else default
        return dataclasses.replace(
            self,
            keys=tuple(key for key in self.keys if key not in keys),
            extra={k: v for k, v in self.extra.items() if k not in keys},
            **defaults,
        )


def read_as(kind: type[T], value: Any, where: str) -> T:
    """``value`` (``dataclasses.asdict``'s JSON) as a ``kind``, a dataclass whose fields are strings, numbers,
    flags, tuples, lists, string-keyed dicts, optional values and such dataclasses, read by their types: a
    key left out takes its field's default, a key no field names is left out, and a value of the wrong
    type (or one the dataclass refuses) is a ``ValueError`` naming ``where`` and its key."""
    try:
        return cast(T, _as(kind, value, ""))
    except Wrong as exc:
        raise ValueError(f"{where}: {exc}") from None


@functools.cache
def _fields(kind: type) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A dataclass's fields' types by name, and the names of those without a default."""
    hints = typing.get_type_hints(kind)
    fields = [f for f in dataclasses.fields(kind) if f.init]
    required = tuple(
        f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return {f.name: hints[f.name] for f in fields}, required


def _as(kind: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        data = json_object(value, where)
        hints, required = _fields(kind)
        missing = [name for name in required if name not in data]
        if missing:
            raise Wrong(f"{where + ' has ' if where else ''}no {', '.join(repr(name) for name in missing)}")
        inside = f"{where}." if where else ""
        values = {k: _as(hints[k], v, f"{inside}{k}") for k, v in data.items() if k in hints}
        try:
            return kind(**values)
        except ValueError as exc:  # its own checks (__post_init__)
            raise Wrong(f"{where or kind.__name__}: {exc}") from None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union) and type(None) in args and len(args) == 2:
        return None if value is None else _as(next(a for a in args if a is not type(None)), value, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):  # a tuple: asdict's own, not yet through JSON
            raise fail(where, value, "a list")
        alike = origin is list or (len(args) == 2 and args[1] is Ellipsis)  # else a tuple of fixed types
        kinds = [args[0]] * len(value) if alike else list(args)
        if len(kinds) != len(value):
            raise fail(where, value, f"a list of {len(kinds)}")
        items = [_as(kind, item, f"{where}[{i}]") for i, (kind, item) in enumerate(zip(kinds, value, strict=True))]
        return tuple(items) if origin is tuple else items
    if origin is dict and args[0] is str:
        return {k: _as(args[1], v, f"{where}.{k}") for k, v in json_object(value, where).items()}
    if kind in _SCALARS:
        return _SCALARS[kind](value, where)
    raise TypeError(f"{kind!r} has no JSON reading")  # a dataclass's field of a type this does not read


def _float(value: float, where: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer past a float's range
        raise fail(where, value, "a number a float holds") from None


_SCALARS: dict[Any, Check] = {
    str: text,
    int: integer,
    float: lambda value, where: _float(number(value, where), where),
    bool: flag,
    Any: lambda value, where: value,
}
