"""The session's runs: on a CPU, a refresh's repeats and a retry each on a new forkserver (a fresh
address-space layout); on a GPU, on the one forkserver."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest

from perfsuite.core.spec import CaseSpec

SPEC = CaseSpec(model="tiny-bert", strategy="vanilla", steps=4, warmup_steps=1, threads=1, device="cpu")


def _logging_cache(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    from perfsuite.session.runs import RunCache

    log: list[str] = []

    def renew() -> bool:
        log.append("renew")
        return True

    def run_case(**kw: Any) -> dict[str, Any]:
        log.append("run")
        return {"model": SPEC.model, "strategy": SPEC.strategy, "status": "ok"}

    # The module as the code under test imports it: after another test's in-process pytest run has
    # dropped it from sys.modules, the dotted path would reach the old module through its package.
    monkeypatch.setattr(importlib.import_module("perfsuite.worker.process"), "renew_forkserver", renew)
    hook = SimpleNamespace(pytest_perfsuite_run_case=run_case)
    monkeypatch.delenv("PERFSUITE_GPUS", raising=False)  # a machine without GPUs: no run holds one
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = SimpleNamespace(hook=hook, getoption=lambda name, default=None: "all")
    return RunCache(config), log  # type: ignore[arg-type]


def test_a_refresh_repeat_or_a_retry_on_a_cpu_runs_on_a_new_forkserver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeats sharing one forkserver share its address-space layout: a refresh recorded
    tiny-bert-grad_ckpt at 32.6x calibration in three tight repeats where fresh layouts give 27x."""
    cache, log = _logging_cache(monkeypatch)
    cache.get(SPEC, 3)
    assert log == ["run", "renew", "run", "renew", "run"]  # the first run keeps the session's forkserver
    cache.run(SPEC, fresh_layout=True)  # a retry
    assert log[-2:] == ["renew", "run"]


def test_a_gpu_case_repeats_on_the_same_forkserver(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU case's repeats and retries skip the forkserver's 12-17 s boot (docs/gpu.md's layout A/A)."""
    cache, log = _logging_cache(monkeypatch)
    gpu = CaseSpec(model="bert-base-uncased", strategy="vanilla", device="cuda")
    cache.get(gpu, 3)
    cache.run(gpu, fresh_layout=True)
    assert log == ["run"] * 4


def test_under_xdist_a_timed_cpu_run_boots_its_forkserver_before_it_waits_for_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The boot (seconds of imports, and a first CPU Adam build) runs beside the other workers' tests
    instead of holding them up; a retry's renewal with it, once. A run that is not timed, or on a GPU,
    takes no turn of the machine and boots nothing ahead."""
    import contextlib

    cache, log = _logging_cache(monkeypatch)

    def ahead(renew: bool) -> bool:
        log.append("ahead, renewed" if renew else "ahead")
        return True

    cache.ahead = ahead

    @contextlib.contextmanager
    def alone() -> Any:
        log.append("alone")
        yield

    cache.alone = alone
    cache.get(SPEC, 2)
    assert log == ["ahead", "alone", "run", "ahead, renewed", "alone", "run"]
    log.clear()
    cache.run(SPEC, fresh_layout=True, timed=False)
    cache.run(CaseSpec(model="bert-base-uncased", strategy="vanilla", device="cuda"))
    assert log == ["renew", "run", "alone", "run"]
    log.clear()
    cache.config.getoption = lambda *a: 1  # the up-front runs, one lane
    cache.run_each_once([SPEC], lambda line: None)
    assert log == ["ahead", "alone", "run"]
    log.clear()
    cache.ahead = lambda renew: False  # a conftest's runner: nothing booted, so the run renews itself
    cache.run(SPEC, fresh_layout=True)
    assert log == ["alone", "renew", "run"]


def test_only_perfsuites_own_runner_has_its_forkserver_booted_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conftest's ``pytest_perfsuite_run_case`` (a test project's fake one, a team's own) may start
    no worker of ours: booting one for it would cost seconds for nothing."""
    from perfsuite import plugin

    booted: list[str] = []
    process = importlib.import_module("perfsuite.worker.process")
    monkeypatch.setattr(process, "renew_forkserver", lambda: booted.append("renew"))
    monkeypatch.setattr(process, "start_forkserver", lambda: booted.append("boot"))

    def config(*runners: Any) -> Any:
        impls = [SimpleNamespace(function=runner) for runner in runners]
        return SimpleNamespace(
            hook=SimpleNamespace(pytest_perfsuite_run_case=SimpleNamespace(get_hookimpls=lambda: impls))
        )

    assert plugin._boot_ahead(config(plugin.pytest_perfsuite_run_case), False)
    assert plugin._boot_ahead(config(plugin.pytest_perfsuite_run_case), True)
    assert booted == ["boot", "renew", "boot"]
    assert not plugin._boot_ahead(config(plugin.pytest_perfsuite_run_case, lambda **kw: None), True)
    assert booted == ["boot", "renew", "boot"]

    def hangs() -> None:
        raise process.ForkserverHung("its imports hang")

    monkeypatch.setattr(process, "start_forkserver", hangs)  # each run then fails its case, saying so
    assert not plugin._boot_ahead(config(plugin.pytest_perfsuite_run_case), False)


def test_cpu_cases_are_measured_two_at_a_time_and_multi_rank_ones_alone() -> None:
    """Before the tests, one-process CPU cases run side by side, a core each; a case on two ranks, which
    takes both cores, runs after them, alone. Every run is kept, each reported once."""
    import threading
    import time

    from perfsuite.session.runs import RunCache

    spans: dict[str, tuple[float, float]] = {}

    def run_case(**kw: Any) -> dict[str, Any]:
        start = time.monotonic()
        time.sleep(0.2)
        spans[kw["spec"].id] = (start, time.monotonic())
        assert threading.current_thread() is not threading.main_thread() or kw["spec"].world_size > 1
        return {"model": kw["spec"].model, "strategy": kw["spec"].strategy, "status": "ok"}

    config = SimpleNamespace(hook=SimpleNamespace(pytest_perfsuite_run_case=run_case), getoption=lambda *a: 2)
    cache = RunCache(config)  # type: ignore[arg-type]
    specs = [CaseSpec(model="tiny-bert", strategy=s, threads=1, device="cpu") for s in ("vanilla", "fp16", "bf16")]
    ranks = CaseSpec(model="tiny-bert", strategy="ddp", threads=1, device="cpu", world_size=2)
    lines: list[str] = []
    cache.run_each_once([specs[0], ranks, *specs[1:]], lines.append)
    assert sorted(line.split("]")[0] for line in lines) == [f"perfsuite: [{i}/4" for i in range(1, 5)]
    assert all(len(cache.records[spec]) == 1 for spec in [*specs, ranks])
    starts = sorted(spans[spec.id][0] for spec in specs[:2])
    assert starts[1] < min(spans[spec.id][1] for spec in specs[:2])  # the first two overlapped
    assert spans[ranks.id][0] >= max(spans[spec.id][1] for spec in specs)  # then the ranks, alone


def test_lanes_need_a_core_for_each_cases_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfsuite.session.runs import lanes

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    one, default = (
        CaseSpec(model="tiny-bert", strategy="vanilla", threads=1),
        CaseSpec(model="tiny-bert", strategy="fp16"),
    )
    assert lanes("auto", [one]) == 2
    assert lanes("auto", [one, default]) == 1  # torch's default threads take every core
    assert lanes(1, [one]) == 1
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert lanes("auto", [one]) == 1


def test_more_lanes_than_cores_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each lane is a core of its own: three on two cores would time three cases on two."""
    import argparse

    from perfsuite.cli.options import cpu_lanes

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert cpu_lanes("2") == 2
    with pytest.raises(
        argparse.ArgumentTypeError, match="3 lanes, each on a core of its own, and this process may use 2"
    ):
        cpu_lanes("3")


def test_an_interrupt_while_cases_run_side_by_side_stops_the_one_in_flight_and_keeps_no_other() -> None:
    import threading
    import time

    from perfsuite.session.runs import RunCache

    stopped, ran = threading.Event(), []

    def run_case(**kw: Any) -> dict[str, Any]:
        ran.append(kw["spec"].strategy)
        if kw["spec"].strategy == "fp16":
            stopped.wait(10)  # a worker until it is killed
            return {"model": "tiny-bert", "strategy": "fp16", "status": "failed", "error": "killed"}
        return {"model": "tiny-bert", "strategy": kw["spec"].strategy, "status": "ok", "step_time_s": {"median": 1.0}}

    def interrupt(line: str) -> None:
        raise KeyboardInterrupt

    config = SimpleNamespace(hook=SimpleNamespace(pytest_perfsuite_run_case=run_case), getoption=lambda *a: 2)
    cache = RunCache(config)  # type: ignore[arg-type]
    process = importlib.import_module("perfsuite.worker.process")
    specs = [CaseSpec(model="tiny-bert", strategy=s, threads=1, device="cpu") for s in ("fp16", "vanilla", "bf16")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(process, "stop_workers", stopped.set)
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            cache.run_each_once(specs, interrupt)  # vanilla finishes first; its report is interrupted
    assert time.monotonic() - start < 5  # not the 10 s the case in flight would have run on
    assert stopped.is_set()
    assert {"fp16", "vanilla"} <= set(ran)
    assert list(cache.records) == [specs[1]]  # the run that finished is kept, the one in flight dropped
