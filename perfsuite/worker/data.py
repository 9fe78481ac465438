"""Training data: deterministic generated datasets, batching, and a real-dataset path.

Generated data is made with NumPy's PCG64 so that it is the same on every machine
and every torch version (the loss baselines depend on it). Each task's data is
learnable, so the loss really falls, and sequence lengths are long-tailed like real
text, so that padding to a fixed length wastes most of a batch and the padding
strategies have something to save.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfsuite.core.models import ModelSpec, Task

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader

    from perfsuite.core.strategies import Strategy

IGNORE_INDEX = -100
"""Label value the loss ignores (padding positions)."""

# Keys the collator adds for bookkeeping; the engine pops them before the forward.
TOKENS_KEY = "_tokens"
WORKER_KEY = "_worker"


@dataclass(frozen=True)
class Example:
    """One tokenised sample. ``label`` is a class index or a target id sequence."""

    input_ids: np.ndarray
    label: int | np.ndarray | None = None


class TokenDataset:
    """A list of examples, indexable by the DataLoader, with their lengths for batching."""

    def __init__(self, examples: Sequence[Example], task: Task, pad_token_id: int) -> None:
        if not examples:
            raise ValueError("a dataset needs at least one example")
        self.examples = list(examples)
        self.task = task
        self.pad_token_id = pad_token_id
        self.lengths = np.array([len(e.input_ids) for e in self.examples])

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)


def sample_lengths(rng: np.random.Generator, n: int, max_len: int, min_len: int = 8) -> np.ndarray:
    """Long-tailed lengths: log-normal with a median near 30% of ``max_len``, clipped.

    Roughly the shape of news or review text tokenised for BERT: most samples are
    short, a few per batch of 32 reach the maximum.
    """
    raw = rng.lognormal(mean=np.log(0.3 * max_len), sigma=0.55, size=n)
    return np.clip(np.rint(raw), min_len, max_len).astype(np.int64)


class ZipfTokens:
    """Draws token ids with Zipf-like frequencies (p ∝ 1/rank^1.1), as words are in text.

    Which id gets which rank is a seeded permutation, so frequent ids are spread over
    the vocabulary rather than clustered at its start.
    """

    def __init__(self, rng: np.random.Generator, low: int, high: int, exponent: float = 1.1) -> None:
        self.rng = rng
        self.ids = rng.permutation(np.arange(low, high))
        weights = 1.0 / np.arange(1, high - low + 1) ** exponent
        self.cdf = np.cumsum(weights / weights.sum())

    def __call__(self, size: int | tuple[int, ...]) -> np.ndarray:
        ranks = np.searchsorted(self.cdf, self.rng.random(size), side="right")
        return self.ids[np.minimum(ranks, len(self.ids) - 1)]


def generate_dataset(
    spec: ModelSpec,
    *,
    num_samples: int,
    seq_len: int,
    seed: int = 0,
    target_len: int | None = None,
    vocab_size: int | None = None,
) -> TokenDataset:
    """The task's generated dataset for ``spec``, identical for identical arguments.

    Tokens follow Zipf-like frequencies, so every task's loss first falls the way it
    does on text, as the model learns which tokens are common.

    - classification: background tokens plus class-specific signal tokens; balanced classes.
    - seq2seq: the target is a fixed token-by-token "translation" of the source's start.
    - causal_lm: a sparse Markov chain, so next-token loss can fall far below log(vocab).
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    vocab = vocab_size or spec.vocab_size
    # Content ids avoid the special tokens at the bottom and the pad/eos id at the top.
    first = spec.first_token_id if spec.first_token_id is not None else min(1000, vocab // 8)
    low, high = first, vocab - 1
    if high - low < 64:
        raise ValueError(f"{spec.name}: vocabulary too small for generated data ({vocab})")
    lengths = sample_lengths(rng, num_samples, seq_len)
    tokens = ZipfTokens(rng, low, high)
    examples: list[Example] = []
    if spec.task == "classification":
        signal = rng.choice(np.arange(low, high), size=(spec.num_labels, 8), replace=False)
        labels = rng.permutation(np.arange(num_samples) % spec.num_labels)
        for length, label in zip(lengths, labels, strict=True):
            ids = tokens(length)
            marks = rng.choice(length, size=max(1, length // 8), replace=False)
            ids[marks] = rng.choice(signal[label], size=len(marks))
            examples.append(Example(ids, int(label)))
    elif spec.task == "seq2seq":
        mapping = rng.permutation(np.arange(low, high))
        tlen = target_len or spec.target_len
        for length in lengths:
            ids = tokens(length)
            examples.append(Example(ids, mapping[ids[:tlen] - low]))
    else:
        successors = tokens((high, 4))
        for length in lengths:
            ids = np.empty(length, dtype=np.int64)
            ids[0] = tokens(1)[0]
            follow = rng.random(length) < 0.9
            picks = rng.integers(0, 4, size=length)
            noise = tokens(length)
            for i in range(1, length):
                ids[i] = successors[ids[i - 1], picks[i]] if follow[i] else noise[i]
            examples.append(Example(ids, None))
    return TokenDataset(examples, spec.task, spec.pad_token_id)


class Collator:
    """Pads a list of examples into a batch of tensors.

    ``padding="max_length"`` pads every batch to ``max_len`` (the vanilla setup);
    ``"longest"`` pads to the longest sample in the batch (dynamic padding). It also
    records real and padded token counts and which DataLoader worker built the batch.
    """

    def __init__(self, task: Task, pad_token_id: int, padding: str, max_len: int, target_len: int) -> None:
        self.task = task
        self.pad_token_id = pad_token_id
        self.padding = padding
        self.max_len = max_len
        self.target_len = target_len

    def _pad(self, seqs: Sequence[np.ndarray], width: int, value: int) -> np.ndarray:
        out = np.full((len(seqs), width), value, dtype=np.int64)
        for row, seq in enumerate(seqs):
            out[row, : len(seq)] = seq[:width]
        return out

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        import torch
        from torch.utils.data import get_worker_info

        seqs = [e.input_ids[: self.max_len] for e in examples]
        width = self.max_len if self.padding == "max_length" else max(len(s) for s in seqs)
        ids = self._pad(seqs, width, self.pad_token_id)
        mask = (np.arange(width)[None, :] < np.array([len(s) for s in seqs])[:, None]).astype(np.int64)
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        real, padded = int(mask.sum()), int(mask.size)
        if self.task == "classification":
            batch["labels"] = torch.tensor([int(e.label) for e in examples])  # type: ignore[arg-type]
        elif self.task == "causal_lm":
            batch["labels"] = torch.from_numpy(np.where(mask == 1, ids, IGNORE_INDEX))
        else:
            targets = [np.asarray(e.label)[: self.target_len] for e in examples]
            twidth = self.target_len if self.padding == "max_length" else max(len(t) for t in targets)
            batch["labels"] = torch.from_numpy(self._pad(targets, twidth, IGNORE_INDEX))
            real += sum(len(t) for t in targets)
            padded += len(targets) * twidth
        info = get_worker_info()
        batch[TOKENS_KEY] = torch.tensor([real, padded])
        batch[WORKER_KEY] = torch.tensor(info.id if info is not None else -1)
        return batch


class StepBatchSampler:
    """Yields micro-batches of indices, ``micro_batches`` per optimizer step, forever.

    Every epoch is a seeded permutation, so runs are repeatable and two strategies
    with the same batch size see the same samples at every optimizer step. With
    ``length_grouped`` (smart batching), a shuffled pool of 50 batches is sorted by
    length, cut into batches, and the batches are shuffled: similar lengths share a
    batch while the order stays random (as transformers' ``LengthGroupedSampler``).
    A step's batch is split into micro-batches in order, so accumulation sees the
    same samples per optimizer step as one big batch.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        batch_size: int,
        micro_batches: int = 1,
        *,
        seed: int = 0,
        length_grouped: bool = False,
        group_batches: int = 50,
    ) -> None:
        if batch_size % micro_batches:
            raise ValueError(f"batch size {batch_size} is not divisible into {micro_batches} micro-batches")
        if batch_size > len(lengths):
            raise ValueError(f"batch size {batch_size} exceeds the dataset's {len(lengths)} samples")
        self.lengths = lengths
        self.batch_size = batch_size
        self.micro_batches = micro_batches
        self.seed = seed
        self.length_grouped = length_grouped
        self.group_batches = group_batches

    def step_batches(self, epoch: int) -> list[np.ndarray]:
        """The optimizer-step batches of one epoch (incomplete last batch dropped)."""
        rng = np.random.Generator(np.random.PCG64([self.seed, epoch]))
        order = rng.permutation(len(self.lengths))
        n = len(order) // self.batch_size * self.batch_size
        if not self.length_grouped:
            return [order[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        pool = self.batch_size * self.group_batches
        batches = []
        for start in range(0, n, pool):
            chunk = order[start : min(start + pool, n)]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __iter__(self) -> Iterator[list[int]]:
        micro = self.batch_size // self.micro_batches
        epoch = 0
        while True:
            for batch in self.step_batches(epoch):
                for i in range(0, self.batch_size, micro):
                    yield batch[i : i + micro].tolist()
            epoch += 1


def build_loader(
    dataset: TokenDataset,
    strategy: Strategy,
    *,
    batch_size: int,
    seq_len: int,
    target_len: int,
    seed: int,
    pin_memory: bool,
) -> DataLoader[Any]:
    """The DataLoader a strategy trains with: an endless stream of micro-batches."""
    from torch.utils.data import DataLoader

    sampler = StepBatchSampler(
        dataset.lengths,
        batch_size,
        strategy.grad_accum_steps,
        seed=seed,
        length_grouped=strategy.length_grouped,
    )
    collate = Collator(dataset.task, dataset.pad_token_id, strategy.padding, seq_len, target_len)
    return DataLoader(
        dataset,  # type: ignore[arg-type]
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=strategy.num_workers,
        pin_memory=pin_memory,
        persistent_workers=strategy.num_workers > 0,
        # Each worker prefetches two micro-batches; fork keeps worker start-up cheap.
        multiprocessing_context="fork" if strategy.num_workers else None,
    )


def load_text_dataset(
    source: str,
    *,
    tokenizer: str,
    task: Task,
    seq_len: int,
    target_len: int = 32,
    text_column: str = "text",
    label_column: str = "label",
    target_column: str = "target",
    split: str = "train",
    limit: int | None = None,
) -> TokenDataset:
    """A real dataset through ``datasets`` and a local tokenizer.

    ``source`` is a local ``.csv``/``.json``/``.jsonl``/``.parquet`` file or a
    ``datasets.load_dataset`` name that is already in the local cache. Labels may be
    ints or strings (mapped to indices in sorted order).
    """
    import datasets
    from transformers import AutoTokenizer

    suffix = source.rsplit(".", 1)[-1].lower() if "." in source else ""
    builder = {"csv": "csv", "json": "json", "jsonl": "json", "parquet": "parquet"}.get(suffix)
    if builder is not None:
        ds = datasets.load_dataset(builder, data_files={split: source}, split=split)
    else:
        ds = datasets.load_dataset(source, split=split)
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    for column in (text_column, label_column if task == "classification" else None):
        if column and column not in ds.column_names:
            raise ValueError(f"{source}: no column {column!r}; columns are {ds.column_names}")
    tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    encoded = tok(list(ds[text_column]), truncation=True, max_length=seq_len)["input_ids"]
    examples: list[Example] = []
    if task == "classification":
        raw = list(ds[label_column])
        names = sorted(set(raw))
        labels = raw if all(isinstance(v, int) for v in raw) else [names.index(v) for v in raw]
        examples = [Example(np.asarray(ids), int(y)) for ids, y in zip(encoded, labels, strict=True)]
    elif task == "seq2seq":
        targets = tok(list(ds[target_column]), truncation=True, max_length=target_len)["input_ids"]
        examples = [Example(np.asarray(s), np.asarray(t)) for s, t in zip(encoded, targets, strict=True)]
    else:
        examples = [Example(np.asarray(ids), None) for ids in encoded]
    return TokenDataset(examples, task, int(tok.pad_token_id))


class RankShare:
    """Rank ``rank``'s rows of each batch ``loader`` yields: every rank draws the same global
    (micro-)batch, so the ranks together train on exactly what one process would, and a
    data-parallel run can be checked against a single process on the same global batch.

    The token counts stay the global batch's (throughput is reported on the global batch).
    """

    def __init__(self, loader: DataLoader[Any], rank: int, world_size: int) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside a world of {world_size}")
        self.loader = loader
        self.rank = rank
        self.world_size = world_size

    @property
    def num_workers(self) -> int:
        return self.loader.num_workers

    @property
    def pin_memory(self) -> bool:
        return self.loader.pin_memory

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for batch in self.loader:
            rows = int(batch["input_ids"].shape[0])
            if rows % self.world_size:
                raise ValueError(f"a batch of {rows} rows does not split across {self.world_size} ranks")
            share = rows // self.world_size
            start = self.rank * share
            yield {
                key: value if key in (TOKENS_KEY, WORKER_KEY) else value[start : start + share]
                for key, value in batch.items()
            }
