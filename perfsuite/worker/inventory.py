"""What an explanation run records besides the profile: every tensor by name after a step (the
inventory), and per step the digest of the data the model saw, the learning rate and each
parameter's gradient norm before clipping.

The inventory lists the model's parameters and buffers by their names, the gradients by their
parameters' names (read just before the optimizer steps, the only moment they all exist), the
optimizer's state by parameter and state name, and every other live tensor of the process by
where it is held when that is found: in a plain attribute of one of the model's modules
(``model.encoder.last_probs``), of the engine (``engine.cache``), or in a module's globals
(``somemodule.CACHE[0]``). Bytes are each tensor's own
(elements × element size), so a change reads as arithmetic on names, dtypes and shapes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from perfsuite.core.explain.records import StepFacts, TensorEntry
from perfsuite.worker.measure import other_live_tensors

HELD_FROM = 64 * 1024
"""Tensors outside the model and optimizer from this size on are looked for where they are held."""


def _entry(kind: str, name: str, tensor: torch.Tensor) -> TensorEntry:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return TensorEntry(kind, name, dtype, tuple(tensor.shape), tensor.numel() * tensor.element_size())


def _parameter_names(model: torch.nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


@contextmanager
def gradients_before_step(model: torch.nn.Module) -> Iterator[list[TensorEntry]]:
    """Within the block, the gradients of ``model``'s parameters as the next optimizer step finds
    them (any torch optimizer: a global step pre-hook), added to the yielded list."""
    names = _parameter_names(model)
    found: list[TensorEntry] = []

    def capture(optimizer: Any, args: Any, kwargs: Any) -> None:
        if found:
            return
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    name = names.get(id(param), f"<unnamed {tuple(param.shape)}>")
                    found.append(_entry("gradient", name, param.grad))

    from torch.optim.optimizer import register_optimizer_step_pre_hook

    handle = register_optimizer_step_pre_hook(capture)
    try:
        yield found
    finally:
        handle.remove()


def inventory(
    model: torch.nn.Module,
    optimizer: Any,
    gradients: Iterable[TensorEntry] = (),
    holders: Mapping[str, Any] | None = None,
) -> list[TensorEntry]:
    """Every tensor of the process after a step, by kind and name (see the module's docstring); one held in
    an attribute of one of ``holders`` (the engine: ``{"engine": ...}``) is named ``engine.ATTR``."""
    names = _parameter_names(model)
    entries = [_entry("parameter", name, p) for name, p in model.named_parameters()]
    entries += list(gradients)
    entries += [_entry("buffer", name, b) for name, b in model.named_buffers()]
    known: list[torch.Tensor] = [*model.parameters(), *model.buffers()]
    known += [p.grad for p in model.parameters() if p.grad is not None]
    for param, state in getattr(optimizer, "state", {}).items():
        owner = names.get(id(param), f"<unnamed {tuple(param.shape)}>")
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                entries.append(_entry("optimizer_state", f"{owner}:{key}", value))
                known.append(value)
    others = [t for t in other_live_tensors(known) if t.device.type != "meta"]
    wanted = {id(t) for t in others if t.numel() * t.element_size() >= HELD_FROM}
    held: dict[int, str] = {}
    if wanted:
        for path, module in model.named_modules():  # a plain attribute: ``self.cache = ...``
            _look_in(vars(module), f"model.{path}." if path else "model.", wanted, held)
        for holder, value in (holders or {}).items():
            _look_in(getattr(value, "__dict__", {}), f"{holder}.", wanted, held)
        for module_name, module in list(sys.modules.items()):
            namespace = getattr(module, "__dict__", None)
            if type(namespace) is dict:
                _look_in(namespace, f"{module_name}.", wanted, held)
    entries += [_entry("other", held.get(id(t), ""), t) for t in others]
    return entries


def _look_in(namespace: Mapping[str, Any], prefix: str, wanted: set[int], found: dict[int, str]) -> None:
    """Name each of the tensors ``wanted`` (by id) that ``namespace`` holds, directly or in a list, tuple
    or dict, as ``prefix`` + ``NAME``, ``NAME[i]`` or ``NAME['key']``; a name found first is kept."""
    # Plain containers only: a library's mapping may import or build things when iterated
    # (transformers' lazy auto-mappings load every model class).
    for attr, value in list(namespace.items()):
        if id(value) in wanted:
            found.setdefault(id(value), f"{prefix}{attr}")
        elif type(value) in (list, tuple) and len(value) <= 1000:
            for i, item in enumerate(value):
                if id(item) in wanted:
                    found.setdefault(id(item), f"{prefix}{attr}[{i}]")
        elif type(value) is dict and len(value) <= 1000:
            for key, item in list(value.items()):
                if id(item) in wanted:
                    found.setdefault(id(item), f"{prefix}{attr}[{key!r}]")


class StepRecorder:
    """Per step: a digest of every tensor the model is called with, the learning rates after the
    step, and (where asked) each parameter's gradient norm once its gradient is complete, before any
    clipping: a hook after each accumulation (the last micro-batch's value is the step's), or under
    DeepSpeed's ZeRO, which takes each micro-batch's gradient into its own partitions, the whole
    gradient its update is about to use, and the last micro-batch's apart.

    ``optimizer`` (the one holding the learning rates) and ``stepped`` (the optimizer as the engine
    steps it) may be given as functions that return them: the Trainer makes its optimizer only once
    it trains, so they are looked up at the first forward, before any gradient exists."""

    def __init__(self, model: torch.nn.Module, optimizer: Any, *, stepped: Any = None) -> None:
        import xxhash

        self._names = _parameter_names(model)
        self._model = model
        self._optimizer, self._stepped = optimizer, stepped
        self._digest = xxhash.xxh3_64()
        self._norms: dict[str, float] = {}
        self._micro: dict[str, float] | None = None
        self._grads = False
        self._looked_up = False
        self._undo: list[Callable[[], None]] = []
        self._handles: list[Any] = [model.register_forward_pre_hook(self._inputs, with_kwargs=True)]
        self._handles += [
            p.register_post_accumulate_grad_hook(self._gradient)  # type: ignore[no-untyped-call]
            for p in model.parameters()
            if p.requires_grad
        ]

    def _look_up(self) -> None:
        from perfsuite.worker.engines.deepspeed import before_zero_update, zero_optimizer

        self._looked_up = True
        if callable(self._optimizer):
            self._optimizer = self._optimizer()
        zero = zero_optimizer(self._stepped() if callable(self._stepped) else self._stepped)
        if zero is not None:
            self._micro = {}
            self._undo.append(before_zero_update(zero, self._zero_gradients))

    def _inputs(self, module: Any, args: Any, kwargs: Any) -> None:
        if not self._looked_up:
            self._look_up()
        # The batch's tensors; a 0-dim one is a count the caller passes beside them (the Trainer's
        # num_items_in_batch), not data.
        for value in [*args, *(kwargs[k] for k in sorted(kwargs))]:
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                flat = value.detach().to("cpu").contiguous()
                self._digest.update(f"{flat.dtype}|{tuple(flat.shape)}|".encode())
                if flat.numel():
                    self._digest.update(flat.reshape(-1).view(torch.uint8).numpy().data)

    def _gradient(self, param: torch.Tensor) -> None:
        if self._grads and param.grad is not None:
            into = self._norms if self._micro is None else self._micro  # under ZeRO: this micro-batch's
            into[self._names.get(id(param), "?")] = float(param.grad.detach().float().norm())

    def _zero_gradients(self) -> None:
        from perfsuite.worker.engines.deepspeed import full_gradient

        if not self._grads:
            return
        for name, param in self._model.named_parameters():
            grad = full_gradient(param) if param.requires_grad else None
            if grad is not None:
                self._norms[name] = float(grad.detach().float().norm())

    def begin(self, *, grads: bool) -> None:
        self._digest.reset()
        self._norms = {}
        self._micro = None if self._micro is None else {}
        self._grads = grads

    def end(self, loss: torch.Tensor | float) -> StepFacts:
        lr = tuple(float(group["lr"]) for group in getattr(self._optimizer, "param_groups", ()))
        grads, micro = (dict(self._norms), self._micro) if self._grads else (None, None)
        return StepFacts(float(loss), self._digest.hexdigest(), lr, grads, dict(micro) if micro is not None else None)

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        for undo in self._undo:
            undo()
