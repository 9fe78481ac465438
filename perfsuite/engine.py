"""The training engine: one explicit optimizer step on accelerate.

:meth:`Trainer.step` is the whole training loop body, in the order a reader expects:
micro-batch forward, scaled backward, accumulation, clipping, optimizer step.
accelerate supplies autocast, the GradScaler, accumulation bookkeeping and the
DeepSpeed engine; everything a strategy changes is decided in ``__init__``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from perfsuite.data import TOKENS_KEY, WORKER_KEY
from perfsuite.optimizers import build_optimizer, state_bytes

if TYPE_CHECKING:
    from torch.utils.data import DataLoader
    from transformers import PreTrainedModel

    from perfsuite.device import Device
    from perfsuite.strategies import Strategy


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deepspeed_config(
    strategy: Strategy, *, micro_batch_size: int, lr: float, max_grad_norm: float, hidden_size: int
) -> dict[str, Any]:
    """The DeepSpeed config of a ZeRO strategy (DeepSpeed's own AdamW; CPU Adam when offloading).

    Bucket sizes follow the HF Trainer's ``"auto"`` values, which scale with the model:
    DeepSpeed's bare defaults allocate a 500M-element (2 GB) gradient bucket and keep
    every parameter under 100k elements whole, i.e. all of a small model.
    """
    zero: dict[str, Any] = {"stage": strategy.zero_stage, "reduce_bucket_size": hidden_size * hidden_size}
    if strategy.zero_stage == 3:
        zero["stage3_prefetch_bucket_size"] = int(0.9 * hidden_size * hidden_size)
        zero["stage3_param_persistence_threshold"] = 10 * hidden_size
    if strategy.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    if strategy.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    return {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": strategy.grad_accum_steps,
        "gradient_clipping": max_grad_norm,
        "zero_optimization": zero,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0}},
        "fp16": {"enabled": strategy.precision == "fp16"},
        "bf16": {"enabled": strategy.precision == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def _enable_checkpointing(model: Any, *, offload: bool = False) -> None:
    # transformers 5 renamed gradient_checkpointing_enable (the old name warns); 4.x has only the old one.
    kwargs = {"use_reentrant": False}
    if offload:
        import inspect

        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is None or "offload" not in inspect.signature(enable).parameters:
            from perfsuite.case import CaseSkipped

            raise CaseSkipped(
                "activation offloading needs transformers >= 5.17 (activation_checkpointing_enable(offload=...))"
            )
        # The saved checkpoint inputs go to pinned host memory (torch.autograd.graph.save_on_cpu).
        enable(activation_checkpointing_kwargs=kwargs, offload=True)
    elif hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _checkpointing_enabled(model: Any) -> bool:
    # transformers 5 renamed is_gradient_checkpointing; 4.x only has the old name.
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _skip_shm_comm_build() -> None:
    # On CPU, deepspeed.comm JIT-compiles a shared-memory allreduce op at init (~1 min on
    # two cores) that a world of one process never uses. The switch is internal, hence
    # the guard: without it the op is merely built.
    try:
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    except (ImportError, AttributeError, TypeError):
        pass


def _group_flag(optimizer: torch.optim.Optimizer, key: str) -> Any:
    values = {group.get(key) for group in optimizer.param_groups}
    return values.pop() if len(values) == 1 else sorted(values, key=str)


def _galore_evidence(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Which parameters GaLore projects, to what rank, and what its state holds."""
    projected = [p for group in optimizer.param_groups if "rank" in group for p in group["params"]]
    projectors = [optimizer.state[p]["projector"] for p in projected if "projector" in optimizer.state[p]]
    moments = [optimizer.state[p]["exp_avg"] for p in projected if "exp_avg" in optimizer.state[p]]
    projected_state = [
        v for p in projected for v in optimizer.state[p].values() if isinstance(v, torch.Tensor) and v.dim() > 0
    ]
    return {
        "projected_parameters": len(projected),
        "projected_numel": sum(p.numel() for p in projected),
        "projected_moment_bytes": sum(v.numel() * v.element_size() for v in projected_state),
        "projectors": len(projectors),
        "rank": next((g["rank"] for g in optimizer.param_groups if "rank" in g), None),
        "moment_shapes_vs_weights": [[list(m.shape), list(p.shape)] for m, p in zip(moments, projected, strict=False)][
            :4
        ],
        "projector_bytes": sum(
            int(pr.ortho_matrix.numel() * pr.ortho_matrix.element_size())
            for pr in projectors
            if isinstance(getattr(pr, "ortho_matrix", None), torch.Tensor)
        ),
    }


def _dynamo_evidence(model: Any) -> dict[str, Any]:
    """What torch.compile did: the wrapper, and dynamo's process-wide counters (one case per process)."""
    from torch._dynamo.utils import counters

    frames = dict(counters["frames"])
    stats = dict(counters["stats"])
    return {
        "wrapper": type(model).__name__,
        "compiled_module": type(getattr(model, "_orig_mod", model)).__name__,
        "frames_ok": int(frames.get("ok", 0)),
        "frames_total": int(frames.get("total", 0)),
        "unique_graphs": int(stats.get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        # Past torch._dynamo.config.recompile_limit a frame silently runs eager from then on.
        "recompile_limit_hits": int(
            sum(n for reason, n in counters["unimplemented"].items() if "recompile limit" in reason.lower())
        ),
    }


class Trainer:
    """A model, an optimizer and a batch stream, set up the way ``strategy`` says."""

    def __init__(
        self,
        model: PreTrainedModel,
        strategy: Strategy,
        loader: DataLoader[Any],
        device: Device,
        *,
        lr: float,
        max_grad_norm: float,
        batch_size: int,
    ) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DeepSpeedPlugin, DummyOptim

        self.strategy = strategy
        self.loader = loader
        self.max_grad_norm = max_grad_norm
        self.accum_steps = strategy.grad_accum_steps
        self.micro_batch_size = batch_size // strategy.grad_accum_steps
        self.workers_seen: set[int] = set()
        self.pinned_batches = 0
        self.batches_seen = 0

        plugin = None
        if strategy.uses_deepspeed:
            # One process, world size 1: DeepSpeed still wants a process group (gloo on CPU).
            for key, value in (("MASTER_ADDR", "127.0.0.1"), ("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
                os.environ.setdefault(key, value)
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            if not device.is_accelerator:
                os.environ.setdefault("DS_ACCELERATOR", "cpu")
            config = deepspeed_config(
                strategy,
                micro_batch_size=self.micro_batch_size,
                lr=lr,
                max_grad_norm=max_grad_norm,
                hidden_size=int(model.config.hidden_size),
            )
            plugin = DeepSpeedPlugin(hf_ds_config=config)
            _skip_shm_comm_build()
        self.accelerator = Accelerator(
            # cpu=True would make accelerate skip the DeepSpeed plugin; DS_ACCELERATOR=cpu places it.
            cpu=not device.is_accelerator and plugin is None,
            mixed_precision="no" if strategy.precision == "fp32" else strategy.precision,
            gradient_accumulation_steps=strategy.grad_accum_steps,
            deepspeed_plugin=plugin,
        )
        if strategy.precision == "fp16" and not device.is_accelerator and not strategy.uses_deepspeed:
            self._enable_cpu_fp16()
        self.base_model = model  # accelerate's unwrap_model() would import deepspeed (seconds) to look
        if strategy.lora_rank:
            from perfsuite.adapters import apply_lora

            model = apply_lora(model, strategy.lora_rank, quantized=strategy.quantize_4bit)
        if strategy.grad_checkpointing:
            # Non-reentrant checkpointing restores the RNG state when recomputing, so
            # dropout masks (and the loss) match a run without checkpointing.
            _enable_checkpointing(self.base_model, offload=strategy.activation_offload)
            if strategy.lora_rank:
                # Frozen embeddings give checkpointed blocks inputs without grad; this hook
                # makes them require it (transformers >= 5.23 does it too, 4.x does not).
                self.base_model.enable_input_require_grads()  # type: ignore[no-untyped-call]
        if strategy.uses_deepspeed:
            optimizer: Any = DummyOptim(model.parameters(), lr=lr)
        else:
            optimizer = build_optimizer(strategy.optimizer, model, lr)
        self.trained_model = model  # the model handed to accelerate (peft-wrapped for LoRA), before compiling
        if strategy.compile:
            model = torch.compile(model)  # type: ignore[assignment]
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.batches: Iterator[dict[str, torch.Tensor]] = iter(loader)

    def _enable_cpu_fp16(self) -> None:
        # accelerate creates a GradScaler for fp16 only on accelerators and, on CPU,
        # silently trains in fp32 instead. torch >= 2.3 has CPU fp16 autocast and a
        # CPU GradScaler, so give accelerate both before prepare() wraps the model;
        # the strategy tests check the matmuls really run in fp16.
        self.accelerator.native_amp = True
        self.accelerator.scaler = torch.amp.GradScaler("cpu")

    def _next_batch(self) -> tuple[dict[str, torch.Tensor], int, int]:
        batch = next(self.batches)
        real, padded = batch.pop(TOKENS_KEY).tolist()
        self.workers_seen.add(int(batch.pop(WORKER_KEY)))
        self.pinned_batches += int(batch["input_ids"].is_pinned())
        self.batches_seen += 1
        moved = {k: v.to(self.accelerator.device, non_blocking=True) for k, v in batch.items()}
        return moved, real, padded

    def step(self, before_micro_batch: Callable[[], None] | None = None) -> StepOutput:
        """One optimizer step over ``accum_steps`` micro-batches (``before_micro_batch`` is for instruments)."""
        total = torch.zeros((), device=self.accelerator.device)
        real = padded = 0
        for _ in range(self.accum_steps):
            if before_micro_batch is not None:
                before_micro_batch()
            batch, n_real, n_padded = self._next_batch()
            with self.accelerator.accumulate(self.model):
                loss = self.model(**batch).loss  # forward; autocast is applied by prepare()
                self.accelerator.backward(loss)  # ÷ accum_steps, GradScaler-scaled in fp16
            total += loss.detach().float()
            real, padded = real + n_real, padded + n_padded
        grad_norm = self.accelerator.clip_grad_norm_(self.params, self.max_grad_norm)  # unscales first
        self.optimizer.step()  # GradScaler skips it on inf/nan gradients; DeepSpeed stepped in backward
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutput(
            total / self.accum_steps, grad_norm, real, padded, self.accelerator.optimizer_step_was_skipped
        )

    @property
    def inner_optimizer(self) -> torch.optim.Optimizer:
        """The optimizer that holds the state and does the update."""
        opt = self.optimizer.optimizer  # accelerate's wrapper
        if self.strategy.uses_deepspeed:
            opt = opt.optimizer  # DeepSpeed's ZeRO optimizer wraps the one that updates (CPU Adam when offloading)
        return opt  # type: ignore[no-any-return]

    def evidence(self) -> dict[str, Any]:
        """What the run observably did, for the tests that check each strategy is applied."""
        opt = self.inner_optimizer
        info: dict[str, Any] = {
            "precision": self.strategy.precision,
            "autocast": bool(self.accelerator.native_amp),
            "grad_scaler": self.accelerator.scaler is not None,
            "gradient_checkpointing": _checkpointing_enabled(self.base_model),
            "optimizer_class": f"{type(opt).__module__}.{type(opt).__qualname__}",
            "accumulation_steps": self.accelerator.gradient_accumulation_steps,
            "micro_batch_size": self.micro_batch_size,
            "num_workers": self.loader.num_workers,
            "pin_memory": self.loader.pin_memory,
            "workers_seen": sorted(self.workers_seen),
            "pinned_batches": self.pinned_batches,
            "batches_seen": self.batches_seen,
            "padding": self.strategy.padding,
            "length_grouped": self.strategy.length_grouped,
            "deepspeed": self._deepspeed_evidence() if self.strategy.uses_deepspeed else None,
            "optimizer_state_bytes": None if self.strategy.uses_deepspeed else state_bytes(opt),
            "fused": _group_flag(opt, "fused"),
            "attention_implementation": getattr(self.base_model.config, "_attn_implementation", None),
            "trainable_parameters": sum(p.numel() for p in self.trained_model.parameters() if p.requires_grad),
            "frozen_parameters_with_grad": sum(
                1 for p in self.trained_model.parameters() if not p.requires_grad and p.grad is not None
            ),
        }
        if self.strategy.lora_rank:
            from perfsuite.adapters import lora_evidence

            info["lora"] = lora_evidence(self.trained_model)
        if self.strategy.optimizer == "galore_adamw":
            info["galore"] = _galore_evidence(opt)
        if self.strategy.compile:
            info["compile"] = _dynamo_evidence(self.model)
        return info

    def _deepspeed_evidence(self) -> dict[str, Any]:
        from perfsuite.measure import deepspeed_state

        return deepspeed_state(self.model, self.optimizer)

    def close(self) -> None:
        """Release DataLoader workers and the process group, so nothing outlives the case."""
        self.batches = iter(())
        del self.loader
        self.accelerator.free_memory()  # DeepSpeed's teardown still needs the process group
        if self.strategy.uses_deepspeed:
            import deepspeed.comm

            # DeepSpeed's destroy also drops its cached groups (torch's alone leaves them stale).
            deepspeed.comm.destroy_process_group()
