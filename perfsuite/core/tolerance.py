"""How far a case may move: :class:`Tolerance`, its defaults, and how ``[tool.perfsuite.tolerance]`` and
its ``overrides`` tables resolve for one case. Pure: no torch, no pytest."""

from __future__ import annotations

import dataclasses
import fnmatch
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
    """Multiple of the baseline's recorded relative spread (:func:`perfsuite.core.baselines.robust_spread`)."""
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

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                raise ConfigError(f"tolerance {field.name} must be a non-negative number, got {value!r}")
        if isinstance(self.refresh_max_repeats, float) or self.refresh_max_repeats < 1:
            raise ConfigError(
                f"tolerance refresh_max_repeats must be a whole number >= 1, got {self.refresh_max_repeats!r}"
            )

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


def _apply(values: dict[str, Any], table: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_FIELDS))}")
    values.update(table)


def _defaults(config: Mapping[str, Any], *, hardware: str, precision: str) -> dict[str, Any]:
    """Built-in defaults, the device's, the precision's loss tolerance, then ``[tool.perfsuite.tolerance]``."""
    values: dict[str, Any] = dict(LOSS_TOLERANCE.get(precision, LOSS_TOLERANCE["fp32"]))
    if hardware not in ("cpu", ""):
        values.update(DEVICE_DEFAULTS["gpu"])
    table = dict(config.get("tolerance", {}))
    loss_tables = table.pop("loss", {})
    _apply(values, table, "[tool.perfsuite.tolerance]")
    unknown = sorted(set(loss_tables) - set(LOSS_TOLERANCE))
    if unknown:
        raise ConfigError(f"[tool.perfsuite.tolerance.loss]: unknown precision(s) {', '.join(unknown)}")
    for key, value in loss_tables.get(precision, {}).items():
        if key not in ("rtol", "atol"):
            raise ConfigError(f"[tool.perfsuite.tolerance.loss.{precision}]: unknown key {key}; valid: atol, rtol")
        values[f"loss_{key}"] = value
    return values


def resolve_tolerance(config: Mapping[str, Any], *, hardware: str, case_id: str, precision: str) -> Tolerance:
    """The tolerance of one case: built-in defaults (a GPU's: :data:`DEVICE_DEFAULTS`), the precision's
    loss tolerance, then ``pyproject.toml``.

    ``[tool.perfsuite.tolerance]`` sets defaults for every case;
    ``[tool.perfsuite.tolerance.loss.<precision>]`` the loss tolerance of a precision;
    ``[tool.perfsuite.overrides."<hardware>/<case-id glob>"]`` any field for matching
    cases, later tables winning (e.g. ``"cpu/*"``, ``"*/tiny-gpt2-fp16"``).
    """
    values = _defaults(config, hardware=hardware, precision=precision)
    for pattern, override in config.get("overrides", {}).items():
        if fnmatch.fnmatchcase(f"{hardware}/{case_id}", pattern):
            _apply(values, override, f'[tool.perfsuite.overrides."{pattern}"]')
    return Tolerance(**values)


def validate_config(config: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for any unknown key or bad value, before a case runs."""
    for precision in (*LOSS_TOLERANCE, *config.get("tolerance", {}).get("loss", {})):
        resolve_tolerance(config, hardware="", case_id="", precision=precision)
    for pattern, override in config.get("overrides", {}).items():
        values: dict[str, Any] = {}
        _apply(values, override, f'[tool.perfsuite.overrides."{pattern}"]')
        Tolerance(**values)
