"""Multi-rank cases on the CPU: world size 2 over gloo, each rank a process launched from the
case's worker through torch's elastic launcher.

The claims (tests/claims.py) read the matrix's own runs (multi-rank cases train without
dropout, see perfsuite.core.spec.tier_spec) against ``vanilla`` without dropout on the same
global batch. Each claim is shown failing on the silent fallback it exists for, and a
rank that dies or hangs fails its case alone, leaving nothing running.
"""

from __future__ import annotations

import functools
import tempfile
import time
from pathlib import Path
from typing import Any

import claims
import injections
import pytest
from claims import known

from perfsuite.core.matrix import nightly_only
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import MATRIX_WORLD_SIZE, tier_spec
from perfsuite.session import PerfsuiteSession
from perfsuite.worker.process import run_isolated, start_forkserver

pytestmark = [pytest.mark.cpu, pytest.mark.distributed]


def _tiered(strategy: str, models: tuple[str, ...], *marks: Any) -> list[Any]:
    return [
        pytest.param(
            m, marks=[*marks, *([pytest.mark.nightly] if nightly_only(m, strategy, "loop", MATRIX_WORLD_SIZE) else [])]
        )
        for m in models
    ]


def _ranks(perfsuite: PerfsuiteSession, model: str, strategy: str) -> CaseRecord:
    record = perfsuite.record(tier_spec(model, strategy, world_size=MATRIX_WORLD_SIZE))
    assert record.status == "ok", f"{model}-{strategy}: {record.status}: {record.error}"
    return record


def _single(perfsuite: PerfsuiteSession, model: str, strategy: str = "vanilla") -> CaseRecord:
    record = perfsuite.record(tier_spec(model, strategy, dropout=False))
    assert record.status == "ok", record.error
    return record


@pytest.mark.parametrize("model", _tiered("ddp", ("tiny-bert", "tiny-gpt2", "tiny-llama")))
def test_ddp_trains_like_one_process_on_the_global_batch(perfsuite: PerfsuiteSession, model: str) -> None:
    claims.ddp(_ranks(perfsuite, model, "ddp"), _single(perfsuite, model))


@pytest.mark.parametrize("model", _tiered("fsdp2", ("tiny-bert", "tiny-gpt2", "tiny-llama")))
def test_fsdp2_shards_parameters_and_state_and_trains_like_one_process(perfsuite: PerfsuiteSession, model: str) -> None:
    claims.fsdp2(_ranks(perfsuite, model, "fsdp2"), _single(perfsuite, model))


@pytest.mark.parametrize(
    ("strategy", "stage"),
    [
        pytest.param(
            s,
            n,
            marks=[pytest.mark.deepspeed] + ([pytest.mark.nightly] if nightly_only("tiny-bert", s, "loop", 2) else []),
        )
        for s, n in (("zero2", 2), ("zero3", 3))
    ],
)
def test_zero_partitions_what_its_stage_says_and_trains_like_one_process(
    perfsuite: PerfsuiteSession, strategy: str, stage: int
) -> None:
    claims.zero(_ranks(perfsuite, "tiny-bert", strategy), _single(perfsuite, "tiny-bert"), stage)


@pytest.mark.nightly
def test_ddp_with_accumulation_trains_like_one_process(perfsuite: PerfsuiteSession) -> None:
    record = _ranks(perfsuite, "tiny-bert", "ddp+grad_accum")
    claims.ranks_hold_the_same_parameters(record)
    claims.trains_like_one_process(record, _single(perfsuite, "tiny-bert"))


@pytest.mark.nightly
def test_fsdp2_with_checkpointing_cuts_activations_and_keeps_the_loss(perfsuite: PerfsuiteSession) -> None:
    record, plain = _ranks(perfsuite, "tiny-bert", "fsdp2+grad_ckpt"), _ranks(perfsuite, "tiny-bert", "fsdp2")
    claims.fsdp2(record, _single(perfsuite, "tiny-bert"))
    assert claims.mem(record, "activations") < 0.7 * claims.mem(plain, "activations")


# -- the silent fallbacks, and ranks that die or hang ----------------------------------------


def _injected(strategy: str, kind: str, tmp_path: Path, timeout_s: float = 600) -> tuple[CaseRecord, list[int]]:
    """The world-size-2 tiny-bert case with ``kind`` injected, and the pids its ranks had."""
    pids = tmp_path / "pids"
    pids.touch()
    target = functools.partial(injections.run_injected, chosen=frozenset({kind}))
    spec = tier_spec("tiny-bert", strategy, world_size=MATRIX_WORLD_SIZE)
    # Read by the ranks (tests/injections.py), which the worker forks.
    record = run_isolated(spec, timeout_s=timeout_s, target=target, env={"PERFSUITE_TEST_PIDS": str(pids)})
    return record, [int(p) for p in pids.read_text().split()]


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited; its parent has not collected it yet


def _assert_none_left(pids: list[int]) -> None:
    assert len(pids) == MATRIX_WORLD_SIZE, f"expected one pid per rank, got {pids}"
    deadline = time.monotonic() + 10  # SIGKILL is delivered asynchronously
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _running(p)], "a rank outlived its case"


def test_the_fsdp_claim_fails_when_fsdp_silently_becomes_ddp(perfsuite: PerfsuiteSession, tmp_path: Path) -> None:
    record, _ = _injected("fsdp2", "as_ddp", tmp_path)
    assert record.status == "ok", record.error
    single = _single(perfsuite, "tiny-bert")
    claims.ddp(record, single)  # it trained, correctly, as DDP
    with pytest.raises(AssertionError, match="not FSDP"):
        claims.fsdp2(record, single)


def test_the_ddp_claim_fails_when_ranks_train_alone(perfsuite: PerfsuiteSession, tmp_path: Path) -> None:
    record, _ = _injected("ddp", "alone", tmp_path)
    assert record.status == "ok", record.error
    assert {r["applied"]["accelerate_distributed_type"] for r in record.ranks} == {"NO"}
    with pytest.raises(AssertionError, match="different parameters"):
        claims.ddp(record, _single(perfsuite, "tiny-bert"))


def test_a_killed_rank_fails_its_case_alone(tmp_path: Path) -> None:
    record, pids = _injected("ddp", "kill_rank", tmp_path)
    assert record.status == "failed"
    assert "rank 1" in known(record.error), record.error
    assert "SIGKILL" in known(record.error), record.error
    _assert_none_left(pids)
    # The next case runs as usual: a run of its own now, after the kill (not the session's cached record).
    after = run_isolated(tier_spec("tiny-bert", "ddp", world_size=MATRIX_WORLD_SIZE), timeout_s=600)
    assert after.status == "ok", after.error


def test_a_hung_rank_is_stopped_by_the_timeout_with_its_whole_group(tmp_path: Path) -> None:
    # Rank 1 hangs in the third timed step. With the forkserver up, a tiny-bert-ddp-ws2 case
    # starts its ranks within a second (all the test needs before the timeout) and runs in 2-3 s.
    start_forkserver()
    record, pids = _injected("ddp", "hang_rank", tmp_path, timeout_s=6)
    assert record.status == "failed"
    assert "timed out after 6 s" in known(record.error), record.error
    _assert_none_left(pids)
    # The ranks' logs, in a directory the killed worker could not remove: its parent did.
    errors = [Path(line) for line in (tmp_path / "pids.errors").read_text().split()]
    assert len(errors) == MATRIX_WORLD_SIZE, errors
    tmp = Path(tempfile.gettempdir())
    made = {tmp / error.relative_to(tmp).parts[0] for error in errors}
    assert [str(d) for d in made if d.exists()] == []
