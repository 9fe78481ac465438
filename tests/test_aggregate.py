"""One record from a multi-rank case's ranks (perfsuite.worker.distributed.aggregate), and how the
matrix, declarations and case ids name a world size. Pure: no torch, no training."""

from __future__ import annotations

import json
from typing import Any

import pytest

from perfsuite.core import registry
from perfsuite.core.matrix import builtin_matrix
from perfsuite.core.record import CaseRecord
from perfsuite.core.registry import DeclarationError
from perfsuite.core.spec import CaseSpec, tier_spec
from perfsuite.core.stats import summarize
from perfsuite.worker.distributed.aggregate import aggregate


def _rank(rank: int, steps: list[float], calibrated: list[float], peak: int, loss: list[float]) -> dict[str, Any]:
    return {
        "model": "tiny-bert",
        "strategy": "ddp",
        "status": "ok",
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


def test_what_other_processes_took_of_the_cores_is_counted_over_every_rank() -> None:
    """Ranks wait for each other's cores by design; another job's load is what the cores ran beside
    all of them: rank 0's reading of the cores, less every rank's threads."""
    ranks = [_rank(i, [1.0, 1.0], [10.0, 10.0], 500, [2.0, 1.0]) | {"threads": 1} for i in range(2)]

    def others(count: int = 2, busy_s: float = 4.0, window_s: float = 2.0, owns: tuple[float, ...] = (1.5, 1.5)) -> Any:
        for i, rank in enumerate(ranks):
            rank["timed_threads"] = {
                "window_s": window_s,
                "busy": 1,
                "threads": [{"tid": i, "name": "MainThread", "cpu_s": 1.4, "share": 0.7}],
                "cores": {"count": count, "busy_s": busy_s - i * 0.1, "own_s": owns[i]},
                "contention": {"steps": 0.3, "calibration": 0.2, "others": 0.9},  # its own: the other rank counted
            }
        return aggregate(ranks)["timed_threads"]["contention"]["others"]

    assert others() == pytest.approx(0.25)  # (4.0 - 1.5 - 1.5) / (2 cores × 2 s), rank 0's reading of the cores
    window = aggregate(ranks)["timed_threads"]
    assert window["contention"] == {"steps": 0.3, "calibration": 0.2, "others": pytest.approx(0.25)}
    assert window["cores"] == {"count": 2, "busy_s": 4.0, "own_s": 1.5}
    assert others(busy_s=2.85) == 0.0  # less than the ranks' own, as windows a few ms apart read: none
    # Not assessed: cores the two one-thread ranks could not fill (a load there is not theirs to wait for),
    # a window too short for /proc/stat's 10 ms ticks, cores less busy than the ranks alone.
    assert others(count=4) is None
    assert others(window_s=0.4) is None
    assert others(busy_s=2.5) is None
    ranks[1]["timed_threads"]["cores"] = None  # a rank's own time unread
    assert aggregate(ranks)["timed_threads"]["contention"]["others"] is None


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


def test_ranks_that_timed_different_steps_or_one_without_a_loss_curve_are_an_error() -> None:
    with pytest.raises(ValueError, match="different numbers of steps"):
        aggregate([_rank(0, [1.0, 1.0], [1.0, 1.0], 1, [1.0]), _rank(1, [1.0], [1.0], 1, [1.0])])
    ranks = [_rank(0, [1.0], [1.0], 1, [1.0]), _rank(1, [1.0], [1.0], 1, [1.0])]
    del ranks[1]["loss"]
    with pytest.raises(ValueError, match="rank 1: no loss"):
        aggregate(ranks)


def _full_rank(rank: int) -> dict[str, Any]:
    """A rank's record as a rank sends it, in a worker's key order, with a key no field names."""
    steps = [[0.5, 0.75, 0.5], [0.625, 0.5, 0.625]][rank]
    calibrated = [[40.0, 60.0, 40.0], [50.0, 40.0, 50.0]][rank]
    return {
        "model": "tiny-gpt2",
        "strategy": "ddp",
        "engine": "loop",
        "status": "ok",
        "error": None,
        "device": "cpu",
        "device_name": "AMD EPYC",
        "hardware": "cpu",
        "time_class": "amd-25.1-avx2",
        "threads": 1,
        "precision": "fp32",
        "num_parameters": 102714,
        "model_config": {"n_embd": 32, "n_layer": 2},
        "initial_weights": "sha256:0a1b",
        "task": "causal-lm",
        "batch_size": 8,
        "micro_batch_size": 2,
        "world_size": 2,
        "rank": rank,
        "seq_len": 32,
        "seed": 0,
        "learning_rate": 0.001,
        "dropout": False,
        "pretrained": None,
        "dataset": "synthetic",
        "warmup_steps": 1,
        "steps": 3,
        "strategy_config": {"name": "ddp", "grad_accum_steps": 2},
        "step_time_s": summarize(steps),
        "warmup_step_s": [1.5],
        "compile_s": None,
        "step_time_calibrated": summarize(calibrated),
        "calibration": {"workload": "numpy-mix-v2", "median_s": 0.0125, "samples_s": [0.0125, 0.0125]},
        "samples_per_s": 4 * 3 / sum(steps),
        "tokens_per_s": {"real": 300 / sum(steps), "padded": 384 / sum(steps)},
        "timed_tokens": {"real": 300 + rank, "padded": 384},
        "padding_fraction": 0.21875,
        "peak_memory_bytes": [6_000_000, 7_000_000][rank],
        "peak_memory_source": "memtracker",
        "allocator_peaks_bytes": None,
        "memory_breakdown_bytes": {"parameters": 410856, "activations": [5_000_000, 6_000_000][rank]},
        "memory_breakdown_error": [None, "no tracker"][rank],
        "host_peak_rss_bytes": [400_000_000, 390_000_000][rank],
        "flops_per_step": 3_000_000_000,
        "mfu": None,
        "peak_flops": 1.5e11,
        "matmul_dtypes": {"float32": 48},
        "flops_source": "counted",
        "attention_ops": {"sdpa": 4},
        "loss": [[4.5, 4.25, 4.0, 3.75], [4.75, 4.5, 4.0, 3.5]][rank],
        "micro_batches": {
            "losses": [[4.5, 4.5], [4.25, 4.25], [4.0, 4.0], [3.75 + rank, 3.75 - rank]],
            "targets": [[31, 30], [31, 31], [29, 31], [30, 28 + rank]],
        },
        "grad_norm": [1.5, None, 1.25, 1.0],
        "skipped_optimizer_steps": rank,
        "applied": {"distributed": {"rank": rank, "backend": "gloo"}, "optimizer_class": "AdamW"},
        "timed_threads": None,
        "phases_s": {"build": 0.25, "timed": 1.75},
        "pid": 4100 + rank,
        "a_key_of_tomorrow": [rank],
        "warnings": [{"category": "UserWarning", "message": f"rank {rank}", "where": "f.py:1", "count": 2}],
        "gpu": str(rank),
    }


AGGREGATED = {
    "model": "tiny-gpt2",
    "strategy": "ddp",
    "engine": "loop",
    "status": "ok",
    "error": None,
    "device": "cpu",
    "device_name": "AMD EPYC",
    "hardware": "cpu",
    "time_class": "amd-25.1-avx2",
    "threads": 1,
    "precision": "fp32",
    "num_parameters": 102714,
    "model_config": {"n_embd": 32, "n_layer": 2},
    "initial_weights": "sha256:0a1b",
    "task": "causal-lm",
    "batch_size": 8,
    "micro_batch_size": 2,
    "world_size": 2,
    "seq_len": 32,
    "seed": 0,
    "learning_rate": 0.001,
    "dropout": False,
    "pretrained": None,
    "dataset": "synthetic",
    "warmup_steps": 1,
    "steps": 3,
    "strategy_config": {"name": "ddp", "grad_accum_steps": 2},
    "step_time_s": {
        "median": 0.625,
        "mean": 0.6666666666666666,
        "min": 0.625,
        "max": 0.75,
        "stdev": 0.07216878364870322,
        "iqr": 0.0625,
        "mad": 0.0,
        "rel_spread": 0.1,
        "samples": [0.625, 0.75, 0.625],
    },
    "warmup_step_s": [1.5],
    "compile_s": None,
    "step_time_calibrated": {
        "median": 50.0,
        "mean": 53.333333333333336,
        "min": 50.0,
        "max": 60.0,
        "stdev": 5.773502691896257,
        "iqr": 5.0,
        "mad": 0.0,
        "rel_spread": 0.1,
        "samples": [50.0, 60.0, 50.0],
    },
    "calibration": {"workload": "numpy-mix-v2", "median_s": 0.0125, "samples_s": [0.0125, 0.0125]},
    "samples_per_s": 12.0,
    "tokens_per_s": {"real": 150.0, "padded": 192.0},
    "timed_tokens": {"real": 300, "padded": 384},
    "padding_fraction": 0.21875,
    "peak_memory_bytes": 7000000,
    "peak_memory_source": "memtracker",
    "allocator_peaks_bytes": None,
    "memory_breakdown_bytes": {"parameters": 410856, "activations": 6000000},
    "memory_breakdown_error": "no tracker",
    "host_peak_rss_bytes": 400000000,
    "flops_per_step": 6000000000,
    "mfu": 0.032,
    "peak_flops": 150000000000.0,
    "matmul_dtypes": {"float32": 48},
    "flops_source": "counted",
    "attention_ops": {"sdpa": 4},
    "loss": [4.5, 4.25, 4.0, 3.745614035087719],
    "grad_norm": [1.5, None, 1.25, 1.0],
    "skipped_optimizer_steps": 1,
    "applied": {"distributed": {"rank": 0, "backend": "gloo"}, "optimizer_class": "AdamW"},
    "timed_threads": None,
    "phases_s": {"build": 0.25, "timed": 1.75},
    "pid": 4100,
    "a_key_of_tomorrow": [0],
    "gpu": "0",
    "peak_memory_per_rank_bytes": [6000000, 7000000],
    "peak_memory_sum_bytes": 13000000,
    "memory_breakdown_rank": 1,
    "loss_per_rank": [[4.5, 4.25, 4.0, 3.75], [4.75, 4.5, 4.0, 3.5]],
    "grad_norm_per_rank": [[1.5, None, 1.25, 1.0], [1.5, None, 1.25, 1.0]],
    "ranks": [
        {
            "rank": 0,
            "pid": 4100,
            "gpu": "0",
            "step_time_median_s": 0.5,
            "step_time_calibrated_median": 40.0,
            "peak_memory_bytes": 6000000,
            "host_peak_rss_bytes": 400000000,
            "applied": {"rank": 0, "backend": "gloo"},
            "warnings": [{"category": "UserWarning", "message": "rank 0", "where": "f.py:1", "count": 2}],
        },
        {
            "rank": 1,
            "pid": 4101,
            "gpu": "1",
            "step_time_median_s": 0.625,
            "step_time_calibrated_median": 50.0,
            "peak_memory_bytes": 7000000,
            "host_peak_rss_bytes": 390000000,
            "applied": {"rank": 1, "backend": "gloo"},
            "warnings": [{"category": "UserWarning", "message": "rank 1", "where": "f.py:1", "count": 2}],
        },
    ],
}
"""What two :func:`_full_rank` records aggregate to, key for key and in order."""


def _bare(rank: int, steps: list[float], loss: list[float]) -> dict[str, Any]:
    """A rank's record with its identity, steps and losses only: every other key absent."""
    return {
        "model": "tiny-bert",
        "strategy": "ddp",
        "status": "ok",
        "batch_size": 4,
        "steps": len(steps),
        "step_time_s": {"median": sorted(steps)[len(steps) // 2], "samples": steps},
        "loss": loss,
    }


AGGREGATED_BARE = {
    "model": "tiny-bert",
    "strategy": "ddp",
    "status": "ok",
    "batch_size": 4,
    "steps": 2,
    "step_time_s": {
        "median": 2.0,
        "mean": 2.0,
        "min": 2.0,
        "max": 2.0,
        "stdev": 0.0,
        "iqr": 0.0,
        "mad": 0.0,
        "rel_spread": 0.0,
        "samples": [2.0, 2.0],
    },
    "loss": [2.5, 1.5],
    "peak_memory_bytes": None,
    "step_time_calibrated": None,
    "samples_per_s": 2.0,
    "peak_memory_per_rank_bytes": [500, None],
    "peak_memory_sum_bytes": None,
    "memory_breakdown_bytes": None,
    "memory_breakdown_error": None,
    "memory_breakdown_rank": 0,
    "allocator_peaks_bytes": None,
    "host_peak_rss_bytes": 0,
    "loss_per_rank": [[2.0, 1.0], [3.0, 2.0]],
    "grad_norm_per_rank": [None, None],
    "skipped_optimizer_steps": 0,
    "flops_per_step": None,
    "mfu": None,
    "world_size": 2,
    "ranks": [
        {
            "rank": 0,
            "pid": None,
            "gpu": None,
            "step_time_median_s": 2.0,
            "step_time_calibrated_median": None,
            "peak_memory_bytes": 500,
            "host_peak_rss_bytes": None,
            "applied": None,
            "warnings": [],
        },
        {
            "rank": 1,
            "pid": None,
            "gpu": None,
            "step_time_median_s": 2.0,
            "step_time_calibrated_median": None,
            "peak_memory_bytes": None,
            "host_peak_rss_bytes": None,
            "applied": None,
            "warnings": [],
        },
    ],
}
"""What two :func:`_bare` records (the first with a peak) aggregate to: an absent key reads as absent."""


def test_the_aggregated_record_is_the_same_json_key_for_key_and_in_order() -> None:
    """A several ranks' record is what results files and baselines hold: its JSON is pinned, to the key order."""
    full = aggregate([_full_rank(0), _full_rank(1)])
    assert list(full) == list(AGGREGATED)
    assert json.dumps(full) == json.dumps(AGGREGATED)  # nested order and number types too
    bare = [_bare(0, [1.0, 2.0], [2.0, 1.0]), _bare(1, [2.0, 1.0], [3.0, 2.0])]
    bare[0]["peak_memory_bytes"] = 500
    assert json.dumps(aggregate(bare)) == json.dumps(AGGREGATED_BARE)
    assert json.dumps(CaseRecord.from_json(full, "ws2").to_json()) == json.dumps(full)


def test_a_rank_record_of_the_wrong_shape_is_refused_naming_the_rank() -> None:
    ranks = [_full_rank(0), {**_full_rank(1), "peak_memory_bytes": "7 MB"}]
    with pytest.raises(ValueError, match=r"^rank 1: peak_memory_bytes is '7 MB' \(str\), not an integer$"):
        aggregate(ranks)


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
