"""``perfsuite ab``'s set-up lines with fake sides (no workers): what the two sides differ in."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite.ab.comparison import AbRun, schedule_for
from perfsuite.core.spec import CaseSpec


def _side(label: str, **versions: str) -> Any:
    return SimpleNamespace(env=SimpleNamespace(label=label), versions=lambda: {"torch": "2.13.0", **versions})


@pytest.mark.parametrize(
    ("sides", "line"),
    [
        ((_side("current"), _side("current")), "the same versions (an A/A comparison)"),
        (
            (_side("current"), _side("benchmarks/ab/slow-python")),
            "the same package versions, in current and benchmarks/ab/slow-python",
        ),
        ((_side("current"), _side("transformers==5.0.0", transformers="5.0.0")), "transformers"),
    ],
)
def test_the_version_line_says_an_a_a_comparison_only_of_one_environment(sides: tuple[Any, Any], line: str) -> None:
    run = AbRun(sides, [], schedule_for(1, floor=0.03, alpha=0.05, first=None, cap=None), say=print)
    (said,) = run.version_lines()
    assert said.startswith("perfsuite: base → candidate: ")
    assert line in said
    assert ("A/A" in said) == (sides[0].env.label == sides[1].env.label)


def test_a_case_stopped_before_its_first_look_shows_its_pairs_mean_without_a_verdict() -> None:
    from perfsuite.reports.ab import rows

    case = {
        "case": "bert-base-uncased-vanilla",
        "verdict": "undecided",
        "error": None,
        "interrupted": True,
        "time": None,  # no look reached: no interval, no verdict on the time
        "mode": "alternate",
        "ratios": [1.0887, 1.0489, 1.0376, 1.0734],
        "memory": {"a": 2**30, "b": 2**30, "breakdown_a": {}, "breakdown_b": {}},
        "loss": {"max_abs_diff": 0.0},
    }
    (row,) = rows({"cases": [case]})
    assert row[1:4] == ["undecided (interrupted)", "1.062 before the first look", "4 alternate"]
    (row,) = rows({"cases": [{**case, "ratios": []}]})
    assert row[2:4] == ["—", "0 alternate"]
    (row,) = rows({"cases": [{**case, "interrupted": False, "stopped": "B (current): its worker did not start"}]})
    assert row[1:4] == ["undecided (stopped)", "1.062 before the first look", "4 alternate"]


def test_a_comparison_a_dead_side_stopped_says_so_first() -> None:
    from perfsuite.reports.ab import verdict_line

    counts = {"regressed": 0, "improved": 0, "same": 1, "undecided": 1, "skipped": 0, "cannot test": 0}
    side = {"probe": {"libraries": {"torch": {"version": "2.13.0"}}}, "code": None}
    line = verdict_line({"verdicts": counts, "stopped": 1, "sides": {"base": side, "candidate": side}})
    assert line.startswith("STOPPED when a side stopped answering, no regression called before it: ")
    assert line.endswith("; 1 case(s) unfinished")  # the headline says STOPPED; once is enough


@pytest.mark.parametrize(
    ("verdicts", "interrupted", "head"),
    [
        ({"regressed": 1, "same": 1}, 1, "REGRESSED: "),
        ({"same": 1, "undecided": 1}, 1, "INTERRUPTED, no regression called before it stopped: "),
        ({"same": 1, "undecided": 1}, 0, "no regression called: "),
        ({"same": 1, "cannot test": 1}, 0, "no regression called: "),
        ({"same": 1, "improved": 1}, 0, "no regression: "),
        ({"same": 1, "skipped": 1}, 0, "no regression: "),
        ({"skipped": 2}, 0, "nothing compared: "),
        ({"skipped": 1, "cannot test": 1}, 0, "nothing compared: "),
        ({"same": 1, "new": 1}, 0, "no regression: "),  # a case the candidate adds: nothing to decide
        ({"new": 2}, 0, "nothing compared: "),
    ],
)
def test_the_headline_says_no_regression_only_where_every_case_was_decided(
    verdicts: dict[str, int], interrupted: int, head: str
) -> None:
    """The line a pull request's comment leads with: a comparison stopped half-way, or one that left a
    case undecided, may have missed a regression, and says so."""
    from perfsuite.reports.ab import verdict_line

    counts = {"regressed": 0, "improved": 0, "same": 0, "undecided": 0, "skipped": 0, "cannot test": 0, **verdicts}
    side = {"probe": {"libraries": {"torch": {"version": "2.13.0"}}}, "code": None}
    line = verdict_line({"verdicts": counts, "interrupted": interrupted, "sides": {"base": side, "candidate": side}})
    assert line.startswith(head)
    tail = f"; INTERRUPTED with {interrupted} case(s)" if head == "REGRESSED: " else f"; {interrupted} case(s)"
    assert line.endswith(f"{tail} unfinished" if interrupted else "versions)")
    assert line.count("INTERRUPTED") == (1 if interrupted else 0)


def _run(said: list[str]) -> AbRun:
    """A comparison of one case between two stand-in sides, saying into ``said``."""
    sides = [
        SimpleNamespace(name=name, env=SimpleNamespace(label="current", moved=()), probe={"libraries": {}})
        for name in ("base", "candidate")
    ]
    schedule = schedule_for(1, floor=0.03, alpha=0.05, first=None, cap=None)
    return AbRun(tuple(sides), [], schedule, say=said.append)  # type: ignore[arg-type]


def test_a_comparison_a_dead_side_stopped_is_no_pass_and_says_why(tmp_path: Any) -> None:
    """Cases left open when a side's server died are not a pass (exit 3, as when nothing could be
    tested); the pairs they had are written, and the reason is said."""
    import json

    from rich.console import Console

    from perfsuite.ab.rounds import CaseResult

    said: list[str] = []
    run = _run(said)
    open_ = CaseResult(case="tiny-bert-adafactor", log_ratios=[0.05, 0.04], stopped="B (current): its worker died")
    options = SimpleNamespace(upgrade=None, json=tmp_path / "ab.json", report=None)
    with (tmp_path / "out").open("w") as out:
        console = Console(file=out, width=200)
        code = run.finish([CaseResult(case="tiny-bert-vanilla"), open_], options, 12.0, console)  # type: ignore[arg-type]
    assert "undecided (stopped)" in (tmp_path / "out").read_text()
    assert code == 3
    assert any(line.endswith("when a side stopped answering: B (current): its worker died") for line in said), said
    written = json.loads((tmp_path / "ab.json").read_text())
    assert written["stopped"] == 1
    assert len(written["cases"][1]["ratios"]) == 2


def test_a_side_set_up_whose_cases_cannot_run_keeps_its_versions_and_names_itself() -> None:
    """A release that resolves but does not import (its forkserver dies at its first boot): each case
    is *cannot test*, the headline says what moved and which side, the summary says why, whole."""
    from perfsuite.reports.ab import markdown, verdict_line

    run = _run([])
    run.specs = [CaseSpec(model="tiny-bert", strategy="vanilla")]
    run.sides[0].probe = {"libraries": {"transformers": {"version": "4.57.6"}}}
    run.sides[1].probe = {"libraries": {"transformers": {"version": "5.0.0"}}}
    why = "candidate (transformers==5.0.0): ForkserverDied: ... ValueError: Either a <revision> or a version"
    payload = run.untested(why, 3.0, "candidate")
    assert [case["verdict"] for case in payload["cases"]] == ["cannot test"]
    assert verdict_line(payload) == (
        "nothing compared: 1 cannot test "
        "(base → candidate: transformers 4.57.6 → 5.0.0; the candidate cannot be tested)"
    )
    summary = markdown(payload)
    assert f"\n> cannot test: {why.replace('<', '&lt;')}\n" in summary
    # Which side is data the comparison keeps, not read back from the error's words.
    unnamed = run.untested("the base's words: candidate mentioned", 3.0)
    assert verdict_line(unnamed).endswith("transformers 4.57.6 → 5.0.0; the sides cannot be tested)")
    assert "Time: *slower*" not in summary


def test_a_case_that_regressed_at_its_first_pair_and_ran_on_to_time_it_points_to_the_flag(tmp_path: Any) -> None:
    from rich.console import Console

    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.check import Check

    said: list[str] = []
    run = _run(said)
    schedule = run.schedule
    hungrier = Check("peak_memory", False, "10 MiB", "12 MiB", "+20%", "5%", "more memory", rel=0.2, limit=0.05)
    timed_on = CaseResult(case="tiny-bert-vanilla", log_ratios=[0.0] * (schedule.first + 2), checks=[hungrier])
    at_first_look = CaseResult(case="tiny-bert-bf16", log_ratios=[0.0] * schedule.first, checks=[hungrier])
    options = SimpleNamespace(upgrade=None, json=None, report=None)
    with (tmp_path / "out").open("w") as out:
        run.finish([timed_on, at_first_look], options, 12.0, Console(file=out, width=200))  # type: ignore[arg-type]
    (hint,) = [line for line in said if "--stop-on-regression" in line]
    assert hint.startswith("perfsuite ab: 1 case(s) regressed on memory or loss at their first pair and ran on")
    assert f"(up to {schedule.first + 2} pairs)" in hint


def test_what_a_side_imported_of_the_projects_code_is_said_against_its_copy() -> None:
    from perfsuite.reports.ab import imported

    copy = {"pyproject": "/copy-1/pyproject.toml"}
    assert imported({**copy, "code": {"acme.model": "/copy-1/acme/model.py"}}) == "from /copy-1: acme/model.py"
    # An installed copy shadowing the side's, and a module not found: each said, not hidden under "from".
    shadowed = {"acme.model": "/site/acme/model.py", "acme.train": None}
    said = imported({**copy, "code": shadowed})
    assert said == "from /copy-1: /site/acme/model.py (outside its copy), acme.train (not found)"
    assert imported({**copy, "code": {}}) == ""


def test_a_side_whose_code_declares_none_of_the_cases_names_says_so_in_a_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pull request that first declares a team's model: the base commit's code declares no module of
    the project's own, said so, and its server answers a case of that model with the one name it does
    not know, not with every name it does."""
    import io
    import json

    from perfsuite.core import registry
    from perfsuite.worker import serve

    side: Any = SimpleNamespace(name="base", env=SimpleNamespace(label="current"), versions=dict, probe={"project": {}})
    other: Any = SimpleNamespace(name="candidate", env=SimpleNamespace(label="current"), versions=dict, probe={})
    run = AbRun((side, other), [], schedule_for(1, floor=0.03, alpha=0.05, first=None, cap=None), say=print)
    run.code = ("main", "the working tree")
    lines = run.version_lines()
    assert "  base declares no module of the project's own (no factory, batch maker or engine)" in lines
    monkeypatch.chdir(tmp_path)  # no pyproject.toml: nothing declared
    answers = io.StringIO()
    asked = [
        {"model": "teamnet"},
        {"model": "tiny-bert", "engine": "team_step"},
        {"model": "tiny-bert", "strategy": "+"},
    ]
    requests = [
        json.dumps({"op": "run", "spec": {"strategy": "vanilla", "device": "cpu", **spec}, "timeout_s": 5}) + "\n"
        for spec in asked
    ]
    specs = [{"strategy": "vanilla", "device": "cpu", **spec} for spec in [*asked, {"model": "tiny-bert"}]]
    requests.append(json.dumps({"op": "declares", "specs": specs}) + "\n")  # asked before any run
    saved = registry.snapshot()
    try:
        serve.serve(io.StringIO("".join(requests)), answers)
    finally:
        registry.restore(saved)
        serve._load_project_once.cache_clear()  # read again by whichever test asks next, in its own directory
    *ran, declares = [json.loads(line) for line in answers.getvalue().splitlines()]
    # What a comparison asks first: the names this side lacks, a malformed one and a known one not among them.
    assert declares == {"ok": True, "unknown": ["model 'teamnet'", "engine 'team_step'", None, None]}
    errors = [answer["error"] for answer in ran]
    assert errors[:2] == [
        "UnknownNameError: unknown model 'teamnet': this side's code does not declare it",
        "UnknownNameError: unknown engine 'team_step': this side's code does not declare it",
    ]
    assert "does not declare it" not in errors[2]  # a malformed name, said as it was


class _Declaring:
    """A fake side (:class:`test_ab_rounds.FakeSide`) whose code declares only ``models``."""

    def __init__(self, name: str, side: Any, models: set[str]) -> None:
        self.name, self.side, self.models = name, side, models
        self.env = SimpleNamespace(label="current", moved=())
        self.probe: dict[str, Any] = {"libraries": {}}

    def undeclared(self, specs: list[dict[str, Any]]) -> list[str | None]:
        return [None if spec["model"] in self.models else f"model '{spec['model']}'" for spec in specs]

    def reset(self) -> None:
        self.side.reset()

    def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> Any:
        return self.side.run(spec, timeout_s, env)


def test_a_case_only_the_candidate_declares_is_new_run_once_on_it_and_fails_nothing(tmp_path: Any) -> None:
    """A pull request that adds a model: its case is *new*, run once on the candidate for its figures
    (the base never asked to run it), not *cannot test*; beside a compared case the headline is that
    case's, alone it is *nothing compared*, and neither is a failure. A new case whose run fails is
    *cannot test*, naming the side."""
    import json

    from rich.console import Console
    from test_ab_rounds import FakeSide

    from perfsuite.ab.added import added_cases, run_added
    from perfsuite.ab.envs import EnvError
    from perfsuite.core.ab_file import AbFile
    from perfsuite.reports.ab import markdown, rows, verdict_line

    log: list[str] = []
    base = _Declaring("base", FakeSide("A", {}, log), {"tiny-bert"})
    candidate = _Declaring(
        "candidate", FakeSide("B", {}, log, fail="tiny-t5-vanilla"), {"tiny-bert", "tiny-gpt2", "tiny-t5"}
    )
    specs = [
        CaseSpec(model=m, strategy="vanilla", steps=4, warmup_steps=1) for m in ("tiny-bert", "tiny-gpt2", "tiny-t5")
    ]
    new = added_cases(specs, (base, candidate))  # type: ignore[arg-type]
    assert new == {"tiny-gpt2-vanilla": "model 'tiny-gpt2'", "tiny-t5-vanilla": "model 'tiny-t5'"}
    said: list[str] = []
    schedule = schedule_for(1, floor=0.03, alpha=0.05, first=6, cap=6)
    run = AbRun((base, candidate), specs, schedule, say=said.append, mode="alternate", new=new)  # type: ignore[arg-type]
    results = run.compare_all(60)
    assert [r.verdict for r in results] == ["same", "new", "regressed"]
    assert not [line for line in log if line.startswith("A tiny-gpt2") or line.startswith("A tiny-t5")]
    assert [line for line in log if line.startswith("B tiny-gpt2")] == [
        "B tiny-gpt2-vanilla profile=True calibrate=False"
    ]
    assert any(
        "tiny-gpt2-vanilla: new: the base's code does not declare model 'tiny-gpt2'; the candidate, one run: "
        "100.00 ms a step, peak 1,000 B, final loss 1.5; nothing to compare it with" in line
        for line in said
    ), said
    assert results[2].error == "candidate: boom"
    assert any(
        "tiny-t5-vanilla: regressed: the base's code does not declare model 'tiny-t5'; candidate: boom" in line
        for line in said
    ), said
    options = SimpleNamespace(upgrade=None, json=tmp_path / "ab.json", report=None)
    with (tmp_path / "out").open("w") as out:
        code = run.finish(results, options, 12.0, Console(file=out, width=200))  # type: ignore[arg-type]
    assert code == 1  # the new case's own failure
    payload = json.loads((tmp_path / "ab.json").read_text())
    AbFile.from_json(payload, "ab.json")  # read back as any ab file is
    assert payload["verdicts"]["new"] == 1
    assert verdict_line(payload).startswith("REGRESSED: 1 regressed, 1 same, 1 new (")
    table = {row[0]: row for row in rows(payload)}
    assert table["tiny-gpt2-vanilla"][1:] == [
        "new (model 'tiny-gpt2' not in base)",
        "B alone, one run: 100.00 ms a step",
        "0",
        "— → 0.00",
        "—",
        "B alone: final 1.5",
    ]
    assert "| tiny-gpt2-vanilla | new (model 'tiny-gpt2' not in base) |" in markdown(payload)
    assert table["tiny-t5-vanilla"][1:3] == ["regressed (new)", "candidate: boom"]

    # The pull request that first declares the team's models: every case new, nothing compared, no failure.
    alone = AbRun((base, candidate), specs[1:2], schedule, say=said.append, mode="alternate", new=new)  # type: ignore[arg-type]
    results = alone.compare_all(60)
    assert [r.verdict for r in results] == ["new"]
    with (tmp_path / "out").open("w") as out:
        assert alone.finish(results, SimpleNamespace(upgrade=None, json=None, report=None), 3.0, Console(file=out)) == 0  # type: ignore[arg-type]
    assert verdict_line(alone.payload(results, 3.0)).startswith("nothing compared: 1 new (")
    # Stopped (Ctrl-C, SIGTERM) before a new case ran: not run, said so.
    (stopped,) = run_added(alone.specs, alone.new, alone.sides[1], timeout_s=60, stopped="interrupted")
    assert (stopped.verdict, stopped.error, stopped.interrupted) == ("cannot test", "interrupted before its run", True)
    # A side that stopped answering: not run, saying why; a signal while one runs: the rest are not run.
    (dead,) = run_added(alone.specs, alone.new, alone.sides[1], timeout_s=60, stopped="B: its worker died")
    assert (dead.error, dead.stopped, dead.interrupted) == ("not run: B: its worker died", "B: its worker died", False)

    def interrupted(result: Any) -> None:
        raise KeyboardInterrupt

    twice = [*specs[1:2], CaseSpec(model="tiny-llama", strategy="vanilla", steps=4, warmup_steps=1)]
    both = {**new, "tiny-llama-vanilla": "model 'tiny-llama'"}
    first, second = run_added(twice, both, alone.sides[1], timeout_s=60, told=interrupted)
    assert first.verdict == "new"  # it ran; the signal came as it was told
    assert (second.error, second.interrupted) == ("interrupted before its run", True)

    class Dead(_Declaring):
        def run(self, spec: dict[str, Any], timeout_s: float, env: dict[str, str] | None = None) -> Any:
            raise EnvError("candidate (current): its server stopped answering", "candidate")

    # Its server, not its run, failed: nothing says the candidate's code is at fault; the side stopped
    # answering, so the next new case is not run and the comparison counts both as stopped (exit 3).
    why = "candidate (current): its server stopped answering"
    gone, after = run_added(twice, both, Dead("candidate", None, set()), timeout_s=60)  # type: ignore[arg-type]
    assert (gone.verdict, gone.error, gone.stopped) == ("cannot test", why, why)
    assert (after.verdict, after.error, after.stopped) == ("cannot test", f"not run: {why}", why)


def test_a_side_whose_perfsuite_cannot_say_what_it_declares_has_its_runs_say_it() -> None:
    """A side in an environment of its own with an older perfsuite answers the question with an unknown
    request: no case is taken for new, and a case it does not declare fails its run, naming it, as before."""
    from perfsuite.ab.sides import Side

    side: Any = Side.__new__(Side)
    side._ask = lambda request, unknown_ok=False: {"ok": False, "error": "unknown request 'declares'"}
    assert side.undeclared([{"model": "teamnet"}, {"model": "tiny-bert"}]) == [None, None]
    side._ask = lambda request, unknown_ok=False: {"ok": True, "unknown": ["model 'teamnet'", None]}
    assert side.undeclared([{"model": "teamnet"}, {"model": "tiny-bert"}]) == ["model 'teamnet'", None]


def test_a_comparison_judges_a_loss_from_other_weights_at_its_alpha_over_its_cases_and_tables_it(tmp_path: Any) -> None:
    """Two cases whose candidate re-drew its initial weights, alpha 0.05: each judged against the base's 5 other
    seeds at 1 - 0.05 / 2, said so in the line, the JSON and the table's loss cell, and no regression."""
    import json

    from rich.console import Console
    from test_ab_rounds import Seeded

    from perfsuite.reports.ab import rows

    log: list[str] = []

    def a_curve(seed: int) -> list[float]:
        return [2.0 + 0.01 * (seed * 3 % 5), 1.5 + 0.01 * (seed * 7 % 5)]

    sides = (
        Seeded("base", {}, log, digest="aa", curve=a_curve),
        Seeded("candidate", {}, log, digest="bb", curve=lambda seed: [2.02, 1.51]),
    )
    for side in sides:
        vars(side).update(env=SimpleNamespace(label="current", moved=()), probe={"libraries": {}})
    specs = [CaseSpec(model=m, strategy="vanilla", steps=4, warmup_steps=1) for m in ("tiny-bert", "tiny-gpt2")]
    said: list[str] = []
    schedule = schedule_for(2, floor=0.03, alpha=0.05, first=6, cap=6)
    run = AbRun(sides, specs, schedule, say=said.append, mode="alternate", loss_seeds=5)  # type: ignore[arg-type]
    results = run.compare_all(60)
    assert [r.verdict for r in results] == ["same", "same"]
    options = SimpleNamespace(upgrade=None, json=tmp_path / "ab.json", report=None)
    with (tmp_path / "out").open("w") as out:
        assert run.finish(results, options, 3.0, Console(file=out, width=200)) == 0  # type: ignore[arg-type]
    payload = json.loads((tmp_path / "ab.json").read_text())
    (loss,) = [c for c in payload["cases"][0]["checks"] if c["metric"] == "loss"]
    assert (loss["seeds"], loss["tolerance"]) == (6, "the base's 6 seeds' 97.5% intervals")
    cell = rows(payload)[0][-1]
    assert cell.startswith("final 1.5 → 1.51, max |Δ| 0.02 from step 0, loss from other initial weights, as at")
    assert "; the base's 6 seeds' 97.5% intervals: step 0 2.017 ± " in cell


def test_a_signal_after_every_verdict_still_exits_with_its_code() -> None:
    """Ctrl-C or SIGTERM that comes as the last round ends (every case judged) or while explaining
    leaves the verdicts as written, says so, and exits 130 or 143 as any stopped command does; with
    no signal the comparison's own code stands."""
    import signal

    from perfsuite.ab.rounds import CaseResult
    from perfsuite.cli.ab import exit_code
    from perfsuite.cli.interrupt import Interrupt

    said: list[str] = []
    judged = [CaseResult("tiny-bert-vanilla")]
    assert exit_code(1, judged, Interrupt(), said.append) == 1
    assert said == []
    assert exit_code(1, judged, Interrupt(signal.SIGTERM), said.append) == 143
    assert said == ["perfsuite ab: stopped by SIGTERM after every case's verdict; they stand as written"]
    cut = [CaseResult("tiny-bert-vanilla", interrupted=True)]
    assert exit_code(0, cut, Interrupt(signal.SIGINT), said.append) == 130
    assert len(said) == 1  # the headline says it: INTERRUPTED with 1 case(s) unfinished


def test_a_signal_while_the_sides_close_closes_them_all_and_goes_no_further(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's one signal (later ones are ignored) heard while the servers close: they are closed
    again, and the comparison goes on to write what it measured rather than losing it."""
    from perfsuite.ab import comparison

    closed: list[int] = []

    def close_lanes(lanes: Any) -> None:
        closed.append(len(lanes))
        if len(closed) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(comparison, "close_lanes", close_lanes)
    run = AbRun.__new__(AbRun)
    run.lanes, run.sides = [object(), object()], (None, None)  # type: ignore[assignment, list-item]
    run.close()
    assert closed == [2, 2]
