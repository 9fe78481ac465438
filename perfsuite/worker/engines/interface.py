"""perfsuite's engine interface, version 1: what every engine implements and what perfsuite hands it.

A team imports it from the package, ``from perfsuite import BaseEngine, EngineCase, Unsupported``
(this module's path keeps working too).

An *engine* trains one case: perfsuite times its :meth:`Engine.step` calls, measures one
more step under MemTracker and one under FlopCounterMode, records the loss each step
returns, and reads :meth:`Engine.evidence` and the ``model`` and ``optimizer`` it trains
(their tensors are what MemTracker files as parameters, gradients and optimizer state).
perfsuite's own loop (:mod:`~perfsuite.worker.engines.loop`) and Trainer
(:mod:`~perfsuite.worker.engines.hf_trainer`) engines implement it; so does a project's own
engine, declared under ``[tool.perfsuite.engines]`` (docs/engines.md):

- perfsuite builds it as ``EngineClass(case)`` with an :class:`EngineCase`: the model the
  project's factory built (seeded, on the CPU), the batch maker, the strategy, the device,
  batch size, sequence length, learning rate, clipping norm and seed;
- a strategy it does not apply, it refuses from its constructor with :class:`Unsupported`
  (the case is reported *skipped* with the reason); :func:`refuse_unless` does that for
  every strategy field it does not read;
- ``step()`` runs one optimizer step and returns its loss (a 0-dim tensor, left on the
  device), or a :class:`StepOutput` with the gradient norm and token counts too;
- ``evidence()`` says what it applied, read from the objects it trained with;
- ``close()`` releases what it started, once after the last step.

:class:`BaseEngine` is a small base class that keeps the case and declares the version.
Optional members, which perfsuite's own engines have: ``step(before_micro_batch=None,
within=None)`` for an engine whose steps run in a thread of its own (it enters ``within``
there and calls ``before_micro_batch`` before each micro-batch; for any other engine
perfsuite does both around ``step()``); ``in_training_thread(fn)`` (run ``fn`` in that
thread between two steps); ``inner_optimizer`` (the optimizer holding the state, where
``optimizer`` wraps it). A change of what is required or handed over bumps
:data:`ENGINE_API_VERSION`; an engine declares the version it was written for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch

from perfsuite.core.project_code import not_strategy_fields
from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.core.strategies import Strategy

ENGINE_API_VERSION = 1
"""The interface's version; an engine sets ``api_version`` to the version it implements."""


class Unsupported(CaseSkipped):
    """Raised by an engine's constructor for a strategy (or model) it does not apply: the case is
    reported skipped with this reason, as a missing package or precision is."""


class StepOutput(NamedTuple):
    """What one optimizer step reports. Tensors stay on the device: reading them would sync."""

    loss: torch.Tensor
    """Mean loss over the step's micro-batches."""
    grad_norm: torch.Tensor | float | None
    """Total gradient norm before clipping."""
    real_tokens: int
    """Non-padding tokens in the step's batch."""
    padded_tokens: int
    """Token positions including padding."""
    skipped: bool
    """GradScaler skipped the update (inf/nan gradients)."""


@dataclass(frozen=True, kw_only=True)
class EngineCase:
    """What perfsuite builds a project's engine from (version 1)."""

    case_id: str
    """The case's id (``acme-mlp-vanilla-acme_step``)."""
    model: torch.nn.Module
    """The model the project's factory built, seeded, on the CPU: the engine moves it to ``device``."""
    strategy: Strategy
    """The strategy to apply (:class:`perfsuite.core.strategies.Strategy`); refuse what is not applied."""
    device: torch.device
    """Where the steps run."""
    batch_size: int
    """Samples per optimizer step (the strategy's, else the model's)."""
    seq_len: int
    """Sequence length the batches are made with."""
    lr: float
    """Learning rate (1e-3 for a tiny model, 1e-4 for a full-size one, unless the case says otherwise)."""
    max_grad_norm: float
    """Gradient clipping norm."""
    seed: int
    """The case's seed: the model was built from it, and torch is seeded with it before the engine is built."""
    max_steps: int
    """How many times perfsuite calls ``step()`` at most."""
    make_batch: Callable[..., Mapping[str, torch.Tensor]] = field(repr=False)
    """The project's batch maker, called by :meth:`batch`."""

    def batch(self, step: int, batch_size: int | None = None) -> dict[str, torch.Tensor]:
        """Batch number ``step`` (0, 1, ...; an engine that accumulates numbers its micro-batches) of
        ``batch_size`` samples (default: the whole step's), on the CPU."""
        return dict(
            self.make_batch(batch_size=batch_size or self.batch_size, seq_len=self.seq_len, step=step, seed=self.seed)
        )


def case_fields(
    spec: CaseSpec, model: torch.nn.Module, device: torch.device, *, batch_size: int, seq_len: int, lr: float
) -> dict[str, Any]:
    """The :class:`EngineCase` fields every engine's case takes from its spec and its build, for
    perfsuite's own engines and a project's alike (the strategy and the batch maker are each caller's)."""
    return {
        "case_id": spec.id,
        "model": model,
        "device": device,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "lr": lr,
        "max_grad_norm": spec.max_grad_norm,
        "seed": spec.seed,
        # The timed steps, the warm-up and the profiled steps (memory and FLOPs) where there are any.
        "max_steps": spec.warmup_steps + spec.steps + (2 if spec.profile else 0),
    }


class Engine(Protocol):
    """What perfsuite drives (version 1); see the module's docstring for the optional members."""

    api_version: int
    """:data:`ENGINE_API_VERSION` of the interface the engine implements."""

    @property
    def model(self) -> torch.nn.Module:
        """The module the steps train (perhaps wrapped): its parameters, buffers and gradients."""

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer that updates it (``zero_grad(set_to_none=True)``; its state is counted as such)."""

    def step(self) -> StepOutput | torch.Tensor:
        """One optimizer step; its loss, or a :class:`StepOutput`."""

    def evidence(self) -> dict[str, Any]:
        """What the run observably did, read from the objects it trained with (JSON-serialisable)."""

    def close(self) -> None:
        """Release workers, threads and process groups."""


class BaseEngine:
    """A project's engine starts here: it keeps the case, declares the version, reports no evidence
    and closes nothing until told otherwise. Subclasses set ``model`` and ``optimizer`` in their
    ``__init__`` (after ``super().__init__(case)``) and write :meth:`step`."""

    api_version = ENGINE_API_VERSION
    model: torch.nn.Module
    """The module the steps train, set by the subclass's ``__init__``."""
    optimizer: torch.optim.Optimizer
    """The optimizer that updates it, set by the subclass's ``__init__``."""
    applies: Collection[str] = ()
    """The :class:`~perfsuite.core.strategies.Strategy` fields the engine reads and applies
    (``{"grad_accum_steps"}``): a strategy that sets any other is refused here, before the
    subclass's ``__init__`` goes on, so that no case runs a strategy as if it were vanilla."""

    def __init__(self, case: EngineCase) -> None:
        refuse_unless(case.strategy, self.applies, type(self).__name__)
        self.case = case

    def step(self) -> StepOutput | torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def evidence(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        return None


def refuse_unless(strategy: Strategy, applied: Collection[str], engine: str) -> None:
    """Raise :class:`Unsupported` when ``strategy`` sets a field (beyond ``batch_size``) other than
    those in ``applied``, which the engine reads and applies; its name and description are not fields."""
    vanilla = Strategy(name=strategy.name)
    ignored = {"name", "description", "batch_size", *applied}
    problem = not_strategy_fields(f"{engine}.applies", [str(name) for name in applied])
    if problem is not None:
        raise ValueError(problem)
    changed = [
        f"{f.name}={getattr(strategy, f.name)!r}"
        for f in dataclasses.fields(Strategy)
        if f.name not in ignored and getattr(strategy, f.name) != getattr(vanilla, f.name)
    ]
    if changed:
        what = ", ".join(sorted(applied)) or "no strategy field"
        raise Unsupported(f"{engine} applies {what}; {strategy.name} also sets {', '.join(changed)}")


def batch_items(batch: Mapping[str, torch.Tensor]) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    first = next(iter(batch.values()))
    return int(first.shape[0]) if first.dim() else 1
