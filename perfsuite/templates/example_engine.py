"""A training step of this project's own for perfsuite to time, measure and gate: its own loop, loss
and optimizer. pyproject.toml's [tool.perfsuite.engines.example_step] names it (`perfsuite init
--example` wrote it; make it yours). The interface it implements is perfsuite's (version 1, imported
from the package: BaseEngine, EngineCase, StepOutput, Unsupported): built from the case, one
optimizer step returning the loss, evidence of what it applied, close.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional

from perfsuite import BaseEngine, EngineCase


class ExampleEngine(BaseEngine):
    """AdamW on cross-entropy, clipped; applies a strategy's gradient accumulation and refuses the rest."""

    # The strategy fields this step applies; BaseEngine refuses a strategy that sets any other,
    # and perfsuite reports its case skipped, with why.
    applies = {"grad_accum_steps"}

    def __init__(self, case: EngineCase) -> None:
        super().__init__(case)
        self.accumulation = case.strategy.grad_accum_steps
        self.micro_batch_size = case.batch_size // self.accumulation
        self.model = case.model.to(case.device).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=case.lr, weight_decay=0.0)
        self.batches = 0

    def step(self) -> torch.Tensor:
        """One optimizer step over ``accumulation`` micro-batches; the mean loss."""
        total = torch.zeros((), device=self.case.device)
        for _ in range(self.accumulation):
            batch = self.case.batch(self.batches, self.micro_batch_size)
            self.batches += 1
            tokens, labels = batch["tokens"].to(self.case.device), batch["labels"].to(self.case.device)
            loss = functional.cross_entropy(self.model(tokens), labels) / self.accumulation
            torch.autograd.backward(loss)
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.case.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

    def evidence(self) -> dict[str, Any]:
        """What the step applied, read from what it trained with."""
        return {
            "optimizer_class": type(self.optimizer).__name__,
            "accumulation_steps": self.accumulation,
            "micro_batch_size": self.micro_batch_size,
            "batches_seen": self.batches,
        }
