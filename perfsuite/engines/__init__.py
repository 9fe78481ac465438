"""The engines a case trains through, one module each.

- ``loop`` (:mod:`perfsuite.engines.loop`): perfsuite's explicit loop on accelerate.
- ``trainer`` (:mod:`perfsuite.engines.hf_trainer`): the Hugging Face ``Trainer``, which
  is what most users run; every default it would pick for itself is pinned, so a case
  means the same training in both engines.

A case drives either one step at a time through :class:`Engine`, so the timing, the
calibration, the instrumented steps and the record are the same code for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the engines need torch; naming them does not
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from perfsuite.engines.common import StepOutput
    from perfsuite.strategies import Strategy

ENGINES = ("loop", "trainer")
"""Engine names; ``loop`` is the default, and its case ids carry no suffix."""


def check_engine(name: str) -> str:
    """``name`` if it is an engine; otherwise a ``ValueError`` listing the valid ones."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; valid engines: {', '.join(ENGINES)}")
    return name


TRAINER_OPTIMIZERS = {
    "adamw": "adamw_torch",
    "adamw_fused": "adamw_torch_fused",
    "adafactor": "adafactor",
    "adamw_8bit": "adamw_bnb_8bit",
    "paged_adamw_8bit": "paged_adamw_8bit",
}
"""perfsuite optimizer → the Trainer's ``optim``. The others have no Trainer equivalent
with the loop's hyperparameters (lion-pytorch; bitsandbytes Lion at the loop's lr ÷ 3 and
betas; GaLore on the loop's chosen weights and rank): their cases are skipped with why."""


def trainer_unsupported(strategy: Strategy) -> str | None:
    """Why the Trainer cannot express ``strategy`` the way the loop engine runs it, or ``None``."""
    if strategy.uses_deepspeed:
        return None
    if strategy.optimizer not in TRAINER_OPTIMIZERS:
        return (
            f"the Trainer has no optim for perfsuite's {strategy.optimizer!r} with the same hyperparameters "
            f"(mapped: {', '.join(TRAINER_OPTIMIZERS)})"
        )
    if strategy.compile:
        return "torch.compile through the Trainer (torch_compile) is not in perfsuite's Trainer mapping yet"
    if strategy.quantize_4bit or strategy.activation_offload:
        return "QLoRA and activation offloading are mapped for the loop engine only"
    return None


class Engine(Protocol):
    """What a case needs of an engine (see :func:`perfsuite.case.run_case`)."""

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


__all__ = ["ENGINES", "TRAINER_OPTIMIZERS", "Engine", "check_engine", "trainer_unsupported"]
