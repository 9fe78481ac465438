"""The model registry: published architectures built from their configs, seeded.

Nothing is downloaded. A full-size model is its published architecture config with
seeded random weights, which is all a performance test needs (step time and memory
do not depend on the weights, and the loss of a seeded run is repeatable). Real
weights load instead from a local directory, or from the local Hugging Face hub
cache, never from the network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from perfsuite.core.strategies import UnknownNameError

Task = Literal["classification", "seq2seq", "causal_lm", "custom"]
TASKS: tuple[Task, ...] = ("classification", "seq2seq", "causal_lm")
"""What a config-built model is trained for (:mod:`perfsuite.worker.modeling` builds each with its
Auto class). A model a project builds with its own factory has the task ``custom``: its engine
knows what it trains for."""

_LEAST = {"batch_size": 1, "seq_len": 1, "target_len": 1, "num_labels": 0, "first_token_id": 0}
""":class:`ModelSpec`'s numbers, each an integer of at least this (``first_token_id`` may be ``None``): a
batch of -4 would hang its worker, a length of 0 fail only once the case runs."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """How to build one model and the shape of the batches it trains on."""

    name: str
    """Registry name; full-size names match the Hugging Face hub ids."""
    task: Task
    """Which head and which generated dataset."""
    config_class: str = ""
    """``transformers`` config class name (or ``config_dir``)."""
    config_dir: str | None = None
    """A directory holding the architecture's ``config.json`` (a project's own model, or a hub
    id's snapshot in the local cache), instead of ``config_class``."""
    model_class: str = ""
    """``transformers`` model class name (the task head); the task's auto class when empty."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """Config fields that differ from the config class's defaults (or from ``config_dir``'s)."""
    num_labels: int = 0
    """Classification labels (0 for generative tasks)."""
    tiny: bool = False
    """A CPU-sized variant of a full-size architecture."""
    batch_size: int = 32
    """Samples per optimizer step (the practitioners' reference uses 32)."""
    seq_len: int = 128
    """Maximum (and fixed-padding) sequence length."""
    target_len: int = 32
    """Maximum target length (seq2seq only)."""
    hub_id: str | None = None
    """Hub id whose locally cached weights ``pretrained="hub-cache"`` loads."""
    first_token_id: int | None = None
    """First id generated data draws from, above the tokenizer's special tokens (default:
    1000, or an eighth of a smaller vocabulary)."""
    expected_parameters: int | None = None
    """Parameter count the published architecture has with this head (checked in tests)."""
    data: str | None = None
    """A local data file (csv, json, jsonl, parquet) the model trains on instead of generated data."""
    tokenizer: str | None = None
    """The local tokenizer directory ``data`` is tokenised with."""
    pretrained: str | None = None
    """Weights to start from: a ``save_pretrained`` directory, or ``hub-cache``; seeded random when ``None``."""
    factory: str | None = None
    """A project's own model instead of a config: ``module:attribute`` of a callable that builds the
    ``torch.nn.Module`` as ``factory(seed=..., **factory_args)`` (task ``custom``; trained by a project's engine)."""
    batch: str | None = None
    """With ``factory``: ``module:attribute`` of a callable that makes one step's batch,
    ``batch(batch_size=..., seq_len=..., step=..., seed=...)`` → a dict of tensors (inputs and targets)."""
    factory_args: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of ``factory`` beyond the seed (the tiny variant's replace some)."""
    root: str | None = None
    """The project's root, where ``factory`` and ``batch`` are looked for when their modules are not installed."""
    declared_at: str = ""
    """Where the model was declared (``pyproject.toml: tool.perfsuite.models.acme``), for error messages."""

    def __post_init__(self) -> None:
        for name, least in _LEAST.items():
            value = getattr(self, name)
            if (value is not None or name != "first_token_id") and (type(value) is not int or value < least):
                raise ValueError(
                    f"{self.name}: {name} must be {'a positive integer' if least else 'an integer >= 0'}, not {value!r}"
                )
        if self.factory is not None:
            if self.config_class or self.config_dir or self.task != "custom":
                raise ValueError(f"{self.name}: a model built by a factory has no config and the task 'custom'")
            if self.batch is None:
                raise ValueError(f"{self.name}: a model built by a factory needs a batch maker")
            return
        if bool(self.config_class) == bool(self.config_dir):
            raise ValueError(f"{self.name}: give either config_class or config_dir")
        if self.data is not None and self.tokenizer is None:
            raise ValueError(f"{self.name}: a data file needs a tokenizer directory")
        if self.task not in TASKS:
            raise ValueError(f"{self.name}: task must be one of {TASKS}")
        if self.task == "classification" and self.num_labels < 2:
            raise ValueError(f"{self.name}: a classification model needs num_labels >= 2")

    def _declared(self) -> Mapping[str, Any]:
        """The config fields known without transformers: ``config_dir``'s file, then ``config``."""
        if self.config_dir is None:
            return self.config
        return {**json.loads((Path(self.config_dir) / "config.json").read_text()), **self.config}

    @property
    def vocab_size(self) -> int:
        declared = self._declared()
        if "vocab_size" in declared:
            return int(declared["vocab_size"])
        return _default_vocab(self.config_class)

    @property
    def pad_token_id(self) -> int:
        declared = self._declared()
        if declared.get("pad_token_id") is not None:
            return int(declared["pad_token_id"])
        # An id of the vocabulary in any case: a declared GPT-2 may have far fewer than 50,257 tokens.
        return min({"GPT2Config": 50256, "XLMRobertaConfig": 1}.get(self.config_class, 0), self.vocab_size - 1)


def _default_vocab(config_class: str) -> int:
    known = {
        "BertConfig": 30522,
        "DistilBertConfig": 30522,
        "GPT2Config": 50257,
        "T5Config": 32128,
        "XLMRobertaConfig": 30522,
        "LlamaConfig": 32000,
    }
    if config_class in known:
        return known[config_class]
    import transformers

    return int(getattr(transformers, config_class)().vocab_size)


_XLMR = {
    "vocab_size": 250002,
    "max_position_embeddings": 514,
    "type_vocab_size": 1,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
}
_SMOLLM2 = {
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}
_TINY_BERT = {
    "vocab_size": 4096,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 256,
}

_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="bert-base-uncased",
        task="classification",
        config_class="BertConfig",
        model_class="BertForSequenceClassification",
        num_labels=4,
        hub_id="bert-base-uncased",
        expected_parameters=109_485_316,
    ),
    ModelSpec(
        name="distilbert-base-uncased",
        task="classification",
        config_class="DistilBertConfig",
        model_class="DistilBertForSequenceClassification",
        num_labels=4,
        hub_id="distilbert-base-uncased",
        expected_parameters=66_956_548,
    ),
    ModelSpec(
        name="bert-large-uncased",
        task="classification",
        config_class="BertConfig",
        model_class="BertForSequenceClassification",
        config={"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
        num_labels=2,
        hub_id="bert-large-uncased",
        expected_parameters=335_143_938,
    ),
    ModelSpec(
        name="xlm-roberta-base",
        task="classification",
        config_class="XLMRobertaConfig",
        model_class="XLMRobertaForSequenceClassification",
        config=_XLMR,
        num_labels=4,
        hub_id="xlm-roberta-base",
        expected_parameters=278_046_724,
    ),
    ModelSpec(
        name="xlm-roberta-large",
        task="classification",
        config_class="XLMRobertaConfig",
        model_class="XLMRobertaForSequenceClassification",
        config={
            **_XLMR,
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
        num_labels=2,
        hub_id="xlm-roberta-large",
        expected_parameters=559_892_482,
    ),
    ModelSpec(
        name="t5-small",
        task="seq2seq",
        config_class="T5Config",
        model_class="T5ForConditionalGeneration",
        config={"decoder_start_token_id": 0},
        hub_id="t5-small",
        expected_parameters=60_506_624,
    ),
    ModelSpec(
        name="gpt2",
        task="causal_lm",
        config_class="GPT2Config",
        model_class="GPT2LMHeadModel",
        hub_id="gpt2",
        expected_parameters=124_439_808,
    ),
    # A modern decoder: the Llama architecture (RMSNorm, rotary positions, SwiGLU,
    # grouped-query attention, tied embeddings) at SmolLM2-135M's published config.
    ModelSpec(
        name="smollm2-135m",
        task="causal_lm",
        config_class="LlamaConfig",
        model_class="LlamaForCausalLM",
        config=_SMOLLM2,
        hub_id="HuggingFaceTB/SmolLM2-135M",
        expected_parameters=134_515_008,
    ),
    # CPU variants: same architectures and heads, sized so that an fp32 step takes
    # well under 100 ms on two cores while activations still dominate memory, as they
    # do at full size (so checkpointing and accumulation have something to save).
    ModelSpec(
        name="tiny-bert",
        task="classification",
        config_class="BertConfig",
        model_class="BertForSequenceClassification",
        config=_TINY_BERT,
        num_labels=4,
        tiny=True,
        batch_size=16,
        first_token_id=200,
    ),
    ModelSpec(
        name="tiny-t5",
        task="seq2seq",
        config_class="T5Config",
        model_class="T5ForConditionalGeneration",
        config={
            "vocab_size": 4096,
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 256,
            "num_layers": 3,
            "num_heads": 4,
            "decoder_start_token_id": 0,
        },
        tiny=True,
        batch_size=16,
        target_len=32,
        first_token_id=200,
    ),
    ModelSpec(
        name="tiny-gpt2",
        task="causal_lm",
        config_class="GPT2Config",
        model_class="GPT2LMHeadModel",
        config={
            "vocab_size": 4096,
            "n_positions": 256,
            "n_embd": 64,
            "n_layer": 4,
            "n_head": 4,
            "bos_token_id": 4095,
            "eos_token_id": 4095,
            "pad_token_id": 4095,
        },
        tiny=True,
        batch_size=16,
        first_token_id=1,
    ),
    ModelSpec(
        name="tiny-llama",
        task="causal_lm",
        config_class="LlamaConfig",
        model_class="LlamaForCausalLM",
        config={
            **_SMOLLM2,
            "vocab_size": 4096,
            "hidden_size": 64,
            "intermediate_size": 172,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
        },
        tiny=True,
        batch_size=16,
        first_token_id=1,
    ),
)

MODELS: dict[str, ModelSpec] = {s.name: s for s in _SPECS}
FULL_SIZE: tuple[str, ...] = tuple(s.name for s in _SPECS if not s.tiny)
"""perfsuite's own full-size models (a project's declarations add to :data:`MODELS`)."""
TINY: tuple[str, ...] = tuple(s.name for s in _SPECS if s.tiny)
"""perfsuite's own CPU-sized models."""


def get_model_spec(name: str) -> ModelSpec:
    """The registered spec, or an error listing the valid names."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownNameError(f"unknown model {name!r}; valid: {', '.join(MODELS)}") from None
