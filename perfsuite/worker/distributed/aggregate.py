"""One case record from its ranks' records. Pure: no torch.

A synchronous step ends when its slowest rank does, so the case's step time is, for each
step, the slowest rank's time, then the median over steps (on a CPU, each rank's time is
first divided by its own calibration, which ran on its own core). Peak memory is the
largest rank's (what decides an out-of-memory), with every rank's and their sum beside
it. The loss is the global batch's, as one process would report it: each micro-batch's
ranks' losses weighted by what each averaged over (its samples, or its target tokens:
ranks of a causal LM hold different numbers of them), then the mean over the step's
micro-batches. Throughput counts the global batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.stats import summarize

Record = dict[str, Any]


def _slowest(ranks: Sequence[Record], key: str) -> list[float] | None:
    series = [r.get(key) for r in ranks]
    if any(s is None for s in series):
        return None
    samples = [s["samples"] for s in series]  # type: ignore[index]
    if len({len(s) for s in samples}) != 1:
        raise ValueError(f"ranks timed different numbers of steps: {[len(s) for s in samples]}")
    return [max(step) for step in zip(*samples, strict=True)]


def global_losses(micro: Sequence[Mapping[str, list[list[Any]]]]) -> list[float]:
    """Per step, the loss one process would report for the global batch: each micro-batch's
    ranks' losses weighted by what each averaged over (samples, or target tokens), then the
    mean over the step's micro-batches, as a process averages its micro-batches."""
    steps = len(micro[0]["losses"])
    result = []
    for s in range(steps):
        per_micro = []
        for m in range(len(micro[0]["losses"][s])):
            weights = [rank["targets"][s][m] for rank in micro]
            total = sum(weights)
            values = [rank["losses"][s][m] for rank in micro]
            per_micro.append(
                sum(v * w for v, w in zip(values, weights, strict=True)) / total if total else statistics.fmean(values)
            )
        result.append(statistics.fmean(per_micro))
    return result


def aggregate(ranks: Sequence[Record]) -> Record:
    """The case's record from its ranks' records (in rank order)."""
    if not ranks:
        raise ValueError("no rank records to aggregate")
    first = ranks[0]
    record = dict(first)
    record.pop("rank", None)
    slowest = _slowest(ranks, "step_time_s")
    assert slowest is not None
    record["step_time_s"] = summarize(slowest)
    calibrated = _slowest(ranks, "step_time_calibrated")
    record["step_time_calibrated"] = summarize(calibrated) if calibrated is not None else None
    total_time = sum(slowest)
    steps = int(first["steps"])
    record["samples_per_s"] = first["batch_size"] * steps / total_time
    tokens = first.get("timed_tokens") or {}
    if tokens:
        record["tokens_per_s"] = {kind: count / total_time for kind, count in tokens.items()}

    peaks = [r.get("peak_memory_bytes") for r in ranks]
    known = [p for p in peaks if p is not None]
    largest = max(range(len(ranks)), key=lambda i: int(peaks[i] or -1))
    record["peak_memory_bytes"] = max(known) if len(known) == len(peaks) else None
    record["peak_memory_per_rank_bytes"] = peaks
    record["peak_memory_sum_bytes"] = sum(known) if len(known) == len(peaks) else None
    record["memory_breakdown_bytes"] = ranks[largest].get("memory_breakdown_bytes")
    record["memory_breakdown_error"] = next(
        (r["memory_breakdown_error"] for r in ranks if r.get("memory_breakdown_error")), None
    )
    record["memory_breakdown_rank"] = largest
    record["allocator_peaks_bytes"] = ranks[largest].get("allocator_peaks_bytes")
    record["host_peak_rss_bytes"] = max(int(r.get("host_peak_rss_bytes") or 0) for r in ranks)

    losses = [r["loss"] for r in ranks]
    if len({len(series) for series in losses}) != 1:
        raise ValueError(f"ranks report different numbers of steps: {[len(s) for s in losses]}")
    micro = [r.get("micro_batches") for r in ranks]
    if all(m is not None for m in micro):
        record["loss"] = global_losses(micro)  # type: ignore[arg-type]
    else:
        record["loss"] = [statistics.fmean(step) for step in zip(*losses, strict=True)]
    record["loss_per_rank"] = losses
    record.pop("micro_batches", None)
    record["grad_norm_per_rank"] = [r.get("grad_norm") for r in ranks]
    record["skipped_optimizer_steps"] = max(int(r.get("skipped_optimizer_steps") or 0) for r in ranks)

    flops = [r.get("flops_per_step") for r in ranks]
    counted = [int(f) for f in flops if f is not None]
    record["flops_per_step"] = sum(counted) if len(counted) == len(flops) else None
    peak_rate = first.get("peak_flops")
    median = record["step_time_s"]["median"]
    record["mfu"] = (
        record["flops_per_step"] / median / (peak_rate * len(ranks)) if record["flops_per_step"] and peak_rate else None
    )
    record["world_size"] = len(ranks)
    record["ranks"] = [
        {
            "rank": r.get("rank", i),
            "pid": r.get("pid"),
            "gpu": r.get("gpu"),
            "step_time_median_s": r["step_time_s"]["median"],
            "step_time_calibrated_median": (r.get("step_time_calibrated") or {}).get("median"),
            "peak_memory_bytes": r.get("peak_memory_bytes"),
            "host_peak_rss_bytes": r.get("host_peak_rss_bytes"),
            "applied": (r.get("applied") or {}).get("distributed"),
            "warnings": r.get("warnings", []),
        }
        for i, r in enumerate(ranks)
    ]
    record.pop("warnings", None)
    return record
