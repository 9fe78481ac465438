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
    return RunCache(SimpleNamespace(hook=hook)), log  # type: ignore[arg-type]


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
