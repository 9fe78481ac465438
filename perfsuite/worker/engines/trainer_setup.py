"""What the Trainer engine hands ``transformers.Trainer``: the ``TrainingArguments`` of a strategy with
every default pinned, the case's samples in its order, transformers' collator for them, and a
Trainer class that keeps that order. Also what :mod:`perfsuite.worker.bare`'s Trainer loop builds."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from perfsuite.core.engines import TRAINER_OPTIMIZERS

if TYPE_CHECKING:
    from perfsuite.core.strategies import Strategy
    from perfsuite.worker.data import TokenDataset


def _arguments_class_fields() -> set[str]:
    from transformers import TrainingArguments

    return {f.name for f in dataclasses.fields(TrainingArguments)}


def _sampling_choices() -> list[str]:
    """``train_sampling_strategy``'s values in the installed transformers ([] before 5.x)."""
    from transformers import TrainingArguments

    for f in dataclasses.fields(TrainingArguments):
        if f.name == "train_sampling_strategy":
            return list(f.metadata.get("choices", ["random", "group_by_length"]))
    return []


def sequential_option() -> bool:
    """Whether ``TrainingArguments`` can ask for the training set in order (else a subclass does)."""
    return "sequential" in _sampling_choices()


def training_arguments(
    strategy: Strategy,
    *,
    output_dir: str,
    micro_batch_size: int,
    lr: float,
    max_grad_norm: float,
    seed: int,
    max_steps: int,
    on_accelerator: bool,
    pin_memory: bool,
    deepspeed: dict[str, Any] | None,
) -> dict[str, Any]:
    """``TrainingArguments`` keyword arguments for ``strategy``, every default pinned.

    Works with transformers >= 4.46: where 5.x renamed an argument, the name this
    installation knows is used (``activation_checkpointing`` / ``gradient_checkpointing``,
    ``train_sampling_strategy`` / ``group_by_length``).
    """
    fields = _arguments_class_fields()
    kwargs: dict[str, Any] = {
        "output_dir": output_dir,
        "max_steps": max_steps,
        "per_device_train_batch_size": micro_batch_size,
        "gradient_accumulation_steps": strategy.grad_accum_steps,
        "learning_rate": lr,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-8,
        "max_grad_norm": max_grad_norm,
        "optim": TRAINER_OPTIMIZERS.get(strategy.optimizer, "adamw_torch"),
        "seed": seed,
        "data_seed": seed,
        "logging_strategy": "steps",
        "logging_steps": 1,
        "logging_nan_inf_filter": False,
        "eval_strategy": "no",
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "log_level": "error",
        "dataloader_num_workers": strategy.num_workers,
        "dataloader_pin_memory": pin_memory,
        "dataloader_persistent_workers": strategy.num_workers > 0,
        "dataloader_drop_last": True,
        "fp16": strategy.precision == "fp16",
        "bf16": strategy.precision == "bf16",
        # DeepSpeed keeps accelerate's launch path (use_cpu would bypass its plugin).
        "use_cpu": not on_accelerator and deepspeed is None,
    }
    if deepspeed is not None:
        kwargs["deepspeed"] = deepspeed
    if strategy.grad_checkpointing:
        prefix = "activation" if "activation_checkpointing" in fields else "gradient"
        kwargs[f"{prefix}_checkpointing"] = True
        kwargs[f"{prefix}_checkpointing_kwargs"] = {"use_reentrant": False}
    if strategy.length_grouped:
        if "train_sampling_strategy" in fields:  # 5.x removed group_by_length
            kwargs["train_sampling_strategy"] = "group_by_length"
        else:
            kwargs["group_by_length"] = True
    elif sequential_option():
        kwargs["train_sampling_strategy"] = "sequential"
    return kwargs


class _Features(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The case's samples as the Trainer's collators take them, in a fixed order.

    ``label_width``: seq2seq targets padded (with -100) to this width here, as the loop's
    collator pads them under fixed padding (transformers' seq2seq collator would pad them
    to the input length); ``None`` leaves them to the collator (dynamic padding).
    """

    def __init__(self, dataset: TokenDataset, order: Sequence[int], seq_len: int, label_width: int | None) -> None:
        self.dataset = dataset
        self.order = list(order)
        self.seq_len = seq_len
        self.label_width = label_width

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index: int) -> dict[str, Any]:
        example = self.dataset[self.order[index]]
        features: dict[str, Any] = {"input_ids": [int(t) for t in example.input_ids[: self.seq_len]]}
        if self.dataset.task == "classification":
            features["labels"] = int(example.label)  # type: ignore[arg-type]
        elif self.dataset.task == "seq2seq":
            target = [int(t) for t in np.asarray(example.label)]
            if self.label_width is not None:
                target = target[: self.label_width] + [-100] * max(0, self.label_width - len(target))
            features["labels"] = target
        return features


def _pad_tokenizer(pad_token_id: int, seq_len: int) -> Any:
    """A tokenizer that only pads (generated data has token ids, no text), built offline."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": pad_token_id, "<unk>": pad_token_id + 1}  # token names, not secrets:
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call,unused-ignore]
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")),  # noqa: S106
        pad_token="<pad>",  # noqa: S106
        unk_token="<unk>",  # noqa: S106
        model_max_length=seq_len,
    )


def _collator(task: str, tokenizer: Any, padding: str, seq_len: int) -> Any:
    """transformers' own collator for the task: fixed padding to ``seq_len`` or dynamic (longest)."""
    from transformers import DataCollatorForLanguageModeling, DataCollatorForSeq2Seq, DataCollatorWithPadding

    fixed = padding == "max_length"
    if task == "classification" or (task == "seq2seq" and fixed):  # seq2seq: targets come padded (_Features)
        return DataCollatorWithPadding(tokenizer, padding="max_length" if fixed else "longest", max_length=seq_len)
    if task == "causal_lm":
        # Labels are the inputs with padding masked to -100, as the loop's collator makes them.
        return DataCollatorForLanguageModeling(tokenizer, mlm=False, pad_to_multiple_of=seq_len if fixed else None)
    return DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=-100)


def _sequential_trainer_class() -> type[Any]:
    """A Trainer reading the training set in order, where ``train_sampling_strategy`` has no
    ``"sequential"`` (transformers 4.x, and 5.x before it gained one)."""
    from transformers import Trainer

    class SequentialTrainer(Trainer):
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
            return torch.utils.data.SequentialSampler(self.train_dataset)  # type: ignore[arg-type]

    return SequentialTrainer


def trainer_inputs(
    strategy: Strategy,
    dataset: TokenDataset,
    *,
    batch_size: int,
    seq_len: int,
    target_len: int,
    seed: int,
    tokenizer: Any = None,
) -> tuple[torch.utils.data.Dataset[Any], Any, type[Any]]:
    """The training set in the case's order, transformers' collator for it, and the Trainer
    class that reads it in that order (also what :mod:`perfsuite.worker.bare`'s Trainer loop uses)."""
    from transformers import Trainer

    from perfsuite.worker.data import StepBatchSampler

    if strategy.length_grouped:
        order: list[int] = list(range(len(dataset)))  # the Trainer's own length-grouped sampler orders it
    else:
        # The loop engine's seeded order; the Trainer reads it sequentially.
        sampler = StepBatchSampler(dataset.lengths, batch_size, strategy.grad_accum_steps, seed=seed)
        order = [int(i) for epoch in range(2) for batch in sampler.step_batches(epoch) for i in batch]
    if tokenizer is None:
        tokenizer = _pad_tokenizer(dataset.pad_token_id, seq_len)
    trainer_cls: type[Any] = Trainer
    if not strategy.length_grouped and not sequential_option():
        trainer_cls = _sequential_trainer_class()  # no "sequential" option in this transformers
    features = _Features(dataset, order, seq_len, label_width=target_len if strategy.padding == "max_length" else None)
    return features, _collator(dataset.task, tokenizer, strategy.padding, seq_len), trainer_cls
