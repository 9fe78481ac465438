"""The explicit engine: one optimizer step on accelerate, written out.

:meth:`LoopEngine.step` is the whole training loop body, in the order a reader expects:
micro-batch forward, scaled backward, accumulation, clipping, optimizer step.
accelerate supplies autocast, the GradScaler, accumulation bookkeeping and the
DeepSpeed engine; everything a strategy changes is decided in ``__init__``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import torch

from perfsuite.worker import optimizers
from perfsuite.worker.data import IGNORE_INDEX, TOKENS_KEY, WORKER_KEY
from perfsuite.worker.engines import common
from perfsuite.worker.engines.common import (
    checkpointing_enabled,
    dynamo_evidence,
    galore_evidence,
    group_flag,
)
from perfsuite.worker.engines.deepspeed import deepspeed_builds_optimizer, deepspeed_state, end_process_group
from perfsuite.worker.engines.interface import ENGINE_API_VERSION, StepOutput
from perfsuite.worker.optimizers import state_bytes

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from transformers import PreTrainedModel

    from perfsuite.worker.engines.common import OwnCase


class LoopEngine:
    """A model, an optimizer and a batch stream, set up the way the case's strategy says."""

    api_version = ENGINE_API_VERSION

    def __init__(self, case: OwnCase) -> None:
        from accelerate import Accelerator
        from accelerate.utils import DeepSpeedPlugin

        from perfsuite.worker.data import RankShare, build_loader

        model = cast("PreTrainedModel", case.model)
        strategy, device, deepspeed, lr = case.strategy, case.hardware, case.deepspeed, case.lr
        loader: Any = build_loader(
            case.dataset,
            strategy,
            batch_size=case.batch_size,
            seq_len=case.seq_len,
            target_len=case.model_spec.target_len,
            seed=case.seed,
            pin_memory=case.pin_memory,
        )
        if case.world_size > 1:
            loader = RankShare(loader, case.rank, case.world_size)
        if strategy.uses_deepspeed and deepspeed is None:
            raise ValueError(f"{strategy.name} needs its DeepSpeed config (engines.deepspeed.deepspeed_setup)")
        self.strategy = strategy
        self.loader = loader
        self.max_grad_norm = case.max_grad_norm
        self.accum_steps = strategy.grad_accum_steps
        self.micro_batch_size = case.batch_size // strategy.grad_accum_steps // case.world_size  # per rank
        self.world_size = case.world_size
        self.sharded = strategy.data_parallel == "fsdp2"
        self.causal_lm = case.model_spec.task == "causal_lm"
        self._micro: list[list[tuple[torch.Tensor, int]]] = []
        """Per step, each micro-batch's loss and target count (kept beyond one rank: their global mean)."""
        self.workers_seen: set[int] = set()
        self.pinned_batches = 0
        self.batches_seen = 0

        plugin = None if deepspeed is None else DeepSpeedPlugin(hf_ds_config=deepspeed)
        self.accelerator = Accelerator(
            # cpu=True would make accelerate skip the DeepSpeed plugin; DS_ACCELERATOR=cpu places it.
            # Under several ranks, cpu=True is also what makes accelerate join them (MULTI_CPU):
            # without it, on a CPU, every rank silently trains alone.
            cpu=not device.is_accelerator and plugin is None,
            # FSDP2 casts through its own policy (perfsuite.worker.distributed.fsdp), not autocast.
            mixed_precision="no" if strategy.precision == "fp32" or self.sharded else strategy.precision,
            gradient_accumulation_steps=strategy.grad_accum_steps,
            deepspeed_plugin=plugin,
        )
        if strategy.precision == "fp16" and not device.is_accelerator and not strategy.uses_deepspeed:
            self._enable_cpu_fp16()
        self.base_model = model  # accelerate's unwrap_model() would import deepspeed (seconds) to look
        if strategy.lora_rank:
            from perfsuite.worker.adapters import apply_lora

            model = apply_lora(model, strategy.lora_rank, quantized=strategy.quantize_4bit)
        if strategy.grad_checkpointing:
            # Non-reentrant checkpointing restores the RNG state when recomputing, so
            # dropout masks (and the loss) match a run without checkpointing.
            common.enable_checkpointing(self.base_model, offload=strategy.activation_offload)
            if strategy.lora_rank:
                # Frozen embeddings give checkpointed blocks inputs without grad; this hook
                # makes them require it (transformers >= 5.23 does it too, 4.x does not).
                self.base_model.enable_input_require_grads()  # type: ignore[no-untyped-call]
        if self.sharded:
            from perfsuite.worker.distributed.fsdp import shard_model

            # Each transformer block and the root become FSDP2 modules, their parameters
            # DTensors sharded across the ranks, before the optimizer sees them.
            model = shard_model(model, precision=strategy.precision)  # type: ignore[assignment]
        if strategy.uses_deepspeed and deepspeed_builds_optimizer(strategy):
            from accelerate.utils import DummyOptim  # accelerate has it only where DeepSpeed is installed

            optimizer: Any = DummyOptim(model.parameters(), lr=lr)
        else:
            optimizer = optimizers.build_optimizer(strategy.optimizer, model, lr)
        self.trained_model = model  # the model handed to accelerate (peft-wrapped for LoRA), before compiling
        if strategy.compile:
            model = torch.compile(model)  # type: ignore[assignment]
        if self.sharded:
            # accelerate would wrap it in DDP (its FSDP path does not run on a CPU); it gets the optimizer only.
            self.model, self.optimizer = model, self.accelerator.prepare(optimizer)
        else:
            self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # Seeded again once everything is built, as the HF Trainer does (set_seed in its
        # __init__): both engines then draw the same dropout masks and train identically.
        torch.manual_seed(case.seed)
        self.batches: Iterator[dict[str, torch.Tensor]] = iter(loader)

    def _enable_cpu_fp16(self) -> None:
        # accelerate creates a GradScaler for fp16 only on accelerators and, on CPU,
        # silently trains in fp32 instead. torch >= 2.3 has CPU fp16 autocast and a
        # CPU GradScaler, so give accelerate both before prepare() wraps the model;
        # the strategy tests check the matmuls really run in fp16.
        self.accelerator.native_amp = True
        self.accelerator.scaler = torch.amp.GradScaler("cpu")

    def _targets(self, labels: torch.Tensor) -> int:
        """What the loss averages over: samples, or target tokens (a causal LM predicts from position 1)."""
        if labels.dim() == 1:
            return int(labels.numel())
        if self.causal_lm:
            labels = labels[..., 1:]
        return int((labels != IGNORE_INDEX).sum())

    def _next_batch(self) -> tuple[dict[str, torch.Tensor], int, int, int]:
        """The next micro-batch on the device, its real and padded tokens, and (beyond one
        rank) what its loss averages over, counted on the host before the copy: no device sync."""
        batch = next(self.batches)
        real, padded = batch.pop(TOKENS_KEY).tolist()
        targets = self._targets(batch["labels"]) if self.world_size > 1 else 0
        self.workers_seen.add(int(batch.pop(WORKER_KEY)))
        self.pinned_batches += int(batch["input_ids"].is_pinned())
        self.batches_seen += 1
        moved = {k: v.to(self.accelerator.device, non_blocking=True) for k, v in batch.items()}
        return moved, real, padded, targets

    def step(
        self,
        before_micro_batch: Callable[[], None] | None = None,
        within: AbstractContextManager[Any] | None = None,
    ) -> StepOutput:
        """One optimizer step over ``accum_steps`` micro-batches.

        ``before_micro_batch`` and ``within`` (a context entered around the whole step, in
        the thread that runs it) are for instruments.
        """
        with within if within is not None else contextlib.nullcontext():
            return self._step(before_micro_batch)

    def _step(self, before_micro_batch: Callable[[], None] | None) -> StepOutput:
        total = torch.zeros((), device=self.accelerator.device)
        real = padded = 0
        if self.world_size > 1:
            self._micro.append([])
        for micro in range(self.accum_steps):
            if before_micro_batch is not None:
                before_micro_batch()
            batch, n_real, n_padded, targets = self._next_batch()
            if self.sharded:  # FSDP2: reduce-scatter the gradients after the last micro-batch only
                self.model.set_requires_gradient_sync(micro == self.accum_steps - 1)  # type: ignore[operator]
                loss = self.model(**batch).loss
                (loss / self.accum_steps).backward()
            else:
                with self.accelerator.accumulate(self.model):  # DDP: no all-reduce before the last micro-batch
                    loss = self.model(**batch).loss  # forward; autocast is applied by prepare()
                    self.accelerator.backward(loss)  # ÷ accum_steps, GradScaler-scaled in fp16
            total += loss.detach().float()
            if self.world_size > 1:
                self._micro[-1].append((loss.detach().float(), targets))
            real, padded = real + n_real, padded + n_padded
        if self.sharded:
            from perfsuite.worker.distributed.fsdp import clip_grad_norm

            grad_norm: Any = clip_grad_norm(self.params, self.max_grad_norm)
        else:
            grad_norm = self.accelerator.clip_grad_norm_(self.params, self.max_grad_norm)  # unscales first
        self.optimizer.step()  # GradScaler skips it on inf/nan gradients; DeepSpeed stepped in backward
        self.optimizer.zero_grad(set_to_none=True)
        return StepOutput(
            total / self.accum_steps, grad_norm, real, padded, self.accelerator.optimizer_step_was_skipped
        )

    def micro_batches(self, steps: int) -> dict[str, list[list[Any]]] | None:
        """Each of the first ``steps`` steps' micro-batch losses and target counts on this rank
        (beyond one rank; reading the losses syncs, so only after the timed steps)."""
        if self.world_size == 1:
            return None
        kept = self._micro[:steps]
        return {
            "losses": [[float(loss) for loss, _ in step] for step in kept],
            "targets": [[count for _, count in step] for step in kept],
        }

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
            "gradient_checkpointing": checkpointing_enabled(self.base_model),
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
            "deepspeed": deepspeed_state(self.model, self.optimizer) if self.strategy.uses_deepspeed else None,
            "optimizer_state_bytes": None if self.strategy.uses_deepspeed else state_bytes(opt),
            "fused": group_flag(opt, "fused"),
            "attention_implementation": getattr(self.base_model.config, "_attn_implementation", None),
            "trainable_parameters": sum(p.numel() for p in self.trained_model.parameters() if p.requires_grad),
            "frozen_parameters_with_grad": sum(
                1 for p in self.trained_model.parameters() if not p.requires_grad and p.grad is not None
            ),
        }
        if self.strategy.lora_rank:
            from perfsuite.worker.adapters import lora_evidence

            info["lora"] = lora_evidence(self.trained_model)
        if self.strategy.optimizer == "galore_adamw":
            info["galore"] = galore_evidence(opt)
        if self.strategy.compile:
            info["compile"] = dynamo_evidence(self.model)
        if self.strategy.distributed or self.world_size > 1:
            from perfsuite.worker.distributed.evidence import rank_evidence

            info["distributed"] = rank_evidence(self)
        return info

    def in_training_thread(self, fn: Callable[[], float]) -> float:
        return fn()  # the case's own thread runs the steps

    def close(self) -> None:
        """Release DataLoader workers and the process group, so nothing outlives the case."""
        self.batches = iter(())
        del self.loader
        self.accelerator.free_memory()  # DeepSpeed's teardown still needs the process group
        if self.strategy.uses_deepspeed:
            end_process_group()
