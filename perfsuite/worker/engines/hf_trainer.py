"""The Hugging Face ``Trainer`` engine: the same case through ``transformers.Trainer``.

Most users train with the Trainer, and it decides much on its own (optimizer defaults,
weight decay, the LR schedule, how it divides the loss under accumulation, whether fp16
is really used), so a regression there is invisible to an explicit loop. This engine
maps a strategy onto ``TrainingArguments`` and pins every default the Trainer would
otherwise choose, so a case means the same training as in the loop engine: AdamW
(or the strategy's optimizer) with no weight decay, a constant learning rate, clipping
at ``max_grad_norm``, the seed, the data order (the loop's seeded order, through the
Trainer's sequential sampler; its own length-grouped sampler for smart batching), no
evaluation, no checkpoints, no reporting integrations, no progress bar.

The Trainer owns its loop, so :meth:`HFTrainerEngine.step` runs ``train()`` in a thread
that a callback holds after each optimizer step's log: the case advances it one step
at a time, exactly as it drives the loop engine, and times the whole period between
successive steps (the Trainer fetches the next batches outside ``on_step_begin`` /
``on_step_end``); that window is recorded too (``applied["trainer"]["step_window_s"]``).
The loss and grad norm of each step come from the Trainer's own log (``logging_steps=1``,
NaN filtering off, so a NaN still fails the case).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import transformers.trainer  # noqa: F401  # with the engine, so a forkserver that preloads it has the Trainer
from transformers import TrainerCallback

from perfsuite.core.engines import trainer_unsupported
from perfsuite.worker.engines.common import (
    checkpointing_enabled,
    dynamo_evidence,
    galore_evidence,
    group_flag,
)
from perfsuite.worker.engines.deepspeed import deepspeed_state, end_process_group
from perfsuite.worker.engines.interface import ENGINE_API_VERSION, StepOutput, Unsupported
from perfsuite.worker.engines.trainer_setup import trainer_inputs, training_arguments
from perfsuite.worker.optimizers import state_bytes

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from perfsuite.worker.engines.common import OwnCase


class _CountingCollator:
    """Counts the batches each DataLoader worker builds (shared memory survives the fork)."""

    def __init__(self, inner: Any, counts: Any) -> None:
        self.inner = inner
        self.counts = counts

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        info = torch.utils.data.get_worker_info()
        slot = 0 if info is None else info.id + 1
        if slot < len(self.counts):
            self.counts[slot] += 1
        return self.inner(features)


class _Stepper(TrainerCallback):
    """The Trainer callback that hands control back to the case after every optimizer step."""

    def __init__(self, engine: HFTrainerEngine) -> None:
        self.engine = engine
        self.go = threading.Semaphore(0)
        self.done = threading.Semaphore(0)
        self.stop = False
        self.logs: list[dict[str, float]] = []
        self.task: Callable[[], float] | None = None
        """Work to run in the training thread while it waits between steps (the calibration)."""
        self.task_result: float | BaseException = 0.0
        self.window = engine.device.timer()  # on_step_begin → on_step_end; CUDA events read at the end
        self.skipped: list[bool] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.engine.before_micro_batch()
        self.window.start()

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.engine.before_micro_batch()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.window.stop()
        self.skipped.append(bool(self.engine.hf.accelerator.optimizer_step_was_skipped))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> Any:
        if not logs or "loss" not in logs:
            return control  # the end-of-training summary
        self.logs.append(dict(logs))
        self.engine.end_step()
        self.done.release()
        self.go.acquire()  # the case's next step() or close(), or a task to run here first
        while self.task is not None:
            task, self.task = self.task, None
            try:
                self.task_result = task()
            except BaseException as exc:  # handed back to in_training_thread's caller
                self.task_result = exc
            self.done.release()
            self.go.acquire()
        if self.stop:
            control.should_training_stop = True
        else:
            self.engine.begin_step()
        return control


class HFTrainerEngine:
    """A ``transformers.Trainer`` set up the way ``strategy`` says, driven one optimizer step at a time."""

    api_version = ENGINE_API_VERSION

    def __init__(self, case: OwnCase) -> None:
        from transformers import AutoTokenizer, TrainingArguments

        strategy, deepspeed, batch_size, seed = case.strategy, case.deepspeed, case.batch_size, case.seed
        reason = trainer_unsupported(strategy)
        if reason:
            raise Unsupported(f"{strategy.name} through the Trainer: {reason}")
        if strategy.uses_deepspeed and deepspeed is None:
            raise ValueError(f"{strategy.name} needs its DeepSpeed config (engines.deepspeed.deepspeed_setup)")
        tokenizer = None
        if case.tokenizer is not None:  # a case on real text: the Trainer's collators pad with it
            tokenizer = AutoTokenizer.from_pretrained(case.tokenizer, local_files_only=True)
        self.strategy = strategy
        self.accum_steps = strategy.grad_accum_steps
        self.micro_batch_size = batch_size // strategy.grad_accum_steps
        self.device = case.hardware
        self._output_dir = tempfile.TemporaryDirectory(prefix="perfsuite-trainer-")
        kwargs = training_arguments(
            strategy,
            output_dir=self._output_dir.name,
            micro_batch_size=self.micro_batch_size,
            lr=case.lr,
            max_grad_norm=case.max_grad_norm,
            seed=seed,
            max_steps=case.max_steps,
            on_accelerator=self.device.is_accelerator,
            pin_memory=case.pin_memory,
            deepspeed=deepspeed,
        )
        self.args = TrainingArguments(**kwargs)
        train_dataset, collator, trainer_cls = trainer_inputs(
            strategy,
            case.dataset,
            batch_size=batch_size,
            seq_len=case.seq_len,
            target_len=case.model_spec.target_len,
            seed=seed,
            tokenizer=tokenizer,
        )
        # No lock: each slot has one writer, its process.
        self.worker_batches = multiprocessing.Array("l", 1 + max(strategy.num_workers, 0), lock=False)
        self.base_model = model = case.model
        if strategy.lora_rank:
            from perfsuite.worker.adapters import apply_lora

            model = apply_lora(model, strategy.lora_rank, quantized=False)
        self.trained_model = model
        self.stepper = _Stepper(self)
        self.hf = trainer_cls(
            model=model,
            args=self.args,
            train_dataset=train_dataset,
            data_collator=_CountingCollator(collator, self.worker_batches),
            callbacks=[self.stepper],
        )
        self._drop_printer()
        self.tokens: list[Any] = [torch.zeros((), dtype=torch.long), 0]
        self._hook = self.base_model.register_forward_pre_hook(self._count_tokens, with_kwargs=True)
        self._within: contextlib.ExitStack = contextlib.ExitStack()
        self._pending_within: AbstractContextManager[Any] | None = None
        self._before: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._finished = False

    def _drop_printer(self) -> None:
        # With disable_tqdm the Trainer prints every log dict through PrinterCallback.
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for cls in (PrinterCallback, ProgressCallback):
            self.hf.remove_callback(cls)

    # -- what the case drives ----------------------------------------------------------

    def _count_tokens(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        # Summed on the device and read once per step, outside the Trainer's step window.
        mask = kwargs.get("attention_mask")
        if mask is None:
            return
        self.tokens[0] = self.tokens[0].to(mask.device) + mask.sum()
        self.tokens[1] += int(mask.numel())
        labels = kwargs.get("labels")
        if labels is not None and labels.dim() == 2 and labels.shape != mask.shape:
            # seq2seq targets count as tokens, as in the loop's collator
            self.tokens[0] = self.tokens[0] + (labels != -100).sum()
            self.tokens[1] += int(labels.numel())

    def before_micro_batch(self) -> None:
        if self._before is not None:
            self._before()

    def begin_step(self) -> None:
        """In the training thread, before a step: enter the case's instruments."""
        if self._pending_within is not None:
            self._within.enter_context(self._pending_within)
            self._pending_within = None

    def end_step(self) -> None:
        """In the training thread, after a step's log: leave the instruments."""
        self._within.close()
        self._within = contextlib.ExitStack()

    def _train(self) -> None:
        try:
            self.begin_step()
            self.hf.train()
        except BaseException as exc:  # handed to the case's step()
            self._error = exc
            self._within.__exit__(*sys.exc_info())
        finally:
            self._finished = True
            self.stepper.done.release()

    def step(
        self,
        before_micro_batch: Callable[[], None] | None = None,
        within: AbstractContextManager[Any] | None = None,
    ) -> StepOutput:
        """Let the Trainer run one optimizer step, and report it as the loop engine does."""
        if self._finished:
            raise RuntimeError(f"the Trainer stopped after {len(self.stepper.logs)} steps: {self._error!r}")
        self._before = before_micro_batch
        self._pending_within = within
        steps_before = len(self.stepper.logs)
        self.tokens = [torch.zeros((), dtype=torch.long), 0]
        if self._thread is None:
            self._thread = threading.Thread(target=self._train, name="hf-trainer", daemon=True)
            self._thread.start()
        else:
            self.stepper.go.release()
        self.stepper.done.acquire()
        if self._error is not None:
            raise self._error
        if len(self.stepper.logs) == steps_before:
            raise RuntimeError(f"the Trainer ended after {steps_before} steps (max_steps {self.args.max_steps})")
        logs = self.stepper.logs[-1]
        grad_norm = logs.get("grad_norm")
        return StepOutput(
            loss=torch.tensor(logs["loss"], dtype=torch.float64),
            grad_norm=None if grad_norm is None else float(grad_norm),
            real_tokens=int(self.tokens[0]),
            padded_tokens=int(self.tokens[1]),
            skipped=self.stepper.skipped[-1] if self.stepper.skipped else False,
        )

    def in_training_thread(self, fn: Callable[[], float]) -> float:
        """Run ``fn`` in the Trainer's thread, parked between two steps (in the case's own
        thread before the first step or after the last)."""
        if self._thread is None or self._finished:
            return fn()
        self.stepper.task = fn
        self.stepper.go.release()
        self.stepper.done.acquire()
        result = self.stepper.task_result
        if isinstance(result, BaseException):
            raise result
        return result

    # -- what the instruments read -----------------------------------------------------

    @property
    def model(self) -> Any:
        return self.hf.model_wrapped if self.strategy.uses_deepspeed else self.hf.model

    @property
    def optimizer(self) -> Any:
        return self.hf.optimizer

    @property
    def inner_optimizer(self) -> Any:
        opt = self.hf.optimizer.optimizer  # accelerate's wrapper
        if self.strategy.uses_deepspeed:
            opt = opt.optimizer
        return opt

    @property
    def accelerator(self) -> Any:
        return self.hf.accelerator

    def evidence(self) -> dict[str, Any]:
        """What the Trainer really did, read from its own objects."""
        opt = self.inner_optimizer
        loader = getattr(self.hf.callback_handler, "train_dataloader", None)
        sampler = getattr(loader, "sampler", None)
        batch_sampler = getattr(loader, "batch_sampler", None)
        inner_sampler = getattr(batch_sampler, "sampler", None) or sampler
        counts = [int(n) for n in self.worker_batches[:]]
        info: dict[str, Any] = {
            "engine": "trainer",
            "precision": self.strategy.precision,
            "autocast": bool(self.hf.accelerator.native_amp),
            "grad_scaler": self.hf.accelerator.scaler is not None,
            "gradient_checkpointing": checkpointing_enabled(self.base_model),
            "optimizer_class": f"{type(opt).__module__}.{type(opt).__qualname__}",
            "accumulation_steps": int(self.hf.args.gradient_accumulation_steps),
            "micro_batch_size": int(self.hf.args.per_device_train_batch_size),
            "num_workers": getattr(loader, "num_workers", None),
            "pin_memory": getattr(loader, "pin_memory", None),
            "workers_seen": [i - 1 for i, n in enumerate(counts) if n],
            "batches_by_worker": counts,
            "pinned_batches": None,
            "batches_seen": sum(counts),
            "padding": self.strategy.padding,
            "length_grouped": type(inner_sampler).__name__ == "LengthGroupedSampler",
            "sampler": type(inner_sampler).__name__ if inner_sampler is not None else None,
            "deepspeed": None,
            "optimizer_state_bytes": None if self.strategy.uses_deepspeed else state_bytes(opt),
            "fused": group_flag(opt, "fused"),
            "weight_decay": sorted({float(g.get("weight_decay", 0.0)) for g in opt.param_groups}),
            "learning_rates": sorted({round(float(log["learning_rate"]), 12) for log in self.stepper.logs}),
            "attention_implementation": getattr(self.base_model.config, "_attn_implementation", None),
            "trainable_parameters": sum(p.numel() for p in self.trained_model.parameters() if p.requires_grad),
            "frozen_parameters_with_grad": sum(
                1 for p in self.trained_model.parameters() if not p.requires_grad and p.grad is not None
            ),
            "trainer": {
                "transformers_class": f"{type(self.hf).__module__}.{type(self.hf).__qualname__}",
                "distributed_type": str(self.hf.accelerator.distributed_type),
                "deepspeed_enabled": bool(getattr(self.hf, "is_deepspeed_enabled", False)),
                "step_window_s": self.stepper.window.elapsed(),
                "logged_steps": len(self.stepper.logs),
            },
        }
        if self.strategy.uses_deepspeed:
            info["deepspeed"] = deepspeed_state(self.hf.model_wrapped, self.hf.optimizer)
        if self.strategy.lora_rank:
            from perfsuite.worker.adapters import lora_evidence

            info["lora"] = lora_evidence(self.trained_model)
        if self.strategy.optimizer == "galore_adamw":
            info["galore"] = galore_evidence(opt)
        if self.strategy.compile:
            info["compile"] = dynamo_evidence(self.hf.model)
        return info

    def close(self) -> None:
        """Let ``train()`` return, then release its workers, process group and output directory."""
        if self._thread is not None and not self._finished:
            self.stepper.stop = True
            self.stepper.go.release()
            self._thread.join(timeout=60)
        self._hook.remove()
        self.hf.accelerator.free_memory()
        if self.strategy.uses_deepspeed:
            end_process_group()
        self._output_dir.cleanup()

    def discard(self) -> None:
        """Its output directory, when the engine is left unclosed to the worker's exit
        (:mod:`perfsuite.worker.teardown`)."""
        self._output_dir.cleanup()
