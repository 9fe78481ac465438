"""Building a case inside its worker: the checks that may skip it, its data, model and engine.

Nothing here is timed. :func:`build` returns what :mod:`perfsuite.worker.run` drives and
what the record (:mod:`perfsuite.worker.record`) reports of the setup.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfsuite.core.engines import OWN_ENGINES
from perfsuite.core.spec import CaseSkipped, CaseSpec

if TYPE_CHECKING:
    from perfsuite.worker.device import Device
    from perfsuite.worker.engines.interface import Engine


@dataclass
class Built:
    """A case ready to step, and what was decided while building it."""

    engine: Engine
    device: Device
    batch_size: int
    seq_len: int
    lr: float
    dataset: str
    """The data file, or ``generated:<task>``."""
    pretrained: str | None
    num_parameters: int
    model_config: dict[str, Any]
    initial_weights: str
    """The digest of the weights as built, before any strategy touched them (:mod:`perfsuite.worker.weights`)."""
    sequences: bool = True
    """Whether a batch is made of sequences, whose positions a step that returns a bare loss counts as
    its tokens (a project's batch maker that takes no ``seq_len``, an image model's, makes none)."""

    @property
    def token_positions(self) -> int:
        """The token positions of a step's batch (0 where it holds no sequences)."""
        return self.batch_size * self.seq_len if self.sequences else 0


def check_runnable(spec: CaseSpec, device: Device | None = None) -> None:
    """Raise :class:`CaseSkipped` with the reason when ``spec`` cannot run here (a missing package;
    with ``device``, a precision it lacks or a GPU-only technique)."""
    strategy = spec.strategy_spec
    unmet = strategy.unmet_requirements()
    if unmet:
        raise CaseSkipped(unmet)
    if device is None:
        return
    reason = device.precision_unsupported(strategy.precision, deepspeed=strategy.uses_deepspeed)
    if reason:
        raise CaseSkipped(reason)
    if strategy.gpu_only and not device.is_accelerator:
        raise CaseSkipped(f"{strategy.name} needs a GPU: {strategy.gpu_only}")


def own_engine_class(name: str) -> type:
    """perfsuite's own engine ``name``, imported from its row of :data:`~perfsuite.core.engines.OWN_ENGINES`."""
    module, _, attribute = OWN_ENGINES[name].engine_class.partition(":")
    return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


def build(spec: CaseSpec, *, rank: int = 0, world_size: int = 1) -> Built:
    """The case's data, model and engine, seeded; rank ``rank`` of ``world_size`` takes its share of each batch."""
    import torch

    from perfsuite.worker.data import generate_dataset, load_text_dataset
    from perfsuite.worker.device import get_device
    from perfsuite.worker.modeling import build_model
    from perfsuite.worker.weights import initial_weights_digest

    strategy, model_spec = spec.strategy_spec, spec.model_spec
    device = get_device(spec.device)
    check_runnable(spec, device)
    batch_size = spec.batch_size or strategy.batch_size or model_spec.batch_size
    if batch_size % (strategy.grad_accum_steps * world_size):
        raise ValueError(
            f"batch size {batch_size} does not split into {strategy.grad_accum_steps} micro-batches "
            f"across {world_size} rank(s)"
        )
    seq_len = spec.seq_len or model_spec.seq_len
    lr = spec.lr or (1e-3 if model_spec.tiny else 1e-4)
    if spec.engine_spec is not None:
        return _build_project_case(spec, device, batch_size=batch_size, seq_len=seq_len, lr=lr)
    # The case's own data and weights, else the model's declared ones.
    data_file, tokenizer_dir = spec.dataset, spec.tokenizer
    if data_file is None:
        data_file, tokenizer_dir = model_spec.data, model_spec.tokenizer
    pretrained = spec.pretrained or model_spec.pretrained
    torch.manual_seed(spec.seed)
    vocab_size = None
    if data_file is not None:
        assert tokenizer_dir is not None
        dataset = load_text_dataset(data_file, tokenizer=tokenizer_dir, task=model_spec.task, seq_len=seq_len)
        if pretrained is None:
            from transformers import AutoTokenizer

            vocab_size = len(AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True))
    else:
        needed = batch_size * (spec.warmup_steps + spec.steps + 2)
        dataset = generate_dataset(
            model_spec, num_samples=max(spec.num_samples, needed), seq_len=seq_len, seed=spec.seed
        )
    model = build_model(
        model_spec,
        seed=spec.seed,
        dropout=spec.dropout,
        pretrained=pretrained,
        vocab_size=vocab_size,
        attention=strategy.attention,
    )
    num_parameters = sum(p.numel() for p in model.parameters())
    model_config = model.config.to_diff_dict()
    initial_weights = initial_weights_digest(model)
    if strategy.quantize_4bit:
        from perfsuite.worker.adapters import quantize_4bit

        dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
        model = quantize_4bit(model, compute_dtype=dtypes[strategy.precision], placement=device.placement())
    from perfsuite.worker.engines.common import OwnCase
    from perfsuite.worker.engines.deepspeed import deepspeed_setup
    from perfsuite.worker.engines.interface import case_fields

    # One DeepSpeed config for whichever engine runs the case (None unless the strategy is ZeRO).
    deepspeed = deepspeed_setup(
        strategy,
        model,
        on_accelerator=device.is_accelerator,
        micro_batch_size=batch_size // strategy.grad_accum_steps // world_size,
        lr=lr,
        max_grad_norm=spec.max_grad_norm,
    )
    case = OwnCase(
        **case_fields(spec, model, torch.device(device.placement()), batch_size=batch_size, seq_len=seq_len, lr=lr),
        strategy=strategy,
        hardware=device,
        dataset=dataset,
        model_spec=model_spec,
        tokenizer=tokenizer_dir,
        deepspeed=deepspeed,
        pin_memory=strategy.pin_memory and device.pins_memory,
        rank=rank,
        world_size=world_size,
    )
    # perfsuite's own engines are built as a project's is, Class(case), from their row of OWN_ENGINES.
    engine: Engine = own_engine_class(spec.engine)(case)
    return Built(
        engine=engine,
        device=device,
        batch_size=batch_size,
        seq_len=seq_len,
        lr=lr,
        dataset=data_file or f"generated:{model_spec.task}",
        pretrained=pretrained,
        num_parameters=num_parameters,
        model_config=model_config,
        initial_weights=initial_weights,
    )


def _build_project_case(spec: CaseSpec, device: Device, *, batch_size: int, seq_len: int, lr: float) -> Built:
    """A case of the project's own model and engine (:mod:`perfsuite.worker.project`): the factory's
    model, seeded, handed to the project's engine with the batch maker and the strategy."""
    from perfsuite.worker import project
    from perfsuite.worker.weights import initial_weights_digest

    model_spec = spec.model_spec
    model = project.build_model(model_spec, seed=spec.seed)
    num_parameters = sum(p.numel() for p in model.parameters())
    initial_weights = initial_weights_digest(model)  # before the engine moves, wraps or casts it
    engine = project.build_engine(spec, model, device, batch_size=batch_size, seq_len=seq_len, lr=lr)
    return Built(
        engine=engine,
        device=device,
        batch_size=batch_size,
        seq_len=seq_len,
        lr=lr,
        dataset=f"batch:{model_spec.batch}",
        pretrained=None,
        num_parameters=num_parameters,
        model_config={"factory": model_spec.factory, "factory_args": dict(model_spec.factory_args)},
        initial_weights=initial_weights,
        sequences=project.takes_seq_len(model_spec),
    )
