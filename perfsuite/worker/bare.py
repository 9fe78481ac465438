"""Bare training loops: what a case's step costs without perfsuite around it. Runs in a worker.

``perfsuite overhead`` (:mod:`perfsuite.cli.overhead_rounds`) runs a case and the loop here on
exactly the same model, data, batch order, optimizer, clipping and thread count, and
compares their median step times. The loop here is what a person would write by hand
(forward, backward, clip, step, in the order nanoGPT does them), timed with nothing
else running in the process: no calibration, no accelerate, no instruments. The
model, data and optimizer are built with perfsuite's own functions, outside the timed
region, so that both sides train the same thing; that both do is checked from their
losses.

A family's bare equivalent exists for: fp32 (``vanilla``), autocast (``fp16`` with a
GradScaler, ``bf16``), 8-bit optimizers (``adamw_8bit``), ZeRO offload
(``zero2_offload``, DeepSpeed's engine called directly), and the HF Trainer
(``vanilla`` through ``trainer.train()``, timed by a callback between step ends).
Anything else is :data:`NO_BARE_EQUIVALENT` with the reason.

:func:`run_interleaved` is the sharper measurement: the case's own engine (built as the
case builds it, the calibration before each of its steps on a CPU, as the case runs it)
and the bare loop on a second copy of the model step alternately in one process, so
each pair of steps sees the same machine; separate processes differ by a few percent
from run to run, which hides a harness cost of that size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.core.stats import summarize

if TYPE_CHECKING:
    import torch

FAMILIES = {
    "vanilla": "fp32",
    "fp16": "autocast",
    "bf16": "autocast",
    "adamw_8bit": "8-bit",
    "zero2_offload": "ZeRO offload",
}
"""Strategy → family, for the loop engine; every strategy here has a bare loop below."""
TRAINER_FAMILY = {"vanilla": "Trainer"}
"""Strategy → family, through the HF Trainer."""

NO_BARE_EQUIVALENT = (
    "a bare loop of the other strategies would reimplement them (checkpointing, accumulation, LoRA, "
    "compile, the DataLoader's workers change what the loop is), so its step would be perfsuite's own "
    "code again; their overhead is the family's, whose loop they share"
)


def family(strategy: str, engine: str) -> str | None:
    """The strategy family a case belongs to for the overhead benchmark, ``None`` without a bare loop."""
    return (TRAINER_FAMILY if engine == "trainer" else FAMILIES).get(strategy)


def run_bare(spec: CaseSpec) -> dict[str, Any]:
    """The bare loop of ``spec``: its warm-up and timed step times and losses (a worker's target)."""
    import torch

    from perfsuite.worker.data import generate_dataset
    from perfsuite.worker.device import get_device
    from perfsuite.worker.modeling import build_model

    name = family(spec.strategy, spec.engine)
    if name is None:
        raise CaseSkipped(f"{spec.id}: no bare loop: {NO_BARE_EQUIVALENT}")
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    strategy, model_spec = spec.strategy_spec, spec.model_spec
    missing = strategy.missing_requirements()
    if missing:
        raise CaseSkipped(f"{spec.id} needs {', '.join(missing)}")
    device = get_device(spec.device)
    batch_size = spec.batch_size or strategy.batch_size or model_spec.batch_size
    seq_len = spec.seq_len or model_spec.seq_len
    lr = spec.lr or (1e-3 if model_spec.tiny else 1e-4)
    needed = batch_size * (spec.warmup_steps + spec.steps + 2)
    dataset = generate_dataset(model_spec, num_samples=max(spec.num_samples, needed), seq_len=seq_len, seed=spec.seed)
    model = build_model(model_spec, seed=spec.seed, dropout=spec.dropout, attention=strategy.attention)
    total = spec.warmup_steps + spec.steps
    times: list[float]
    losses: list[Any]
    if spec.engine == "trainer":
        times, losses = _trainer_loop(spec, model, dataset, device, lr=lr, batch_size=batch_size, seq_len=seq_len)
    else:
        batches = _batches(spec, dataset, batch_size=batch_size, seq_len=seq_len, device=device.type)
        torch.nn.Module.to(model, device.type)
        step = _STEPS[spec.strategy](model, spec, lr, batches, device.type)
        times, losses = [], []
        for _ in range(total):
            device.synchronize()
            start = time.perf_counter()
            loss = step()
            device.synchronize()  # a host clock read after the device's work, not its launch
            times.append(time.perf_counter() - start)
            losses.append(loss)
    timed = times[spec.warmup_steps :]
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "engine": spec.engine,
        "family": name,
        "status": "ok",
        "error": None,
        "threads": torch.get_num_threads(),
        "step_time_s": summarize(timed),
        "loss": [float(v) for v in losses],
    }


def _batches(spec: CaseSpec, dataset: Any, *, batch_size: int, seq_len: int, device: str) -> Iterator[Any]:
    """The case's endless micro-batch stream (its loader, its seeded order) on ``device``, as a model takes them."""
    from perfsuite.worker.data import TOKENS_KEY, WORKER_KEY, build_loader

    loader = build_loader(
        dataset,
        spec.strategy_spec,
        batch_size=batch_size,
        seq_len=seq_len,
        target_len=spec.model_spec.target_len,
        seed=spec.seed,
        pin_memory=False,
    )
    for batch in loader:
        batch.pop(TOKENS_KEY)
        batch.pop(WORKER_KEY)
        yield {k: v.to(device) for k, v in batch.items()}


StepFn = Callable[[], "torch.Tensor"]
"""One optimizer step; returns its loss (on the device: reading it would sync)."""


def _plain(model: Any, spec: CaseSpec, lr: float, batches: Iterator[Any], device: str) -> StepFn:
    """fp32 (and the 8-bit optimizer): forward, backward, clip, step."""
    import torch

    from perfsuite.worker.optimizers import build_optimizer

    optimizer = build_optimizer(spec.strategy_spec.optimizer, model, lr)
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(spec.seed)  # as both engines do once everything is built

    def step() -> torch.Tensor:
        loss = model(**next(batches)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return cast(torch.Tensor, loss.detach())

    return step


def _autocast(model: Any, spec: CaseSpec, lr: float, batches: Iterator[Any], device: str) -> StepFn:
    """fp16 or bf16 autocast; fp16 with a GradScaler (unscaled before clipping)."""
    import torch

    from perfsuite.worker.optimizers import build_optimizer

    dtype = torch.float16 if spec.strategy_spec.precision == "fp16" else torch.bfloat16
    optimizer = build_optimizer(spec.strategy_spec.optimizer, model, lr)
    scaler = torch.amp.GradScaler(device, enabled=dtype == torch.float16)
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(spec.seed)

    def step() -> torch.Tensor:
        with torch.autocast(device, dtype=dtype):
            loss = model(**next(batches)).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, spec.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return cast(torch.Tensor, loss.detach())

    return step


def _zero_offload(model: Any, spec: CaseSpec, lr: float, batches: Iterator[Any], device: str) -> StepFn:
    """DeepSpeed's engine, called directly with the case's config (ZeRO-2, CPU Adam)."""
    import deepspeed
    import torch

    from perfsuite.worker.engines.deepspeed import deepspeed_setup

    strategy = spec.strategy_spec
    batch_size = spec.batch_size or strategy.batch_size or spec.model_spec.batch_size
    config = deepspeed_setup(
        strategy,
        model,
        on_accelerator=device != "cpu",
        micro_batch_size=batch_size // strategy.grad_accum_steps,
        lr=lr,
        max_grad_norm=spec.max_grad_norm,
    )
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    torch.manual_seed(spec.seed)

    def step() -> torch.Tensor:
        loss = engine(**next(batches)).loss
        engine.backward(loss)
        engine.step()
        return cast(torch.Tensor, loss.detach())

    return step


_STEPS: dict[str, Callable[[Any, CaseSpec, float, Iterator[Any], str], StepFn]] = {
    "vanilla": _plain,
    "adamw_8bit": _plain,
    "fp16": _autocast,
    "bf16": _autocast,
    "zero2_offload": _zero_offload,
}


def _trainer_loop(
    spec: CaseSpec, model: Any, dataset: Any, device: Any, *, lr: float, batch_size: int, seq_len: int
) -> tuple[list[float], list[float]]:
    """``trainer.train()`` with the case's arguments, timed from one step's end to the next
    (the period perfsuite's Trainer engine times: batch fetch, step, log)."""
    import tempfile

    from transformers import TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from perfsuite.worker.engines.trainer_setup import trainer_inputs, training_arguments

    total = spec.warmup_steps + spec.steps
    ends: list[float] = []
    losses: list[float] = []

    class _Clock(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                ends.append(time.perf_counter())  # after the step and its log, as the engine's step() returns
                losses.append(float(logs["loss"]))

    strategy = spec.strategy_spec
    with tempfile.TemporaryDirectory(prefix="perfsuite-bare-") as out:
        kwargs = training_arguments(
            strategy,
            output_dir=out,
            micro_batch_size=batch_size // strategy.grad_accum_steps,
            lr=lr,
            max_grad_norm=spec.max_grad_norm,
            seed=spec.seed,
            max_steps=total,
            on_accelerator=device.is_accelerator,
            pin_memory=False,
            deepspeed=None,
        )
        train_dataset, collator, trainer_cls = trainer_inputs(
            strategy,
            dataset,
            batch_size=batch_size,
            seq_len=seq_len,
            target_len=spec.model_spec.target_len,
            seed=spec.seed,
        )
        hf = trainer_cls(
            model=model,
            args=TrainingArguments(**kwargs),
            train_dataset=train_dataset,
            data_collator=collator,
            callbacks=[_Clock()],
        )
        for cls in (PrinterCallback, ProgressCallback):
            hf.remove_callback(cls)
        hf.train()
    return [b - a for a, b in zip(ends, ends[1:], strict=False)], losses


INTERLEAVED = ("vanilla", "fp16", "bf16", "adamw_8bit")
"""Loop-engine cases :func:`run_interleaved` can pair in one process (two DeepSpeed engines in one
process share its global state; the Trainer owns its loop)."""


def run_interleaved(spec: CaseSpec) -> dict[str, Any]:
    """``spec.steps`` pairs of steps, the case's engine and the bare loop alternately (ABBA), after
    ``spec.warmup_steps`` of each: each side's step times and the median paired ratio (a worker's target)."""
    import torch

    from perfsuite.worker.build import build
    from perfsuite.worker.calibrate import Calibration
    from perfsuite.worker.data import generate_dataset
    from perfsuite.worker.engines.driven import Driven
    from perfsuite.worker.modeling import build_model

    if spec.engine != "loop" or spec.strategy not in INTERLEAVED:
        raise CaseSkipped(f"{spec.id}: no interleaved pairing (cases with one: {', '.join(INTERLEAVED)})")
    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    built = build(spec)
    device = built.device
    engine = Driven(built.engine, device_type=device.type)  # as the run drives it (perfsuite.worker.run)
    model_spec = spec.model_spec
    dataset = generate_dataset(model_spec, num_samples=spec.num_samples, seq_len=built.seq_len, seed=spec.seed)
    batches = _batches(spec, dataset, batch_size=built.batch_size, seq_len=built.seq_len, device=device.type)
    model = build_model(model_spec, seed=spec.seed, dropout=spec.dropout, attention=spec.strategy_spec.attention)
    torch.nn.Module.to(model, device.type)
    bare = _STEPS[spec.strategy](model, spec, built.lr, batches, device.type)
    calibration = None if device.is_accelerator else Calibration()

    def calibrate() -> None:
        if calibration is not None:  # as the case runs it: before each of its steps, not timed
            engine.in_training_thread(calibration.run_once)

    sides: dict[str, Callable[[], object]] = {"case": engine.step, "bare": bare}
    times: dict[str, list[float]] = {"case": [], "bare": []}
    try:
        for _ in range(spec.warmup_steps):
            calibrate()
            engine.step()
            bare()
        for i in range(spec.steps):
            for side in ("case", "bare") if i % 2 == 0 else ("bare", "case"):
                if side == "case":
                    calibrate()
                device.synchronize()
                start = time.perf_counter()
                sides[side]()
                device.synchronize()
                times[side].append(time.perf_counter() - start)
    finally:
        engine.close()
    ratios = [c / b for c, b in zip(times["case"], times["bare"], strict=True)]
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "engine": spec.engine,
        "status": "ok",
        "error": None,
        "threads": torch.get_num_threads(),
        "case_step_s": times["case"],
        "bare_step_s": times["bare"],
        "ratios": ratios,
    }
