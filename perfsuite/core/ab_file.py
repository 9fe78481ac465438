"""A ``perfsuite ab --json`` file as it is read back (``perfsuite report ab.json``): typed, every value
its table, ``summary.md`` and ``report.html`` read checked by its key before anything is drawn.

Such a file often comes from elsewhere (a pull request's artifact): untrusted data, whose wrong value
is one line naming its key, never a traceback from deep inside a chart. The comparison writes it
(:meth:`perfsuite.ab.comparison.Comparison.payload`); the reports read the checked object's JSON.
Pure: standard library and the core only.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from perfsuite.core import typed_json
from perfsuite.core.explain.explanation import Explanation
from perfsuite.core.paired import Verdict as TimeVerdict
from perfsuite.core.typed_json import (
    EMPTY,
    JsonObject,
    Wrong,
    fail,
    flag,
    from_key,
    integer,
    json_object,
    list_of,
    nested,
    number,
    optional,
    read_as,
    shown,
    text,
    values_of,
)

KIND = "perfsuite-ab"
"""The file's ``kind``."""
SCHEMA_VERSION = 1
"""The file's ``schema_version`` (the only one read: an ab file is read by the perfsuite that wrote it,
or one as new)."""
VERDICTS = ("regressed", "improved", "same", "undecided", "skipped", "cannot test", "new")
"""A case's ``verdict`` (:attr:`perfsuite.ab.rounds.CaseResult.verdict`)."""

_TEXT, _NUMBER, _INT = optional(text), optional(number), optional(integer)
_REQUIRED = dataclasses.MISSING


def _count_or_flag(value: Any, where: str) -> Any:
    """A case's ``interrupted`` or ``stopped``: a flag, or why it stopped."""
    return value if value is None or isinstance(value, (bool, str)) else integer(value, where)


def _one_of(values: tuple[str, ...], what: str) -> typed_json.Check:
    def checked(value: Any, where: str) -> str:
        if text(value, where) not in values:
            raise fail(where, value, f"{what} ({', '.join(values)})")
        return value  # type: ignore[no-any-return]

    return checked


def _version(value: Any, where: str) -> int | None:
    if value is not None and (type(value) is not int or value != SCHEMA_VERSION):
        newer = " (a newer perfsuite's file)" if type(value) is int and value > SCHEMA_VERSION else ""
        raise Wrong(f"{where} is {shown(value)}; this perfsuite reads {SCHEMA_VERSION}{newer}")
    return value


def _explanation(value: Any, where: str) -> Any:
    """A case's explanation (:class:`~perfsuite.core.explain.explanation.Explanation`'s JSON), kept as JSON."""
    if value is not None:
        try:
            read_as(Explanation, value, where)
        except ValueError as exc:
            raise Wrong(str(exc)) from None
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class Library(JsonObject):
    version: str | None = from_key(_TEXT)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProjectCode(JsonObject):
    """Where a side imported the project's own code from: its ``pyproject.toml``, and per module its file."""

    pyproject: str | None = from_key(_TEXT)
    code: Mapping[str, Any] = from_key(values_of(_TEXT), EMPTY)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Probe(JsonObject):
    libraries: Mapping[str, Any] = from_key(values_of(optional(nested(Library))), _REQUIRED)
    """Each library's version on the side (``null``: a library the probe could not read)."""
    project: ProjectCode | None = from_key(optional(nested(ProjectCode)))
    """The project's own code, where the side ran it (``--base-ref``, ``--own``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Side(JsonObject):
    env: str = from_key(text, _REQUIRED)
    overlay: tuple[str, ...] = from_key(list_of(text), ())
    probe: Probe = from_key(nested(Probe), _REQUIRED)
    code: str | None = from_key(_TEXT)
    """The project's commit on this side (``--base-ref``, ``--own``)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Time(JsonObject):
    """A case's paired time verdict (:class:`~perfsuite.core.paired.Paired`)."""

    ratio: float = from_key(number, _REQUIRED)
    low: float | None = from_key(_NUMBER, _REQUIRED)
    """The interval's ends (``null``: unbounded, too few pairs)."""
    high: float | None = from_key(_NUMBER, _REQUIRED)
    verdict: str = from_key(_one_of(typing.get_args(TimeVerdict), "a time verdict"), _REQUIRED)
    pairs: int = from_key(integer, _REQUIRED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Memory(JsonObject):
    a: float | None = from_key(_NUMBER, _REQUIRED)
    """The peak in bytes (``null``: none measured)."""
    b: float | None = from_key(_NUMBER, _REQUIRED)
    breakdown_a: Mapping[str, float] = from_key(values_of(number), _REQUIRED)
    breakdown_b: Mapping[str, float] = from_key(values_of(number), _REQUIRED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Loss(JsonObject):
    a: tuple[float, ...] | None = from_key(optional(list_of(number)))
    b: tuple[float, ...] | None = from_key(optional(list_of(number)))
    max_abs_diff: float | None = from_key(_NUMBER, _REQUIRED)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Check(JsonObject):
    """A memory or loss check (:class:`~perfsuite.core.gates.CheckResult`'s JSON): what the table reads."""

    metric: str | None = from_key(_TEXT)
    ok: bool | None = from_key(optional(flag))
    compared: bool | None = from_key(optional(flag))
    seeds: int | None = from_key(_INT)
    """The loss judged against the base's curves at this many seeds (then the three below are read)."""
    baseline: str | None = from_key(_TEXT)
    measured: str | None = from_key(_TEXT)
    tolerance: str | None = from_key(_TEXT)
    rel: float | None = from_key(_NUMBER)
    """Its relative change (the loss against the base's seeds: below 0, lower than theirs)."""
    moment: bool | None = from_key(optional(flag))
    """A breakdown category that moved with the peak's moment (:attr:`perfsuite.core.check.Check.moment`)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepTimes(JsonObject):
    """Per pair, each side's median step time, and its timed steps."""

    a: tuple[float, ...] = from_key(list_of(number), ())
    b: tuple[float, ...] = from_key(list_of(number), ())
    steps_a: tuple[tuple[float, ...], ...] = from_key(list_of(list_of(number)), ())
    steps_b: tuple[tuple[float, ...], ...] = from_key(list_of(list_of(number)), ())


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case(JsonObject):
    case: str = from_key(text, _REQUIRED)
    verdict: str = from_key(_one_of(VERDICTS, "a verdict"), _REQUIRED)
    error: str | None = from_key(_TEXT, _REQUIRED)
    """Why it could not be tested (``null``: it was)."""
    candidate_failed: bool = from_key(flag, False)
    """Its candidate's run failed where the base's ran (``error`` says how): regressed."""
    new: str | None = from_key(_TEXT)
    """What the base's code does not declare of it (``null``: both sides declare it): B's figures alone."""
    interrupted: Any = from_key(_count_or_flag)
    stopped: Any = from_key(_count_or_flag)
    time: Time | None = from_key(optional(nested(Time)))
    mode: str | None = from_key(_TEXT)
    step_time_s: StepTimes | None = from_key(optional(nested(StepTimes)))
    ratios: tuple[float, ...] = from_key(list_of(number), ())
    memory: Memory = from_key(nested(Memory), _REQUIRED)
    loss: Loss = from_key(nested(Loss), _REQUIRED)
    checks: tuple[Check, ...] = from_key(list_of(nested(Check)), ())
    explanation: Mapping[str, Any] | None = from_key(_explanation)
    ran: Mapping[str, Any] | None = from_key(optional(json_object))
    """Each side's watched build and steps (read where it is used: a wrong one reads as not watched)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule(JsonObject):
    """When the comparison looked, and at what floor and confidence (:class:`~perfsuite.core.paired.Schedule`)."""

    first: int = from_key(integer, _REQUIRED)
    cap: int = from_key(integer, _REQUIRED)
    floor: float = from_key(number, _REQUIRED)
    confidence: float = from_key(number, _REQUIRED)
    same_confidence: float | None = from_key(number, None)
    """The confidence a *same* verdict's interval holds at (absent in files that predate it)."""
    alarms: tuple[int, ...] = from_key(list_of(integer), ())


def _case(value: Any, where: str) -> Case:
    """A case, whose wrong value is named by its key and by the case's name where it has one."""
    try:
        return Case.read(value, where)
    except Wrong as exc:
        name = value.get("case") if isinstance(value, dict) else None
        if not isinstance(name, str) or not name:
            raise
        raise Wrong(f"{exc} (case {shown(name)})") from None


def _sides(value: Any, where: str) -> Mapping[str, Any]:
    sides: Mapping[str, Any] = values_of(nested(Side))(value, where)
    missing = [name for name in ("base", "candidate") if name not in sides]
    if missing:
        raise Wrong(f"{where} has no {', '.join(repr(name) for name in missing)}")
    return sides


@dataclasses.dataclass(frozen=True, kw_only=True)
class AbFile(JsonObject):
    kind: str = from_key(text, _REQUIRED)
    schema_version: int | None = from_key(_version)
    date: str = from_key(text, _REQUIRED)
    device_type: str = from_key(text, "cpu")
    engines: tuple[str, ...] = from_key(list_of(text), ())
    strategies_using: Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]] | None = from_key(
        optional(values_of(values_of(values_of(list_of(text)))))
    )
    """Per optional package, perfsuite's and the project's strategies that need it, and the engines
    compared that apply each (:func:`perfsuite.core.reach.strategies_using`); ``null``: an older file."""
    wall_s: float = from_key(number, _REQUIRED)
    schedule: Schedule = from_key(nested(Schedule), _REQUIRED)
    alpha: float | None = from_key(_NUMBER)
    loss_seeds: int | None = from_key(_INT)
    """Other seeds the base ran a case at where its sides started from other initial weights (0: none)."""
    sides: Mapping[str, Any] = from_key(_sides, _REQUIRED)
    cases: tuple[Case, ...] = from_key(list_of(_case), _REQUIRED)
    changed_code: Mapping[str, Any] | None = from_key(optional(json_object))
    """The project's changed files and functions (read by :class:`~perfsuite.core.changed_code.ChangedCode`)."""
    interrupted: int = from_key(integer, 0)
    stopped: int = from_key(integer, 0)
    verdicts: Mapping[str, int] = from_key(values_of(integer), _REQUIRED)
    pins: Mapping[str, Any] | None = from_key(optional(json_object))
    untested_side: str | None = from_key(optional(_one_of(("base", "candidate"), "a side")))
    """The side that could not be set up, where one stopped every case (``null``: none, or not known)."""


def is_ab(data: Any) -> bool:
    """Whether ``data`` says it is a ``perfsuite ab --json`` file (then :meth:`AbFile.from_json` checks it)."""
    return isinstance(data, Mapping) and data.get("kind") == KIND
