"""A time class's step times pooled from several sessions (``perfsuite baselines pool``): each session's
drift taken out as the gate takes it out, a session that moved one case against the rest refused with
three sessions and set aside with more, a session of another stack or case refused, and the command
writing the time entry only, memory and loss untouched."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfsuite.cli import main
from perfsuite.core.observation import Observation, Waiting
from perfsuite.core.pooled import MIN_SESSIONS, Reading, Session, Target, pool
from perfsuite.core.pooled_aa import held_out
from perfsuite.core.tolerance import Tolerance
from perfsuite.reports.pooled import session_lines

BASELINES = Path(__file__).parents[1] / "baselines" / "cpu"
CASES = [
    "tiny-bert-vanilla",
    "tiny-bert-adafactor",
    "tiny-bert-lora",
    "tiny-gpt2-vanilla",
    "tiny-t5-vanilla",
    "tiny-llama-vanilla",
]
CLASS = "test-class"
VERSIONS = json.loads((BASELINES / "tiny-bert-vanilla.json").read_text())["provenance"]["versions"]
"""The stack the committed baselines were recorded on, which the sessions ran too."""
CPU = Tolerance(time_floor=0.15, time_k=1.5, max_refresh_spread=0.10, time_drift_limit=0.15)
"""The CPU tier's step-time settings (``[tool.perfsuite.overrides."cpu/*"]``)."""


def _stored(case: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BASELINES / f"{case}.json").read_text())
    return data


def _steps(case: str, session: int, scale: float) -> list[float]:
    """Twelve steps of ``case`` around 10 + its index, ``scale`` times, with a deterministic ±1.5% wobble."""
    base = 10.0 + CASES.index(case)
    return [scale * base * (1 + 0.015 * (((7 * i + 3 * session + CASES.index(case)) % 5) - 2) / 2) for i in range(12)]


def _observation(case: str, steps: list[float], *, peak_delta: int = 0) -> Observation:
    stored = _stored(case)
    return Observation(
        time=statistics.median(steps),
        time_unit="calibrated",
        time_class=CLASS,
        calibration="numpy-mix-v2",
        time_steps=steps,
        step_time_s=statistics.median(steps) / 100,
        peak_bytes=stored["memory"]["peak_bytes"] + peak_delta,
        breakdown=stored["memory"]["breakdown"],
        losses=stored["loss"],
        attention=stored["spec"]["attention"],
        initial_weights=stored["spec"]["initial_weights"],
    )


def _sessions(scales: list[float], moved: dict[tuple[int, str], float] | None = None) -> list[Session]:
    """One session per scale (every case that much slower: the host's drift), ``moved`` cases further."""
    sessions = []
    for n, scale in enumerate(scales):
        readings = {}
        for case in CASES:
            steps = _steps(case, n, scale * (moved or {}).get((n, case), 1.0))
            readings[case] = Reading(observed=_observation(case, steps), group=f"{CLASS}/float32", hardware="cpu")
        date = f"2026-12-0{n + 1}T00:00:00+00:00"
        sessions.append(
            Session(name=f"s{n + 1}", date=date, commit="c", host="h", versions=VERSIONS, readings=readings)
        )
    return sessions


def _targets(tolerance: Tolerance = CPU) -> dict[str, Target]:
    return {case: Target(stored=_stored(case), tolerance=tolerance, hardware="cpu") for case in CASES}


def test_each_sessions_drift_is_taken_out_as_the_gate_takes_it_out() -> None:
    # Three sessions on hosts reading the whole class 0%, +12% and -6%: drift, not noise.
    result = pool(_sessions([1.0, 1.12, 0.94]), _targets(), CLASS)
    assert [c.refused for c in result.cases] == [None] * len(CASES)
    drifts = [d[f"{CLASS}/float32"].change for d in result.drifts]
    assert drifts[1] == pytest.approx(0.12, abs=0.02)
    assert drifts[2] == pytest.approx(-0.06, abs=0.02)
    for case in result.cases:
        assert case.spread is not None
        assert case.spread < 0.03, case
        assert case.entry is not None
        medians = [statistics.median(_steps(case.case, n, scale)) for n, scale in enumerate([1.0, 1.12, 0.94])]
        assert case.entry["repeats"] == medians  # one repeat per session
        assert case.entry["median"] == statistics.median(case.entry["repeats"])
        assert [s["date"][:10] for s in case.entry["sessions"]] == ["2026-12-01", "2026-12-02", "2026-12-03"]
        assert case.entry["recorded"].startswith("2026-12-03")
    # A case the gate judges on its own change (no drift limit: a multi-rank case) keeps the drift in its
    # spread: +12% against the others is too wide for its gate, so it is refused, saying so.
    own = pool(
        _sessions([1.0, 1.12, 0.94]), _targets(Tolerance(time_floor=0.15, time_k=1.5, max_refresh_spread=0.10)), CLASS
    )
    assert all(c.refused is not None and "sessions spread" in c.refused for c in own.cases)


def test_a_case_moved_against_the_rest_in_one_session_is_refused_of_three_and_set_aside_of_four() -> None:
    moved = {(1, "tiny-bert-lora"): 1.25}
    three = {c.case: c for c in pool(_sessions([1.0, 1.05, 0.97], moved), _targets(), CLASS).cases}
    assert three["tiny-bert-lora"].entry is None
    assert "s2 +2" in str(three["tiny-bert-lora"].refused)  # the session that moved it, and by how much
    noisy = three["tiny-bert-lora"].untimed  # refused for its spread: the class keeps why
    assert noisy is not None
    assert (noisy.sessions, noisy.widest) == (3, 0.1)
    assert noisy.spread == three["tiny-bert-lora"].spread
    assert all(c.entry is not None for name, c in three.items() if name != "tiny-bert-lora")
    four = {c.case: c for c in pool(_sessions([1.0, 1.05, 0.97, 1.02], moved), _targets(), CLASS).cases}
    lora = four["tiny-bert-lora"]
    assert lora.entry is not None
    assert lora.spread is not None
    assert lora.spread < 0.05
    assert max(lora.deviations) > 0.15  # read, then set aside as one of four
    assert lora.set_aside == ["s2"]


def test_a_case_gated_alone_carries_its_sessions_drift_and_none_is_set_aside() -> None:
    # Four sessions, the last on a host 14% slower; tiny-bert-lora alone in its group (an fp16 case among
    # fp32 ones), so no drift is taken out of it: that host's 14% stays, as it would in every retry there.
    sessions = _sessions([1.0, 1.01, 0.99, 1.14])
    for session in sessions:
        reading = session.readings["tiny-bert-lora"]
        alone = Reading(observed=reading.observed, group=f"{CLASS}/float16", hardware="cpu")
        session.readings["tiny-bert-lora"] = alone  # type: ignore[index]
    cases = {c.case: c for c in pool(sessions, _targets(), CLASS).cases}
    lora = cases["tiny-bert-lora"]
    assert lora.carries_drift
    assert lora.set_aside == []
    assert lora.refused is not None
    assert "Its gate takes no session's drift out" in lora.refused
    vanilla = cases["tiny-bert-vanilla"]  # the drift taken out, the fourth session reads like the rest
    assert not vanilla.carries_drift
    assert vanilla.entry is not None


def test_a_host_drifting_with_time_widens_the_cases_that_carry_its_drift_by_its_move() -> None:
    """Six sessions whose host reads a little slower each day. The cases gated against their session's
    drift pool as they are; the one gated alone (tiny-bert-lora, an fp16 case among fp32 ones) has the
    move added to its spread: past its ceiling it is refused with the override that admits it, and with
    that override it pools with that spread. The same hosts in another order of days have no trend."""

    def alone(scales: list[float]) -> list[Session]:
        sessions = _sessions(scales)
        for session in sessions:
            reading = session.readings["tiny-bert-lora"]
            session.readings["tiny-bert-lora"] = Reading(  # type: ignore[index]
                observed=reading.observed, group=f"{CLASS}/float16", hardware="cpu"
            )
        return sessions

    rising = alone([0.94, 0.97, 1.0, 1.02, 1.05, 1.08])
    result = pool(rising, _targets(), CLASS)
    assert result.trend is not None
    assert result.trend.found
    assert result.trend.group == f"{CLASS}/float32"
    assert result.trend.tau == 1.0
    assert result.trend.change == pytest.approx(0.13, abs=0.01)  # the first session to the last
    cases = {c.case: c for c in result.cases}
    lora = cases["tiny-bert-lora"]
    assert lora.trend_added == pytest.approx(result.trend.change)
    assert "the host's drift moved 13." in str(lora.refused)
    assert all(c.entry is not None and c.trend_added == 0 for name, c in cases.items() if name != "tiny-bert-lora")
    lines = session_lines(result, rising, _targets())
    assert "  drift against time: a trend" in lines
    assert max(len(line) for line in lines[2:]) <= 100

    # The override the refusal names admits the case, and its gate is drawn from the widened spread.
    override = re.search(r"\ntime_ceiling = ([\d.]+)\nmax_refresh_spread = ([\d.]+)", str(lora.refused))
    assert override is not None
    ceiling, most = map(float, override.groups())
    widened = _targets()
    widened["tiny-bert-lora"] = Target(
        stored=_stored("tiny-bert-lora"),
        tolerance=Tolerance(**{**vars(CPU), "time_ceiling": ceiling, "max_refresh_spread": most}),
        hardware="cpu",
    )
    admitted = {c.case: c for c in pool(rising, widened, CLASS).cases}["tiny-bert-lora"]
    assert admitted.entry is not None
    assert admitted.entry["spread"] == pytest.approx(lora.spread)
    assert widened["tiny-bert-lora"].tolerance.time_tolerance(admitted.entry["spread"]) > 0.30

    # A smaller move fits under the ceiling: the case is written, its spread carrying the move.
    mild = {c.case: c for c in pool(alone([0.99, 0.995, 1.0, 1.005, 1.01, 1.015]), _targets(), CLASS).cases}
    assert mild["tiny-bert-lora"].entry is not None
    assert mild["tiny-bert-lora"].trend_added == pytest.approx(0.025, abs=0.005)
    assert mild["tiny-bert-lora"].entry["spread"] > mild["tiny-bert-lora"].trend_added

    shuffled = pool(alone([1.0, 0.94, 1.08, 0.97, 1.05, 1.02]), _targets(), CLASS)
    assert shuffled.trend is not None
    assert not shuffled.trend.found
    assert all(c.entry is not None and c.trend_added == 0 for c in shuffled.cases)


def test_the_trend_is_read_over_dated_sessions_only() -> None:
    sessions = _sessions([0.94, 0.97, 1.0, 1.02, 1.05])
    assert pool(sessions, _targets(), CLASS).trend is not None
    undated = [replace(s, date=None) if n in (1, 3) else s for n, s in enumerate(sessions)]
    result = pool(undated, _targets(), CLASS)
    assert result.trend is None  # three dated: no order of three is unlikely enough to call
    assert "  drift against time: not read (it needs 4 dated sessions" in "\n".join(
        session_lines(result, undated, _targets())
    )


def test_sessions_within_an_hour_are_said_to_be_one_stretch_of_the_host() -> None:
    days = _sessions([1.0, 1.02, 0.99])  # a day apart
    assert not any(
        "one stretch of the host" in line for line in session_lines(pool(days, _targets(), CLASS), days, _targets())
    )
    minutes = [replace(s, date=f"2026-12-01T00:{10 * n:02d}:00+00:00") for n, s in enumerate(days)]
    lines = session_lines(pool(minutes, _targets(), CLASS), minutes, _targets())
    assert "  all within an hour: one stretch of the host, as a refresh's repeats are; later sessions may" in lines
    assert max(map(len, lines[2:4])) <= 100  # the two lines it adds


def test_each_session_held_out_is_gated_against_the_pool_of_the_others() -> None:
    # Five sessions on hosts up to 12% apart; the fourth read tiny-bert-lora 25% slower than the rest.
    sessions = _sessions([1.0, 1.12, 0.94, 1.05, 0.98], {(3, "tiny-bert-lora"): 1.25})
    checks = held_out(sessions, _targets(), CLASS)
    assert [c.session for c in checks] == ["s1", "s2", "s3", "s4", "s5"]
    assert [c.beyond for c in checks] == [[], [], [], ["tiny-bert-lora"], []]
    assert checks[3].changes["tiny-bert-lora"] == pytest.approx(0.25, abs=0.03)  # the host's 5% taken out
    assert checks[3].gates["tiny-bert-lora"] == 0.15
    # The others within a few percent: lora's pools of four hold the slow session, which moves their medians.
    assert all(abs(change) < 0.05 for c in checks for case, change in c.changes.items() if case not in c.beyond)
    assert held_out(sessions[:3], _targets(), CLASS) == []  # a pool of two is none


def test_a_session_of_another_stack_or_too_few_sessions_is_refused() -> None:
    sessions = _sessions([1.0, 1.0, 1.0])
    other = dict(sessions[2].readings)
    steps = list(other["tiny-bert-vanilla"].observed.time_steps)
    other["tiny-bert-vanilla"] = Reading(
        observed=_observation("tiny-bert-vanilla", steps, peak_delta=4 * 2**20),
        group=f"{CLASS}/float32",
        hardware="cpu",
    )
    del other["tiny-t5-vanilla"]
    sessions[2] = Session(name="s3", date=None, commit=None, host=None, versions=VERSIONS, readings=other)
    cases = {c.case: c for c in pool(sessions, _targets(), CLASS).cases}
    refused = str(cases["tiny-bert-vanilla"].refused)
    assert "s3's peak memory differs from its baseline's (92.96 MiB there, 96.96 MiB here)" in refused
    assert cases["tiny-t5-vanilla"].refused == f"read in 2 of 3 sessions; a pooled step time needs {MIN_SESSIONS}"
    assert cases["tiny-bert-vanilla"].untimed is None  # another case ran, or too few sessions: no word on its noise
    assert cases["tiny-t5-vanilla"].untimed is None
    missing = Target(stored=None, tolerance=CPU, hardware="cpu", error="no baseline")
    assert pool(sessions, {"tiny-bert-lora": missing}, CLASS).cases[0].refused == "no baseline"


def _record(case: str, steps: list[float], *, torch: str = "2.13.0+cpu") -> dict[str, Any]:
    stored = _stored(case)
    model, strategy = stored["spec"]["model"], stored["spec"]["strategy"]
    summary = {"samples": steps, "median": statistics.median(steps)}
    return {
        "model": model, "strategy": strategy, "engine": "loop", "status": "ok", "device": "cpu",
        "device_name": "a test CPU", "hardware": "cpu", "time_class": CLASS, "threads": 1, "precision": "fp32",
        "steps": 12, "warmup_steps": 2, "initial_weights": stored["spec"]["initial_weights"],
        "step_time_s": {"samples": [s / 100 for s in steps], "median": statistics.median(steps) / 100},
        "step_time_calibrated": summary, "calibration": {"workload": "numpy-mix-v2", "median_s": 0.01},
        "peak_memory_bytes": stored["memory"]["peak_bytes"], "memory_breakdown_bytes": stored["memory"]["breakdown"],
        "loss": stored["loss"], "applied": {"attention_implementation": stored["spec"]["attention"]},
        "matmul_dtypes": {"float32": 10},
    }  # fmt: skip


def _project(tmp_path: Path, scales: tuple[float, ...] = (1.0, 1.12, 0.94)) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.perfsuite.overrides."cpu/*"]\ntime_floor = 0.15\ntime_k = 1.5\nmax_refresh_spread = 0.10\n'
        "time_drift_limit = 0.15\n"
    )
    (tmp_path / "baselines" / "cpu").mkdir(parents=True)
    for case in CASES:
        (tmp_path / "baselines" / "cpu" / f"{case}.json").write_text((BASELINES / f"{case}.json").read_text())
    files = []
    for n, scale in enumerate(scales):
        env = {"date": f"2026-12-0{n + 1}T0{n}:00:00+00:00", "commit": "abc", "python": "3.11.7",
               "versions": dict(VERSIONS)}  # fmt: skip
        cases = [_record(case, _steps(case, n, scale)) for case in CASES]
        files.append(tmp_path / f"session-{n + 1}.json")
        files[-1].write_text(json.dumps({"schema_version": 1, "env": env, "cases": cases}))
    return tmp_path


def test_pool_writes_the_class_step_time_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    before = {case: _stored(case) for case in CASES}

    def now(case: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((tmp_path / "baselines" / "cpu" / f"{case}.json").read_text())
        return data

    sessions = ["session-1.json", "session-2.json", "session-3.json"]
    assert main(["baselines", "pool", *sessions, "--dry-run"]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert all(now(c) == before[c] for c in CASES)

    # Three of six, while the other three have no time of this class: a later session's gate would take
    # no drift out of three cases alone, so these sessions, 12% apart, spread too wide for it.
    assert main(["baselines", "pool", *sessions, "-k", "tiny-bert"]) == 1
    out = capsys.readouterr().out
    assert "float32 +10.3% (3 cases: too few, each gated alone)" in out
    assert "0 cases pooled and 0 withdrawn" in out
    # Their spread is the drift that the cases -k left out would have taken out: no time is withdrawn for it.
    assert "3 cases of the class not written (-k) and holding no time of it count towards no session's drift" in out
    assert "no time withdrawn: without those cases, the sessions' drift is not read as a later gate" in out
    assert all(now(c) == before[c] for c in CASES)

    assert main(["baselines", "pool", *sessions]) == 0
    out = capsys.readouterr().out
    assert f"pooling 3 sessions of {CLASS}, from 2026-12-01T00:00 to 2026-12-03T02:00 UTC (50 h 0 min)" in out
    assert "  session-2.json (abc): drift float32 +1" in out
    assert "held out: none (3 sessions; of 4 or more, each is also gated against the pool of the others" in out
    assert "  drift against time: not read (it needs 4 dated sessions" in out
    assert re.search(
        r"^tiny-bert-lora +new → 12\.\d+× calibration, spread \d\.\d% over 3 sessions: gate ±15%$", out, re.M
    )
    for case in CASES:
        after = now(case)
        entry = after["time"].pop(CLASS)
        assert after == before[case]  # every other class, memory and loss as they were; no longer untimed
        assert entry["unit"] == "calibrated"
        assert len(entry["repeats"]) == len(entry["sessions"]) == 3

    # Now that the others hold this class's time, they count towards each session's drift against it.
    assert main(["baselines", "pool", *sessions, "-k", "tiny-bert"]) == 0
    out = capsys.readouterr().out
    assert "float32 +1" in out
    assert "(6 cases)" in out
    assert "tiny-gpt2" not in out.split("\n", 4)[-1]  # not written, not shown


def test_a_case_too_noisy_to_pool_has_its_class_withdrawn_and_its_pinned_entry_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path, scales=(1.0, 1.02, 0.99)))
    second = tmp_path / "session-2.json"
    data = json.loads(second.read_text())
    lora = next(c for c in data["cases"] if c["model"] == "tiny-bert" and c["strategy"] == "lora")
    for key in ("step_time_calibrated", "step_time_s"):
        lora[key] = {"samples": [1.3 * v for v in lora[key]["samples"]], "median": 1.3 * lora[key]["median"]}
    second.write_text(json.dumps(data))
    stored = json.loads((tmp_path / "baselines" / "cpu" / "tiny-bert-lora.json").read_text())
    stored["time"][CLASS] = {"unit": "calibrated", "median": 12.0, "spread": 0.01, "steps": [], "calibration": "x"}
    (tmp_path / "baselines" / "cpu" / "tiny-bert-lora.json").write_text(json.dumps(stored))
    pinned = tmp_path / "baselines" / "cpu" / f"pytest-benchmark.{CLASS}.json"
    vanilla_entry = {"param": "tiny-bert-vanilla", "fullname": "m::t[tiny-bert-vanilla]"}
    entries = [{"param": "tiny-bert-lora", "fullname": "m::t[tiny-bert-lora]"}, vanilla_entry]
    pinned.write_text(json.dumps({"machine_info": {}, "benchmarks": [{"param": "tiny-bert-lora"}]}))
    files = {p.name: p.read_bytes() for p in (tmp_path / "baselines" / "cpu").iterdir()}
    sessions = ["session-1.json", "session-2.json", "session-3.json"]

    # A pinned file it cannot read: one line, and nothing written.
    assert main(["baselines", "pool", *sessions]) == 2
    err = capsys.readouterr().err
    assert "corrupt pinned pytest-benchmark file ('benchmarks' is not a list of entries, each with its fullname)" in err
    assert "its entries of tiny-bert-lora are to be removed" in err
    assert {p.name: p.read_bytes() for p in (tmp_path / "baselines" / "cpu").iterdir()} == files
    pinned.write_text(json.dumps({"machine_info": {}, "benchmarks": entries}))
    files = {p.name: p.read_bytes() for p in (tmp_path / "baselines" / "cpu").iterdir()}

    assert main(["baselines", "pool", *sessions, "--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "5 cases pooled and 1 withdrawn, would be written (--dry-run: nothing written)" in out
    assert f"withdrawn, too noisy on {CLASS} to gate: tiny-bert-lora. The class's time would be removed" in out
    assert {p.name: p.read_bytes() for p in (tmp_path / "baselines" / "cpu").iterdir()} == files

    assert main(["baselines", "pool", *sessions]) == 1
    after = json.loads((tmp_path / "baselines" / "cpu" / "tiny-bert-lora.json").read_text())
    assert CLASS not in after["time"]
    assert after["untimed"][CLASS]["sessions"] == 3
    assert after["untimed"][CLASS]["widest"] == 0.1
    assert json.loads(pinned.read_text())["benchmarks"] == [vanilla_entry]
    vanilla = json.loads((tmp_path / "baselines" / "cpu" / "tiny-bert-vanilla.json").read_text())
    assert CLASS in vanilla["time"]
    assert "untimed" not in vanilla


def test_a_session_given_twice_or_run_otherwise_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path, scales=(1.0, 1.02, 0.99)))  # hosts close enough for cases gated alone
    assert main(["baselines", "pool", "session-1.json", "session-2.json", "./session-1.json"]) == 2
    assert "session-1.json and session-1.json are the same session" in capsys.readouterr().err
    copy = tmp_path / "copy.json"
    copy.write_text((tmp_path / "session-2.json").read_text())
    assert main(["baselines", "pool", "session-1.json", "session-2.json", "copy.json"]) == 2
    assert "session-2.json and copy.json are the same session" in capsys.readouterr().err
    for name in ("session-1.json", "session-2.json", "session-3.json"):  # files that name no session
        undated = json.loads((tmp_path / name).read_text())
        for key in ("date", "commit", "host"):
            undated["env"].pop(key, None)
        (tmp_path / f"undated-{name}").write_text(json.dumps(undated))
    main(
        ["baselines", "pool", "--dry-run", "undated-session-1.json", "undated-session-2.json", "undated-session-3.json"]
    )
    assert "are the same session" not in capsys.readouterr().err

    data = json.loads((tmp_path / "session-2.json").read_text())
    lora = next(c for c in data["cases"] if c["strategy"] == "lora")
    lora["threads"] = 2
    vanilla = next(c for c in data["cases"] if c["model"] == "tiny-bert" and c["strategy"] == "vanilla")
    vanilla["step_time_calibrated"]["samples"][3] = 0.0
    (tmp_path / "session-2.json").write_text(json.dumps(data))
    assert main(["baselines", "pool", "session-1.json", "session-2.json", "session-3.json"]) == 1
    out = capsys.readouterr().out
    assert "tiny-bert-lora       refused: session-2.json ran it otherwise than its baseline recorded " in out
    assert "(threads 1 there, 2 here)" in out
    assert "tiny-bert-vanilla    refused: session-2.json's step times are not all finite and above 0" in out
    assert "4 cases pooled" in out


def test_sessions_of_different_stacks_do_not_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(_project(tmp_path))
    data = json.loads((tmp_path / "session-3.json").read_text())
    data["env"]["versions"]["torch"] = "2.12.0+cpu"
    (tmp_path / "session-3.json").write_text(json.dumps(data))
    assert main(["baselines", "pool", "session-1.json", "session-2.json", "session-3.json"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "perfsuite: error: session-1.json and session-3.json ran different stacks (torch 2.13.0+cpu vs 2.12.0+cpu): "
        "pool one stack's sessions\n"
    )


def test_sessions_are_named_by_their_path_below_the_files_common_directory(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from perfsuite.cli.pooling import _short_names

    def files(*paths: Path) -> Any:
        return [SimpleNamespace(path=str(p)) for p in paths]

    flat = files(tmp_path / "push-1.json", tmp_path / "push-2.json", tmp_path / "push-3.json")
    assert _short_names(flat) == ["push-1.json", "push-2.json", "push-3.json"]
    artifacts = files(*(tmp_path / "sessions" / run / "perfsuite.json" for run in ("101", "102", "103")))
    assert _short_names(artifacts) == ["101/perfsuite.json", "102/perfsuite.json", "103/perfsuite.json"]


def test_a_session_timed_on_a_busy_machine_is_not_pooled() -> None:
    """A pooled time gates every later run, as a refresh's does: a session whose run of the case waited
    for a CPU longer than its gate refuses the case's pool, saying which and why."""
    sessions = _sessions([1.0, 1.02, 0.99])
    reading = sessions[1].readings["tiny-bert-vanilla"]
    busy = dataclasses.replace(reading.observed, waited=Waiting(0.4))
    sessions[1].readings["tiny-bert-vanilla"] = dataclasses.replace(reading, observed=busy)  # type: ignore[index]
    cases = {c.case: c for c in pool(sessions, _targets(), CLASS).cases}
    refused = str(cases["tiny-bert-vanilla"].refused)
    assert refused.startswith("s2: the machine was busy: its steps or calibration waited for a CPU 40% of the time")
    assert refused.endswith(": pool sessions of a quiet machine")
    assert all(c.refused is None for name, c in cases.items() if name != "tiny-bert-vanilla")
