"""The engines a case can train through, by name, and what the Trainer can express. Pure.

- ``loop`` (:mod:`perfsuite.worker.engines.loop`): perfsuite's explicit loop on accelerate.
- ``trainer`` (:mod:`perfsuite.worker.engines.hf_trainer`): the Hugging Face ``Trainer``,
  which is what most users run; every default it would pick for itself is pinned, so a
  case means the same training in both engines.

The interface a case drives them through is :mod:`perfsuite.worker.engines.interface`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfsuite.core.strategies import Strategy

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


__all__ = ["ENGINES", "TRAINER_OPTIMIZERS", "check_engine", "trainer_unsupported"]
