"""Building a declared model (:mod:`perfsuite.core.models`): from its config with seeded weights, or
from local pretrained weights. Nothing is downloaded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.core.models import ModelSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel

_AUTO_CLASSES: dict[str, str] = {
    "classification": "AutoModelForSequenceClassification",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "causal_lm": "AutoModelForCausalLM",
}


def _without_dropout(config: Any) -> None:
    # Names differ per architecture (hidden_dropout_prob, dropout_rate, resid_pdrop, ...).
    for key, value in list(vars(config).items()):
        if isinstance(value, float) and ("dropout" in key or key.endswith("pdrop")):
            setattr(config, key, 0.0)


def model_class(spec: ModelSpec, config_class: type) -> type:
    """The class ``spec`` builds for a config of ``config_class``, on the installed transformers."""
    import transformers

    if spec.model_class:
        return getattr(transformers, spec.model_class)  # type: ignore[no-any-return]
    mapping = getattr(transformers, _AUTO_CLASSES[spec.task])._model_mapping
    return mapping[config_class]  # type: ignore[no-any-return]


def supported_attention(model_cls: type, requested: str) -> str:
    """``requested``, or ``eager`` where the installed transformers has no SDPA path for ``model_cls``.

    T5 gained SDPA only in transformers 5.0; 4.x refuses ``sdpa`` for it outright. The
    implementation that ran is recorded (``applied.attention_implementation``) and kept
    in a baseline, whose gates refuse a run of other kernels (:mod:`perfsuite.core.gates`).
    """
    if requested == "sdpa" and not getattr(model_cls, "_supports_sdpa", False):
        return "eager"
    return requested


def build_config(
    spec: ModelSpec, *, dropout: bool = True, vocab_size: int | None = None, attention: str = "sdpa"
) -> Any:
    """The architecture config of ``spec``, optionally without dropout or with a tokenizer's vocab.

    The attention implementation is always pinned: transformers' default moved from
    eager (4.x, for a model built from its config) to SDPA (5.x), and a case must mean
    the same kernels on every version (:func:`supported_attention` says which ran).
    """
    import transformers

    if spec.config_dir is not None:
        config_class = type(transformers.AutoConfig.from_pretrained(spec.config_dir, local_files_only=True))
    else:
        config_class = getattr(transformers, spec.config_class)
    attention = supported_attention(model_class(spec, config_class), attention)
    check_config_fields(spec, config_class)
    kwargs = dict(spec.config, attn_implementation=attention)
    if spec.num_labels:
        kwargs["num_labels"] = spec.num_labels
    if vocab_size is not None:
        kwargs["vocab_size"] = vocab_size
    if spec.config_dir is not None:
        config = transformers.AutoConfig.from_pretrained(spec.config_dir, local_files_only=True, **kwargs)
    else:
        config = getattr(transformers, spec.config_class)(**kwargs)
    if not dropout:
        _without_dropout(config)
    return config


def check_config_fields(spec: ModelSpec, config_class: type) -> None:
    """Refuse a field of ``spec.config`` that looks misspelt: one a ``config_class`` neither takes nor holds,
    close to one it does. transformers keeps it as an attribute nothing reads and builds the model with the
    default it was meant to replace (``hidden_sizzle``: a BERT 768 wide, not 32). A field close to none
    (``decoder_start_token_id``, which T5's model reads) is left to transformers. A
    :class:`DeclarationError` naming the declaration, the field and the one it is close to."""
    import difflib
    import inspect

    from perfsuite.core.registry import DeclarationError, source_of

    try:
        default = config_class()
    except Exception:  # noqa: BLE001 - a config that needs arguments (a composite one): its fields are not checked
        return
    known = set(dir(default)) | set(vars(default))
    for cls in config_class.__mro__:
        if "__init__" in vars(cls):
            known |= set(inspect.signature(vars(cls)["__init__"]).parameters)
    public = sorted(k for k in known if not k.startswith("_"))
    for field in spec.config:
        near = [] if field in known else difflib.get_close_matches(field, public, n=1, cutoff=0.8)
        if near:
            raise DeclarationError(
                f"{source_of('model', spec.name) or spec.name}: config: {config_class.__name__} has no field "
                f"{field!r}: did you mean {near[0]!r}? (transformers would keep it unread and build the model "
                f"with {near[0]}'s default)"
            )


def resolve_pretrained(spec: ModelSpec, pretrained: str) -> str:
    """Where pretrained weights for ``spec`` come from: a local directory, or the hub cache.

    ``pretrained`` is a directory holding ``config.json`` (as written by
    ``save_pretrained``) or the word ``hub-cache``, which looks the spec's hub id up in
    the local Hugging Face cache without touching the network.
    """
    if pretrained == "hub-cache":
        if spec.hub_id is None:
            raise ValueError(f"{spec.name} has no hub id to look up in the local cache")
        from huggingface_hub import snapshot_download

        # Read the cache location now, not at huggingface_hub's import.
        cache_dir = os.environ.get("HF_HUB_CACHE") or None
        try:
            return snapshot_download(spec.hub_id, local_files_only=True, cache_dir=cache_dir)
        except Exception as exc:  # LocalEntryNotFoundError and friends
            raise FileNotFoundError(
                f"{spec.hub_id} is not in the local Hugging Face cache "
                f"({os.environ.get('HF_HUB_CACHE', 'default cache')}): {exc}"
            ) from exc
    path = Path(pretrained)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{pretrained}: no config.json there; pass a directory written by save_pretrained")
    return str(path)


def _from_config(spec: ModelSpec, config: Any, transformers: Any) -> Any:
    if spec.model_class:
        return getattr(transformers, spec.model_class)(config)
    return getattr(transformers, _AUTO_CLASSES[spec.task]).from_config(config)


def build_model(
    spec: ModelSpec,
    *,
    seed: int = 0,
    dropout: bool = True,
    pretrained: str | None = None,
    vocab_size: int | None = None,
    attention: str = "sdpa",
) -> PreTrainedModel:
    """A seeded, randomly initialised model of ``spec`` (or its pretrained weights), in train mode."""
    import torch
    import transformers

    torch.manual_seed(seed)
    if pretrained is not None:
        source = resolve_pretrained(spec, pretrained)
        auto = getattr(transformers, _AUTO_CLASSES[spec.task])
        kwargs: dict[str, Any] = {"num_labels": spec.num_labels} if spec.num_labels else {}
        config_class = type(transformers.AutoConfig.from_pretrained(source, local_files_only=True))
        attention = supported_attention(model_class(spec, config_class), attention)
        model = auto.from_pretrained(source, local_files_only=True, attn_implementation=attention, **kwargs)
        if not dropout:
            _without_dropout(model.config)
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
    else:
        config = build_config(spec, dropout=dropout, vocab_size=vocab_size, attention=attention)
        model = _from_config(spec, config, transformers)
    model.train()
    return model  # type: ignore[no-any-return]
