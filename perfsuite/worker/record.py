"""How a run's figures become a case's record, as the JSON object a worker sends back.

The record's shape is :class:`perfsuite.core.record.CaseRecord`'s, which the worker's caller makes
of this object once (:func:`perfsuite.worker.process.run_isolated`): what ``--json`` and
``--perfsuite-json`` hold per case, and what the table, the reports, the gates and ``ab`` read. Its
keys are the JSON format's, so they do not change without a schema version.
"""

from __future__ import annotations

import dataclasses
import os
import resource
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfsuite.core.hardware import hardware_key, time_class
from perfsuite.core.record import RecordJson, failed_json
from perfsuite.core.spec import PHASES, CaseSpec
from perfsuite.core.stats import summarize

if TYPE_CHECKING:
    from perfsuite.worker.build import Built
    from perfsuite.worker.engines.interface import StepOutput


@dataclass
class Timed:
    """What the steps of a case produced, before it becomes a record."""

    warmup_times: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    calibrations: list[float] = field(default_factory=list)
    """On a CPU: the calibration workload's seconds before each timed step and after the last."""
    warm: list[StepOutput] = field(default_factory=list)
    timed: list[StepOutput] = field(default_factory=list)
    allocator_peaks: dict[str, int] | None = None
    threads: dict[str, Any] | None = None
    """CPU time per thread over the timed steps (:mod:`perfsuite.worker.cpu_threads`)."""
    micro_batches: Any = None
    breakdown: dict[str, Any] = field(default_factory=dict)
    flops: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds per :data:`~perfsuite.core.spec.PHASES` entry; ``build`` and ``close`` are added by the caller."""
    ran: dict[str, Any] | None = None
    """What the build and the watched steps ran of the code asked for (:mod:`perfsuite.worker.reach`);
    ``None``: none asked."""


def failed_record(spec: CaseSpec, *, status: str, error: str) -> RecordJson:
    """The record of a case that produced no measurements."""
    return failed_json(spec, status=status, error=error)


def _host_peak_rss() -> int:
    # ru_maxrss is a kernel high-water mark (KiB on Linux): reading it samples nothing.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def case_record(spec: CaseSpec, built: Built, run: Timed, *, rank: int, world_size: int) -> RecordJson:
    """The record of a case whose steps ran."""
    import torch

    from perfsuite.worker.calibrate import NAME as CALIBRATION
    from perfsuite.worker.calibrate import calibrated_steps

    strategy, device = spec.strategy_spec, built.device
    outputs = run.warm + run.timed
    time_stats = summarize(run.step_times)
    # torch.compile compiles in the first steps: what the warm-up took beyond steady steps.
    compile_s = None
    if strategy.compile:
        compile_s = max(0.0, sum(run.warmup_times) - len(run.warmup_times) * time_stats["median"])
    calibrated = summarize(calibrated_steps(run.step_times, run.calibrations)) if run.calibrations else None
    real = sum(o.real_tokens for o in run.timed)
    padded = sum(o.padded_tokens for o in run.timed)
    total_time = sum(run.step_times)
    flops_per_step = run.flops.get("flops_per_step")
    peak_rate = device.peak_flops(strategy.precision)
    mfu = flops_per_step / time_stats["median"] / peak_rate if flops_per_step and peak_rate else None
    if run.allocator_peaks is not None:
        peak_bytes: int | None = run.allocator_peaks["max_memory_allocated"]
    else:
        peak_bytes = run.breakdown.get("peak_bytes")
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "engine": spec.engine,
        "status": "ok",
        "error": None,
        "device": device.type,
        "device_name": device.name,
        "hardware": hardware_key(device.type, device.name),
        "time_class": time_class(device.type, device.name),
        "threads": torch.get_num_threads(),
        "precision": strategy.precision,
        "num_parameters": built.num_parameters,
        "model_config": built.model_config,
        "initial_weights": built.initial_weights,
        "task": spec.model_spec.task,
        "batch_size": built.batch_size,
        "micro_batch_size": built.batch_size // strategy.grad_accum_steps // world_size,
        "world_size": world_size,
        "rank": rank,
        "seq_len": built.seq_len,
        "seed": spec.seed,
        "learning_rate": built.lr,
        "dropout": spec.dropout,
        "pretrained": built.pretrained,
        "dataset": built.dataset,
        "warmup_steps": spec.warmup_steps,
        "steps": spec.steps,
        "strategy_config": dataclasses.asdict(strategy),
        "step_time_s": time_stats,
        "warmup_step_s": run.warmup_times,
        "compile_s": compile_s,
        "step_time_calibrated": calibrated,
        "calibration": None
        if not run.calibrations
        else {
            "workload": CALIBRATION,
            "median_s": summarize(run.calibrations)["median"],
            "samples_s": run.calibrations,
        },
        "samples_per_s": built.batch_size * spec.steps / total_time,
        "tokens_per_s": {"real": real / total_time, "padded": padded / total_time},
        "timed_tokens": {"real": real, "padded": padded},
        "padding_fraction": 1 - real / padded if padded else 0.0,
        "peak_memory_bytes": peak_bytes,
        "peak_memory_source": "max_memory_allocated" if run.allocator_peaks is not None else "memtracker",
        "allocator_peaks_bytes": run.allocator_peaks,
        "memory_breakdown_bytes": run.breakdown.get("categories"),
        "memory_breakdown_error": run.breakdown.get("error"),
        "host_peak_rss_bytes": _host_peak_rss(),
        "flops_per_step": flops_per_step,
        "mfu": mfu,
        "peak_flops": peak_rate,
        "matmul_dtypes": run.flops.get("matmul_dtypes"),
        "flops_source": run.flops.get("source"),
        "attention_ops": run.flops.get("attention_ops"),
        "loss": [float(o.loss) for o in outputs],
        "micro_batches": run.micro_batches,
        "grad_norm": [None if o.grad_norm is None else float(o.grad_norm) for o in outputs],
        "skipped_optimizer_steps": sum(o.skipped for o in outputs),
        "applied": run.evidence,
        "timed_threads": run.threads,
        "phases_s": {name: run.phases[name] for name in PHASES if name in run.phases},
        "pid": os.getpid(),
        **({"step_ran": run.ran} if run.ran is not None else {}),
    }
