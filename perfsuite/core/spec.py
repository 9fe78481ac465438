"""What a case is: its spec, its defaults per device, and the exceptions a run reports by. Pure.

A :class:`CaseSpec` names a model × strategy run and its knobs; it is made in the
pytest process or the CLI and sent to a worker (:mod:`perfsuite.worker.process`), which
runs it (:mod:`perfsuite.worker.run`). Everything here imports neither torch nor pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfsuite.core.engines import PROJECT_ENGINES, EngineSpec, check_engine, project_engine
from perfsuite.core.models import ModelSpec, get_model_spec
from perfsuite.core.strategies import Strategy, resolve


def case_id(model: str, strategy: str, world_size: int = 1, engine: str = "loop") -> str:
    """A case's id: ``<model>-<strategy>``, plus ``-ws<N>`` beyond one rank (``tiny-bert-ddp-ws2``)
    and ``-<engine>`` beyond the loop (``tiny-bert-fp16-trainer``)."""
    ranks = "" if world_size == 1 else f"-ws{world_size}"
    suffix = "" if engine == "loop" else f"-{engine}"
    return f"{model}-{strategy}{ranks}{suffix}"


@dataclass(frozen=True)
class RunDefaults:
    """How long a device's cases run when not told otherwise (``perfsuite run`` and the pytest tiers)."""

    steps: int
    warmup: int
    timeout: float
    fresh_layout: bool
    """Whether a repeat or a retry of a case starts a new forkserver, so that it draws a new
    address-space layout instead of sharing the first run's (see :func:`perfsuite.worker.process.renew_forkserver`)."""


TIER_THREADS = 1
"""Intra-op threads of the CPU tier (see :attr:`CaseSpec.threads`)."""

# CPU runs the tiny models briefly; a GPU the full-size ones longer.
DEFAULTS = {
    # A fresh machine JIT-compiles DeepSpeedCPUAdam: with a CPU build of torch in the forkserver of a
    # session with an offload case (30 s on 2 cores; perfsuite.worker.engines.deepspeed.load_cpu_adam),
    # with a CUDA build in the case's worker; .ci/run compiles it before the tests.
    # 12 timed steps: single steps spike on a shared machine, and the median of 12
    # calibrated steps moved 3% between repeats where 8 moved up to 10% (measured).
    # A CPU's layout moves a case's step time by a few percent the same way in every run forked
    # from one interpreter (docs/ab.md): its repeats each draw a new one. A GPU's step is its
    # kernels' (or, where the host issues them, noisier run to run than any layout): its repeats
    # share the forkserver, whose boot costs 12-17 s there (docs/gpu.md, the layout A/A).
    "cpu": RunDefaults(steps=12, warmup=2, timeout=600.0, fresh_layout=True),
    "cuda": RunDefaults(steps=20, warmup=5, timeout=900.0, fresh_layout=False),
}

PHASES = {
    "build": "build",
    "warmup": "warm-up",
    "timed": "timed steps",
    "memory_profile": "memory profile",
    "flop_count": "FLOP count",
    "close": "close",
}
"""The parts of a run, in order, with the words a summary uses: building model, data and
optimizer; the warm-up steps; the timed steps (with the calibration around them on a CPU);
the profiling step under MemTracker; the one under FlopCounterMode; closing the engine. A
record's ``phases_s`` has the seconds of each that ran."""


class CaseSkipped(Exception):
    """The case cannot run here (missing package, unsupported precision); the message says why."""


class NonFiniteLoss(RuntimeError):
    """A NaN or infinite loss; the message names the optimizer step."""


def launches_ranks(strategy: Strategy, world_size: int) -> bool:
    """Whether a case of ``strategy`` on ``world_size`` ranks launches them as processes of their own,
    which only the loop engine does."""
    return world_size > 1 or strategy.data_parallel != "none"


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
    """Run the untimed profile step (memory breakdown and FLOPs)."""
    calibrate: bool = True
    """On a CPU, bracket each timed step with the calibration workload (what stored times are
    gated in); ``perfsuite ab`` turns it off: its two sides share the machine's drift instead."""
    engine: str = "loop"
    """``loop`` (perfsuite's explicit loop), ``trainer`` (the Hugging Face Trainer) or an engine the
    project declared, see :mod:`perfsuite.core.engines`."""
    world_size: int = 1
    """Ranks the case trains on, each a process launched from the case's worker through torch's
    elastic launcher (one GPU each, or a CPU core); the strategy says how they share the work
    (``ddp``, ``fsdp2``, ``zero2``, ``zero3``). ``batch_size`` stays the global batch."""
    threads: int | None = None
    """Intra-op threads for torch; ``None`` keeps torch's default (the calibration's BLAS always uses one).
    The CPU tier uses 1: on a shared 2-core machine two threads wait on each other and on
    every other process, which doubled the run-to-run spread (measured; docs/timing.md)."""

    model_spec: ModelSpec = field(init=False, repr=False, compare=False)
    """The declared model, resolved where the case was made: a worker needs no registry (a
    project's ``conftest.py`` declarations live in the pytest process only)."""
    strategy_spec: Strategy = field(init=False, repr=False, compare=False)
    """The declared strategy (or composition), resolved likewise."""
    engine_spec: EngineSpec | None = field(init=False, repr=False, compare=False)
    """The project's engine, resolved likewise; ``None`` for perfsuite's own."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_spec", get_model_spec(self.model))
        object.__setattr__(self, "strategy_spec", resolve(self.strategy))
        object.__setattr__(self, "engine_spec", project_engine(check_engine(self.engine)))
        wrong = _wrong_engine(self, factory=self.model_spec.factory is not None, own=self.engine_spec is not None)
        if wrong is not None:
            raise ValueError(wrong)
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
            raise ValueError(
                f"{self.model}-{self.strategy} through {self.engine}: a case whose ranks are processes of their "
                "own runs through the loop engine (--engine loop); no other engine launches ranks"
            )

    @property
    def launches_ranks(self) -> bool:
        """Whether the case's ranks are launched as processes of their own (:mod:`perfsuite.worker.distributed`).

        DeepSpeed at world size 1 (``zero2_offload``) stays in the worker, in a world of one."""
        return launches_ranks(self.strategy_spec, self.world_size)

    @property
    def id(self) -> str:
        """``<model>-<strategy>``, plus ``-ws<N>`` beyond one rank (``tiny-bert-ddp-ws2``) and
        ``-<engine>`` beyond the loop (``tiny-bert-fp16-trainer``)."""
        return case_id(self.model, self.strategy, self.world_size, self.engine)


def _wrong_engine(spec: CaseSpec, *, factory: bool, own: bool) -> str | None:
    """Why a model cannot train through ``spec``'s engine, and what to give instead (``None``: it can).
    A model the project builds with a factory trains through an engine of the project's (one process),
    and only such a model does."""
    model, strategy, engine = spec.model, spec.strategy, spec.engine
    if factory and not own:
        if spec.world_size > 1:
            return (
                f"{model} is built by the project's factory, whose engines train one process; a case of "
                f"{spec.world_size} ranks runs through the loop engine, which trains a transformers model"
            )
        if not PROJECT_ENGINES:
            return f"{model} is built by the project's factory: declare its engine under [tool.perfsuite.engines]"
        first = next(iter(PROJECT_ENGINES))
        return (
            f"{model} is built by the project's factory and trains through an engine of the project's "
            f"({', '.join(PROJECT_ENGINES)}), not {engine}: the case {model}-{strategy}-{first} (--engine {first})"
        )
    if own and not factory:
        if spec.world_size > 1:
            choice, ids = "--engine loop", f"{model}-{strategy}-ws{spec.world_size}"
        else:
            choice, ids = "--engine loop or trainer", f"{model}-{strategy} or {model}-{strategy}-trainer"
        return (
            f"{engine} trains the models the project builds with a factory; {model} is built from a "
            f"transformers config: the case {ids} ({choice})"
        )
    return None


def dropout_for(world_size: int) -> bool:
    """Multi-rank cases train without dropout: each rank would draw its own masks, so only
    then is their loss the loss one process has on the same global batch, which their
    claims check against ``vanilla`` (also without dropout), sharing the matrix's runs.
    ``perfsuite run`` follows the same rule, so its figures are the baselines'."""
    return world_size == 1


def tier_spec(model: str, strategy: str, engine: str = "loop", **overrides: Any) -> CaseSpec:
    """The case as the test tiers run it: tiny models on the CPU, full-size ones on the GPU,
    multi-rank ones without dropout (:func:`dropout_for`)."""
    device = "cpu" if get_model_spec(model).tiny else "cuda"
    defaults = DEFAULTS[device]
    fields: dict[str, Any] = {"steps": defaults.steps, "warmup_steps": defaults.warmup, "device": device}
    fields["dropout"] = dropout_for(overrides.get("world_size", 1))
    if device == "cpu":
        fields["threads"] = TIER_THREADS
    return CaseSpec(model=model, strategy=strategy, engine=engine, **(fields | overrides))


MULTI_RANK_STRATEGIES = ("ddp", "fsdp2", "zero2", "zero3")
"""The strategies that say how ranks share the work; the matrix runs them at :data:`MATRIX_WORLD_SIZE`."""
MATRIX_WORLD_SIZE = 2
"""Ranks of the matrix's multi-rank cases: two CPU cores (gloo) in the CPU tier, two GPUs (NCCL) on a GPU box."""


def parse_case_id(case_id: str) -> tuple[str, str, str, int]:
    """``(model, strategy, engine, world size)`` of a case id as :attr:`CaseSpec.id` writes it:
    ``<model>-<strategy>[-ws<N>][-<engine>]``, the strategy any registered one or a ``+``
    composition (``tiny-bert-zero2_offload+grad_accum``). A ``ValueError`` says what a valid id is."""
    from perfsuite.core.engines import engine_names
    from perfsuite.core.models import MODELS

    rest, engine = case_id, "loop"
    for name in engine_names():
        if name != "loop" and rest.endswith(f"-{name}"):
            rest, engine = rest.removesuffix(f"-{name}"), name
    world_size = 1
    head, _, ranks = rest.rpartition("-ws")
    if head and ranks.isdigit():
        rest, world_size = head, int(ranks)
    problems = []
    for model in sorted(MODELS, key=len, reverse=True):  # the longest name first: tiny-bert before a tiny-
        if rest.startswith(f"{model}-"):
            strategy = rest.removeprefix(f"{model}-")
            try:
                resolve(strategy)
            except ValueError as exc:
                problems.append(f"{model}: {exc}")
                continue
            return model, strategy, engine, world_size
    why = f" ({problems[0]})" if problems else f"; models: {', '.join(MODELS)}"
    swapped = next((n for n in engine_names() if n != "loop" and f"-{n}-ws" in case_id), None)
    if swapped is not None and ranks.isdigit():  # the ranks before the engine, as ids are written
        why += f"; did you mean {case_id.replace(f'-{swapped}-ws{ranks}', f'-ws{ranks}-{swapped}')!r}?"
    raise ValueError(
        f"{case_id!r} is not a case id <model>-<strategy>[+<strategy>...][-ws<N>][-<engine>], "
        f"as `perfsuite run` names cases{why}"
    )
