"""Splitting the matrix across machines: every case of a model on one shard. Pure: no torch, no pytest.

A model's cases share what a machine caches (the model's weights, DeepSpeed's compiled
ops) and fit the same GPU memory, so shards are whole models, balanced by their number
of cases (longest first onto the least loaded shard). Every shard computes the same
split from the same selection, so the shards of one night cover each case exactly once;
the model with the most cases lands on shard 1, with the tests that are not matrix cases
(the GPU claims, which read bert-base-uncased's runs). :func:`merge_results` puts the shards'
results files back together as one night's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from perfsuite.core.results import parse_results
from perfsuite.core.results_file import ResultsError, read_results_json


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


def merge_results(paths: Sequence[Path], *, expect: int | None = None) -> dict[str, Any]:
    """One pytest results file from the shards' (``pytest --perfsuite-json``, one per machine):
    their cases together, each exactly once; ``env`` is the first shard's, with every shard's
    under ``shards``. A missing shard (``expect``), a file given twice, a case in two shards or a
    file that is not a results file (each is read as a report reads it) raises :class:`ResultsError`
    naming it."""
    if expect is not None and len(paths) != expect:
        raise ResultsError(f"{len(paths)} shard results for {expect} shards: {', '.join(map(str, paths)) or 'none'}")
    if not paths:
        raise ResultsError("no results files to merge")
    resolved = [Path(path).resolve() for path in paths]
    for i, path in enumerate(paths):
        same = next((other for other, where in zip(paths[:i], resolved[:i], strict=True) if where == resolved[i]), None)
        if same is not None:
            raise ResultsError(f"{path}: given twice ({same} is the same file); merge each shard's results once")
    merged: dict[str, Any] = {}
    seen: dict[str, str] = {}
    shards = []
    for path in paths:
        data = read_results_json(path, gate_only=True)
        if not isinstance(data, dict) or not isinstance(data.get("cases"), list) or "refresh" not in data:
            raise ResultsError(f"{path}: not a pytest --perfsuite-json results file")
        if not all(isinstance(c, dict) and "case" in c for c in data["cases"]):
            raise ResultsError(f"{path}: a case has no 'case' name: not a pytest --perfsuite-json results file")
        parse_results(data, str(path))  # every value checked, as the report and the history will read it
        for case in data["cases"]:
            name = case["case"]
            if name in seen:
                raise ResultsError(f"{name} is in two shards' results: {seen[name]} and {path}")
            seen[name] = str(path)
        if not merged:
            merged = {k: v for k, v in data.items() if k != "cases"} | {"cases": []}
        merged["refresh"] = bool(merged["refresh"] or data["refresh"])
        merged["cases"].extend(data["cases"])
        shards.append({"file": str(path), "cases": len(data["cases"]), "env": data.get("env")})
    merged["env"] = dict(merged.get("env") or {}) | {"shards": shards}
    return merged
