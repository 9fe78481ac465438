"""``perfsuite overhead``: rounds alternate ABBA between the case and its bare loop, a round's
ratio pairs their steps, and a failed side ends that case's rounds. The real rounds (a case
against its bare loop, per family) run nightly: they take minutes."""

from __future__ import annotations

from typing import Any

import pytest

from perfsuite.cli.overhead_rounds import DEFAULT_SELECTION, measure
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec, tier_spec
from perfsuite.worker.bare import FAMILIES, TRAINER_FAMILY, family, run_interleaved


def _as_record(answer: dict[str, Any]) -> CaseRecord:
    """A worker's answer for tiny-bert-vanilla, as :func:`perfsuite.worker.process.run_isolated` gives it."""
    return CaseRecord.from_json({"model": "tiny-bert", "strategy": "vanilla", **answer}, "fake")


def _record(steps: list[float], loss: list[float], busy: int = 1) -> CaseRecord:
    return _as_record(
        {
            "status": "ok",
            "step_time_s": {"samples": steps, "median": sorted(steps)[len(steps) // 2]},
            "loss": loss,
            "timed_threads": {"busy": busy},
        }
    )


def test_rounds_alternate_and_pair_each_step() -> None:
    calls: list[str] = []

    def fake(spec: CaseSpec, *, timeout_s: float, target: Any) -> CaseRecord:
        side = "case" if target is None else "bare"
        calls.append(side)
        if side == "bare":
            return _record([1.0, 2.0, 4.0], [3.0, 2.0, 1.0])
        return _record([1.1, 2.2, 4.4], [3.0, 2.0, 1.5])

    [result] = measure([tier_spec("tiny-bert", "vanilla")], rounds=4, timeout_s=1, run=fake)
    assert calls == ["case", "bare", "bare", "case"] * 2
    assert result.ratios == pytest.approx([1.1] * 4)
    assert result.ratio == pytest.approx(1.1)
    assert result.loss_diff == pytest.approx(0.5)
    assert result.family == "fp32"
    assert result.busy_threads == [1, 1, 1, 1]


def test_pairs_in_one_process_come_first_where_the_case_has_them() -> None:
    calls: list[tuple[str, int]] = []

    def fake(spec: CaseSpec, *, timeout_s: float, target: Any) -> CaseRecord:
        if target is run_interleaved:
            calls.append(("pairs", spec.steps))
            return _as_record({"status": "ok", "ratios": [1.0, 1.01, 0.99, 1.02, 1.0, 1.01, 1.0]})
        calls.append(("case" if target is None else "bare", spec.steps))
        return _record([1.0, 1.0], [1.0, 1.0])

    vanilla, trainer = tier_spec("tiny-bert", "vanilla"), tier_spec("tiny-bert", "vanilla", engine="trainer")
    paired, unpaired = measure([vanilla, trainer], rounds=1, pairs=7, timeout_s=1, run=fake)
    assert calls[0] == ("pairs", 7)  # its own steps: the pairs
    assert [c for c, _ in calls[1:]] == ["case", "bare", "case", "bare"]
    assert paired.interleaved_ratio == pytest.approx(1.0)
    assert paired.interleaved_interval == (0.99, 1.02)
    assert unpaired.interleaved_ratio is None  # the Trainer owns its loop: no pairing in one process


def test_a_failed_side_ends_the_case_and_names_it() -> None:
    def fake(spec: CaseSpec, *, timeout_s: float, target: Any) -> CaseRecord:
        if target is not None:
            return _as_record({"status": "failed", "error": "worker killed by signal SIGKILL"})
        return _record([1.0], [1.0])

    [result] = measure([tier_spec("tiny-bert", "vanilla")], rounds=3, timeout_s=1, run=fake)
    assert result.ratio is None
    assert result.error == "bare: worker killed by signal SIGKILL"


def test_every_family_has_a_default_case() -> None:
    assert {family(s, e) for s, e in DEFAULT_SELECTION} == set(FAMILIES.values()) | set(TRAINER_FAMILY.values())
    assert family("grad_ckpt", "loop") is None


@pytest.mark.cpu
@pytest.mark.nightly
@pytest.mark.alone
@pytest.mark.parametrize("engine", ["loop", "trainer"])
@pytest.mark.parametrize("threads", [1, 2])
def test_vanilla_costs_what_a_bare_loop_costs(engine: str, threads: int) -> None:
    """The harness's share of a step, measured: a returning interference of the kind that made every
    CPU step 1.6-1.9x a bare loop's fails this. The bounds leave room for noise (the measured figures,
    0.999-1.012 in one process, are in docs/overhead.md); the thread check is exact."""
    from perfsuite.worker.process import run_isolated

    spec = CaseSpec(
        model="tiny-bert", strategy="vanilla", engine=engine, steps=24, warmup_steps=2, device="cpu", threads=threads
    )
    [result] = measure([spec], rounds=6, pairs=60, timeout_s=600, run=run_isolated)
    assert result.error is None
    assert result.loss_diff == 0.0  # the same training on both sides, step by step
    assert result.ratio is not None
    assert result.ratio <= 1.10, result.as_json()
    if engine == "loop":
        assert result.interleaved_ratio is not None
        assert result.interleaved_ratio <= 1.05, result.as_json()
    assert all(b is not None and b <= threads for b in result.busy_threads), result.busy_threads


@pytest.mark.parametrize(
    ("pairs", "rounds", "title"),
    [
        (60, 6, "the median of 60 pairs of steps in one process and of 6 rounds of separate processes"),
        (4, 0, "the median of 4 pairs of steps in one process (no rounds: the columns across processes read —)"),
        (0, 3, "the median of 3 rounds of separate processes (no pairs: the column in one process reads —)"),
    ],
)
def test_the_title_names_only_what_was_measured(
    pairs: int, rounds: int, title: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from perfsuite.cli.overhead import _report

    assert _report(SimpleNamespace(pairs=pairs, rounds=rounds, json=None), [], "cpu", None) == 0
    assert title in " ".join(capsys.readouterr().out.split())
