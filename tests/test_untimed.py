"""A time class too noisy to gate a case (``untimed`` in its baseline, written by ``perfsuite baselines
pool``): read strictly, said by the gate in place of a comparison, left out by ``refresh --missing`` and
kept by a refresh, which does not record the class's time over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from plugin_project import REFRESH, baseline, edit, gate, local_class

from perfsuite.core.baselines import BaselineError, incomplete, load_baseline
from perfsuite.core.check import RECORDABLE, UNTIMED
from perfsuite.core.gates import check_time
from perfsuite.core.observation import Observation
from perfsuite.core.tolerance import Tolerance
from perfsuite.core.untimed import Untimed, kept, timed, untimed_on, withdrawn

CLASS = "fake-1.2-avx2"  # the fake runner's time class
WHY: dict[str, Any] = {"spread": 0.142, "widest": 0.10, "sessions": 6, "date": "2026-12-06T08:56:00+00:00"}
ENTRY = {"unit": "calibrated", "median": 50.0, "spread": 0.01, "steps": [], "calibration": "numpy-mix-v2"}


def _stored(**extra: Any) -> dict[str, Any]:
    return {
        "schema_version": 2,
        "case": "tiny-bert-all",
        "hardware": "cpu",
        "time": {"other-class": dict(ENTRY)},
        "memory": {"peak_bytes": 1000, "breakdown": {"parameters": 1000}},
        "loss": [2.0, 1.9],
        **extra,
    }


@pytest.mark.parametrize(
    ("untimed", "why"),
    [
        ([], "`untimed` maps time classes"),
        ({CLASS: {**WHY, "spread": -0.1}}, "spread and widest are finite numbers of 0 or more"),
        ({CLASS: {**WHY, "spread": 10**400}}, "spread and widest are finite numbers of 0 or more"),
        ({CLASS: {**WHY, "spread": 0.05}}, "the spread the wider"),
        ({CLASS: {**WHY, "sessions": 1}}, "sessions is a whole number of 2 or more"),
        ({CLASS: {**WHY, "date": "yesterday"}}, "date is an ISO 8601 date and time, or null"),
        (
            {CLASS: {k: v for k, v in WHY.items() if k != "date"}},
            "each class maps to spread, widest, sessions and date",
        ),
        ({"other-class": WHY}, "`untimed`: other-class also holds a step time"),
    ],
)
def test_a_baseline_whose_untimed_is_wrong_is_refused_naming_it(tmp_path: Path, untimed: Any, why: str) -> None:
    path = tmp_path / "tiny-bert-all.json"
    path.write_text(json.dumps(_stored(untimed=untimed)))
    with pytest.raises(BaselineError, match="corrupt baseline") as raised:
        load_baseline(path, case_id="tiny-bert-all", hardware="cpu")
    assert why in str(raised.value)
    path.write_text(json.dumps(_stored(untimed={CLASS: WHY})))
    assert untimed_on(load_baseline(path, case_id="tiny-bert-all", hardware="cpu"), CLASS) == Untimed(**WHY)


def test_the_gate_says_the_class_is_too_noisy_and_passes_even_where_a_missing_time_fails() -> None:
    stored = _stored(untimed={CLASS: WHY})
    observed = Observation(
        time=51.0, time_unit="calibrated", time_class=CLASS, calibration="numpy-mix-v2", time_steps=[],
        step_time_s=0.5, peak_bytes=1000, breakdown={"parameters": 1000}, losses=[2.0, 1.9],
    )  # fmt: skip
    check = check_time("tiny-bert-all", stored, observed, Tolerance(), "cpu", fail_uncompared=True)
    assert (check.ok, check.compared, check.change) == (True, False, UNTIMED)
    assert check.message == (
        "tiny-bert-all: step time not gated on fake-1.2-avx2: too noisy there (6 sessions to 2026-12-06 spread "
        f"14.2%, past the {Tolerance().widest_spread:.1%} its gate admits); memory and loss were gated"
    )
    wider = Tolerance(time_ceiling=0.5, max_refresh_spread=0.2)  # widened knowingly since: the refresh it needs
    recordable = check_time("tiny-bert-all", stored, observed, wider, "cpu")
    assert (recordable.ok, recordable.compared, recordable.change) == (True, False, RECORDABLE)
    again = recordable.message
    assert again == (
        "tiny-bert-all: step time not gated on fake-1.2-avx2: no time kept there, though its gate now admits the "
        f"pooled spread (6 sessions to 2026-12-06 spread 14.2%, within the {wider.widest_spread:.1%} its gate "
        "admits): record it with `perfsuite baselines refresh -k '[tiny-bert-all]'`; memory and loss "
        "were gated"
    )
    bare = check_time("tiny-bert-all", _stored(), observed, Tolerance(), "cpu", fail_uncompared=True)
    assert (bare.ok, bare.change) == (False, "not compared")  # a class merely missing its time still fails there


def test_a_pool_withdraws_a_time_and_a_later_one_restores_it_while_a_refresh_keeps_it() -> None:
    stored = _stored(time={CLASS: dict(ENTRY), "other-class": dict(ENTRY)})
    out = withdrawn(stored, CLASS, Untimed(**WHY))
    assert list(out["time"]) == ["other-class"]
    assert out["untimed"] == {CLASS: WHY}
    refreshed = kept({**stored, "time": {CLASS: dict(ENTRY), "other-class": dict(ENTRY)}}, out)
    assert list(refreshed["time"]) == ["other-class"]
    assert refreshed["untimed"] == {CLASS: WHY}
    assert kept(stored, _stored()) == stored  # nothing untimed: the refresh's baseline as it is
    elsewhere = kept({**stored, "time": {"a-third-class": dict(ENTRY)}}, out)  # a refresh on another class
    assert list(elsewhere["time"]) == ["a-third-class"]
    assert elsewhere["untimed"] == {CLASS: WHY}
    back = timed(out, CLASS, ENTRY)
    assert back["time"][CLASS] == ENTRY
    assert "untimed" not in back


def test_refresh_missing_does_not_take_on_a_class_too_noisy_to_gate(tmp_path: Path) -> None:
    path = tmp_path / "tiny-bert-all.json"
    path.write_text(json.dumps(_stored(untimed={CLASS: WHY})))
    args = {"case_id": "tiny-bert-all", "hardware": "cpu", "unit": "calibrated", "calibration": "numpy-mix-v2"}
    assert incomplete(path, time_class=CLASS, **args) is None
    assert incomplete(path, time_class="a-third-class", **args) == "no step time for a-third-class"


def test_a_gate_and_a_refresh_on_a_class_too_noisy_to_gate(project: pytest.Pytester) -> None:
    """End to end, through the plugin: the summary counts the case apart and sends it to no refresh; a
    refresh records the others and keeps the case's class untimed, saying so in its table."""

    def withdraw(why: dict[str, Any]) -> Any:
        def change(data: dict[str, Any]) -> None:
            data["time"].pop(CLASS)
            data["untimed"] = {CLASS: why}

        return change

    edit(project, "tiny-bert-vanilla", withdraw(WHY))
    result = gate(project)
    result.assert_outcomes(passed=3)
    first = next(line for line in result.outlines if line.startswith("perfsuite: passed"))
    assert f"step time NOT gated for 1 of 3 (too noisy on {CLASS} to keep a time" in first
    assert "baselines refresh" not in first
    result.stdout.fnmatch_lines(
        ["*tiny-bert-vanilla*(none: sessions spread 14.2%) →*too noisy here*time not compared: too noisy on this*"]
    )

    # A spread the case's gate allows now (its tolerance widened since) lifts the class's withdrawal.
    edit(project, "tiny-bert-fp16", withdraw({**WHY, "spread": 0.03, "widest": 0.02}))
    # Before that refresh, the summary says which cases it would give a time, and the command.
    admitted = gate(project, "--perfsuite-markdown", "summary.md")
    first = next(line for line in admitted.outlines if line.startswith("perfsuite: passed"))
    assert ", 1 of them now admitted by a gate widened since: a refresh of each records its time;" in first
    assert (
        "time not compared: no time kept, though its gate now admits the pooled spread: "
        "`perfsuite baselines refresh -k '[tiny-bert-fp16]'`"
    ) in (project.path / "summary.md").read_text()
    pinned = baseline(project, f"pytest-benchmark.{CLASS}")
    benchmarks = json.loads(pinned.read_text())
    benchmarks["benchmarks"] = [b for b in benchmarks["benchmarks"] if b["param"] != "tiny-bert-vanilla"]
    pinned.write_text(json.dumps(benchmarks))  # as the pool that withdrew vanilla's time leaves it
    refresh = project.runpytest_subprocess(*REFRESH, "--perfsuite-repeats=1")
    refresh.assert_outcomes(passed=3)
    refresh.stdout.fnmatch_lines(
        ["*tiny-bert-vanilla*refreshed*step time*none kept*not kept*too noisy here: 6 sessions*"]
    )
    data = json.loads(baseline(project, "tiny-bert-vanilla").read_text())
    assert CLASS not in data["time"]
    assert data["untimed"] == {CLASS: WHY}
    fp16 = json.loads(baseline(project, "tiny-bert-fp16").read_text())
    assert CLASS in fp16["time"]
    assert "untimed" not in fp16
    written = json.loads(pinned.read_text())["benchmarks"]
    assert {b["param"] for b in written} == {"tiny-bert-fp16", "tiny-bert-grad_ckpt"}  # none for a time not kept
    # On this machine's class, a refresh --missing takes on none of the three, and names the one it left
    # for its noise.
    here = local_class()
    edit(project, "tiny-bert-vanilla", lambda data: data.update(untimed={here: data["untimed"][CLASS]}))
    for case in ("tiny-bert-fp16", "tiny-bert-grad_ckpt"):
        edit(project, case, lambda data: data["time"].update({here: data["time"][CLASS]}))
    missing = project.runpytest_subprocess(*REFRESH, "--perfsuite-refresh-missing")
    assert missing.ret == pytest.ExitCode.OK
    missing.stdout.fnmatch_lines(
        ["perfsuite: 3 selected case(s) already have complete baselines here*; 1 of them keeps no step*vanilla"]
    )
