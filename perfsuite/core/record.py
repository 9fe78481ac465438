"""One case's record, typed: what a run measured, as everything above the worker reads it. Pure: no torch.

A worker builds its record as a JSON object (:func:`perfsuite.worker.record.case_record`) and sends
it across the process boundary; :func:`perfsuite.worker.process.run_isolated` makes it a
:class:`CaseRecord` once, and so does whatever reads one from elsewhere: a side's server, a
``pytest_perfsuite_run_case`` hook, a results file. That data is untrusted: :meth:`CaseRecord.from_json`
checks every value it types and a wrong one is a ``ValueError`` naming the key, never a traceback
deep inside a report. :meth:`~CaseRecord.to_json` writes back exactly the object read, key for key
and in the same order (docs/results-json.md is the schema), so results files, baselines and reports
do not change; keys this type does not name are kept as they came (:attr:`~JsonObject.extra`).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from perfsuite.core.spec import CaseSpec

RecordJson = dict[str, Any]
"""A record as JSON: what a worker sends back and a results file holds per case."""

Check = Callable[[Any, str], Any]
"""Checks a JSON value (``where``: its key, ``step_time_s.median``) and returns it as the field holds it."""
J = TypeVar("J", bound="JsonObject")
_EMPTY: Mapping[str, Any] = types.MappingProxyType({})
"""An object field's value where the key is absent (a record that has the key holds an object there)."""


class _Wrong(ValueError):
    """A value of the wrong type, named by its key; :meth:`JsonObject.from_json` says whose."""


def _fail(where: str, value: Any, expected: str) -> _Wrong:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    kind = type(value).__name__
    return _Wrong(f"{where} is {shown} ({kind}), not {expected}" if where else f"{shown} ({kind}) is not {expected}")


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, value, "a string")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, value, "an integer")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(where, value, "a number")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(where, value, "true or false")
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """A JSON object kept as it came (what it holds is the reader's: a strategy's evidence, a config)."""
    if not isinstance(value, dict):
        raise _fail(where, value, "an object")
    return value


def _optional(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def _list(check: Check) -> Check:
    def checked(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _fail(where, value, "a list")
        return tuple(check(item, f"{where}[{i}]") for i, item in enumerate(value))

    return checked


def _of(check: Check) -> Check:
    """An object whose every value ``check`` accepts (the counts per category, the seconds per phase)."""

    def checked(value: Any, where: str) -> Mapping[str, Any]:
        for key, item in _object(value, where).items():
            check(item, f"{where}.{key}")
        return value  # type: ignore[no-any-return]

    return checked


def _nested(kind: type[JsonObject]) -> Check:
    return lambda value, where: kind.read(value, where)


def _json(check: Check, default: Any = None) -> Any:
    """A field read from the JSON key of its name by ``check``; ``default`` where the key is absent."""
    if default is _EMPTY:  # shared, read-only: a dataclass default may not be a mapping
        return field(default_factory=lambda: _EMPTY, metadata={"check": check})
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
        except _Wrong as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def read(cls: type[J], data: Any, where: str) -> J:
        """:meth:`from_json` of the value at key ``where`` of an object being read."""
        if not isinstance(data, dict):
            raise _fail(where, data, "an object")
        fields = cls._named()
        required = [
            f for f in fields.values() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [f.name for f in required if f.name not in data]
        if missing:
            raise _Wrong(f"{where + ' has ' if where else ''}no {', '.join(repr(name) for name in missing)}")
        inside = f"{where}." if where else ""
        values = {k: fields[k].metadata["check"](v, f"{inside}{k}") for k, v in data.items() if k in fields}
        extra = {k: v for k, v in data.items() if k not in fields}
        return cls(keys=tuple(data), extra=extra, **values)

    def to_json(self) -> RecordJson:
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


@dataclass(frozen=True, kw_only=True)
class Summary(JsonObject):
    """:func:`perfsuite.core.stats.summarize` of per-step figures: the timed steps' seconds, or each
    step ÷ the calibration around it."""

    median: float = _json(_number, dataclasses.MISSING)
    mean: float | None = _json(_optional(_number))
    min: float | None = _json(_optional(_number))
    max: float | None = _json(_optional(_number))
    stdev: float | None = _json(_optional(_number))
    iqr: float | None = _json(_optional(_number))
    mad: float | None = _json(_optional(_number))
    rel_spread: float | None = _json(_optional(_number))
    """IQR ÷ median."""
    samples: tuple[float, ...] = _json(_list(_number), ())
    """Each step's figure, in step order."""


@dataclass(frozen=True, kw_only=True)
class Calibration(JsonObject):
    """The calibration workload run around a CPU case's timed steps (:mod:`perfsuite.worker.calibrate`)."""

    workload: str | None = _json(_optional(_text))
    median_s: float | None = _json(_optional(_number))
    samples_s: tuple[float, ...] = _json(_list(_number), ())


@dataclass(frozen=True, kw_only=True)
class Tokens(JsonObject):
    """Tokens of the timed steps (or per second): those of the samples, and the padded positions."""

    real: float | None = _json(_optional(_number))
    padded: float | None = _json(_optional(_number))


@dataclass(frozen=True, kw_only=True)
class CaughtWarning(JsonObject):
    """A warning the worker caught, and how often it was raised (:func:`perfsuite.worker.capture.warning_list`)."""

    category: str = _json(_text, "")
    message: str = _json(_text, "")
    where: str = _json(_text, "")
    """``file:line``."""
    count: int = _json(_int, 1)


_TEXT, _INT, _NUMBER = _optional(_text), _optional(_int), _optional(_number)
_OBJECT, _COUNTS = _optional(_object), _optional(_of(_number))


@dataclass(frozen=True, kw_only=True)
class PackageRun(JsonObject):
    """What one step ran of an installed distribution's code (:mod:`perfsuite.worker.reach`): the calls
    of its Python functions and of its compiled modules' functions; ``version`` ``None``: not installed."""

    name: str = _json(_text, dataclasses.MISSING)
    version: str | None = _json(_TEXT)
    complete: bool = _json(_flag, False)
    """Whether the watched step ended (else only what it reached before its error was counted)."""
    python_calls: int = _json(_int, 0)
    native_calls: int = _json(_int, 0)
    has_code: bool | None = _json(_optional(_flag))
    """Whether it ships code a step could show calling (``None``: it lists no files)."""


@dataclass(frozen=True, kw_only=True)
class CaseRecord(JsonObject):
    """One case's figures. ``model``, ``strategy`` and ``status`` are always there; a case that failed or
    was skipped has its identity, status and error only (the other fields at their defaults)."""

    model: str = _json(_text, dataclasses.MISSING)
    strategy: str = _json(_text, dataclasses.MISSING)
    engine: str | None = _json(_TEXT)
    """``None`` in records that predate engines: the loop."""
    status: str = _json(_text, dataclasses.MISSING)
    """``ok``, ``skipped`` or ``failed``."""
    error: str | None = _json(_TEXT)
    world_size: int | None = _json(_INT)
    device: str | None = _json(_TEXT)
    """``cpu`` or ``cuda``."""
    device_name: str | None = _json(_TEXT)
    hardware: str | None = _json(_TEXT)
    """The baselines' directory: ``cpu``, or the GPU model (:mod:`perfsuite.core.hardware`)."""
    time_class: str | None = _json(_TEXT)
    """Whose step times compare with this one's."""
    threads: int | None = _json(_INT)
    precision: str | None = _json(_TEXT)
    num_parameters: int | None = _json(_INT)
    model_config: Mapping[str, Any] = _json(_object, _EMPTY)
    initial_weights: str | None = _json(_TEXT)
    """A digest of the weights the case started from (:mod:`perfsuite.worker.weights`)."""
    task: str | None = _json(_TEXT)
    batch_size: int | None = _json(_INT)
    micro_batch_size: int | None = _json(_INT)
    rank: int | None = _json(_INT)
    gpu: str | None = _json(_TEXT)
    """A rank's GPU, as ``CUDA_VISIBLE_DEVICES`` names it (several ranks on GPUs: the record keeps the first's)."""
    seq_len: int | None = _json(_INT)
    seed: int | None = _json(_INT)
    learning_rate: float | None = _json(_NUMBER)
    dropout: bool | None = _json(_optional(_flag))
    pretrained: str | None = _json(_TEXT)
    dataset: str | None = _json(_TEXT)
    warmup_steps: int | None = _json(_INT)
    steps: int | None = _json(_INT)
    strategy_config: Mapping[str, Any] = _json(_object, _EMPTY)
    step_time_s: Summary | None = _json(_optional(_nested(Summary)))
    """The timed steps' seconds (:meth:`timed` for a record that ran)."""
    warmup_step_s: tuple[float, ...] = _json(_list(_number), ())
    compile_s: float | None = _json(_NUMBER)
    step_time_calibrated: Summary | None = _json(_optional(_nested(Summary)))
    """On a CPU: each step ÷ the calibration around it."""
    calibration: Calibration | None = _json(_optional(_nested(Calibration)))
    samples_per_s: float | None = _json(_NUMBER)
    tokens_per_s: Tokens | None = _json(_optional(_nested(Tokens)))
    timed_tokens: Tokens | None = _json(_optional(_nested(Tokens)))
    padding_fraction: float | None = _json(_NUMBER)
    peak_memory_bytes: int | None = _json(_INT)
    """The largest rank's on several ranks (:attr:`peak_memory_sum_bytes`: their sum)."""
    peak_memory_source: str | None = _json(_TEXT)
    allocator_peaks_bytes: Mapping[str, int] | None = _json(_COUNTS)
    memory_breakdown_bytes: Mapping[str, int] | None = _json(_COUNTS)
    """Peak bytes per category: parameters, gradients, optimizer_state, activations, ..."""
    memory_breakdown_error: str | None = _json(_TEXT)
    host_peak_rss_bytes: int | None = _json(_INT)
    flops_per_step: float | None = _json(_NUMBER)
    mfu: float | None = _json(_NUMBER)
    peak_flops: float | None = _json(_NUMBER)
    matmul_dtypes: Mapping[str, int] | None = _json(_COUNTS)
    flops_source: str | None = _json(_TEXT)
    """Where the FLOPs, matmul dtypes and attention ops come from: ``counted`` in this run's profile
    step, or the ``cache`` of an earlier count of the same case and stack (:mod:`perfsuite.worker.flop_cache`)."""
    attention_ops: Mapping[str, int] | None = _json(_COUNTS)
    loss: tuple[float, ...] = _json(_list(_number), ())
    """One per optimizer step, warm-up included."""
    micro_batches: Any = _json(lambda value, where: value)
    grad_norm: tuple[float | None, ...] = _json(_list(_NUMBER), ())
    skipped_optimizer_steps: int | None = _json(_INT)
    applied: Mapping[str, Any] = _json(_object, _EMPTY)
    """What each strategy left as evidence (the engine's ``evidence()``)."""
    timed_threads: Mapping[str, Any] | None = _json(_OBJECT)
    phases_s: Mapping[str, float] = _json(_of(_number), _EMPTY)
    """Host seconds of each part of the run in the worker (:data:`~perfsuite.core.spec.PHASES`)."""
    pid: int | None = _json(_INT)
    peak_memory_sum_bytes: int | None = _json(_INT)
    """Several ranks: the sum of their peaks."""
    ranks: tuple[Mapping[str, Any], ...] = _json(_list(_object), ())
    """Several ranks: what each one measured and held."""
    gpus: tuple[str, ...] = _json(_list(_text), ())
    """On a GPU pool: the GPUs the case ran on."""
    gpu_pool: tuple[str, ...] = _json(_list(_text), ())
    worker_startup_s: float | None = _json(_NUMBER)
    """From the worker's launch to its first word (``None``: it never spoke)."""
    wall_s: float | None = _json(_NUMBER)
    preloaded: tuple[str, ...] = _json(_list(_text), ())
    """What the worker's forkserver imported for the session's cases."""
    warnings: tuple[CaughtWarning, ...] = _json(_list(_nested(CaughtWarning)), ())
    output: str | None = _json(_TEXT)
    """What the worker printed (the end of it)."""
    interrupted: bool = _json(_flag, False)
    """``perfsuite run`` interrupted before or while this case ran."""
    step_ran: tuple[PackageRun, ...] = _json(_list(_nested(PackageRun)), ())
    """What its profile step ran of the packages ``perfsuite ab`` watched (:mod:`perfsuite.core.reach`)."""

    @classmethod
    def failed(cls, spec: CaseSpec, *, status: str, error: str) -> CaseRecord:
        """The record of a case that produced no measurements."""
        return cls.from_json(failed_json(spec, status=status, error=error), spec.id)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def timed(self) -> Summary:
        """The timed steps' seconds; a ``ValueError`` names the case when it has none (it did not run)."""
        if self.step_time_s is None:
            raise ValueError(f"{self.model}-{self.strategy}: no step times (status {self.status})")
        return self.step_time_s


def failed_json(spec: CaseSpec, *, status: str, error: str) -> RecordJson:
    """The record (as JSON) of a case that produced no measurements."""
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "engine": spec.engine,
        "world_size": spec.world_size,
        "status": status,
        "error": error,
    }


STATUSES = ("ok", "failed", "skipped")
"""A record's ``status`` in a results file."""


def records_of(data: Any, where: str) -> list[CaseRecord]:
    """Each of ``data``'s case records, typed (``where[i]`` names one that is not a record, one of a
    status no run gives, or one whose status is ``ok`` without the step times every reader of a
    results file takes from it; ``where`` itself, a value that is not a list of them)."""
    if not isinstance(data, list):
        raise _fail(where, data, "a list")
    records = [CaseRecord.from_json(item, f"{where}[{i}]") for i, item in enumerate(data)]
    for i, record in enumerate(records):
        if record.status not in STATUSES:
            raise ValueError(f"{where}[{i}]: status is {record.status!r}, not one of {', '.join(STATUSES)}")
        if record.ok and record.step_time_s is None:
            raise ValueError(f"{where}[{i}]: status 'ok' but no 'step_time_s'")
    return records
