"""Any engine as the run and the instruments drive it (:class:`Driven`).

The public interface (:mod:`~perfsuite.worker.engines.interface`) asks little of an engine:
``step()`` returning a loss, ``model``, ``optimizer``, ``evidence()``, ``close()``. The run
(:mod:`perfsuite.worker.run`) and the instrumented steps (:mod:`perfsuite.worker.measure`)
need more: a context entered around a step in the thread that runs it, a hook before each
micro-batch, the optimizer that holds the state, a :class:`StepOutput`. :class:`Driven`
supplies each from the engine's optional members where it has them (perfsuite's own engines
do), and from the simple ones otherwise; what a project's engine returns that is not a loss
is an error naming its declaration.
"""

from __future__ import annotations

import contextlib
import inspect
import numbers
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from perfsuite.core.registry import DeclarationError
from perfsuite.worker.engines.interface import Engine, StepOutput


class Driven:
    """``engine`` with everything the run and the instruments call on it.

    ``tokens``: what a step reports as its real and padded tokens when the engine returns a bare
    loss (a project's engine: samples × sequence length). ``where``: the declaration an error names."""

    def __init__(self, engine: Engine, *, device_type: str, tokens: int = 0, where: str = "") -> None:
        self.engine = engine
        self.device_type = device_type
        self._tokens = tokens
        self._where = where
        # An engine that takes the instruments runs them itself (in its own thread, per micro-batch).
        self._instrumented = "within" in inspect.signature(engine.step).parameters
        self._watch: AbstractContextManager[Any] | None = None

    @property
    def model(self) -> Any:
        return self.engine.model

    @property
    def optimizer(self) -> Any:
        return self.engine.optimizer

    @property
    def inner_optimizer(self) -> Any:
        """The optimizer that holds the state (accelerate's and DeepSpeed's wrappers unwrapped)."""
        return getattr(self.engine, "inner_optimizer", self.engine.optimizer)

    def step(
        self,
        before_micro_batch: Callable[[], None] | None = None,
        within: AbstractContextManager[Any] | None = None,
    ) -> StepOutput:
        """One optimizer step as a :class:`StepOutput`; ``within`` entered around it in the thread that runs it
        (and inside it, once, what :meth:`watch_next_step` was given)."""
        watch, self._watch = self._watch, None
        if watch is not None:
            within = _nested(within, watch)
        if self._instrumented:
            out: Any = self.engine.step(before_micro_batch=before_micro_batch, within=within)  # type: ignore[call-arg]
            return self._output(out)
        hook = None
        if before_micro_batch is not None:
            # Before every forward of the model (each micro-batch's, a second one): registered before
            # ``within`` is entered, so that it runs ahead of the instruments' own global hooks.
            root = self.model

            def before_forward(module: torch.nn.Module, args: Any) -> None:
                if module is root:
                    before_micro_batch()

            hook = torch.nn.modules.module.register_module_forward_pre_hook(before_forward)
        try:
            with within if within is not None else contextlib.nullcontext():
                out = self.engine.step()
        finally:
            if hook is not None:
                hook.remove()
        return self._output(out)

    def watch_next_step(self, context: AbstractContextManager[Any]) -> None:
        """``context`` entered around the next step alone, inside the instruments' own (whichever runs it)."""
        self._watch = context

    def _output(self, out: Any) -> StepOutput:
        if isinstance(out, StepOutput):
            return out
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            return StepOutput(out.detach().reshape(()), None, self._tokens, self._tokens, False)
        if isinstance(out, numbers.Real) and not isinstance(out, bool):
            return StepOutput(torch.tensor(float(out)), None, self._tokens, self._tokens, False)
        shape = f" of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else ""
        raise DeclarationError(
            f"{self._where}: {type(self.engine).__name__}.step() returned {type(out).__name__}{shape}; "
            "expected the step's loss (a 0-dim tensor) or a perfsuite StepOutput"
        )

    def in_training_thread(self, fn: Callable[[], float]) -> float:
        """``fn()`` in the thread that runs the steps, between two steps (the calibration)."""
        run = getattr(self.engine, "in_training_thread", None)
        return fn() if run is None else float(run(fn))

    def micro_batches(self, steps: int) -> Any:
        """Beyond one rank, each step's micro-batch losses (the loop engine's); else ``None``."""
        read = getattr(self.engine, "micro_batches", None)
        return None if read is None else read(steps)

    def evidence(self) -> dict[str, Any]:
        return self.engine.evidence()

    def close(self) -> None:
        self.engine.close()


@contextlib.contextmanager
def _nested(outer: AbstractContextManager[Any] | None, inner: AbstractContextManager[Any]) -> Iterator[None]:
    with outer if outer is not None else contextlib.nullcontext(), inner:
        yield
