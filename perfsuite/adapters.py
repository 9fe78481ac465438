"""LoRA adapters (peft) on a model's attention projections.

peft's default target map has no DistilBERT entry and treats GPT-2's fused ``c_attn``
Conv1D only after a warning, so the projections are named here per architecture and
GPT-2's layout is declared (``fan_in_fan_out``) rather than corrected by peft.
"""

from __future__ import annotations

from typing import Any

import torch

LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "distilbert": ("q_lin", "v_lin"),
    "t5": ("q", "v"),
    "gpt2": ("c_attn",),
    "llama": ("q_proj", "v_proj"),
}
"""The query and value projections of each architecture (``config.model_type``)."""

LORA_ALPHA_PER_RANK = 2
"""lora_alpha = 2 × r, the common choice (peft's examples, the QLoRA paper's r=64/alpha=16 aside)."""


def _task_type(model: torch.nn.Module) -> str:
    name = type(model).__name__
    if "SequenceClassification" in name:
        return "SEQ_CLS"
    if getattr(model.config, "is_encoder_decoder", False):
        return "SEQ_2_SEQ_LM"
    return "CAUSAL_LM"


def apply_lora(model: Any, rank: int) -> Any:
    """``model`` wrapped by peft with rank-``rank`` adapters; only adapters (and a classifier head) train."""
    from peft import LoraConfig, get_peft_model

    model_type = model.config.model_type
    if model_type not in LORA_TARGETS:
        raise ValueError(f"no LoRA target modules known for {model_type!r}; known: {', '.join(LORA_TARGETS)}")
    config = LoraConfig(
        r=rank,
        lora_alpha=LORA_ALPHA_PER_RANK * rank,
        lora_dropout=0.0,
        target_modules=list(LORA_TARGETS[model_type]),
        fan_in_fan_out=model_type == "gpt2",
        task_type=_task_type(model),
    )
    return get_peft_model(model, config)


def lora_evidence(model: Any) -> dict[str, Any]:
    """What peft did: adapter modules, trainable vs total parameters, what else trains."""
    trainable, total = model.get_nb_trainable_parameters()
    adapter_names = [n for n, p in model.named_parameters() if p.requires_grad and "lora_" in n]
    other_trainable = [n for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n]
    return {
        "wrapper": type(model).__name__,
        "lora_modules": sum(1 for n, _ in model.named_modules() if n.endswith("lora_A")),
        "trainable_parameters": int(trainable),
        "total_parameters": int(total),
        "adapter_parameters": sum(p.numel() for n, p in model.named_parameters() if n in set(adapter_names)),
        "other_trainable": other_trainable,
    }
