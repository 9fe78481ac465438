"""FLOPs counted once per case and stack: a cached count is the count, and nothing measured moves."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfsuite.core.spec import CaseSpec
from perfsuite.worker import flop_cache
from perfsuite.worker.process import run_isolated

pytestmark = pytest.mark.cpu

_COUNTS = ("flops_per_step", "matmul_dtypes", "attention_ops")
_MEASURED = ("loss", "peak_memory_bytes", "memory_breakdown_bytes", "initial_weights", "grad_norm")


# Nightly too: a case whose batch shapes vary and whose activations are recomputed.
@pytest.mark.parametrize("strategy", ["bf16", pytest.param("dynamic_padding+grad_ckpt", marks=pytest.mark.nightly)])
def test_a_cached_count_is_what_a_recount_finds_and_changes_nothing_measured(strategy: str, tmp_path: Path) -> None:
    spec = CaseSpec(model="tiny-bert", strategy=strategy, steps=2, warmup_steps=1, threads=1)
    cache = {"PERFSUITE_CACHE": str(tmp_path)}
    first = run_isolated(spec, timeout_s=300, env=cache)
    second = run_isolated(spec, timeout_s=300, env=cache)
    recount = run_isolated(spec, timeout_s=300, env={**cache, flop_cache.ENV: "0"})
    assert [r.status for r in (first, second, recount)] == ["ok"] * 3, [first.error, second.error]
    assert [r.flops_source for r in (first, second, recount)] == ["counted", "cache", "counted"]
    assert len(list((tmp_path / "flops").glob("*.json"))) == 1
    assert "flop_count" in second.phases_s  # the phase is still reported: its lookup's time
    for key in (*_COUNTS, *_MEASURED):
        assert getattr(first, key) == getattr(second, key) == getattr(recount, key), key
    assert (first.flops_per_step or 0) > 0


def test_the_key_holds_the_case_the_weights_the_stack_and_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = CaseSpec(model="tiny-bert", strategy="vanilla", steps=2, warmup_steps=1, threads=1)

    def key(case: CaseSpec = spec, weights: str = "xxh3_128:aa", device: str = "NVIDIA H100 80GB HBM3") -> str:
        return flop_cache.cache_key(case, initial_weights=weights, device_type="cuda", device_name=device)

    assert key() == key()
    assert key(dataclasses.replace(spec, calibrate=False)) == key()  # perfsuite ab's runs share run's counts
    for other in (
        key(dataclasses.replace(spec, seed=1)),
        key(dataclasses.replace(spec, steps=3)),  # the profile step's batch is another one
        key(dataclasses.replace(spec, strategy="bf16")),
        key(weights="xxh3_128:bb"),
        key(device="NVIDIA H200"),
    ):
        assert other != key()
    before = key()
    monkeypatch.setenv("PERFSUITE_DUET_CPU", "1")  # where a duet's side runs: nothing it computes
    assert key() == before
    monkeypatch.setenv("PERFSUITE_INJECT", "*=disable")  # the test suite's strategy silently not applied
    assert key() != before
    monkeypatch.delenv("PERFSUITE_INJECT")
    stack = flop_cache.stack()
    monkeypatch.setattr(flop_cache, "stack", lambda: {**stack, "torch": "9.9.9"})
    assert key() != before  # another torch


def test_ranks_count_their_own_share_and_an_opt_out_counts_always(monkeypatch: pytest.MonkeyPatch) -> None:
    single = CaseSpec(model="tiny-bert", strategy="vanilla")
    assert flop_cache.enabled(single)
    assert not flop_cache.enabled(CaseSpec(model="tiny-bert", strategy="ddp", world_size=2))
    stack = flop_cache.stack()
    monkeypatch.setattr(flop_cache, "stack", lambda: {**stack, "transformers": flop_cache.EDITABLE})
    assert not flop_cache.enabled(single)  # a working tree's code has no version to key on
    monkeypatch.undo()
    monkeypatch.setenv(flop_cache.ENV, "0")
    assert not flop_cache.enabled(single)
