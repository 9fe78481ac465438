"""What a case needs of an engine (:class:`Engine`) and what one optimizer step reports
(:class:`StepOutput`): the types the run, the instruments and the engines share, below
any engine, so that nothing under an engine imports one."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol

import torch


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


class Engine(Protocol):
    """What a case needs of an engine (see :mod:`perfsuite.worker.run`)."""

    accum_steps: int

    @property
    def model(self) -> Any:
        """The module the steps run (accelerate- or DeepSpeed-wrapped)."""

    @property
    def optimizer(self) -> Any:
        """accelerate's optimizer wrapper (``zero_grad``)."""

    @property
    def inner_optimizer(self) -> Any:
        """The optimizer that holds the state and does the update."""

    @property
    def accelerator(self) -> Any:
        """The accelerate ``Accelerator`` the engine trains with."""

    def step(
        self,
        before_micro_batch: Callable[[], None] | None = None,
        within: AbstractContextManager[Any] | None = None,
    ) -> StepOutput:
        """One optimizer step; ``within`` is entered around it in the thread that runs it."""

    def in_training_thread(self, fn: Callable[[], float]) -> float:
        """``fn()`` run in the thread that runs the steps, between two steps: the calibration
        workload, so that it measures the core and the state the steps run in."""

    def evidence(self) -> dict[str, Any]:
        """What the run observably did, read from the objects it trained with."""

    def close(self) -> None:
        """Release workers, threads and process groups."""
