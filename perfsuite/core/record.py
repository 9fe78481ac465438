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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfsuite.core.spec import case_id
from perfsuite.core.typed_json import (
    EMPTY,
    JsonObject,
    fail,
    flag,
    from_key,
    integer,
    json_object,
    list_of,
    nested,
    number,
    optional,
    text,
    values_of,
)

if TYPE_CHECKING:
    from perfsuite.core.spec import CaseSpec

RecordJson = dict[str, Any]
"""A record as JSON: what a worker sends back and a results file holds per case."""


@dataclass(frozen=True, kw_only=True)
class Summary(JsonObject):
    """:func:`perfsuite.core.stats.summarize` of per-step figures: the timed steps' seconds, or each
    step ÷ the calibration around it."""

    median: float = from_key(number, dataclasses.MISSING)
    mean: float | None = from_key(optional(number))
    min: float | None = from_key(optional(number))
    max: float | None = from_key(optional(number))
    stdev: float | None = from_key(optional(number))
    iqr: float | None = from_key(optional(number))
    mad: float | None = from_key(optional(number))
    rel_spread: float | None = from_key(optional(number))
    """IQR ÷ median."""
    samples: tuple[float, ...] = from_key(list_of(number), ())
    """Each step's figure, in step order."""


@dataclass(frozen=True, kw_only=True)
class Calibration(JsonObject):
    """The calibration workload run around a CPU case's timed steps (:mod:`perfsuite.worker.calibrate`)."""

    workload: str | None = from_key(optional(text))
    median_s: float | None = from_key(optional(number))
    samples_s: tuple[float, ...] = from_key(list_of(number), ())


@dataclass(frozen=True, kw_only=True)
class Tokens(JsonObject):
    """Tokens of the timed steps (or per second): those of the samples, and the padded positions."""

    real: float | None = from_key(optional(number))
    padded: float | None = from_key(optional(number))


@dataclass(frozen=True, kw_only=True)
class CaughtWarning(JsonObject):
    """A warning the worker caught, and how often it was raised (:func:`perfsuite.worker.capture.warning_list`)."""

    category: str = from_key(text, "")
    message: str = from_key(text, "")
    where: str = from_key(text, "")
    """``file:line``."""
    count: int = from_key(integer, 1)


_TEXT, _INT, _NUMBER = optional(text), optional(integer), optional(number)
_OBJECT, _COUNTS = optional(json_object), optional(values_of(number))


@dataclass(frozen=True, kw_only=True)
class PackageRun(JsonObject):
    """What a watched step ran of an installed distribution's code (:mod:`perfsuite.worker.reach`): the
    calls of its Python functions and of its compiled modules' functions; ``version`` ``None``: not installed."""

    name: str = from_key(text, dataclasses.MISSING)
    version: str | None = from_key(_TEXT)
    python_calls: int = from_key(integer, 0)
    native_calls: int = from_key(integer, 0)
    has_code: bool | None = from_key(optional(flag))
    """Whether it ships code a step could show calling (``None``: it lists no files)."""


@dataclass(frozen=True, kw_only=True)
class BuildRan(JsonObject):
    """What a case's build (its model, optimizer, data and engine made) ran of the watched code: calls
    per watched package (Python and compiled), per watched file, per watched function as ``file:line``."""

    packages: Mapping[str, int] = from_key(values_of(integer), EMPTY)
    files: Mapping[str, int] = from_key(values_of(integer), EMPTY)
    functions: Mapping[str, int] = from_key(values_of(integer), EMPTY)


@dataclass(frozen=True, kw_only=True)
class StepRan(JsonObject):
    """What a case's build and its steps watched (its first, where another warm-up step follows, and
    its profile step) ran of the code ``perfsuite ab`` asked it to watch (:mod:`perfsuite.core.reach`)."""

    complete: bool = from_key(flag, False)
    """Whether the profile step ended (else only what it reached before its error was counted)."""
    packages: tuple[PackageRun, ...] = from_key(list_of(nested(PackageRun)), ())
    files: Mapping[str, int] = from_key(values_of(integer), EMPTY)
    """Calls of the Python functions of each watched file of the project's own (its path in the project)."""
    functions: Mapping[str, int] = from_key(values_of(integer), EMPTY)
    """Calls of each watched function of those files, as ``file:line`` (the line its code starts at)."""
    imported: tuple[str, ...] = from_key(list_of(text), ())
    """Which of those files a module of the case's process had been imported from by the step's end."""
    blind: tuple[str, ...] = from_key(list_of(text), ())
    """What the watch could not see of the steps (``compiled``: what torch.compile inlined runs as no
    Python call; ``backward on the GPU``: autograd runs it in a thread of its own; ``first step``: not
    watched, with too few warm-up steps or where torch.compile compiles)."""
    error: str | None = from_key(_TEXT)
    """Why what it saw could not be matched to the code watched (its counts left out)."""
    first_step: bool | None = from_key(optional(flag))
    """Whether the case's first step was watched (``None``: a side whose perfsuite watched no first step)."""
    built: BuildRan | None = from_key(optional(nested(BuildRan)))
    """What the case's build ran of it, before its first step (``None``: the build was not watched)."""


@dataclass(frozen=True, kw_only=True)
class CaseRecord(JsonObject):
    """One case's figures. ``model``, ``strategy`` and ``status`` are always there; a case that failed or
    was skipped has its identity, status and error only (the other fields at their defaults)."""

    model: str = from_key(text, dataclasses.MISSING)
    strategy: str = from_key(text, dataclasses.MISSING)
    engine: str | None = from_key(_TEXT)
    """``None`` in records that predate engines: the loop."""
    status: str = from_key(text, dataclasses.MISSING)
    """``ok``, ``skipped`` or ``failed``."""
    error: str | None = from_key(_TEXT)
    world_size: int | None = from_key(_INT)
    device: str | None = from_key(_TEXT)
    """``cpu`` or ``cuda``."""
    device_name: str | None = from_key(_TEXT)
    hardware: str | None = from_key(_TEXT)
    """The baselines' directory: ``cpu``, or the GPU model (:mod:`perfsuite.core.hardware`)."""
    time_class: str | None = from_key(_TEXT)
    """Whose step times compare with this one's."""
    threads: int | None = from_key(_INT)
    precision: str | None = from_key(_TEXT)
    num_parameters: int | None = from_key(_INT)
    model_config: Mapping[str, Any] = from_key(json_object, EMPTY)
    initial_weights: str | None = from_key(_TEXT)
    """A digest of the weights the case started from (:mod:`perfsuite.worker.weights`)."""
    task: str | None = from_key(_TEXT)
    batch_size: int | None = from_key(_INT)
    micro_batch_size: int | None = from_key(_INT)
    rank: int | None = from_key(_INT)
    gpu: str | None = from_key(_TEXT)
    """A rank's GPU, as ``CUDA_VISIBLE_DEVICES`` names it (several ranks on GPUs: the record keeps the first's)."""
    seq_len: int | None = from_key(_INT)
    seed: int | None = from_key(_INT)
    learning_rate: float | None = from_key(_NUMBER)
    dropout: bool | None = from_key(optional(flag))
    pretrained: str | None = from_key(_TEXT)
    dataset: str | None = from_key(_TEXT)
    warmup_steps: int | None = from_key(_INT)
    steps: int | None = from_key(_INT)
    strategy_config: Mapping[str, Any] = from_key(json_object, EMPTY)
    step_time_s: Summary | None = from_key(optional(nested(Summary)))
    """The timed steps' seconds (:meth:`timed` for a record that ran)."""
    warmup_step_s: tuple[float, ...] = from_key(list_of(number), ())
    compile_s: float | None = from_key(_NUMBER)
    step_time_calibrated: Summary | None = from_key(optional(nested(Summary)))
    """On a CPU: each step ÷ the calibration around it."""
    calibration: Calibration | None = from_key(optional(nested(Calibration)))
    samples_per_s: float | None = from_key(_NUMBER)
    tokens_per_s: Tokens | None = from_key(optional(nested(Tokens)))
    timed_tokens: Tokens | None = from_key(optional(nested(Tokens)))
    padding_fraction: float | None = from_key(_NUMBER)
    peak_memory_bytes: int | None = from_key(_INT)
    """The largest rank's on several ranks (:attr:`peak_memory_sum_bytes`: their sum)."""
    peak_memory_source: str | None = from_key(_TEXT)
    allocator_peaks_bytes: Mapping[str, int] | None = from_key(_COUNTS)
    memory_breakdown_bytes: Mapping[str, int] | None = from_key(_COUNTS)
    """Peak bytes per category: parameters, gradients, optimizer_state, activations, ..."""
    memory_breakdown_error: str | None = from_key(_TEXT)
    host_peak_rss_bytes: int | None = from_key(_INT)
    flops_per_step: float | None = from_key(_NUMBER)
    mfu: float | None = from_key(_NUMBER)
    peak_flops: float | None = from_key(_NUMBER)
    matmul_dtypes: Mapping[str, int] | None = from_key(_COUNTS)
    flops_source: str | None = from_key(_TEXT)
    """Where the FLOPs, matmul dtypes and attention ops come from: ``counted`` in this run's profile
    step, or the ``cache`` of an earlier count of the same case and stack (:mod:`perfsuite.worker.flop_cache`)."""
    attention_ops: Mapping[str, int] | None = from_key(_COUNTS)
    loss: tuple[float, ...] = from_key(list_of(number), ())
    """One per optimizer step, warm-up included."""
    micro_batches: Any = from_key(lambda value, where: value)
    grad_norm: tuple[float | None, ...] = from_key(list_of(_NUMBER), ())
    skipped_optimizer_steps: int | None = from_key(_INT)
    applied: Mapping[str, Any] = from_key(json_object, EMPTY)
    """What each strategy left as evidence (the engine's ``evidence()``)."""
    timed_threads: Mapping[str, Any] | None = from_key(_OBJECT)
    phases_s: Mapping[str, float] = from_key(values_of(number), EMPTY)
    """Host seconds of each part of the run in the worker (:data:`~perfsuite.core.spec.PHASES`)."""
    pid: int | None = from_key(_INT)
    peak_memory_sum_bytes: int | None = from_key(_INT)
    """Several ranks: the sum of their peaks."""
    ranks: tuple[Mapping[str, Any], ...] = from_key(list_of(json_object), ())
    """Several ranks: what each one measured and held."""
    gpus: tuple[str, ...] = from_key(list_of(text), ())
    """On a GPU pool: the GPUs the case ran on."""
    gpu_pool: tuple[str, ...] = from_key(list_of(text), ())
    worker_startup_s: float | None = from_key(_NUMBER)
    """From the worker's launch to its first word (``None``: it never spoke)."""
    wall_s: float | None = from_key(_NUMBER)
    preloaded: tuple[str, ...] = from_key(list_of(text), ())
    """What the worker's forkserver imported for the session's cases."""
    warnings: tuple[CaughtWarning, ...] = from_key(list_of(nested(CaughtWarning)), ())
    output: str | None = from_key(_TEXT)
    """What the worker printed (the end of it)."""
    output_truncated: bool = from_key(flag, False)
    """The worker printed more than ``output`` keeps (its last 20,000 characters)."""
    interrupted: bool = from_key(flag, False)
    """``perfsuite run`` interrupted before or while this case ran."""
    step_ran: StepRan | None = from_key(optional(nested(StepRan)))
    """What its build and watched steps ran of the code ``perfsuite ab`` watched (:mod:`perfsuite.core.reach`)."""

    @classmethod
    def failed(cls, spec: CaseSpec, *, status: str, error: str) -> CaseRecord:
        """The record of a case that produced no measurements."""
        return cls.from_json(failed_json(spec, status=status, error=error), spec.id)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def case_id(self) -> str:
        """The id of the case this record is of (:func:`case_id`)."""
        return case_id(self.model, self.strategy, self.world_size or 1, self.engine or "loop")

    def timed(self) -> Summary:
        """The timed steps' seconds; a ``ValueError`` names the case when it has none (it did not run)."""
        if self.step_time_s is None:
            raise ValueError(f"{self.case_id}: no step times (status {self.status})")
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
        raise fail(where, data, "a list")
    records = [CaseRecord.from_json(item, f"{where}[{i}]") for i, item in enumerate(data)]
    for i, record in enumerate(records):
        if record.status not in STATUSES:
            raise ValueError(f"{where}[{i}]: status is {record.status!r}, not one of {', '.join(STATUSES)}")
        if record.ok and record.step_time_s is None:
            raise ValueError(f"{where}[{i}]: status 'ok' but no 'step_time_s'")
    return records
