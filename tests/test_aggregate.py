"""One record from a multi-rank case's ranks (perfsuite.worker.distributed.aggregate), and how the
matrix, declarations and case ids name a world size. Pure: no torch, no training."""

from __future__ import annotations

from typing import Any

import pytest

from perfsuite.core import registry
from perfsuite.core.matrix import builtin_matrix
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSpec, tier_spec
from perfsuite.worker.distributed.aggregate import aggregate


def _rank(rank: int, steps: list[float], calibrated: list[float], peak: int, loss: list[float]) -> dict[str, Any]:
    return {
        "rank": rank,
        "pid": 100 + rank,
        "steps": len(steps),
        "batch_size": 16,
        "step_time_s": {"median": sorted(steps)[len(steps) // 2], "samples": steps},
        "step_time_calibrated": {"median": 0.0, "samples": calibrated},
        "timed_tokens": {"real": 1000, "padded": 2000},
        "peak_memory_bytes": peak,
        "memory_breakdown_bytes": {"parameters": peak // 2},
        "host_peak_rss_bytes": 10 * peak,
        "loss": loss,
        "grad_norm": [1.0] * len(loss),
        "flops_per_step": 1e9,
        "peak_flops": None,
        "applied": {"distributed": {"rank": rank}},
        "warnings": [],
    }


def test_the_slowest_rank_sets_each_step_and_the_largest_rank_the_memory() -> None:
    ranks = [
        _rank(0, [1.0, 3.0, 1.0], [10.0, 30.0, 10.0], 500, [2.0, 1.0]),
        _rank(1, [2.0, 1.0, 2.0], [20.0, 10.0, 20.0], 700, [4.0, 3.0]),
    ]
    record = aggregate(ranks)
    assert record["step_time_s"]["samples"] == [2.0, 3.0, 2.0]
    assert record["step_time_s"]["median"] == 2.0
    assert record["step_time_calibrated"]["median"] == 20.0
    assert record["peak_memory_bytes"] == 700
    assert record["peak_memory_per_rank_bytes"] == [500, 700]
    assert record["peak_memory_sum_bytes"] == 1200
    assert record["memory_breakdown_bytes"] == {"parameters": 350}
    assert record["memory_breakdown_rank"] == 1
    assert record["loss"] == [3.0, 2.0]  # each rank's mean over its equal share: their mean is the global one
    assert record["samples_per_s"] == pytest.approx(16 * 3 / 7.0)  # the global batch over the slowest steps
    assert record["tokens_per_s"] == {"real": pytest.approx(1000 / 7), "padded": pytest.approx(2000 / 7)}
    assert record["flops_per_step"] == 2e9
    assert record["world_size"] == 2
    assert [r["pid"] for r in record["ranks"]] == [100, 101]
    assert "rank" not in record


def test_the_loss_is_the_global_batchs_weighted_by_what_each_rank_averaged_over() -> None:
    ranks = [_rank(0, [1.0], [1.0], 1, [9.0]), _rank(1, [1.0], [1.0], 1, [9.0])]
    # One step of two micro-batches; rank 0 averaged 3 target tokens in the first, rank 1 one.
    ranks[0]["micro_batches"] = {"losses": [[1.0, 2.0]], "targets": [[3, 2]]}
    ranks[1]["micro_batches"] = {"losses": [[5.0, 4.0]], "targets": [[1, 2]]}
    record = aggregate(ranks)
    assert record["loss"] == [pytest.approx(((3 * 1.0 + 5.0) / 4 + (2 * 2.0 + 2 * 4.0) / 4) / 2)]
    assert record["loss_per_rank"] == [[9.0], [9.0]]
    assert "micro_batches" not in record


def test_a_rank_without_a_peak_leaves_the_case_without_one() -> None:
    ranks = [_rank(0, [1.0], [1.0], 500, [1.0]), _rank(1, [1.0], [1.0], 500, [1.0])]
    ranks[1]["peak_memory_bytes"] = None
    assert aggregate(ranks)["peak_memory_bytes"] is None


def test_ranks_that_timed_different_steps_are_an_error() -> None:
    with pytest.raises(ValueError, match="different numbers of steps"):
        aggregate([_rank(0, [1.0, 1.0], [1.0, 1.0], 1, [1.0]), _rank(1, [1.0], [1.0], 1, [1.0])])


def test_a_world_size_shows_in_the_id_and_needs_a_strategy_that_shares_the_work() -> None:
    assert tier_spec("tiny-bert", "ddp", world_size=2).id == "tiny-bert-ddp-ws2"
    assert tier_spec("tiny-bert", "ddp", world_size=2).dropout is False
    assert CaseSpec(model="tiny-bert", strategy="ddp").id == "tiny-bert-ddp"
    assert CaseSpec(model="tiny-bert", strategy="ddp").launches_ranks
    assert not CaseSpec(model="tiny-bert", strategy="zero2_offload").launches_ranks
    with pytest.raises(ValueError, match=r"combine it with one of ddp, fsdp2, zero2, zero3 \(e.g. fp16\+ddp\)"):
        CaseSpec(model="tiny-bert", strategy="fp16", world_size=2)
    with pytest.raises(ValueError, match="loop engine"):
        CaseSpec(model="tiny-bert", strategy="ddp", world_size=2, engine="trainer")
    with pytest.raises(ValueError, match="fsdp2 with fp16"):
        CaseSpec(model="tiny-bert", strategy="fsdp2+fp16", world_size=2)


def test_the_matrix_runs_the_multi_rank_strategies_at_world_size_two_only() -> None:
    multi = [e for e in builtin_matrix() if e.world_sizes != (1,)]
    assert {s for e in multi for s in e.strategies} >= {"ddp", "fsdp2", "zero2", "zero3"}
    single = {s for e in builtin_matrix() if e.world_sizes == (1,) and "tiny-bert" in e.models for s in e.strategies}
    assert not single & {"ddp", "fsdp2", "zero2", "zero3"}


def test_a_declared_world_size_needs_a_strategy_that_shares_the_work() -> None:
    saved = registry.snapshot()
    try:
        entry = registry.register_cases(["tiny-gpt2"], ["grad_ckpt+fsdp2"], world_sizes=[2, 4])
        assert entry.world_sizes == (2, 4)
        ids = {tier_spec(c.model, c.strategy, world_size=c.world_size).id for c in registry.matrix_cases()}
        assert {"tiny-gpt2-grad_ckpt+fsdp2-ws2", "tiny-gpt2-grad_ckpt+fsdp2-ws4"} <= ids
        with pytest.raises(DeclarationError, match="must say how ranks share"):
            registry.register_cases(["tiny-gpt2"], ["grad_ckpt"], world_sizes=[2])
        with pytest.raises(DeclarationError, match="loop engine only"):
            registry.register_cases(["tiny-gpt2"], ["ddp"], engines=["trainer"], world_sizes=[2])
    finally:
        registry.restore(saved)
