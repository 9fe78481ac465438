"""One case record from its ranks' records. Pure: no torch.

A synchronous step ends when its slowest rank does, so the case's step time is, for each
step, the slowest rank's time, then the median over steps (on a CPU, each rank's time is
first divided by its own calibration, which ran on its own core). Peak memory is the
largest rank's (what decides an out-of-memory), with every rank's and their sum beside
it. The loss is the global batch's, as one process would report it: each micro-batch's
ranks' losses weighted by what each averaged over (its samples, or its target tokens:
ranks of a causal LM hold different numbers of them), then the mean over the step's
micro-batches. Throughput counts the global batch. The share of the cores' time other
processes took while steps were timed is counted over every rank's threads.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from perfsuite.core.record import CaseRecord, RecordJson, Summary, Tokens
from perfsuite.core.stats import summarize
from perfsuite.worker.cpu_threads import others_share


def _slowest(series: Sequence[Summary]) -> list[float]:
    """Per step, the slowest rank's figure."""
    samples = [s.samples for s in series]
    if len({len(s) for s in samples}) != 1:
        raise ValueError(f"ranks timed different numbers of steps: {[len(s) for s in samples]}")
    return [max(step) for step in zip(*samples, strict=True)]


def _summary(samples: Sequence[float], key: str) -> Summary:
    return Summary.from_json(summarize(samples), key)


def _per_second(tokens: Tokens | None, seconds: float) -> dict[str, Tokens]:
    """``tokens_per_s`` of the timed tokens, where the first rank counted any (none: no such key)."""
    if tokens is None or not tokens.keys:
        return {}
    counts = tokens.to_json()
    return {"tokens_per_s": Tokens.from_json({kind: count / seconds for kind, count in counts.items()}, "tokens")}


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


def aggregate(ranks: Sequence[RecordJson]) -> RecordJson:
    """The case's record from its ranks' records (in rank order), as JSON; a rank's record of the
    wrong shape is a ``ValueError`` naming the rank."""
    if not ranks:
        raise ValueError("no rank records to aggregate")
    return _merged([CaseRecord.from_json(rank, f"rank {i}") for i, rank in enumerate(ranks)]).to_json()


def _merged(ranks: Sequence[CaseRecord]) -> CaseRecord:
    """The case's record from its ranks' records, typed: the first rank's, without its rank, micro-batches
    and warnings, with the figures of every rank (new keys last, as :meth:`CaseRecord.updated` adds them)."""
    first = ranks[0]
    if first.batch_size is None or first.steps is None:
        raise ValueError("rank 0 has no batch_size or no steps")
    slowest = _slowest([r.timed() for r in ranks])
    calibrations = [r.step_time_calibrated for r in ranks if r.step_time_calibrated is not None]
    calibrated = _summary(_slowest(calibrations), "step_time_calibrated") if len(calibrations) == len(ranks) else None
    total_time = sum(slowest)
    step_time = _summary(slowest, "step_time_s")

    peaks = [r.peak_memory_bytes for r in ranks]
    known = [p for p in peaks if p is not None]
    every_peak = len(known) == len(peaks)
    largest = max(range(len(ranks)), key=lambda i: int(peaks[i] or -1))

    losses = [r.loss for r in ranks]
    if not all(losses):
        raise ValueError(f"rank {next(i for i, series in enumerate(losses) if not series)}: no loss")
    if len({len(series) for series in losses}) != 1:
        raise ValueError(f"ranks report different numbers of steps: {[len(s) for s in losses]}")
    micro = [r.micro_batches for r in ranks]
    if all(m is not None for m in micro):
        loss = tuple(global_losses(micro))
    else:
        loss = tuple(statistics.fmean(step) for step in zip(*losses, strict=True))

    flops = [r.flops_per_step for r in ranks]
    counted = [int(f) for f in flops if f is not None]
    flops_per_step = sum(counted) if len(counted) == len(flops) else None
    peak_rate = first.peak_flops
    mfu = flops_per_step / step_time.median / (peak_rate * len(ranks)) if flops_per_step and peak_rate else None
    window = {"timed_threads": _timed_threads(ranks)} if "timed_threads" in first.keys else {}
    return first.without("rank", "micro_batches", "warnings").updated(
        **window,
        step_time_s=step_time,
        step_time_calibrated=calibrated,
        samples_per_s=first.batch_size * first.steps / total_time,
        **_per_second(first.timed_tokens, total_time),
        peak_memory_bytes=max(known) if every_peak else None,
        peak_memory_per_rank_bytes=peaks,
        peak_memory_sum_bytes=sum(known) if every_peak else None,
        memory_breakdown_bytes=ranks[largest].memory_breakdown_bytes,
        memory_breakdown_error=next((r.memory_breakdown_error for r in ranks if r.memory_breakdown_error), None),
        memory_breakdown_rank=largest,
        allocator_peaks_bytes=ranks[largest].allocator_peaks_bytes,
        host_peak_rss_bytes=max(r.host_peak_rss_bytes or 0 for r in ranks),
        loss=loss,
        loss_per_rank=[list(series) for series in losses],
        grad_norm_per_rank=[list(r.grad_norm) if "grad_norm" in r.keys else None for r in ranks],
        skipped_optimizer_steps=max(r.skipped_optimizer_steps or 0 for r in ranks),
        flops_per_step=flops_per_step,
        mfu=mfu,
        world_size=len(ranks),
        ranks=tuple(_rank_entry(r, i) for i, r in enumerate(ranks)),
    )


def _timed_threads(ranks: Sequence[CaseRecord]) -> Mapping[str, Any] | None:
    """The first rank's window, its share of the cores' time that other processes took counted over
    every rank's threads (the ranks share the cores by design; another job does not)."""
    first = ranks[0].timed_threads
    contention = first.get("contention") if first is not None else None
    if first is None or not isinstance(contention, Mapping):
        return first
    windows = [dict(r.timed_threads) if r.timed_threads is not None else None for r in ranks]
    others = others_share(windows, threads=ranks[0].threads or 1)
    return {**first, "contention": {**contention, "others": others}}


def _rank_entry(r: CaseRecord, index: int) -> dict[str, Any]:
    """What the case's record keeps of one rank's (``ranks``)."""
    return {
        "rank": r.rank if "rank" in r.keys else index,
        "pid": r.pid,
        "gpu": r.gpu,
        "step_time_median_s": r.timed().median,
        "step_time_calibrated_median": None if r.step_time_calibrated is None else r.step_time_calibrated.median,
        "peak_memory_bytes": r.peak_memory_bytes,
        "host_peak_rss_bytes": r.host_peak_rss_bytes,
        "applied": r.applied.get("distributed"),
        "warnings": [w.to_json() for w in r.warnings],
    }
