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


def apply_lora(model: Any, rank: int, *, quantized: bool = False) -> Any:
    """``model`` wrapped by peft with rank-``rank`` adapters; only adapters (and a classifier head) train.

    ``quantized``: the model was loaded in 4-bit (:func:`quantize_4bit`); peft's
    ``prepare_model_for_kbit_training`` readies it as QLoRA does, except that it does not
    turn on checkpointing (a separate strategy here).
    """
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

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
    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)  # type: ignore[no-untyped-call]
    return get_peft_model(model, config)


HEAD_MODULES = ("classifier", "pre_classifier", "score", "lm_head")
"""Module names of the task heads that :func:`quantize_4bit` leaves unquantized."""


def quantize_4bit(model: Any, compute_dtype: Any, placement: int | str) -> Any:
    """The same weights reloaded with NF4 4-bit linear layers (bitsandbytes), as QLoRA trains them.

    transformers quantizes only while loading, so the seeded model is saved to a temporary
    directory and loaded back with a ``BitsAndBytesConfig`` onto ``placement`` (a GPU index, or
    ``"cpu"``: bitsandbytes 0.50 quantizes there too, which is how a CPU test shows the head bug).
    """
    import tempfile

    import transformers

    config = transformers.BitsAndBytesConfig(  # type: ignore[no-untyped-call]
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
        # The head stays in full precision, as QLoRA trains it: peft makes a classification head
        # trainable (modules_to_save), and a 4-bit weight cannot require gradients (bert-base-uncased's
        # qlora failed so on an H100, transformers 5.17). Naming these replaces transformers' own
        # choice of unconverted modules, which is the output embedding, so lm_head is named too.
        llm_int8_skip_modules=list(HEAD_MODULES),
    )
    with tempfile.TemporaryDirectory(prefix="perfsuite-qlora-") as directory:
        model.save_pretrained(directory)
        loaded = type(model).from_pretrained(
            directory,
            quantization_config=config,
            attn_implementation=model.config._attn_implementation,
            device_map={"": placement},
        )
    return loaded


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
        "linear_4bit_modules": sum(1 for m in model.modules() if type(m).__name__ == "Linear4bit"),
    }
