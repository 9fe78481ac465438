"""How far a case may move: :class:`Tolerance`, its defaults, and how ``[tool.perfsuite.tolerance]`` and
its ``overrides`` tables resolve for one case. Pure: no torch, no pytest."""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """``[tool.perfsuite]`` has a key or value this version does not understand."""


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """How far a measurement may sit from its baseline and still pass."""

    time_floor: float = 0.05
    """Smallest relative step-time tolerance, either way (a GPU's 5%)."""
    time_k: float = 3.0
    """Multiple of the baseline's recorded relative spread (:func:`perfsuite.core.baselines.time_spread`)."""
    time_ceiling: float = 0.15
    """Largest relative step-time tolerance, either way (never below ``time_floor``): no gate is
    wider, so none is silently blind to a change this large. A refresh whose spread would set a wider
    one takes more repeats (up to ``refresh_max_repeats``, while more could still settle it:
    :func:`perfsuite.core.baselines.cannot_fit`) and refuses, naming what to run next, if it still would.
    The default is the CPU tier's gate; a GPU's is its floor, 5% (:data:`DEVICE_DEFAULTS`)."""
    refresh_max_repeats: int = 9
    """The most repeats a refresh takes of a case whose spread is too wide for the ceiling."""
    memory_rtol: float = 0.01
    """Relative tolerance on peak memory and each breakdown category."""
    memory_atol_bytes: int = 64 * 1024
    """Absolute slack for small categories (a few KiB of bookkeeping)."""
    loss_rtol: float = 1e-3
    """Relative tolerance per loss value."""
    loss_atol: float = 1e-4
    """Absolute tolerance per loss value."""
    max_refresh_spread: float = 0.15
    """A refresh refuses to record a step time whose repeats spread wider than this."""
    time_retries: int = 0
    """When only the step time fails, run the case again (a fresh worker) up to this many
    times, stopping once most of the ``time_retries + 1`` runs agree; the majority decides.
    A regression is slow in most runs, while a busy neighbour on a shared machine rarely
    spoils two of three."""
    time_retry_pause_s: float = 5.0
    """Seconds to wait before a time retry, so that a burst of a neighbour's load can pass."""
    time_drift_limit: float = 0.0
    """Gate the step time against the session's drift (:mod:`perfsuite.core.drift`: the median
    change of its cases) while that drift is within this limit; 0 gates each case on its
    own change (a GPU, and multi-rank CPU cases, which do not drift with the rest)."""

    def memory_limit(self, base: float) -> float:
        """How far a peak or breakdown category of ``base`` bytes may move and pass its gate."""
        return max(self.memory_rtol * abs(base), self.memory_atol_bytes)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            problem = _value_problem(field.name, getattr(self, field.name))
            if problem is not None:
                raise ConfigError(f"tolerance {field.name} {problem}")
            if field.name in _WHOLE:  # a count written as a float (1e6) counts as the integer it is
                object.__setattr__(self, field.name, int(getattr(self, field.name)))

    def wanted_tolerance(self, spread: float | None) -> float:
        """max(floor, k × spread): the gate a baseline's spread asks for, before the ceiling."""
        return max(self.time_floor, self.time_k * spread) if spread is not None else self.time_floor

    @property
    def ceiling(self) -> float:
        """The widest step-time gate: ``time_ceiling``, or the floor where a project set it higher."""
        return max(self.time_ceiling, self.time_floor)

    @property
    def widest_spread(self) -> float:
        """The widest spread a refresh may record: within ``max_refresh_spread``, and at most the
        ceiling ÷ ``time_k`` (:meth:`spread_fits`)."""
        return min(self.max_refresh_spread, self.ceiling / self.time_k) if self.time_k else self.max_refresh_spread

    def time_tolerance(self, spread: float | None) -> float:
        """The step-time gate of a baseline with ``spread``: max(floor, k × spread), at most the ceiling."""
        return min(self.ceiling, self.wanted_tolerance(spread))

    def ceiling_admitting(self, spread: float) -> float:
        """The smallest whole-percent ``time_ceiling`` that would admit ``spread``: what a refusal offers
        for a gate widened on purpose."""
        return math.ceil(max(self.wanted_tolerance(spread), spread * self.time_k) * 100) / 100

    def spread_fits(self, spread: float | None) -> bool:
        """Whether a refresh may record ``spread``: within ``max_refresh_spread``, and asking for no
        gate wider than the ceiling."""
        return spread is None or (
            spread <= self.max_refresh_spread and self.wanted_tolerance(spread) <= self.ceiling + 1e-12
        )


# Per-step loss tolerance by the precision the matmuls run in. Repeats on one stack agree
# to the last bit; these absorb a different CPU's kernels (AVX2 vs AVX-512 sum in another
# order) or a GPU's non-deterministic reductions, which Adam carries into later steps.
LOSS_TOLERANCE = {
    "fp32": {"loss_rtol": 1e-3, "loss_atol": 1e-4},
    "bf16": {"loss_rtol": 2e-2, "loss_atol": 1e-3},
    "fp16": {"loss_rtol": 1e-2, "loss_atol": 1e-3},
}
_FIELDS = {f.name for f in dataclasses.fields(Tolerance)}

DEVICE_DEFAULTS: dict[str, dict[str, Any]] = {"gpu": {"time_ceiling": 0.05}}
"""Defaults that differ by device, applied before ``pyproject.toml``: a GPU's gate is at most its
floor, 5%, unless a project says otherwise (a host-bound case's measured noise, say)."""
GATE_SENSITIVE = 0.15
"""A verdict line counts the cases whose gate catches a change of this size or smaller."""


def resolve_tolerance(
    config: Mapping[str, Any], *, hardware: str, case_id: str, precision: str, time_class: str | None = None
) -> Tolerance:
    """The tolerance of one case: built-in defaults (a GPU's: :data:`DEVICE_DEFAULTS`), the precision's
    loss tolerance, then ``pyproject.toml`` (checked: :func:`validate_config`).

    ``[tool.perfsuite.tolerance]`` sets defaults for every case;
    ``[tool.perfsuite.tolerance.loss.<precision>]`` the loss tolerance of a precision;
    ``[tool.perfsuite.overrides."<hardware>/<case-id glob>"]`` any field for matching
    cases, later tables winning (e.g. ``"cpu/*"``, ``"*/tiny-gpt2-fp16"``). Where the case's
    ``time_class`` is known, a pattern may name it in the hardware's place (``"amd-25.1-avx2/*"``): a CPU
    class whose step times are noisier than the others' gets its own floor.
    """
    validate_config(config)
    values: dict[str, Any] = dict(LOSS_TOLERANCE.get(precision, LOSS_TOLERANCE["fp32"]))
    if hardware not in ("cpu", ""):
        values.update(DEVICE_DEFAULTS["gpu"])
    table = dict(config.get("tolerance", {}))
    losses = table.pop("loss", {})
    values.update(table)
    values.update({f"loss_{key}": value for key, value in losses.get(precision, {}).items()})
    keys = [f"{hardware}/{case_id}", *([f"{time_class}/{case_id}"] if time_class else [])]
    for pattern, override in config.get("overrides", {}).items():
        if any(fnmatch.fnmatchcase(key, pattern) for key in keys):
            values.update(override)
    return Tolerance(**values)


def validate_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the table and key of any unknown key, a value of the wrong type
    or out of range, or an override pattern that cannot match a case, in ``[tool.perfsuite]``'s
    ``tolerance`` and ``overrides``: read once, before a case runs."""
    tolerance = _table(config.get("tolerance", {}), "tool.perfsuite.tolerance")
    _check_fields({k: v for k, v in tolerance.items() if k != "loss"}, "[tool.perfsuite.tolerance]")
    losses = _table(tolerance.get("loss", {}), "tool.perfsuite.tolerance.loss")
    unknown = sorted(set(losses) - set(LOSS_TOLERANCE))
    if unknown:
        raise ConfigError(f"[tool.perfsuite.tolerance.loss]: unknown precision(s) {', '.join(unknown)}")
    for precision, value in losses.items():
        where = f"[tool.perfsuite.tolerance.loss.{precision}]"
        for key, number in _table(value, where.strip("[]")).items():
            if key not in ("rtol", "atol"):
                raise ConfigError(f"{where}: unknown key {key}; valid: atol, rtol")
            _check_value(f"loss_{key}", number, f"{where}: {key}")
    for pattern, override in _table(config.get("overrides", {}), "tool.perfsuite.overrides").items():
        where = f'[tool.perfsuite.overrides."{pattern}"]'
        if ("/" not in pattern and not pattern.startswith("*")) or re.search(r"\[[^\]]*$", pattern):
            reason = 'an unclosed "["' if "/" in pattern else 'no "/"'
            raise ConfigError(f"{where}: the pattern has {reason}; an override's is {_PATTERN}")
        _check_fields(_table(override, where.strip("[]")), where)


_PATTERN = '"<hardware or CPU time class>/<case-id glob>", e.g. "cpu/*", "amd-25.1-avx2/*" or "*/tiny-bert-fp16"'
_WHOLE = ("refresh_max_repeats", "memory_atol_bytes", "time_retries")
"""The fields that count something: whole numbers."""
_BOUNDS: dict[str, tuple[float, float]] = {
    "refresh_max_repeats": (1, 100),
    "time_retries": (0, 10),
    "time_retry_pause_s": (0, 600),
}
"""The fields whose range is other than [0, ∞): each repeat, retry and pause costs a case's time, so a
slip (``time_retries = 1000000000``) would keep a session running for ever."""


def _value_problem(name: str, value: object) -> str | None:
    """What is wrong with ``value`` for the :class:`Tolerance` field ``name`` (``None``: nothing)."""
    low, high = _BOUNDS.get(name, (0, math.inf))
    whole = name in _WHOLE
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())  # TOML's 1e6 too
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (integral or not whole):
        if math.isfinite(value) and low <= value <= high:
            return None
    within = f"from {low:g} to {high:g}" if high < math.inf else f">= {low:g}"
    return f"must be {'a whole number' if whole else 'a finite number'} {within}, not {value!r}"


def _check_value(name: str, value: object, where: str) -> None:
    problem = _value_problem(name, value)
    if problem is not None:
        raise ConfigError(f"{where} {problem}")


def _check_fields(table: Mapping[str, Any], where: str) -> None:
    """Each of ``table``'s keys a :class:`Tolerance` field, and each value one that field takes."""
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FIELDS))}")
    for name, value in table.items():
        _check_value(name, value, f"{where}: {name}")


def _table(value: object, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a table, not {type(value).__name__} ({value!r})")
    return value
