"""The GPU pool (perfsuite.worker.pool) on a CPU machine with a faked GPU count.

Cases are real workers (perfsuite.worker.run_isolated) whose case function reports the
``CUDA_VISIBLE_DEVICES`` it was started with and when it ran; the pool must give a case
on N ranks N GPUs, never give one GPU to two cases at once, and run single-GPU cases side
by side.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import fault_cases
import pytest

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.pool import GPUPool, PoolRunner, parse_gpus, submit_cases, too_wide, visible_gpus
from perfsuite.worker.process import run_isolated


def test_the_visible_gpus_come_from_a_faked_count_the_cuda_list_or_the_device_count() -> None:
    assert visible_gpus(lambda: 8, {"PERFSUITE_GPUS": "4"}) == ["0", "1", "2", "3"]
    assert visible_gpus(lambda: 8, {"PERFSUITE_GPUS": "2,5"}) == ["2", "5"]
    assert visible_gpus(lambda: 8, {"CUDA_VISIBLE_DEVICES": "1,3"}) == ["1", "3"]
    assert visible_gpus(lambda: 2, {}) == ["0", "1"]
    assert parse_gpus("all", ["0", "1", "2"]) == ["0", "1", "2"]
    assert parse_gpus("2", ["0", "1", "2"]) == ["0", "1"]
    assert parse_gpus("0,2", ["0", "1", "2"]) == ["0", "2"]
    with pytest.raises(ValueError, match="unknown GPU id"):
        parse_gpus("0,7", ["0", "1"])
    with pytest.raises(ValueError, match="3 GPUs asked for; 2 visible"):
        parse_gpus("3", ["0", "1"])
    with pytest.raises(ValueError, match="0 GPUs asked for: a count is 1 or more"):
        parse_gpus("0", ["0", "1"])  # not "all of none", nor the default


def test_a_case_wider_than_the_selection_is_named_before_any_runs() -> None:
    cases = [
        CaseSpec(model="tiny-bert", strategy="ddp", world_size=2, device="cuda"),
        CaseSpec(model="tiny-bert", strategy="vanilla"),
    ]
    assert too_wide(cases, ["3"]) == "tiny-bert-ddp-ws2 (2) need(s) more GPUs than the 1 selected (3)"
    assert too_wide(cases, ["0", "1"]) is None


def test_a_session_run_outside_the_pool_holds_the_selected_gpus_and_sees_only_them(tmp_path: Path) -> None:
    """Repeats and retries run after the pool's first runs: each holds the GPUs it runs on (another
    session waits for them) and its worker sees only those, never a GPU outside the selection."""
    from types import SimpleNamespace

    from perfsuite.session.runs import RunCache

    seen: list[tuple[str | None, bool]] = []
    other = GPUPool(["3"], lock_dir=tmp_path)  # another session on the same machine

    def free() -> bool:
        held = other._try(1)
        for _, handle in held:
            handle.close()
        return bool(held)

    def run_case(config: object, spec: CaseSpec, timeout_s: float, env: dict[str, str]) -> CaseRecord:
        seen.append((env.get("CUDA_VISIBLE_DEVICES"), free()))
        return CaseRecord.failed(spec, status="skipped", error="faked")

    config = SimpleNamespace(hook=SimpleNamespace(pytest_perfsuite_run_case=run_case))
    cache = RunCache(config)  # type: ignore[arg-type]
    cache._pool = GPUPool(["3"], lock_dir=tmp_path)
    spec = CaseSpec(model="tiny-bert", strategy="vanilla", device="cuda")
    record = cache.run(spec, timed=False)
    assert seen == [("3", False)]  # GPU 3 alone, and held meanwhile
    assert (record.gpus, record.gpu_pool) == (("3",), ("3",))
    assert free()  # given back
    cache.run(spec, {"CUDA_VISIBLE_DEVICES": "3"}, timed=False)  # from the pool's thread: held there already
    assert seen[-1][0] == "3"


def test_a_case_asking_for_more_gpus_than_the_pool_has_is_refused(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match="3 GPUs asked for; the pool has 2"),
        GPUPool(["0", "1"], lock_dir=tmp_path).acquire(3),
    ):
        pass


def test_cases_share_four_faked_gpus_without_ever_sharing_one(tmp_path: Path) -> None:
    pool = GPUPool(visible_gpus(lambda: 0, {"PERFSUITE_GPUS": "4"}), lock_dir=tmp_path, poll_s=0.02)
    runner = PoolRunner(pool)
    sizes = [2, 2, 1, 1, 1, 1, 1, 1, 1, 1]  # the widest first, as perfsuite run and the plugin submit them
    specs = [
        CaseSpec(model="tiny-bert", strategy="ddp" if n > 1 else "vanilla", world_size=n, seed=i)
        for i, n in enumerate(sizes)
    ]
    futures = submit_cases(
        runner,
        pool,
        specs,
        lambda spec, env: run_isolated(spec, timeout_s=60, target=fault_cases.gpu_holder, env=env),
    )
    records = [futures[spec].result() for spec in specs]
    runner.close()
    for spec, record in zip(specs, records, strict=True):
        assert record.status == "ok", record.error
        assert record.extra["visible"] == ",".join(record.gpus)  # the worker saw exactly what the pool gave
        assert len(set(record.gpus)) == spec.world_size
        assert set(record.gpus) <= {"0", "1", "2", "3"}
    for gpu in "0123":
        held = sorted(r.extra["held"] for r in records if gpu in r.gpus)
        for (_, end), (start, _) in zip(held, held[1:], strict=False):
            assert start >= end, f"GPU {gpu} held by two cases at once"
    assert runner.most_in_flight >= 3  # side by side, not one after another
    serial = sum(r.extra["held"][1] - r.extra["held"][0] for r in records)
    span = max(r.extra["held"][1] for r in records) - min(r.extra["held"][0] for r in records)
    assert span < 0.75 * serial, (span, serial)


def _hold(lock_dir: str, seconds: float, ready: multiprocessing.synchronize.Event) -> None:
    with GPUPool(["0"], lock_dir=Path(lock_dir)).acquire(1):
        ready.set()
        time.sleep(seconds)


def test_the_gpus_are_shared_with_other_processes_through_lock_files(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    other = ctx.Process(target=_hold, args=(str(tmp_path), 1.0, ready))
    other.start()
    assert ready.wait(30)
    started = time.monotonic()
    with GPUPool(["0"], lock_dir=tmp_path, poll_s=0.02).acquire(1) as ids:
        waited = time.monotonic() - started
    other.join()
    assert ids == ["0"]
    assert waited > 0.5, "took a GPU another process held"


def test_a_stopped_runner_starts_no_case_that_was_waiting_for_gpus(tmp_path: Path) -> None:
    """An interrupted run stops its cases and closes the runner: a case whose thread was already
    waiting for GPUs must not start on the GPUs the stopped cases free."""
    import threading
    from concurrent.futures import CancelledError

    pool = GPUPool(["0", "1"], lock_dir=tmp_path, poll_s=0.02)
    runner = PoolRunner(pool)
    holding, release = threading.Event(), threading.Event()
    started: list[dict[str, str]] = []

    def wide(env: dict[str, str]) -> str:
        holding.set()
        release.wait(10)
        return env["CUDA_VISIBLE_DEVICES"]

    first = runner.submit(2, wide)
    assert holding.wait(10)

    def narrow(env: dict[str, str]) -> str:
        started.append(env)
        return "ran"

    waiting = runner.submit(1, narrow)
    time.sleep(0.1)  # its thread is in acquire(), both GPUs held by the first
    runner.close(cancel=True)
    release.set()  # the stopped case ends and frees both GPUs
    assert first.result(10) == "0,1"
    with pytest.raises(CancelledError):
        waiting.result(10)
    assert started == []


def test_with_one_gpu_a_session_starts_nothing_ahead_and_still_holds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """One GPU: runs are made in their tests, one at a time (a refresh's time limit decides each), each
    holding the GPU; several: the first runs start on them side by side when collection ends."""
    from types import SimpleNamespace

    from perfsuite.session.runs import RunCache

    config = SimpleNamespace(getoption=lambda name, default=None: "all")
    monkeypatch.setenv("PERFSUITE_GPUS", "1")
    one = RunCache(config)  # type: ignore[arg-type]
    one.prefetch([CaseSpec(model="tiny-bert", strategy="vanilla", device="cuda")])
    assert (one._pool.gpus, one._runner, one._pending) == (["0"], None, {})


def test_a_gpu_run_waits_for_its_gpus_no_longer_than_the_time_limit_and_needs_no_gpu_case_selected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's run (no GPU matrix case selected, so no pool was made at collection) holds the GPUs
    selected too; a run whose GPUs another session holds past the time limit fails saying so."""
    import time
    from types import SimpleNamespace

    from perfsuite.session.runs import RunCache

    def run_case(config: object, spec: CaseSpec, timeout_s: float, env: dict[str, str]) -> CaseRecord:
        return CaseRecord.failed(spec, status="skipped", error=env.get("CUDA_VISIBLE_DEVICES", "none"))

    config = SimpleNamespace(getoption=lambda name, default=None: "all")
    config.hook = SimpleNamespace(pytest_perfsuite_run_case=run_case)
    monkeypatch.setenv("PERFSUITE_GPUS", "1")
    spec = CaseSpec(model="tiny-bert", strategy="vanilla", device="cuda")
    claims = RunCache(config)  # type: ignore[arg-type]
    assert claims.run(spec, timed=False).error == "0"  # GPU 0 of the selection, held
    assert claims._pool.gpus == ["0"]

    limited = RunCache(config)  # type: ignore[arg-type]
    limited._pool = GPUPool(["0"], lock_dir=tmp_path, poll_s=0.02)
    limited.deadline = time.monotonic() + 0.3
    with GPUPool(["0"], lock_dir=tmp_path).acquire(1):  # another session's run
        started = time.monotonic()
        record = limited.run(spec, timed=False)
    assert time.monotonic() - started < 5
    assert (record.status, record.error) == (
        "failed",
        "its time limit ran out while it waited for its GPUs (another run on the machine held them)",
    )
