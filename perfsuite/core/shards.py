"""Splitting the matrix across machines: every case of a model on one shard. Pure: no torch, no pytest.

A model's cases share what a machine caches (the model's weights, DeepSpeed's compiled
ops) and fit the same GPU memory, so shards are whole models, balanced by their number
of cases (longest first onto the least loaded shard). Every shard computes the same
split from the same selection, so the shards of one night cover each case exactly once;
the model with the most cases lands on shard 1, with the tests that are not matrix cases
(the GPU claims, which read bert-base-uncased's runs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def parse_shard(value: str) -> tuple[int, int]:
    """``"2/4"`` → ``(2, 4)``: shard 2 of 4, counted from 1."""
    index, sep, total = value.partition("/")
    if not sep or not index.isdigit() or not total.isdigit() or not 1 <= int(index) <= int(total):
        raise ValueError(f"a shard is I/N with 1 <= I <= N (e.g. 2/4), not {value!r}")
    return int(index), int(total)


def assign(models: Iterable[str], shards: int) -> dict[str, int]:
    """Each model's shard (1-based): the case counts of ``models`` (one entry per case) spread
    over ``shards``, the models with most cases first, each onto the shard with fewest so far."""
    counts = Counter(models)
    load = [0] * shards
    placed: dict[str, int] = {}
    for model, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        shard = min(range(shards), key=lambda i: (load[i], i))
        load[shard] += count
        placed[model] = shard + 1
    return placed
