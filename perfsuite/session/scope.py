"""What a session takes on: the cases of one scope (``--perfsuite-scope``, :mod:`perfsuite.core.scopes`)
or one shard (``--perfsuite-shard``); from the baselines this machine already has and the time
it is given, a refresh of only the cases whose baselines here are incomplete
(``--perfsuite-refresh-missing``), only as many as fit a time limit
(``--perfsuite-refresh-time-limit``); a gate that skips the cases without a baseline here
(``--perfsuite-missing=skip``) before running them; and a gate that gated nothing.

The refresh and skip options are for a machine held for a while (a CI job with a time limit, a GPU runner
shared by several jobs): a refresh cut off from outside writes nothing, so it must stop
itself, with every case it finished written, and the next one must go on from there.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from perfsuite.core import untimed
from perfsuite.core.baselines import baseline_path, incomplete, load_baseline, missing_message
from perfsuite.core.gates import Outcome
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec


def machine_keys(device_type: str) -> tuple[str, str] | None:
    """This machine's (hardware, time class) for cases on ``device_type``; ``None`` when it has
    no such device (a GPU case here skips on its own). The CPU's need no torch import."""
    from perfsuite.core.hardware import hardware_key, local_cpu_class, time_class

    if device_type == "cpu":
        return hardware_key("cpu", ""), local_cpu_class()
    from perfsuite.worker.device import cuda_usable, get_device

    if not cuda_usable():
        return None
    device = get_device("cuda")
    return hardware_key(device.type, device.name), time_class(device.type, device.name)


def select_scope(config: pytest.Config, items: list[pytest.Item], chosen: str) -> None:
    """Deselect the tests outside scope ``chosen``: each test's is its ``scope`` marker (a matrix
    case's comes from its declaration), ``push`` without one."""
    from perfsuite.core.scopes import check_scope, in_scope

    def scope_of(item: pytest.Item) -> str:
        marker = item.get_closest_marker("scope")
        if marker is None:
            return "push"
        try:
            return check_scope(marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None, item.nodeid)
        except ValueError as exc:
            raise pytest.UsageError(f'{exc} (mark a test with @pytest.mark.scope("nightly"))') from None

    _deselect(config, items, [item for item in items if not in_scope(scope_of(item), chosen)])


def select_shard(
    config: pytest.Config, items: list[pytest.Item], value: str, case_of: Callable[[pytest.Item], CaseSpec | None]
) -> None:
    """Deselect what is not on shard ``value`` (``--perfsuite-shard``): matrix cases by model
    (:mod:`perfsuite.core.shards`); other tests stay on shard 1."""
    from perfsuite.core.shards import assign, parse_shard

    try:
        index, total = parse_shard(value)
    except ValueError as exc:
        raise pytest.UsageError(f"--perfsuite-shard: {exc}") from None
    specs = [case_of(item) for item in items]
    placed = assign((spec.model for spec in specs if spec is not None), total)
    on = [placed[spec.model] if spec is not None else 1 for spec in specs]
    _deselect(config, items, [item for item, shard in zip(items, on, strict=True) if shard != index])


def _deselect(config: pytest.Config, items: list[pytest.Item], drop: list[pytest.Item]) -> None:
    """Take ``drop`` out of ``items``, telling pytest (counted as deselected)."""
    if drop:
        config.hook.pytest_deselected(items=drop)
        dropped = {id(item) for item in drop}
        items[:] = [item for item in items if id(item) not in dropped]


def select_by_baselines(
    config: pytest.Config, items: list[pytest.Item], session: Any, case_of: Callable[[pytest.Item], CaseSpec | None]
) -> None:
    """At collection: a refresh ``--missing`` deselects the cases whose baselines here are complete
    (``session.already_complete``: each one's id, and whether it is untimed here); a gate under
    ``--perfsuite-missing=skip`` skips the cases without a baseline here before they run (listed in
    ``session.unbaselined``)."""
    specs = {item.nodeid: spec for item in items if (spec := case_of(item)) is not None}
    if session.refresh:
        if not session.refresh_missing:
            return
        complete = complete_on_this_machine(specs.values(), session.root, session.time_unit)
        drop = [item for item in items if specs.get(item.nodeid) in complete]
        session.already_complete = {spec.id: kept_untimed for spec, kept_untimed in complete.items()}
        _deselect(config, items, drop)
        return
    missing = without_baseline(specs.values(), session.root)
    for item in items:
        spec = specs.get(item.nodeid)
        if spec is not None and spec in missing:
            item.add_marker(pytest.mark.skip(reason=missing[spec]))
            session.unbaselined.append(spec.id)


def without_baseline(
    specs: Iterable[CaseSpec], root: Path, keys: Callable[[str], tuple[str, str] | None] = machine_keys
) -> dict[CaseSpec, str]:
    """The cases with no baseline file on this machine, each with the message a gate would give."""
    missing = {}
    for spec, hardware, _ in _on_this_machine(specs, keys):
        path = baseline_path(root, hardware, spec.id)
        if not path.exists():
            missing[spec] = missing_message(path, case_id=spec.id, hardware=hardware)
    return missing


def _on_this_machine(
    specs: Iterable[CaseSpec], keys: Callable[[str], tuple[str, str] | None]
) -> Iterator[tuple[CaseSpec, str, str]]:
    """Each case this machine can run, with its (hardware, time class) here."""
    known: dict[str, tuple[str, str] | None] = {}
    for spec in specs:
        device = "cpu" if spec.device == "cpu" else "cuda"
        if device not in known:
            known[device] = keys(device)
        found = known[device]
        if found is not None:
            yield spec, *found


def complete_on_this_machine(
    specs: Iterable[CaseSpec],
    root: Path,
    time_unit: Callable[[str], str],
    keys: Callable[[str], tuple[str, str] | None] = machine_keys,
) -> dict[CaseSpec, bool]:
    """The cases whose baselines here already hold all a gate compares (a refresh ``--missing``
    skips them), each with whether it is one a pool keeps untimed on this machine's class
    (:mod:`perfsuite.core.untimed`); ``time_unit`` maps a device type to the unit the session gates
    step time in."""
    from perfsuite.worker.calibrate import NAME as CALIBRATION

    complete = {}
    for spec, hardware, time_class in _on_this_machine(specs, keys):
        path = baseline_path(root, hardware, spec.id)
        unit = time_unit("cpu" if spec.device == "cpu" else "cuda")
        calibration = CALIBRATION if unit == "calibrated" else None
        why = incomplete(
            path, case_id=spec.id, hardware=hardware, time_class=time_class, unit=unit, calibration=calibration
        )
        if why is None:  # readable, so loading it again cannot fail
            baseline = load_baseline(path, case_id=spec.id, hardware=hardware)
            complete[spec] = untimed.untimed_on(baseline, time_class) is not None
    return complete


def nothing_gated(reached: Mapping[str, str | None], outcomes: Iterable[Outcome]) -> str | None:
    """The one line a gate ends with when none of the matrix cases it ``reached`` (id → why it was
    skipped at collection, ``None`` when it was to run) was compared with a baseline: each skipped
    before or in its run (no baseline here under ``--perfsuite-missing=skip``, a package missing,
    too few GPUs). Such a run would pass having measured nothing. A GPU case on a machine with no
    GPU (``--perfsuite-no-gpu=skip``) is never reached: that machine was not asked to gate it."""
    if not reached:
        return None
    ran = {o.case: o for o in outcomes}
    if any(ran[case].status in ("passed", "failed") for case in reached if case in ran):
        return None
    first = next(iter(reached))
    why = reached[first] or (ran[first].message if first in ran else "") or "skipped"
    return f"perfsuite: nothing was gated: all {len(reached)} case(s) were skipped ({first}: {why.splitlines()[0]})"


EMPTY_MATRIX = (
    "perfsuite: nothing is gated: the matrix declares no case (a model of the project's and the "
    "[[tool.perfsuite.matrix.cases]] that run it, in pyproject.toml; `perfsuite init --example` writes an "
    "example, `perfsuite list` shows the matrix)"
)
"""Why the matrix test fails where the matrix is empty: a CI job that gated nothing would pass."""

GO_ON = "`perfsuite baselines refresh --missing` goes on from here"
"""What a case the time limit left out says: the run that records it."""


class RefreshBudget:
    """A refresh's time limit, counted from the session's start: a case starts only while the
    time left exceeds the longest case so far (its repeats together), and a case still running
    at the limit is stopped (:attr:`deadline` bounds every run's timeout). So the session ends
    at the limit at the latest, with every case it finished recorded. The first case starts
    whenever any time is left."""

    def __init__(self, limit_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit_s = limit_s
        self.clock = clock
        self.started = clock()
        self.deadline = self.started + limit_s
        self.longest = 0.0
        self.not_reached: list[str] = []

    def why_not(self, case_id: str) -> str | None:
        """Why ``case_id`` must not start now (recorded as not reached); ``None`` when it may."""
        left = self.deadline - self.clock()
        if left > self.longest:
            return None
        self.not_reached.append(case_id)
        return (
            f"not reached: {max(left, 0):.0f} s of the {self.limit_s:g} s time limit left, less than the "
            f"longest case so far ({self.longest:.0f} s); {GO_ON}"
        )

    def has(self, seconds: float) -> bool:
        """Whether more than ``seconds`` are left (a case's further repeat takes about that)."""
        return self.deadline - self.clock() > seconds

    def ran(self, seconds: float) -> None:
        """One case's repeats took ``seconds``."""
        self.longest = max(self.longest, seconds)

    def why_stopped(self, case_id: str, runs: Iterable[CaseRecord]) -> tuple[str, str] | None:
        """``(status, reason)`` when the limit stopped ``case_id``'s runs (call before :meth:`ran`):
        ``not reached`` when cases before it took part of the time, so the next run goes on
        from it; ``failed`` when none did, since it would be stopped in every run of this
        limit. ``None`` when its runs were not cut off."""
        timed_out = any(not r.ok and (r.error or "").startswith("timed out") for r in runs)
        if not timed_out or self.clock() < self.deadline:
            return None
        if self.longest == 0:
            return "failed", (
                f"does not fit in the {self.limit_s:g} s time limit: it had all of it and was stopped "
                "before its runs finished; give it a longer --time-limit"
            )
        self.not_reached.append(case_id)
        return "not reached", (
            f"not reached: stopped at the {self.limit_s:g} s time limit before its runs finished; {GO_ON}"
        )

    def summary(self) -> str | None:
        """The line under a refresh's table when cases were left for the next run."""
        if not self.not_reached:
            return None
        return (
            f"{len(self.not_reached)} case(s) not reached within the {self.limit_s:g} s time limit; "
            "`perfsuite baselines refresh --missing` (with the same -k) records them"
        )


def gpu_tier_selected(config: pytest.Config) -> bool:
    """Whether ``-m`` asks for the GPU tier (``gpu``, ``gpu and ...``), not merely leaves it in."""
    expression = str(config.getoption("markexpr") or "")
    return re.search(r"(?<!not )\bgpu\b", expression) is not None


def left_complete(cases: dict[str, bool]) -> str:
    """The line for the cases a refresh ``--missing`` left out (id → untimed on this class)."""
    line = f"perfsuite: {len(cases)} selected case(s) already have complete baselines here (--missing left them out)"
    untimed = sorted(case for case, kept_untimed in cases.items() if kept_untimed)
    if untimed:
        line += (
            f"; {len(untimed)} of them {'keeps' if len(untimed) == 1 else 'keep'} no step time on this class, "
            "too noisy here for their gates "
            f"(a later `perfsuite baselines pool` decides): {', '.join(untimed)}"
        )
    return line
