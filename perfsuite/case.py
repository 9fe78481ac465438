"""One model × strategy case: what to run, and the run itself (inside a worker).

Order of a case: build, warm-up steps (loss kept, time dropped), timed steps (the
device's step timer only: nothing samples memory while they run; on a CPU each is
bracketed by the calibration workload, see :mod:`perfsuite.calibrate`), then untimed
profiling steps: one under MemTracker for the memory breakdown (every live tensor of
the process counted), one under FlopCounterMode for FLOPs and the dtypes the matmuls
ran in.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import resource
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfsuite.engines import ENGINES, check_engine, trainer_unsupported
from perfsuite.models import FULL_SIZE, TINY, ModelSpec, get_model_spec
from perfsuite.stats import first_non_finite, summarize
from perfsuite.strategies import BUILTIN_STRATEGIES, Strategy, resolve

if TYPE_CHECKING:
    from perfsuite.registry import MatrixEntry


@dataclass(frozen=True)
class RunDefaults:
    """How long a device's cases run when not told otherwise (``perfsuite run`` and the pytest tiers)."""

    steps: int
    warmup: int
    timeout: float


TIER_THREADS = 1
"""Intra-op threads of the CPU tier (see :attr:`CaseSpec.threads`)."""

# CPU runs the tiny models briefly; a GPU the full-size ones longer.
DEFAULTS = {
    # A first DeepSpeed case on a fresh machine JIT-compiles DeepSpeedCPUAdam (~2 min on 2 cores;
    # .ci/run compiles it before the tests).
    # 12 timed steps: single steps spike on a shared machine, and the median of 12
    # calibrated steps moved 3% between repeats where 8 moved up to 10% (measured).
    "cpu": RunDefaults(steps=12, warmup=2, timeout=600.0),
    "cuda": RunDefaults(steps=20, warmup=5, timeout=900.0),
}


class CaseSkipped(Exception):
    """The case cannot run here (missing package, unsupported precision); the message says why."""


class NonFiniteLoss(RuntimeError):
    """A NaN or infinite loss; the message names the optimizer step."""


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    """One model × strategy run and its knobs."""

    model: str
    """Registered model name."""
    strategy: str
    """Registered strategy name or a ``+`` combination."""
    steps: int = 10
    """Timed optimizer steps."""
    warmup_steps: int = 2
    """Optimizer steps before timing starts (allocator, autotuning, lazy optimizer state)."""
    batch_size: int | None = None
    """Samples per optimizer step; the model's default when ``None``."""
    seq_len: int | None = None
    """Maximum sequence length; the model's default when ``None``."""
    seed: int = 0
    """Seeds the weights, the data and the batch order."""
    lr: float | None = None
    """Learning rate; 1e-3 for tiny models, 1e-4 for full-size ones when ``None``."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (the HF Trainer default)."""
    dropout: bool = True
    """Keep the architecture's dropout; equivalence checks turn it off (see tests)."""
    device: str = "auto"
    """``auto``, ``cpu`` or ``cuda``."""
    pretrained: str | None = None
    """A ``save_pretrained`` directory, or ``hub-cache`` for locally cached hub weights."""
    dataset: str | None = None
    """A local data file or cached ``datasets`` name instead of generated data."""
    tokenizer: str | None = None
    """Tokenizer directory for ``dataset``."""
    num_samples: int = 1024
    """Generated dataset size (epochs repeat with a new seeded order)."""
    profile: bool = True
    """Run the untimed memory-breakdown and FLOP-count steps."""
    engine: str = "loop"
    """``loop`` (perfsuite's explicit loop) or ``trainer`` (the Hugging Face Trainer), see
    :mod:`perfsuite.engines`."""
    world_size: int = 1
    """Ranks the case trains on, each a process launched from the case's worker through torch's
    elastic launcher (one GPU each, or a CPU core); the strategy says how they share the work
    (``ddp``, ``fsdp2``, ``zero2``, ``zero3``). ``batch_size`` stays the global batch."""
    threads: int | None = None
    """Intra-op threads for torch; ``None`` keeps torch's default (the calibration's BLAS always uses one).
    The CPU tier uses 1: on a shared 2-core machine two threads wait on each other and on
    every other process, which doubled the run-to-run spread (measured; see README)."""

    model_spec: ModelSpec = field(init=False, repr=False, compare=False)
    """The declared model, resolved where the case was made: a worker needs no registry (a
    project's ``conftest.py`` declarations live in the pytest process only)."""
    strategy_spec: Strategy = field(init=False, repr=False, compare=False)
    """The declared strategy (or composition), resolved likewise."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_spec", get_model_spec(self.model))
        object.__setattr__(self, "strategy_spec", resolve(self.strategy))
        check_engine(self.engine)
        if self.steps < 1 or self.warmup_steps < 0:
            raise ValueError("steps must be >= 1 and warmup_steps >= 0")
        if self.threads is not None and self.threads < 1:
            raise ValueError("threads must be >= 1")
        if self.dataset is not None and self.tokenizer is None:
            raise ValueError("a dataset needs --tokenizer (a local tokenizer directory)")
        if self.world_size < 1:
            raise ValueError("world_size must be >= 1")
        if self.world_size > 1 and not self.strategy_spec.distributed:
            raise ValueError(
                f"{self.strategy} does not say how {self.world_size} ranks share the work; "
                f"combine it with one of {', '.join(MULTI_RANK_STRATEGIES)} (e.g. {self.strategy}+ddp)"
            )
        if self.launches_ranks and self.engine != "loop":
            raise ValueError("multi-rank cases run through the loop engine (the Trainer's launch is not mapped yet)")

    @property
    def launches_ranks(self) -> bool:
        """Whether the case's ranks are launched as processes of their own (:mod:`perfsuite.distributed`).

        DeepSpeed at world size 1 (``zero2_offload``) stays in the worker, in a world of one."""
        return self.world_size > 1 or self.strategy_spec.data_parallel != "none"

    @property
    def id(self) -> str:
        """``<model>-<strategy>``, plus ``-ws<N>`` beyond one rank (``tiny-bert-ddp-ws2``) and
        ``-<engine>`` beyond the loop (``tiny-bert-fp16-trainer``)."""
        ranks = "" if self.world_size == 1 else f"-ws{self.world_size}"
        suffix = "" if self.engine == "loop" else f"-{self.engine}"
        return f"{self.model}-{self.strategy}{ranks}{suffix}"


def tier_spec(model: str, strategy: str, engine: str = "loop", **overrides: Any) -> CaseSpec:
    """The case as the test tiers run it: tiny models on the CPU, full-size ones on the GPU.

    Multi-rank cases train without dropout: each rank would draw its own masks, so only
    then is their loss the loss one process has on the same global batch, which their
    claims check against ``vanilla`` (also without dropout), sharing the matrix's runs."""
    device = "cpu" if get_model_spec(model).tiny else "cuda"
    defaults = DEFAULTS[device]
    fields: dict[str, Any] = {"steps": defaults.steps, "warmup_steps": defaults.warmup, "device": device}
    if overrides.get("world_size", 1) > 1:
        fields["dropout"] = False
    if device == "cpu":
        fields["threads"] = TIER_THREADS
    return CaseSpec(model=model, strategy=strategy, engine=engine, **(fields | overrides))


MULTI_RANK_STRATEGIES = ("ddp", "fsdp2", "zero2", "zero3")
"""The strategies that say how ranks share the work; the matrix runs them at :data:`MATRIX_WORLD_SIZE`."""
MATRIX_WORLD_SIZE = 2
"""Ranks of the matrix's multi-rank cases: two CPU cores (gloo) in the CPU tier, two GPUs (NCCL) on a GPU box."""

MATRIX_ENGINES = ENGINES
"""Every case runs through each engine (the Trainer's where it can express the strategy)."""

MATRIX_PAIRS: tuple[str, ...] = ("fp16+grad_ckpt",)
"""Combinations the matrix runs besides ``all``: the pairs the practitioners' write-ups publish."""

_EVERY_PUSH_BEYOND_TINY_BERT = frozenset({"vanilla", "grad_accum", "grad_ckpt", "adafactor", "dynamic_padding"})
"""fp32 strategies the other tiny encoder/decoder models run on every push (the original matrix,
less DeepSpeed's two, 13-19 s a case there, and 8-bit AdamW, the DataLoader and smart
batching, which tiny-bert runs on every push: they moved to nightly when the Trainer
engine's cases came)."""
_EVERY_PUSH_ON_TINY_LLAMA = frozenset({"vanilla", "grad_accum", "grad_ckpt", "lora"})
"""The tiny Llama's core: what a modern decoder is fine-tuned with (eager attention and fused
AdamW, which tiny-bert covers on every push, run nightly)."""


def matrix_strategies(model: str, engine: str = "loop") -> list[str]:
    """The strategies the test matrix pairs with ``model`` through ``engine``: every registered
    one its device can run (GPU-only ones are left out of the CPU tier), plus :data:`MATRIX_PAIRS`;
    through the Trainer, those it can express (:func:`perfsuite.engines.trainer_unsupported`)."""
    names = [n for n in (*BUILTIN_STRATEGIES, *MATRIX_PAIRS) if n not in MULTI_RANK_STRATEGIES]
    if get_model_spec(model).tiny:
        names = [n for n in names if resolve(n).gpu_only is None]
        if model != "tiny-bert":
            # Measured, not yet understood: MemTracker followed no compiled step of tiny-gpt2
            # or tiny-llama (no memory breakdown, so no CPU peak), and tiny-t5's compiled
            # peak differed by 4.45% between repeats. tiny-bert-compile records and gates.
            names.remove("compile")
    if engine == "trainer":
        names = [n for n in names if trainer_unsupported(resolve(n)) is None]
        if get_model_spec(model).tiny and model != "tiny-bert":
            # The other tiny models through the Trainer (nightly): what the loop runs for them on every push.
            names = [n for n in names if not nightly_only(model, n)]
    return names


_NIGHTLY_ON_TINY_BERT = frozenset(
    {"fused_adamw", "lion", "lion_8bit", "galore", "eager_attention", "fp16+grad_ckpt", "zero3_offload"}
)
"""Newer optimizers and the attention switch, nightly since the project test (tests/test_own_project.py,
about 75 s) came: each cost 10-16 s a push with its without-the-strategy claim (measured in a full run).
``fp16+grad_ckpt`` (20 s: fp16 runs 4-6× vanilla on a CPU without fp16 kernels; ``all`` still
runs both on every push) and ZeRO-3 nightly since the report's tests came and a full run
reached 17 minutes; ZeRO-2 with offload runs on every push (15 s), in place of its
accumulation interaction (100 s), which moved to nightly."""

_TRAINER_EVERY_PUSH = frozenset({"vanilla", "fp16", "grad_accum", "grad_ckpt", "smart_batching"})
"""tiny-bert through the Trainer on every push: the write-ups' core strategies, each with a
claim that has caught the Trainer doing something else (fp16 on CPU, accumulation's loss)."""


MULTI_RANK_MATRIX: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "tiny-bert": (("ddp", "fsdp2", "zero2", "zero3", "ddp+grad_accum", "fsdp2+grad_ckpt"), (MATRIX_WORLD_SIZE,)),
    "tiny-gpt2": (("ddp", "fsdp2"), (MATRIX_WORLD_SIZE,)),
    "tiny-llama": (("ddp", "fsdp2"), (MATRIX_WORLD_SIZE,)),
    "bert-base-uncased": (MULTI_RANK_STRATEGIES, (MATRIX_WORLD_SIZE,)),
    "smollm2-135m": (("ddp", "fsdp2"), (MATRIX_WORLD_SIZE,)),
}
"""Multi-rank cases (loop engine): model → (strategies, world sizes). The GPU tier also runs
bert-base-uncased's ``ddp`` at world size 1 (NCCL in a world of one: what DDP costs alone)."""

_MULTI_RANK_EVERY_PUSH = frozenset({("tiny-bert", "ddp"), ("tiny-bert", "fsdp2"), ("tiny-bert", "zero2")})
"""Multi-rank cases of every push (with their claims); the rest of the CPU tier's run nightly."""


def nightly_only(model: str, strategy: str, engine: str = "loop", world_size: int = 1) -> bool:
    """Whether a CPU-tier case runs only in the nightly tier (``pytest -m nightly``), not on every push.

    Chosen by measured cost, so that ``python -m pytest`` stays within 15 minutes on 2 cores:
    tiny-bert runs every strategy on every push except ``compile`` (inductor compiles a
    tiny-bert step in about a minute on 2 cores, per case) and
    :data:`_NIGHTLY_ON_TINY_BERT`; the other tiny models run
    the fp32 strategies of the original matrix but DeepSpeed's (tiny-llama: its core
    set), because on a CPU without native fp16/bf16 kernels their half-precision cases
    ran 21-44 s each and their ZeRO cases 13-19 s.
    Through the Trainer, tiny-bert runs :data:`_TRAINER_EVERY_PUSH` on every push.
    Everything else runs nightly.
    """
    if model not in TINY:
        return False
    if world_size > 1:
        return (model, strategy) not in _MULTI_RANK_EVERY_PUSH
    if engine != "loop":
        return model != "tiny-bert" or strategy not in _TRAINER_EVERY_PUSH
    chosen = resolve(strategy)
    if chosen.compile:
        return True
    if model == "tiny-bert":
        return strategy in _NIGHTLY_ON_TINY_BERT
    if model == "tiny-llama":
        return strategy not in _EVERY_PUSH_ON_TINY_LLAMA
    return chosen.precision != "fp32" or strategy not in _EVERY_PUSH_BEYOND_TINY_BERT


@functools.cache
def builtin_matrix() -> tuple[MatrixEntry, ...]:
    """perfsuite's own matrix as declaration entries: each built-in model × :func:`matrix_strategies`
    through each engine, the cases :func:`nightly_only` picks marked ``nightly``."""
    from perfsuite.registry import BUILTIN, MatrixEntry

    entries = []
    for engine in MATRIX_ENGINES:
        for model in (*TINY, *FULL_SIZE):
            names = matrix_strategies(model, engine)
            for nightly in (False, True):
                chosen = tuple(n for n in names if nightly_only(model, n, engine) == nightly)
                if chosen:
                    entries.append(
                        MatrixEntry(
                            models=(model,),
                            strategies=chosen,
                            engines=(engine,),
                            markers=("nightly",) if nightly else (),
                            source=BUILTIN,
                        )
                    )
    for model, (strategies, sizes) in MULTI_RANK_MATRIX.items():
        for size in sizes:
            for nightly in (False, True):
                chosen = tuple(n for n in strategies if nightly_only(model, n, "loop", size) == nightly)
                if chosen:
                    entries.append(
                        MatrixEntry(
                            models=(model,),
                            strategies=chosen,
                            markers=("nightly",) if nightly else (),
                            source=BUILTIN,
                            world_sizes=(size,),
                        )
                    )
    entries.append(MatrixEntry(models=("bert-base-uncased",), strategies=("ddp",), source=BUILTIN))
    return tuple(entries)


def failed_record(spec: CaseSpec, *, status: str, error: str) -> dict[str, Any]:
    """The record of a case that produced no measurements."""
    return {
        "model": spec.model,
        "strategy": spec.strategy,
        "engine": spec.engine,
        "world_size": spec.world_size,
        "status": status,
        "error": error,
    }


def _host_peak_rss() -> int:
    # ru_maxrss is a kernel high-water mark (KiB on Linux): reading it samples nothing.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_case(spec: CaseSpec) -> dict[str, Any]:
    """Build and run one case; returns its result record. Runs inside a worker.

    A multi-rank case launches its ranks from here (:mod:`perfsuite.distributed.launch`),
    each running :func:`train` on its share of every global batch, and returns their
    records aggregated into one (:mod:`perfsuite.distributed.aggregate`).
    """
    if spec.launches_ranks:
        from perfsuite.distributed.launch import run_ranks

        _check_requirements(spec.strategy_spec)
        return run_ranks(spec)
    return train(spec)


def _check_requirements(strategy: Strategy) -> None:
    missing = strategy.missing_requirements()
    if missing:
        extra = {
            "deepspeed": "deepspeed",
            "bitsandbytes": "bnb",
            "peft": "lora",
            "lion_pytorch": "lion",
            "galore_torch": "galore",
        }
        raise CaseSkipped(
            f"{strategy.name} needs {', '.join(missing)}: "
            f"pip install 'perfsuite[{','.join(extra[m] for m in missing)}]'"
        )


def train(spec: CaseSpec, *, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
    """Train ``spec`` in this process and measure it: the whole case, or rank ``rank`` of a
    ``world_size``-rank one (whose process group is already up, see :mod:`perfsuite.distributed`)."""
    import torch

    from perfsuite import measure
    from perfsuite.calibrate import NAME as CALIBRATION
    from perfsuite.calibrate import Calibration, calibrated_steps
    from perfsuite.cpu_threads import ThreadWindow
    from perfsuite.data import build_loader, generate_dataset, load_text_dataset
    from perfsuite.device import get_device
    from perfsuite.engines import Engine
    from perfsuite.hardware import hardware_key, time_class
    from perfsuite.models import build_model

    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    strategy = spec.strategy_spec
    model_spec = spec.model_spec
    _check_requirements(strategy)
    device = get_device(spec.device)
    reason = device.precision_unsupported(strategy.precision, deepspeed=strategy.uses_deepspeed)
    if reason:
        raise CaseSkipped(reason)
    if strategy.gpu_only and not device.is_accelerator:
        raise CaseSkipped(f"{strategy.name} needs a GPU: {strategy.gpu_only}")

    batch_size = spec.batch_size or strategy.batch_size or model_spec.batch_size
    if batch_size % (strategy.grad_accum_steps * world_size):
        raise ValueError(
            f"batch size {batch_size} does not split into {strategy.grad_accum_steps} micro-batches "
            f"across {world_size} rank(s)"
        )
    seq_len = spec.seq_len or model_spec.seq_len
    lr = spec.lr or (1e-3 if model_spec.tiny else 1e-4)
    # The case's own data and weights, else the model's declared ones.
    data_file, tokenizer_dir = spec.dataset, spec.tokenizer
    if data_file is None:
        data_file, tokenizer_dir = model_spec.data, model_spec.tokenizer
    pretrained = spec.pretrained or model_spec.pretrained
    torch.manual_seed(spec.seed)
    vocab_size = None
    if data_file is not None:
        assert tokenizer_dir is not None
        dataset = load_text_dataset(data_file, tokenizer=tokenizer_dir, task=model_spec.task, seq_len=seq_len)
        from transformers import AutoTokenizer

        if pretrained is None:
            vocab_size = len(AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True))
    else:
        needed = batch_size * (spec.warmup_steps + spec.steps + 2)
        dataset = generate_dataset(
            model_spec, num_samples=max(spec.num_samples, needed), seq_len=seq_len, seed=spec.seed
        )
    model = build_model(
        model_spec,
        seed=spec.seed,
        dropout=spec.dropout,
        pretrained=pretrained,
        vocab_size=vocab_size,
        attention=strategy.attention,
    )
    num_parameters = sum(p.numel() for p in model.parameters())
    model_config = model.config.to_diff_dict()
    if strategy.quantize_4bit:
        from perfsuite.adapters import quantize_4bit

        dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
        model = quantize_4bit(model, compute_dtype=dtypes[strategy.precision])
    pin_memory = strategy.pin_memory and device.pins_memory
    trainer: Engine
    if spec.engine == "trainer":
        from perfsuite.engines.hf_trainer import HFTrainerEngine

        tokenizer = None
        if tokenizer_dir is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
        trainer = HFTrainerEngine(
            model,
            strategy,
            dataset,
            device,
            lr=lr,
            max_grad_norm=spec.max_grad_norm,
            batch_size=batch_size,
            seq_len=seq_len,
            target_len=model_spec.target_len,
            seed=spec.seed,
            max_steps=spec.warmup_steps + spec.steps + (2 if spec.profile else 0),
            pin_memory=pin_memory,
            tokenizer=tokenizer,
        )
    else:
        from perfsuite.engines.loop import LoopEngine

        loader: Any = build_loader(
            dataset,
            strategy,
            batch_size=batch_size,
            seq_len=seq_len,
            target_len=model_spec.target_len,
            seed=spec.seed,
            pin_memory=pin_memory,
        )
        if world_size > 1:
            from perfsuite.data import RankShare

            loader = RankShare(loader, rank, world_size)
        trainer = LoopEngine(
            model,
            strategy,
            loader,
            device,
            lr=lr,
            max_grad_norm=spec.max_grad_norm,
            batch_size=batch_size,
            seed=spec.seed,
            world_size=world_size,
            causal_lm=model_spec.task == "causal_lm",
        )
    # Host-side drift cancels against a workload outside the stack under test; a GPU's
    # step time is its kernels', which a host workload says nothing about.
    calibration = None if device.is_accelerator else Calibration()
    calibrations: list[float] = []
    try:
        warm_timer = device.timer()
        warm = []
        for _ in range(spec.warmup_steps):
            warm_timer.start()
            warm.append(trainer.step())
            warm_timer.stop()
        warmup_times = warm_timer.elapsed()
        # The calibration runs in the thread that runs the steps (the Trainer's own), so it
        # measures the core and the state the steps ran in.
        if calibration is not None:
            trainer.in_training_thread(calibration.run_once)  # its own warm-up (page faults, BLAS buffers)
        device.reset_peak_memory()
        threads = ThreadWindow()  # which threads ran while steps were timed (read at the two ends only)
        threads.start()
        timer = device.timer()
        timed = []
        for _ in range(spec.steps):
            if calibration is not None:
                calibrations.append(trainer.in_training_thread(calibration.run_once))
            timer.start()
            timed.append(trainer.step())
            timer.stop()
        if calibration is not None:
            calibrations.append(trainer.in_training_thread(calibration.run_once))
        step_times = timer.elapsed()
        threads.stop()
        allocator_peaks = device.peak_memory()
        outputs = warm + timed
        losses = [float(o.loss) for o in outputs]
        bad = first_non_finite(losses)
        if bad is not None:
            raise NonFiniteLoss(f"loss is {losses[bad]} at optimizer step {bad} (of {len(losses)})")
        grad_norms = [None if o.grad_norm is None else float(o.grad_norm) for o in outputs]
        micro_batches = getattr(trainer, "micro_batches", lambda steps: None)(len(outputs))

        breakdown: dict[str, Any] = {}
        flops: dict[str, Any] = {}
        if spec.profile:
            breakdown = measure.memory_breakdown(trainer)
            flops = measure.count_flops(trainer)
        evidence = trainer.evidence()
    finally:
        trainer.close()

    time_stats = summarize(step_times)
    # torch.compile compiles in the first steps: what the warm-up took beyond steady steps.
    compile_s = max(0.0, sum(warmup_times) - len(warmup_times) * time_stats["median"]) if strategy.compile else None
    calibrated = summarize(calibrated_steps(step_times, calibrations)) if calibrations else None
    real = sum(o.real_tokens for o in timed)
    padded = sum(o.padded_tokens for o in timed)
    total_time = sum(step_times)
    flops_per_step = flops.get("flops_per_step")
    peak_rate = device.peak_flops(strategy.precision)
    mfu = flops_per_step / time_stats["median"] / peak_rate if flops_per_step and peak_rate else None
    if allocator_peaks is not None:
        peak_bytes: int | None = allocator_peaks["max_memory_allocated"]
    else:
        peak_bytes = breakdown.get("peak_bytes")
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
        "num_parameters": num_parameters,
        "model_config": model_config,
        "task": model_spec.task,
        "batch_size": batch_size,
        "micro_batch_size": batch_size // strategy.grad_accum_steps // world_size,
        "world_size": world_size,
        "rank": rank,
        "seq_len": seq_len,
        "seed": spec.seed,
        "learning_rate": lr,
        "dropout": spec.dropout,
        "pretrained": pretrained,
        "dataset": data_file or f"generated:{model_spec.task}",
        "warmup_steps": spec.warmup_steps,
        "steps": spec.steps,
        "strategy_config": dataclasses.asdict(strategy),
        "step_time_s": time_stats,
        "warmup_step_s": warmup_times,
        "compile_s": compile_s,
        "step_time_calibrated": calibrated,
        "calibration": None
        if not calibrations
        else {"workload": CALIBRATION, "median_s": summarize(calibrations)["median"], "samples_s": calibrations},
        "samples_per_s": batch_size * spec.steps / total_time,
        "tokens_per_s": {"real": real / total_time, "padded": padded / total_time},
        "timed_tokens": {"real": real, "padded": padded},
        "padding_fraction": 1 - real / padded if padded else 0.0,
        "peak_memory_bytes": peak_bytes,
        "peak_memory_source": "max_memory_allocated" if allocator_peaks is not None else "memtracker",
        "allocator_peaks_bytes": allocator_peaks,
        "memory_breakdown_bytes": breakdown.get("categories"),
        "memory_breakdown_error": breakdown.get("error"),
        "host_peak_rss_bytes": _host_peak_rss(),
        "flops_per_step": flops_per_step,
        "mfu": mfu,
        "peak_flops": peak_rate,
        "matmul_dtypes": flops.get("matmul_dtypes"),
        "attention_ops": flops.get("attention_ops"),
        "loss": losses,
        "micro_batches": micro_batches,
        "grad_norm": grad_norms,
        "skipped_optimizer_steps": sum(o.skipped for o in outputs),
        "applied": evidence,
        "timed_threads": threads.result,
        "pid": os.getpid(),
    }
