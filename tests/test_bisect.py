"""``perfsuite bisect``: the releases between two, the search for the first bad one (around releases
that cannot be tested), what it judges, the case ids it takes, and both ends of a DeepSpeed range
set up on the CPU torch."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from perfsuite.ab.bisect import BisectError, Judgement, between, search

RELEASES = ["4.44.0", "4.45.0", "4.45.1", "4.46.0rc1", "4.46.0", "4.46.1", "4.47.0", "4.48.0"]


def test_releases_between_two_skip_pre_releases_and_keep_the_order_asked() -> None:
    assert between(RELEASES, "4.45.0", "4.47.0") == ["4.45.0", "4.45.1", "4.46.0", "4.46.1", "4.47.0"]
    assert "4.46.0rc1" in between(RELEASES, "4.45.0", "4.47.0", pre=True)


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("4.46.0", "4.46.0", "both"),
        ("4.46.0", "9.9.9", "not a release"),
        ("4.46.0", "4.46.1", "no release between"),
        ("4.46.0", "banana", "--bad .banana. is not a version"),
        ("4.47.0", "4.45.1", "wrong order"),
    ],
)
def test_bad_version_ranges_are_refused(good: str, bad: str, message: str) -> None:
    with pytest.raises(BisectError, match=message):
        between(RELEASES, good, bad)


def _judge(first_bad: str, untestable: set[str], seen: list[str]):  # type: ignore[no-untyped-def]
    order = [f"1.{i}" for i in range(20)]

    def judge(version: str) -> tuple[Judgement, str]:
        seen.append(version)
        if version in untestable:
            return "cannot", "did not install"
        return ("bad" if order.index(version) >= order.index(first_bad) else "good"), "fake"

    return order, judge


@pytest.mark.parametrize("first_bad", ["1.1", "1.7", "1.13", "1.19"])
def test_the_search_finds_the_first_bad_release(first_bad: str) -> None:
    seen: list[str] = []
    order, judge = _judge(first_bad, set(), seen)
    found = search(order, judge)
    assert found.first_bad == first_bad
    assert len(seen) <= 5  # log2(18) rounded up


def test_the_search_steps_around_a_release_that_cannot_be_tested() -> None:
    seen: list[str] = []
    order, judge = _judge("1.9", {"1.9", "1.10"}, seen)
    found = search(order, judge)
    # 1.9 is the first bad one but cannot be tested, nor can 1.10: the answer is the range it lies in.
    assert (found.first_bad, found.last_good, found.candidates) == (None, "1.8", ["1.9", "1.10", "1.11"])
    assert {"cannot"} <= {s.judgement for s in found.steps}
    seen.clear()
    order, judge = _judge("1.8", {"1.9"}, seen)
    assert search(order, judge).first_bad == "1.8"


def test_untestable_releases_leave_a_range_said_so() -> None:
    order, judge = _judge("1.5", {"1.4", "1.5", "1.6"}, [])
    found = search(order[3:8], judge)  # 1.3 good ... 1.7 bad, everything between untestable
    assert found.first_bad is None
    assert found.candidates == ["1.4", "1.5", "1.6", "1.7"]


def test_bisect_judges_only_the_metric_asked() -> None:
    from perfsuite.ab.points import changed
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.check import Check

    def failing(metric: str) -> Check:
        return Check(metric, False, "", "", "", "", f"{metric} moved")

    memory_only = CaseResult(case="c", checks=[failing("memory: buffers")])
    assert changed(memory_only, "memory") is True
    assert changed(memory_only, "loss") is False  # a memory change is not a loss change
    loss_only = CaseResult(case="c", checks=[failing("loss")])
    assert (changed(loss_only, "loss"), changed(loss_only, "memory")) == (True, False)
    assert changed(CaseResult(case="c", checks=[failing("attention")]), "loss") is True
    assert changed(CaseResult(case="c"), "time") is None  # no time verdict: undecided


@pytest.mark.parametrize(
    "case_id",
    [
        "tiny-bert-zero2_offload+grad_accum",
        "tiny-llama-grad_accum-trainer",
        "tiny-bert-fp16+grad_ckpt-trainer",
        "tiny-bert-ddp+grad_accum-ws2",
        "bert-base-uncased-vanilla",
    ],
)
def test_bisect_takes_any_case_perfsuite_run_names(case_id: str) -> None:
    """A composed case is where interaction bugs show, so it is what one bisects: every id
    `perfsuite run` gives a case, in the matrix or not, names that case back."""
    from perfsuite.ab.bisecting import case_spec

    assert case_spec(case_id, steps=None, threads=1).id == case_id


@pytest.mark.parametrize("case_id", ["tiny-bert-ddp-ws02", "tiny-bert-vanilla-ws1"])
def test_bisect_refuses_an_id_that_names_another(case_id: str) -> None:
    """A record carries its case's own id: an id that only names it (-ws1, -ws02) is refused."""
    from perfsuite.ab.bisecting import case_spec

    with pytest.raises(ValueError, match="names the case 'tiny-bert-"):
        case_spec(case_id, steps=None, threads=1)


@pytest.mark.nightly
def test_bisect_sets_up_deepspeed_from_0_14_to_0_18_on_the_cpu_torch() -> None:
    """Both ends of `perfsuite bisect deepspeed --good 0.14.4 --bad 0.18.8` start on this CPU torch, each
    side's workers importing its own DeepSpeed from its overlay (0.14.4's with nvidia-ml-py beside it)."""
    from perfsuite.ab.envs import make_env
    from perfsuite.ab.sides import Side

    for version in ("0.14.4", "0.18.8"):
        side = Side("good", make_env(f"deepspeed=={version}", name="good"))
        try:
            side.check_pins()
            assert side.versions()["deepspeed"] == version
            assert side.versions()["torch"] == installed_torch()
        finally:
            side.close()


def installed_torch() -> str:
    from importlib.metadata import version

    return version("torch")


def test_repo_that_git_cannot_read_is_refused_and_a_bare_clone_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repo is checked before any release is installed: a directory git cannot read is one line
    and exit 2; a bare clone passes that check (what follows, here the versions' order, decides)."""
    from perfsuite.cli import main

    args = ["bisect", "transformers", "--good", "5.0.0", "--bad", "4.57.6", "--case", "tiny-bert-vanilla"]
    assert main([*args, "--repo", str(tmp_path)]) == 2
    assert f"--repo: git cannot read {tmp_path}" in capsys.readouterr().err
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "clone.git")], check=True)
    assert main([*args, "--repo", str(tmp_path / "clone.git")]) == 2
    assert "versions in the wrong order" in capsys.readouterr().err


class _Side:
    """A side that starts no server; each one closed is listed in ``closed``."""

    closed: list[str] = []

    def __init__(self, name: str, env: object) -> None:
        self.name = name
        self.env = env
        self.watch: object = None

    def check_pins(self) -> None:
        pass

    def versions(self) -> dict[str, str]:
        return {"transformers": self.name}

    def close(self) -> None:
        _Side.closed.append(self.name)


def _paired(verdict: str, pairs: int) -> Any:
    from perfsuite.core.paired import Paired

    return Paired(ratio=1.0, low=0.0, high=float("inf"), pairs=pairs, confidence=0.95, verdict=verdict)  # type: ignore[arg-type]


def _bisection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, compare: Callable[[str], Any], said: list[str]) -> Any:
    from perfsuite.ab import bisecting
    from perfsuite.ab.options import BisectOptions
    from perfsuite.core.spec import tier_spec

    monkeypatch.setattr(bisecting, "Side", lambda name, env: _Side(name, env))
    monkeypatch.setattr(_Side, "closed", [])
    monkeypatch.setattr(bisecting, "preload_for", lambda specs: None)
    monkeypatch.setattr(bisecting, "compare_case", lambda spec, sides, *a, **k: compare(sides[1].name))
    options = BisectOptions(package="transformers", device_type="cpu", json=tmp_path / "bisect.json")
    return bisecting.Bisection(
        options, tier_spec("tiny-bert", "vanilla"), RELEASES, said.append, env_for=lambda point, name: cast(Any, None)
    )


def test_ends_whose_time_stays_undecided_are_not_called_alike(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Undecided at the cap is not "no difference": the search has nothing to go on, exit 3."""
    from perfsuite.ab.rounds import CaseResult

    said: list[str] = []
    undecided = CaseResult(case="tiny-bert-vanilla", time=_paired("undecided", 3), log_ratios=[0.1, -0.1, 0.0])
    assert _bisection(monkeypatch, tmp_path, lambda point: undecided, said).run() == 3
    assert "do not differ" not in "\n".join(said)
    assert said[-1].startswith("perfsuite: cannot tell whether 4.44.0 and 4.48.0 differ in time"), said
    assert json.loads((tmp_path / "bisect.json").read_text())["ends"]["verdict"] == "undecided"


def test_a_bad_end_that_cannot_be_set_up_cannot_be_tested_and_its_file_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A bad end whose side did not install, import or answer (not its own run failing) is *cannot
    test*, exit 3, and the ``--json`` file is written, its ends saying so."""
    from perfsuite.ab.rounds import CaseResult

    said: list[str] = []
    gone = CaseResult(case="tiny-bert-vanilla", error="4.48.0 (transformers==4.48.0): does not import")
    assert _bisection(monkeypatch, tmp_path, lambda point: gone, said).run() == 3
    assert said[-1] == "perfsuite: cannot test the bad end 4.48.0: 4.48.0 (transformers==4.48.0): does not import"
    ends = json.loads((tmp_path / "bisect.json").read_text())["ends"]
    assert (ends["verdict"], ends["error"]) == ("cannot test", "4.48.0 (transformers==4.48.0): does not import")


def test_a_bad_end_whose_own_run_fails_is_searched_for_the_first_release_whose_run_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The bad end's run fails where the good end's runs: the search is for the first release whose run
    fails, one pair each; a release that completes is good whatever its time, one that does not
    install is stepped around; the answer names the error, nothing more is explained."""
    import dataclasses

    from perfsuite.ab.rounds import CaseResult

    def compare(point: str) -> CaseResult:
        if point == "4.46.0rc1":
            return CaseResult(case="tiny-bert-vanilla", error="4.46.0rc1 (transformers==4.46.0rc1): does not import")
        if RELEASES.index(point) >= RELEASES.index("4.46.1"):
            return CaseResult(case="tiny-bert-vanilla", error=f"{point}: RuntimeError: boom", candidate_failed=True)
        return CaseResult(case="tiny-bert-vanilla", time=_paired("slower", 6))  # completes: good all the same

    from perfsuite.ab import bisecting

    said: list[str] = []
    caps: list[int] = []
    bisection = _bisection(monkeypatch, tmp_path, compare, said)

    def compare_case(spec: Any, sides: Any, schedule: Any, *a: Any, **k: Any) -> CaseResult:
        caps.append(schedule.cap)
        return compare(sides[1].name)

    monkeypatch.setattr(bisecting, "compare_case", compare_case)
    bisection.options = dataclasses.replace(bisection.options, explain=True)
    assert bisection.run() == 0
    assert caps[0] > 1  # the ends, on time as asked
    assert set(caps[1:]) == {1}  # then each point one pair
    assert said[1].startswith("perfsuite: the bad end's run fails where the good end's runs: searching for the")
    assert said[-1] == (
        "perfsuite: the first bad transformers is 4.46.1 (last good 4.46.0) for tiny-bert-vanilla: its run "
        "fails (4.46.1: RuntimeError: boom)"
    )
    assert any(line.startswith("  4.46.0: good: its run completes") for line in said), said
    assert any(line.startswith("  4.46.0rc1: cannot test: ") for line in said), said
    written = json.loads((tmp_path / "bisect.json").read_text())
    assert (written["metric"], written["metric_asked"], written["first_bad"]) == ("failure", "time", "4.46.1")
    assert written["explanation"] is None
    assert written["ends"]["verdict"] == "regressed"  # the bad end's own run failed where the good end's ran


def test_a_failure_search_names_the_bad_ends_error_where_the_first_bad_fails_otherwise_and_a_follow_up_keeps_its_metric(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first failing point may fail otherwise than the bad end (a breakage fixed and another made):
    both errors are said. A commit search that goes on from a release search keeps that one's metric
    (``may_switch=False``): its failing end is *cannot test*, as before. A failing good end is named."""
    import dataclasses

    from perfsuite.ab.rounds import CaseResult

    def compare(point: str) -> CaseResult:
        if RELEASES.index(point) >= RELEASES.index("4.46.1"):
            error = "KeyError: 'x'" if point == "4.46.1" else "RuntimeError: boom"
            return CaseResult(case="tiny-bert-vanilla", error=f"{point}: {error}", candidate_failed=True)
        return CaseResult(case="tiny-bert-vanilla")

    said: list[str] = []
    assert _bisection(monkeypatch, tmp_path, compare, said).run() == 0
    assert said[-1].endswith(
        "its run fails (4.46.1: KeyError: 'x'); the bad end's otherwise (4.48.0: RuntimeError: boom)"
    ), said
    said.clear()
    kept = _bisection(monkeypatch, tmp_path, compare, said)
    kept.may_switch = False
    assert kept.run() == 3
    assert said[-1] == "perfsuite: cannot test the bad end 4.48.0: 4.48.0: RuntimeError: boom"
    # A search that is for the first failing run from the start (a follow-up of one that turned to it).
    said.clear()
    follow = _bisection(monkeypatch, tmp_path, compare, said)
    follow.options, follow.may_switch = dataclasses.replace(follow.options, metric="failure"), False
    assert follow.run() == 0
    assert "the first bad transformers is 4.46.1" in said[-1]
    said.clear()
    broken = CaseResult(case="tiny-bert-vanilla", error="good: RuntimeError: boom")
    assert _bisection(monkeypatch, tmp_path, lambda point: broken, said).run() == 3
    assert said[-1] == "perfsuite: cannot test the good end 4.44.0: good: RuntimeError: boom"
    assert not any("(bad end)" in line for line in said)  # the good end's failure is not the bad end's evidence


def test_ends_alike_where_the_package_never_ran_say_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Ends alike in a case whose watched build and steps never called the package say nothing of its
    releases: said beside "nothing to bisect", as ab says it of a bumped package no case ran."""
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.record import StepRan

    def ran(version: str, calls: int) -> StepRan:
        package = {"name": "transformers", "version": version, "python_calls": calls, "has_code": True}
        return StepRan.from_json({"complete": True, "first_step": True, "packages": [package]}, "ran")

    def alike(calls: int) -> Callable[[str], CaseResult]:
        return lambda point: CaseResult(case="tiny-bert-vanilla", ran=(ran("4.44.0", calls), ran(point, calls)))

    said: list[str] = []
    bisection = _bisection(monkeypatch, tmp_path, alike(0), said)
    bisection.options = dataclasses.replace(bisection.options, metric="loss")
    assert bisection.run() == 0
    assert said[-1].endswith(
        "nothing to bisect; transformers 4.44.0 → 4.48.0: seen called in no case's step (of 1 watched)"
    ), said
    said.clear()
    bisection = _bisection(monkeypatch, tmp_path, alike(12), said)
    bisection.options = dataclasses.replace(bisection.options, metric="loss")
    assert bisection.run() == 0
    assert said[-1].endswith("on tiny-bert-vanilla; nothing to bisect"), said


def test_an_interrupted_bisection_says_and_writes_what_it_judged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from perfsuite.ab.bisecting import BisectInterrupted
    from perfsuite.ab.rounds import CaseResult

    said: list[str] = []
    slower = CaseResult(case="tiny-bert-vanilla", time=_paired("slower", 9), log_ratios=[0.1] * 9)
    cut = CaseResult(case="tiny-bert-vanilla", log_ratios=[0.1], interrupted=True)  # Ctrl-C in its second pair
    results = iter([slower, slower, cut])  # the bad end, then the middle (4.46.0rc1), then 4.45.0 cut short
    with pytest.raises(BisectInterrupted):
        _bisection(monkeypatch, tmp_path, lambda point: next(results), said).run()
    assert said[-1] == (
        "perfsuite bisect: interrupted by SIGINT while comparing 4.45.0, no answer; judged between the ends: "
        f"4.46.0rc1 bad (written to {tmp_path / 'bisect.json'})"
    ), said
    written = json.loads((tmp_path / "bisect.json").read_text())
    assert written["interrupted"] == "SIGINT"
    assert written["ends"]["time"]["verdict"] == "slower"
    assert [step["version"] for step in written["steps"]] == ["4.46.0rc1"]
    assert written["cut_short"]["point"] == "4.45.0"
    assert written["cut_short"]["interrupted"] is True


def test_a_package_the_index_does_not_serve_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's warnings about index locations it skipped are not the reason: its ERROR line is."""
    from perfsuite.ab import bisect

    stderr = (
        "WARNING: Location 'file:///srv/simple/transfomers/' is ignored: it is neither a file nor a directory.\n"
        "ERROR: No matching distribution found for transfomers\n"
    )
    done = subprocess.CompletedProcess([], 1, stdout="", stderr=stderr)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: done)
    with pytest.raises(BisectError) as refused:
        bisect.index_versions("transfomers")
    assert str(refused.value) == (
        "transfomers: the package index lists no releases (No matching distribution found for transfomers)"
    )


def test_a_steps_evidence_is_the_metric_searched_in_a_few_words() -> None:
    """A loss bisection's step names the loss's change, not the memory's, and not a gate's advice."""
    from perfsuite.ab.points import evidence
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.check import Check

    buffers = Check("memory: buffers", False, "0.25 MiB", "0.00 MiB", "-100.0%", "±5%", "buffers fell", rel=-1.0)
    weights = Check(
        "loss", False, "weights 1f2e", "weights 9a8b", "not compared", "same initial weights",
        "loss not compared: ... then record this stack's curve with `perfsuite baselines refresh`", compared=False,
    )  # fmt: skip
    result = CaseResult(case="tiny-gpt2-vanilla", checks=[buffers, weights])
    result.breakdown_a, result.breakdown_b = {"buffers": 2**18}, {"buffers": 0}
    assert evidence(result, "loss") == "loss from other initial weights (weights 1f2e → weights 9a8b)"
    assert evidence(result, "memory") == "memory: buffers -100.0%"
    assert evidence(CaseResult(case="tiny-gpt2-vanilla"), "loss") == "loss: as the good end"
    # From other initial weights, within the good end's seeds: said so, not "as the good end".
    from perfsuite.core.loss import check_against_seeds

    seeds = [[2.0, 1.8, 1.6, 1.5], [2.1, 1.9, 1.7, 1.5], [1.9, 1.8, 1.5, 1.4]]
    held = check_against_seeds("c", seeds, [2.0, 1.85, 1.6, 1.45], "weights 1f2e → weights 5c6d", 0.99)
    assert held.ok
    said = evidence(CaseResult(case="tiny-gpt2-vanilla", checks=[held]), "loss")
    assert said.startswith("loss from other initial weights, as at another seed (mean loss steps 0-1 1.925"), said
    assert "the good end's 3 seeds' 99% intervals" in said, said
    assert "base" not in said, said


def test_a_signal_heard_after_a_comparisons_last_pair_still_stops_the_search(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The comparison ended normally (the signal came between its last pair and its look): the
    search does not go on as if nothing had been heard."""
    from perfsuite.ab.bisecting import BisectInterrupted
    from perfsuite.ab.rounds import CaseResult

    said: list[str] = []
    heard: list[str] = []
    slower = CaseResult(case="tiny-bert-vanilla", time=_paired("slower", 9), log_ratios=[0.1] * 9)

    def compare(point: str) -> CaseResult:
        if point != "4.48.0":  # the bad end compared, then SIGTERM during the first step's last look
            heard.append("SIGTERM")
        return slower

    bisection = _bisection(monkeypatch, tmp_path, compare, said)
    bisection.heard = lambda: heard[0] if heard else None
    with pytest.raises(BisectInterrupted):
        bisection.run()
    assert said[-1].startswith("perfsuite bisect: interrupted by SIGTERM while comparing 4.46.0rc1, no answer"), said
    assert json.loads((tmp_path / "bisect.json").read_text())["interrupted"] == "SIGTERM"


def test_a_failure_without_pips_error_line_gives_its_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfsuite.ab import bisect

    done = subprocess.CompletedProcess([], 1, stdout="", stderr="/venv/bin/python: No module named pip\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: done)
    with pytest.raises(BisectError, match=r"lists no releases \(/venv/bin/python: No module named pip\)$"):
        bisect.index_versions("transformers")


@pytest.mark.parametrize("explain", [True, False])
def test_the_first_bad_release_is_explained_against_the_last_good(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, explain: bool
) -> None:
    """A memory bisection that finds 4.46.0 says why: 4.46.0 against 4.46.0rc1 (the last good, its own
    side), one pair of them for the breakdowns, then the explanation runs, profiled too where a category
    that lives within a step moved; `--no-explain` runs none."""
    import dataclasses

    from perfsuite.ab import explain as ab_explain
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.check import Check
    from perfsuite.core.explain.explanation import Explanation
    from perfsuite.core.explain.tensors import CategoryCause, MemoryCause

    grew = Check("memory: buffers", False, "0.00 MiB", "50.00 MiB", "+inf", "±5%", "buffers grew")
    within = Check("memory: activations", False, "1.00 MiB", "2.00 MiB", "+100%", "±5%", "activations grew")
    bad = ("4.46.0", "4.46.1", "4.47.0", "4.48.0")
    compared: list[str] = []

    def compare(point: str) -> CaseResult:
        compared.append(point)
        return CaseResult(case="tiny-bert-vanilla", checks=[grew, within] if point in bad else [])

    explained: list[tuple[str, str, tuple[str, ...]]] = []
    cause = MemoryCause((CategoryCause("buffers", 0, 50 * 2**20),))

    def explain_case(sides: Any, spec: Any, result: Any, what: Any, **kw: Any) -> Explanation:
        explained.append((sides[0].name, sides[1].name, tuple(what)))
        return Explanation(result.case, tuple(what), memory=cause)

    monkeypatch.setattr(ab_explain, "explain_case", explain_case)
    said: list[str] = []
    bisection = _bisection(monkeypatch, tmp_path, compare, said)
    bisection.options = dataclasses.replace(bisection.options, metric="memory", explain=explain)
    assert bisection.run() == 0
    answer = said.index(
        "perfsuite: the first bad transformers is 4.46.0 (last good 4.46.0rc1) for tiny-bert-vanilla's memory"
    )
    written = json.loads((tmp_path / "bisect.json").read_text())
    if not explain:
        assert (explained, written["explanation"], said[answer:]) == ([], None, said[-1:])
        return
    assert explained == [("4.46.0rc1", "4.46.0", ("time", "memory"))]  # activations: the step's ops say them
    assert compared[-1] == "4.46.0"  # the one pair against the last good
    # each of the two closed after its search's comparison and again after the explanation
    assert (_Side.closed.count("4.46.0rc1"), _Side.closed.count("4.46.0"), _Side.closed[-1]) == (2, 2, "good")
    assert said[answer + 1 :] == [
        "perfsuite: why: A 4.46.0rc1 (last good) → B 4.46.0 (first bad), instrumented runs, A B A B",
        "  memory: buffers +50.00 MiB: no tensor differs by name, dtype or shape",
    ]
    assert Explanation.from_json(written["explanation"]).memory == MemoryCause(
        (CategoryCause("buffers", 0, 50 * 2**20),)
    )


@pytest.mark.parametrize("fails", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_explanation_that_fails_or_is_interrupted_leaves_the_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails: BaseException
) -> None:
    """The first bad release right after the good end: the search's own pair is the explanation's
    (no pair more); an explanation that raises says why under the answer, and an interrupt there
    stops the command with the answer said and written."""
    import dataclasses

    from perfsuite.ab import explain as ab_explain
    from perfsuite.ab.bisecting import BisectInterrupted
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.check import Check

    grew = Check("loss", False, "", "", "", "", "the loss parted")
    compared: list[str] = []

    def compare(point: str) -> CaseResult:
        compared.append(point)
        return CaseResult(case="tiny-bert-vanilla", checks=[] if point == "4.44.0" else [grew])

    def explain_case(sides: Any, spec: Any, result: Any, what: Any, **kw: Any) -> Any:
        assert (sides[0].name, sides[1].name, tuple(what), result.checks) == ("good", "4.45.0", ("loss",), [grew])
        raise fails

    monkeypatch.setattr(ab_explain, "explain_case", explain_case)
    said: list[str] = []
    bisection = _bisection(monkeypatch, tmp_path, compare, said)
    bisection.options = dataclasses.replace(bisection.options, metric="loss")
    if isinstance(fails, KeyboardInterrupt):
        with pytest.raises(BisectInterrupted):
            bisection.run()
        assert said[-1].startswith("perfsuite bisect: interrupted by SIGINT after the search"), said
    else:
        assert bisection.run() == 0
        assert said[-1] == "  could not explain: RuntimeError: boom", said
    assert compared.count("4.45.0") == 1  # the search's pair, not one more
    written = json.loads((tmp_path / "bisect.json").read_text())
    assert written["first_bad"] == "4.45.0"
    if isinstance(fails, RuntimeError):
        assert written["explanation"]["errors"] == ["RuntimeError: boom"]


def _memory_search(
    monkeypatch: pytest.MonkeyPatch,
    explained: list[tuple[str, str]],
    *,
    bad_from: str = "4.46.0",
    untestable: tuple[str, ...] = ("4.46.0", "4.46.1"),
    interrupted: bool = False,
) -> tuple[Callable[[str], Any], list[str]]:
    """A memory search over RELEASES whose buffers grow from ``bad_from`` on, ``untestable`` not
    installing: its comparison (by the candidate side's name) and the points it compared. Each
    explanation asked for is listed (A, B) and says the buffers grew (or is interrupted)."""
    from perfsuite.ab import explain as ab_explain
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.check import Check
    from perfsuite.core.explain.explanation import Explanation
    from perfsuite.core.explain.tensors import CategoryCause, MemoryCause

    grew = Check("memory: buffers", False, "0.00 MiB", "50.00 MiB", "+inf", "±5%", "buffers grew")
    bad = RELEASES[RELEASES.index(bad_from) :]
    compared: list[str] = []

    def compare(point: str) -> CaseResult:
        compared.append(point)
        if point in untestable:
            return CaseResult(case="tiny-bert-vanilla", error=f"transformers=={point} did not install")
        return CaseResult(case="tiny-bert-vanilla", checks=[grew] if point in bad else [])

    def explain_case(sides: Any, spec: Any, result: Any, what: Any, **kw: Any) -> Explanation:
        explained.append((sides[0].name, sides[1].name))
        if interrupted:
            raise KeyboardInterrupt
        return Explanation(result.case, tuple(what), memory=MemoryCause((CategoryCause("buffers", 0, 50 * 2**20),)))

    monkeypatch.setattr(ab_explain, "explain_case", explain_case)
    return compare, compared


GREW = "  memory: buffers +50.00 MiB: no tensor differs by name, dtype or shape"


def test_a_range_left_by_untestable_releases_is_explained_by_its_judged_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No single first bad release: the last good runs against the first judged bad, and the line says
    that the change is in it or in the untested releases before it; the answer stays a range, exit 1."""
    import dataclasses

    explained: list[tuple[str, str]] = []
    said: list[str] = []
    bisection = _bisection(monkeypatch, tmp_path, _memory_search(monkeypatch, explained)[0], said)
    bisection.options = dataclasses.replace(bisection.options, metric="memory")
    assert bisection.run() == 1
    assert explained == [("4.46.0rc1", "4.47.0")]
    answer = said.index(
        "perfsuite: the first bad transformers is one of 4.46.0, 4.46.1, 4.47.0: 4.47.0 is bad, 4.46.0, 4.46.1 "
        "could not be judged (not testable, or undecided in time)"
    )
    assert said[answer + 1 :] == [
        "perfsuite: why: A 4.46.0rc1 (last good) → B 4.47.0 (first judged bad; the change is in it or in the "
        "untested 4.46.0, 4.46.1), instrumented runs, A B A B",
        GREW,
    ]
    written = json.loads((tmp_path / "bisect.json").read_text())
    assert (written["first_bad"], written["candidates"]) == (None, ["4.46.0", "4.46.1", "4.47.0"])
    assert written["explanation"]["memory"] is not None


def _bisect_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, compare: Callable[[str], Any]) -> list[str]:
    """``perfsuite bisect transformers ... --repo`` over RELEASES with sides that start nothing: its argv."""
    from perfsuite.ab import bisect, bisecting

    monkeypatch.setattr(bisecting, "Side", lambda name, env: _Side(name, env))
    monkeypatch.setattr(_Side, "closed", [])
    monkeypatch.setattr(bisecting, "preload_for", lambda specs: None)
    monkeypatch.setattr(bisecting, "make_env", lambda *a, **k: None)
    monkeypatch.setattr(bisecting, "compare_case", lambda spec, sides, *a, **k: compare(sides[1].name))
    monkeypatch.setattr(bisect, "index_versions", lambda package: RELEASES)
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "clone.git")], check=True)
    args = ["bisect", "transformers", "--good", "4.44.0", "--bad", "4.48.0", "--case", "tiny-bert-vanilla"]
    return args + ["--metric", "memory", "--repo", str(tmp_path / "clone.git"), "--json", str(tmp_path / "bisect.json")]


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_range_of_releases_whose_commits_cannot_be_searched_is_explained_instead(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], interrupted: bool
) -> None:
    """--repo: the commits between the last good release and the first judged bad are searched (a range
    of untestable releases too: their commits may build); where the clone lacks the releases' tags,
    that is said in one line and the releases' answer stands, explained and written with the commits'
    error, exit 1 (a range). Ctrl-C there stops the command as after any search: exit 130."""
    from perfsuite.cli import main

    explained: list[tuple[str, str]] = []
    args = _bisect_repo(monkeypatch, tmp_path, _memory_search(monkeypatch, explained, interrupted=interrupted)[0])
    assert main(args) == (130 if interrupted else 1)
    said = capsys.readouterr().err
    clone = tmp_path / "clone.git"
    assert f"the commits between 4.45.1 and 4.47.0 were not bisected: --repo: {clone} has no tag" in said
    assert explained == [("4.45.1", "4.47.0")]  # pre-releases are not searched without --pre
    written = json.loads((tmp_path / "bisect.json").read_text())
    assert written["candidates"] == ["4.46.0", "4.46.1", "4.47.0"]
    if interrupted:
        assert said.rstrip().endswith(f"interrupted by SIGINT after the search (written to {tmp_path / 'bisect.json'})")
        assert (written["interrupted"], written["explanation"]) == ("SIGINT", None)
        return
    assert said.rstrip().endswith(GREW), said
    assert written["explanation"]["memory"] is not None
    assert written["commits"]["error"].startswith(f"--repo: {clone} has no tag for transformers 4.45.1")


def test_a_release_next_to_the_good_end_is_explained_on_sides_of_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first bad release right after the good end, its commits not searchable: the good end's side
    has closed with the search, so the explanation opens its own, and compares one pair of them for
    the breakdowns (not the search's pair, made against the closed side); exit 0, a release found."""
    from perfsuite.cli import main

    explained: list[tuple[str, str]] = []
    compare, compared = _memory_search(monkeypatch, explained, bad_from="4.45.0", untestable=())
    assert main(_bisect_repo(monkeypatch, tmp_path, compare)) == 0
    said = capsys.readouterr().err
    assert "the commits between 4.44.0 and 4.45.0 were not bisected" in said
    assert "perfsuite: why: A 4.44.0 (last good) → B 4.45.0 (first bad), instrumented runs, A B A B" in said
    assert explained == [("4.44.0", "4.45.0")]
    assert compared.count("4.45.0") == 2  # the search's, then the explanation's own pair
    assert _Side.closed[-2:] == ["4.44.0", "4.45.0"]  # the explanation's two sides, each closed
    assert json.loads((tmp_path / "bisect.json").read_text())["first_bad"] == "4.45.0"


@pytest.mark.parametrize("explain", [True, False])
def test_commits_whose_search_gives_no_answer_leave_the_releases_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], explain: bool
) -> None:
    """The commits' search ran and gave no answer (an end that does not build: its exit 3): the releases'
    answer stands, explained unless --no-explain, its exit code the command's, and --json is the
    releases' answer with the commits' attempt beside it."""
    from perfsuite.ab import builds, envs
    from perfsuite.ab.commits import Commit
    from perfsuite.cli import bisect as cli_bisect
    from perfsuite.cli import main

    def commits(options: Any, spec: Any, say: Any, heard: Any, *found: Any, may_switch: bool) -> tuple[int, None]:
        assert (options.metric, may_switch) == ("memory", False)  # the releases' metric, kept
        say("perfsuite: cannot test the good end aaaa: it does not build")
        (tmp_path / "bisect.json").write_text(json.dumps({"kind": "perfsuite-bisect", "what": "transformers commit"}))
        return 3, None

    monkeypatch.setattr(builds, "release_tag", lambda repo, package, v, what: Commit(v * 2, v, f"Release {v}"))
    monkeypatch.setattr(envs, "make_env", lambda *a, **k: None)
    monkeypatch.setattr(cli_bisect, "_clone_commits", lambda *a: ({}, None, "transformers commit", None))
    monkeypatch.setattr(cli_bisect, "_commits", commits)
    explained: list[tuple[str, str]] = []
    args = _bisect_repo(monkeypatch, tmp_path, _memory_search(monkeypatch, explained, untestable=())[0])
    assert main(args + ([] if explain else ["--no-explain"])) == 0
    said = capsys.readouterr().err
    assert (
        "perfsuite: the commits between 4.45.1 and 4.46.0 were not bisected: their search gave no answer (exit 3); "
        "the releases' answer stands"
    ) in said
    assert explained == ([("4.45.1", "4.46.0")] if explain else [])
    written = json.loads((tmp_path / "bisect.json").read_text())
    assert (written["first_bad"], written["what"]) == ("4.46.0", "transformers")
    assert written["commits"] == {"kind": "perfsuite-bisect", "what": "transformers commit"}
    assert (written["explanation"] is not None) == explain


def test_a_time_bisection_judges_each_point_by_the_end_it_is_nearer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The ends twice as slow apart: a point is good within half that change of the good end (×1.414,
    not --floor's 3%, which a noisy step takes tens of pairs to rule out), bad beyond it. A look that
    decides nothing is said as the comparison goes on; a point left undecided says so; a first bad
    point whose change is apart from the ends' says that the time changed again after it."""
    from perfsuite.ab import bisecting
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.paired import Paired

    def result(ratio: float, verdict: str, pairs: int) -> CaseResult:
        time = Paired(ratio=ratio, low=ratio * 0.95, high=ratio * 1.05, pairs=pairs, confidence=0.95, verdict=verdict)  # type: ignore[arg-type]
        return CaseResult(case="tiny-bert-vanilla", time=time, log_ratios=[0.0] * pairs)

    floors: list[float] = []

    def compare(spec: Any, sides: Any, schedule: Any, *a: Any, progress: Any = None, **k: Any) -> CaseResult:
        floors.append(schedule.floor)
        point = sides[1].name
        if point == "4.46.0rc1":  # a point its looks leave undecided
            progress(result(1.3, "undecided", 21), False)
            return result(1.3, "undecided", 60)
        if RELEASES.index(point) < 6:
            return result(1.0, "same", 7)
        return result(1.5 if point == "4.47.0" else 2.0, "slower", 9)  # the bad end slower again

    said: list[str] = []
    bisection = _bisection(monkeypatch, tmp_path, lambda point: None, said)
    monkeypatch.setattr(bisecting, "compare_case", compare)
    bisection.explains = False  # the answer only
    assert bisection.run() == 0
    assert floors[0] == 0.03  # the ends, at --floor
    assert floors[1:] == [pytest.approx(2**0.5 - 1)] * (len(floors) - 1)
    assert (
        "perfsuite: each point is judged by the end it is nearer: good where its B/A against the good end lies "
        "within [0.707, 1.414] (half the ends' ×2.000, in ratio; --floor 3.0% at least), bad beyond it"
    ) in said
    assert "    4.46.0rc1: time B/A 1.300 [1.235, 1.365] over 21 pairs: undecided, more pairs to come" in said
    assert "  4.46.0rc1: undecided: time B/A 1.300 [1.235, 1.365] over 60 pairs: undecided" in said
    assert said[-2].startswith("perfsuite: the first bad transformers is 4.47.0 (last good 4.46.1)"), said
    # The first bad release is only part of the ends' change: said, with how to find the rest.
    assert said[-1] == (
        "perfsuite: 4.47.0 alone is B/A 1.500 [1.425, 1.575] against the good end, the bad end 2.000 [1.900, "
        "2.100]: the time changed again between them (×1.333); a bisection from it finds that"
    )


def test_a_missing_commit_says_to_fetch_more_history_only_in_a_shallow_clone(tmp_path: Path) -> None:
    from tools import git

    from perfsuite.ab.commits import GitError, commit

    full = tmp_path / "full"
    full.mkdir()
    git(full, "init", "-q")
    for n in range(2):
        (full / "f.txt").write_text(str(n))
        git(full, "add", "f.txt")
        git(full, "commit", "-q", "-m", f"c{n}")
    with pytest.raises(GitError) as missing:
        commit(full, "nope", "--base-ref")
    assert str(missing.value) == "--base-ref: 'nope' is not a commit of this repository"
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", full.as_uri(), str(shallow))
    with pytest.raises(GitError, match=r"'HEAD~1' is not a commit of this repository \(this clone is shallow"):
        commit(shallow, "HEAD~1", "--base-ref")


@pytest.mark.parametrize(
    ("argv", "seeds"),
    [
        (["--own"], 5),
        (["--own", "--loss-seeds", "0"], 0),
        (["transformers"], 0),
        (["transformers", "--loss-seeds", "3"], 3),
    ],
)
def test_a_points_loss_from_other_weights_is_judged_as_ab_judges_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], seeds: int
) -> None:
    """A team's commit that redraws the initial weights (a layer widened, a seed changed) is judged by
    how it converges against the good end's other seeds, as ``ab --own`` judges it, not as a change of
    the curve; a release search takes any other curve as the change, unless ``--loss-seeds`` says."""
    from perfsuite.ab import bisect, bisecting
    from perfsuite.cli import bisect as cli_bisect
    from perfsuite.cli import build_parser
    from perfsuite.core.spec import tier_spec

    taken: list[int] = []
    real = bisecting.Bisection

    def stop(args: Any, options: Any) -> Any:
        taken.append(options.loss_seeds)
        raise ValueError("stopped here")

    class Taken:
        def __init__(self, options: Any, *a: Any, **k: Any) -> None:
            taken.append(options.loss_seeds)

        def run(self) -> int:
            return 0

        found = None

    monkeypatch.setattr(cli_bisect, "_project_commits", stop)
    monkeypatch.setattr(bisect, "index_versions", lambda package: RELEASES)
    monkeypatch.setattr(bisecting, "Bisection", Taken)
    ends = ["--good", RELEASES[0], "--bad", RELEASES[-1]]
    args = build_parser().parse_args(["bisect", *argv, *ends, "--case", "tiny-bert-vanilla", "--metric", "loss"])
    cli_bisect.run(args)
    assert taken == [seeds]

    # ... and the bisection hands them to each comparison.
    asked: list[int] = []

    def compare(spec: Any, sides: Any, *a: Any, loss_seeds: int = -1, **k: Any) -> Any:
        asked.append(loss_seeds)
        return CaseResult(case="tiny-bert-vanilla")

    from perfsuite.ab.options import BisectOptions
    from perfsuite.ab.rounds import CaseResult

    monkeypatch.setattr(bisecting, "Side", lambda name, env: _Side(name, env))
    monkeypatch.setattr(_Side, "closed", [])
    monkeypatch.setattr(bisecting, "preload_for", lambda specs: None)
    monkeypatch.setattr(bisecting, "compare_case", compare)
    options = BisectOptions(package="transformers", metric="loss", device_type="cpu", loss_seeds=seeds)
    spec = tier_spec("tiny-bert", "vanilla")
    real(options, spec, RELEASES, lambda line: None, env_for=lambda point, name: cast(Any, None)).run()
    assert asked == [seeds]


def test_own_ends_alike_say_the_code_that_differs_was_never_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bisect --own``: the ends' comparison watches, on each side in its own copy, the functions the
    project's code changes between them; where the ends are alike and the case never called those, the
    answer says so: their sameness says nothing of that code."""
    from types import SimpleNamespace

    from perfsuite.ab import bisecting
    from perfsuite.ab.options import BisectOptions
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.changed_code import ChangedCode, ChangedFunction
    from perfsuite.core.record import StepRan
    from perfsuite.core.spec import tier_spec

    changed = ChangedCode(("acme/train.py",), (ChangedFunction("acme/train.py", "Engine.step", (10, 12)),))
    watched: list[Any] = []

    def compare(spec: Any, sides: Any, *a: Any, **k: Any) -> CaseResult:
        watched.append([(s.watch.root, s.watch.functions) for s in sides])
        steps = [  # each side watched the function at its own line, and saw it called by no step
            {"complete": True, "files": {"acme/train.py": 0}, "functions": {f"acme/train.py:{line}": 0}}
            for line in (10, 12)
        ]
        return CaseResult(case=spec.id, ran=(StepRan.from_json(steps[0], "a"), StepRan.from_json(steps[1], "b")))

    monkeypatch.setattr(bisecting, "Side", lambda name, env: _Side(name, env))
    monkeypatch.setattr(_Side, "closed", [])
    monkeypatch.setattr(bisecting, "preload_for", lambda specs: None)
    monkeypatch.setattr(bisecting, "compare_case", compare)
    said: list[str] = []
    bisection = bisecting.Bisection(
        BisectOptions(package=None, metric="memory", device_type="cpu"),
        tier_spec("tiny-bert", "vanilla"),
        ["aaa1111", "bbb2222", "ccc3333"],
        said.append,
        env_for=lambda point, name: cast(Any, SimpleNamespace(cwd=f"/copies/{point}")),
        changed_code=changed,
    )
    assert bisection.run() == 0
    assert watched == [[("/copies/aaa1111", ("acme/train.py:10",)), ("/copies/ccc3333", ("acme/train.py:12",))]]
    assert said[-1] == (
        "perfsuite: aaa1111 and ccc3333 do not differ in memory on tiny-bert-vanilla; nothing to bisect; of the "
        "code that differs, not seen in any case's step: acme/train.py:Engine.step"
    )


@pytest.mark.parametrize(
    ("first_bad", "at", "said"),
    [
        ("4.48.0", (1.5, 1.425, 1.575), False),  # the first bad is the bad end: nothing between them
        ("4.47.0", (1.5, 0.0, float("inf")), False),  # too few pairs to bound it: never apart
        ("4.47.0", (1.9, 1.8, 2.0), False),  # overlapping the bad end's
        ("4.47.0", (1.5, 1.425, 1.575), True),
    ],
)
def test_the_time_changed_again_only_where_the_intervals_are_apart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, first_bad: str, at: tuple[float, float, float], said: bool
) -> None:
    from perfsuite.ab.rounds import CaseResult
    from perfsuite.core.paired import Paired

    def result(ratio: float, low: float, high: float) -> CaseResult:
        time = Paired(ratio=ratio, low=low, high=high, pairs=9, confidence=0.95, verdict="slower")
        return CaseResult(case="tiny-bert-vanilla", time=time)

    lines: list[str] = []
    bisection = _bisection(monkeypatch, tmp_path, lambda point: None, lines)
    bisection.compared[first_bad] = result(*at)
    bisection._changed_again(first_bad, result(2.0, 1.9, 2.1))
    assert bool(lines) == said, lines


def test_a_file_at_a_commit_that_is_not_text_is_named_with_its_commit(tmp_path: Path) -> None:
    """``--pins`` and the bisects read pin files with ``git show``: bytes that are not UTF-8 are one
    line naming the commit and the file, not a decoder's error naming neither."""
    from perfsuite.ab.commits import GitError, git

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "requirements.txt").write_bytes(b"torch==2.13.0\n# \xff\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "a"], check=True
    )
    with pytest.raises(GitError, match=r"--pins: `git show HEAD:requirements.txt` is not UTF-8 text"):
        git(tmp_path, "show", "HEAD:requirements.txt", what="--pins")
