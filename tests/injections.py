"""Regressions injected into real training runs, so tests can show the gates catch each one.

``PERFSUITE_INJECT="<case id or *>=<kind>;..."`` picks what goes wrong in which case:

- ``slow``: every training step takes 25% longer (busy-waiting, after the step's own work;
  ``PERFSUITE_INJECT_SLOWDOWN`` another share), the slowdown the CPU tier must catch. Over three runs of
  tests/test_injected_regressions.py (36 readings: six slowed cases, two runs each) it
  read +17.6% to +32.9%, mean +24.3%, standard deviation 3.5 points, against the 15%
  floor (docs/timing.md);
- ``optimizer_state``: the optimizer keeps 5% more state from its first step on;
- ``leak``: a buffer of 5% of the parameters' bytes is held in a module-level global from
  the first step on, outside the model and the optimizer (a library's cache, a leak);
- ``noop``: gradient checkpointing is silently not applied;
- ``disable``: the whole strategy is silently not applied (the case trains as ``vanilla``
  under the strategy's name), for the tests that show each claim fails without it;
- ``hollow``: the strategy's optimizer is built, its class the claimed one, but every
  parameter's state also holds AdamW's two fp32 moments: the memory it claims to save is not
  saved (a wrapper that keeps a full-precision copy, a fallback inside the optimizer);
- ``drop_grad``: under gradient accumulation, the gradients of every micro-batch but the
  last are dropped (the bug an optimizer-offload path once had), for the interaction claims.

Multi-rank cases (their ranks are forked from the worker, so the patches reach them):

- ``as_ddp``: an ``fsdp2`` case trains as ``ddp`` under its own name, what accelerate and
  the HF Trainer silently do when asked for FSDP on a CPU;
- ``alone``: accelerate is set up without its CPU switch, so on a CPU every rank silently
  trains alone on its half of the data (no gradient is all-reduced);
- ``kill_rank``: rank 1 is killed (SIGKILL) in its third timed step;
- ``hang_rank``: rank 1 stops in its third timed step and never comes back.

``PERFSUITE_TEST_PIDS`` (a file) collects the pid of every rank, so a test can check that
none is left running.

The test project's ``pytest_perfsuite_run_case`` runs :func:`run_case` in the usual
isolated worker, so each injection stays inside its case's process.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch

from perfsuite.core.record import RecordJson
from perfsuite.core.spec import CaseSpec
from perfsuite.worker import optimizers
from perfsuite.worker import run as case
from perfsuite.worker.engines import common as engine_common
from perfsuite.worker.engines import loop as engine
from perfsuite.worker.engines.interface import StepOutput
from perfsuite.worker.optimizers import state_bytes

LEAK: list[torch.Tensor] = []
"""The module-level global a ``leak`` fills."""

SLOWDOWN = 0.25
"""The share a ``slow`` step waits on after its own work, unless ``PERFSUITE_INJECT_SLOWDOWN`` says."""
GROWTH = 0.05


def kinds(spec: CaseSpec) -> set[str]:
    chosen = set()
    for item in os.environ.get("PERFSUITE_INJECT", "").split(";"):
        target, _, kind = item.partition("=")
        if kind and target in ("*", spec.id):
            chosen.add(kind)
    return chosen


def _patch_step(slow: bool, leak: bool) -> None:
    step = engine.LoopEngine.step
    slowdown = float(os.environ.get("PERFSUITE_INJECT_SLOWDOWN", SLOWDOWN))

    def patched(self: engine.LoopEngine, *args: Any, **kwargs: Any) -> StepOutput:
        if leak and not LEAK:
            params = sum(p.numel() * p.element_size() for p in self.model.parameters())
            LEAK.append(torch.ones(int(GROWTH * params) // 4))
        start = time.perf_counter()
        out = step(self, *args, **kwargs)
        if slow:
            until = time.perf_counter() + slowdown * (time.perf_counter() - start)
            while time.perf_counter() < until:
                pass
        return out

    engine.LoopEngine.step = patched  # type: ignore[method-assign]


def _patch_optimizer() -> None:
    build = optimizers.build_optimizer

    def grow(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        states = list(optimizer.state.values())
        if states and not any("injected" in s for s in states):
            states[0]["injected"] = torch.zeros(int(GROWTH * state_bytes(optimizer)) // 4)

    def patched(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        optimizer = build(name, model, lr)
        optimizer.register_step_post_hook(grow)
        return optimizer

    optimizers.build_optimizer = patched


def _patch_hollow() -> None:
    build = optimizers.build_optimizer

    def pad(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                state = optimizer.state[p]
                if "hollow_exp_avg" not in state:
                    state["hollow_exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    state["hollow_exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)

    def patched(name: str, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        optimizer = build(name, model, lr)
        optimizer.register_step_post_hook(pad)
        return optimizer

    optimizers.build_optimizer = patched


def _disabled(spec: CaseSpec, instead: str = "vanilla") -> CaseSpec:
    """``spec`` training as ``instead`` under its own name and id."""
    import dataclasses

    from perfsuite.core.strategies import STRATEGIES

    object.__setattr__(spec, "strategy_spec", dataclasses.replace(STRATEGIES[instead], name=spec.strategy))
    return spec


def _patch_accelerate_cpu_switch() -> None:
    import accelerate

    init = accelerate.Accelerator.__init__

    def without_cpu(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["cpu"] = False
        init(self, *args, **kwargs)

    accelerate.Accelerator.__init__ = without_cpu


def _patch_rank_fault(kind: str) -> None:
    step = engine.LoopEngine.step
    calls = [0]

    def patched(self: engine.LoopEngine, *args: Any, **kwargs: Any) -> StepOutput:
        calls[0] += 1
        if os.environ.get("RANK") == "1" and calls[0] == 5:  # 2 warm-up steps, then the third timed one
            if kind == "kill_rank":
                os.kill(os.getpid(), signal.SIGKILL)
            while True:
                time.sleep(1)
        return step(self, *args, **kwargs)

    engine.LoopEngine.step = patched  # type: ignore[method-assign]


def _note_rank_pid() -> None:
    path = os.environ.get("PERFSUITE_TEST_PIDS")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
        with open(f"{path}.errors", "a") as f:  # where the launcher keeps this rank's logs
            f.write(f"{os.environ.get('TORCHELASTIC_ERROR_FILE', '')}\n")


def _patch_pid_notes() -> None:
    train = case.train

    def noted(*args: Any, **kwargs: Any) -> RecordJson:
        _note_rank_pid()
        return train(*args, **kwargs)

    case.train = noted


def _patch_drop_grad() -> None:
    step = engine.LoopEngine.step

    def patched(self: engine.LoopEngine, before_micro_batch: Any = None, within: Any = None) -> StepOutput:
        seen = [0]

        def before() -> None:
            if before_micro_batch is not None:
                before_micro_batch()
            seen[0] += 1
            if seen[0] == self.accum_steps > 1:  # the last micro-batch: forget what the others accumulated
                for p in self.params:
                    p.grad = None

        return step(self, before_micro_batch=before, within=within)

    engine.LoopEngine.step = patched  # type: ignore[method-assign]


def run_case(spec: CaseSpec) -> dict[str, Any]:
    """The case with the injections ``PERFSUITE_INJECT`` names for it."""
    return run_injected(spec, frozenset(kinds(spec)))


def run_injected(spec: CaseSpec, chosen: frozenset[str]) -> dict[str, Any]:
    """The case with the ``chosen`` injections (pass with functools.partial as a worker target)."""
    if "disable" in chosen:
        spec = _disabled(spec)
    if "drop_grad" in chosen:
        _patch_drop_grad()
    if chosen & {"slow", "leak"}:
        _patch_step(slow="slow" in chosen, leak="leak" in chosen)
    if "optimizer_state" in chosen:
        _patch_optimizer()
    if "hollow" in chosen:
        _patch_hollow()
    if "noop" in chosen:
        engine_common.enable_checkpointing = lambda model, **kwargs: None
    if "as_ddp" in chosen:
        spec = _disabled(spec, instead="ddp")
    if "alone" in chosen:
        _patch_accelerate_cpu_switch()
    for kind in chosen & {"kill_rank", "hang_rank"}:
        _patch_rank_fault(kind)
    _patch_pid_notes()
    record = dict(case.run_case(spec))
    record["injected"] = sorted(chosen)
    return record
