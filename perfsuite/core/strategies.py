"""The strategy registry: what each memory/speed technique changes in a training run.

A :class:`Strategy` is a frozen description. The engine reads its fields; nothing
here imports torch, so the registry is cheap to load for the CLI and for test
collection. ``a+b`` composes two strategies field by field (see :func:`resolve`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Precision = Literal["fp32", "fp16", "bf16"]
OptimizerName = Literal[
    "adamw", "adamw_fused", "adafactor", "adamw_8bit", "paged_adamw_8bit", "lion", "lion_8bit", "galore_adamw"
]
Padding = Literal["max_length", "longest"]
Attention = Literal["sdpa", "eager"]
DataParallel = Literal["none", "ddp", "fsdp2"]

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
OPTIMIZERS: tuple[str, ...] = (
    "adamw",
    "adamw_fused",
    "adafactor",
    "adamw_8bit",
    "paged_adamw_8bit",
    "lion",
    "lion_8bit",
    "galore_adamw",
)
PADDINGS: tuple[str, ...] = ("max_length", "longest")
ATTENTIONS: tuple[str, ...] = ("sdpa", "eager")
DATA_PARALLEL: tuple[str, ...] = ("none", "ddp", "fsdp2")

# What cannot run without a GPU, and why (a CPU run reports the case skipped with this).
_GPU_ONLY_OPTIMIZERS = {
    "paged_adamw_8bit": "paged optimizer state lives in CUDA unified memory; on a CPU bitsandbytes "
    "silently falls back to plain 8-bit AdamW",
}


class UnknownNameError(ValueError):
    """A model or strategy name that is not registered; the message lists the valid ones."""


@dataclass(frozen=True, kw_only=True)
class Strategy:
    """One way of running the same training job."""

    name: str
    """Registry name, used in case ids (``tiny-bert-fp16``) and reports."""
    description: str = ""
    """One line for reports and ``perfsuite run --help``."""
    precision: Precision = "fp32"
    """Autocast dtype of the forward pass; ``fp16`` adds GradScaler loss scaling."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; each is ``batch_size / grad_accum_steps`` samples."""
    batch_size: int | None = None
    """Samples per optimizer step, for a recipe that fixes its own; the model's when ``None``."""
    grad_checkpointing: bool = False
    """Recompute activations in the backward pass instead of storing them."""
    optimizer: OptimizerName = "adamw"
    """``adamw`` (torch), ``adamw_fused`` (torch, ``fused=True``), ``adafactor`` (transformers),
    ``adamw_8bit``, ``paged_adamw_8bit`` and ``lion_8bit`` (bitsandbytes), ``lion``
    (lion-pytorch) or ``galore_adamw`` (galore-torch, on the 2-D weights of linear layers)."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage; 0 means plain accelerate without DeepSpeed."""
    offload_optimizer: bool = False
    """ZeRO: keep optimizer state (and fp32 master weights) on the CPU."""
    offload_params: bool = False
    """ZeRO-3: keep partitioned parameters on the CPU between uses."""
    num_workers: int = 0
    """DataLoader worker processes."""
    pin_memory: bool = False
    """Pin host batches for asynchronous copies (only meaningful with an accelerator)."""
    padding: Padding = "max_length"
    """``max_length`` pads every batch to the sequence length; ``longest`` to the batch's longest."""
    length_grouped: bool = False
    """Group samples of similar length into the same batch (smart batching)."""
    attention: Attention = "sdpa"
    """transformers' attention implementation: ``sdpa`` (its default since 5.0) or ``eager``."""
    compile: bool = False
    """``torch.compile`` the model (inductor); compilation happens in the warm-up steps."""
    lora_rank: int = 0
    """LoRA adapters of this rank on the attention projections (peft); 0 trains every weight."""
    quantize_4bit: bool = False
    """Load the base weights in 4-bit NF4 (bitsandbytes), as QLoRA does; needs ``lora_rank``."""
    activation_offload: bool = False
    """Move the activations checkpointing saves to host memory during the forward (GPU only)."""
    data_parallel: DataParallel = "none"
    """How ranks share the work besides DeepSpeed's ZeRO: ``ddp`` (accelerate's
    DistributedDataParallel: replicated weights, all-reduced gradients) or ``fsdp2`` (torch
    ``fully_shard``: parameters, gradients and optimizer state sharded across ranks). The
    case's ``world_size`` says how many ranks (see :mod:`perfsuite.worker.distributed`)."""

    def __post_init__(self) -> None:
        for name, types in _FIELD_TYPES.items():
            value = getattr(self, name)
            if type(value) not in types:  # exactly: true is no integer, 2 no flag
                raise ValueError(
                    f"{self.name}: {name} must be {_TYPE_WORDS.get(types[0], types[0].__name__)}, not {value!r}"
                )
        if self.precision not in PRECISIONS:
            raise ValueError(f"{self.name}: precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"{self.name}: optimizer must be one of {OPTIMIZERS}, not {self.optimizer!r}")
        if self.padding not in PADDINGS:
            raise ValueError(f"{self.name}: padding must be one of {PADDINGS}, not {self.padding!r}")
        if self.grad_accum_steps < 1:
            raise ValueError(f"{self.name}: grad_accum_steps must be >= 1")
        if self.batch_size is not None and (self.batch_size < 1 or self.batch_size % self.grad_accum_steps):
            raise ValueError(f"{self.name}: batch_size must be a positive multiple of grad_accum_steps")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"{self.name}: zero_stage must be 0..3")
        if self.offload_optimizer and not self.zero_stage:
            raise ValueError(f"{self.name}: offload_optimizer needs a DeepSpeed zero_stage")
        if self.offload_params and self.zero_stage != 3:
            raise ValueError(f"{self.name}: offload_params needs zero_stage 3")
        if self.zero_stage and self.optimizer != "adamw":
            # DeepSpeed brings its own (CPU) Adam for offload; a client 8-bit or factored
            # optimizer would silently not be the one measured.
            raise ValueError(f"{self.name}: DeepSpeed strategies use DeepSpeed's AdamW, not {self.optimizer}")
        if self.num_workers < 0:
            raise ValueError(f"{self.name}: num_workers must be >= 0")
        if self.length_grouped and self.padding != "longest":
            raise ValueError(f"{self.name}: length grouping only pays off with padding='longest'")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"{self.name}: attention must be one of {ATTENTIONS}, not {self.attention!r}")
        if self.lora_rank < 0:
            raise ValueError(f"{self.name}: lora_rank must be >= 0")
        if self.quantize_4bit and not self.lora_rank:
            raise ValueError(f"{self.name}: 4-bit base weights cannot be trained; quantize_4bit needs lora_rank")
        if self.activation_offload and not self.grad_checkpointing:
            raise ValueError(f"{self.name}: activation_offload offloads what checkpointing saves; it needs it")
        if self.compile and self.zero_stage:
            raise ValueError(f"{self.name}: DeepSpeed compiles through its own engine; compile with zero_stage")
        if self.data_parallel not in DATA_PARALLEL:
            raise ValueError(f"{self.name}: data_parallel must be one of {DATA_PARALLEL}, not {self.data_parallel!r}")
        if self.data_parallel != "none" and self.zero_stage:
            raise ValueError(
                f"{self.name}: DeepSpeed's ZeRO shares the work across ranks itself; no {self.data_parallel}"
            )
        if self.data_parallel == "fsdp2":
            # What perfsuite's fully_shard path maps: torch optimizers over DTensor parameters,
            # fp32 or bf16 (fp16 would need a scaler that reduces found_inf across shards).
            if self.optimizer not in ("adamw", "adamw_fused"):
                raise ValueError(f"{self.name}: fsdp2 runs torch AdamW (fused or not), not {self.optimizer}")
            if self.precision == "fp16":
                raise ValueError(f"{self.name}: fsdp2 with fp16 loss scaling is not mapped; use bf16")
            if self.lora_rank or self.compile:
                raise ValueError(f"{self.name}: fsdp2 with LoRA or torch.compile is not mapped")

    @property
    def uses_deepspeed(self) -> bool:
        return self.zero_stage > 0

    @property
    def distributed(self) -> bool:
        """Whether the strategy trains across ranks (DDP, FSDP2 or DeepSpeed's ZeRO)."""
        return self.data_parallel != "none" or self.zero_stage > 0

    @property
    def requires(self) -> tuple[str, ...]:
        """Import names of the optional packages this strategy needs: its optimizer's, then those of the
        fields it sets (:data:`OPTIONAL_PACKAGES`' order)."""
        by_optimizer = [p.module for p in OPTIONAL_PACKAGES if self.optimizer in p.optimizers]
        by_field = [p.module for p in OPTIONAL_PACKAGES if any(getattr(self, f) for f in p.fields)]
        return tuple(dict.fromkeys(by_optimizer + by_field))

    @property
    def gpu_only(self) -> str | None:
        """Why this strategy cannot run without a GPU (``None`` when it can)."""
        if self.optimizer in _GPU_ONLY_OPTIMIZERS:
            return _GPU_ONLY_OPTIMIZERS[self.optimizer]
        if self.quantize_4bit:
            return (
                "QLoRA's 4-bit base weights are a GPU memory technique; "
                "bitsandbytes' CPU 4-bit kernels make it a different, far slower job"
            )
        if self.activation_offload:
            return "activation offloading saves to pinned host memory, which a CPU-only torch cannot allocate"
        return None

    def missing_requirements(self) -> list[str]:
        """Optional packages this strategy needs that are not installed."""
        return [pkg for pkg in self.requires if importlib.util.find_spec(pkg) is None]

    def unmet_requirements(self) -> str | None:
        """Why this strategy cannot run here for want of a package, naming the install; ``None`` when it can."""
        missing = self.missing_requirements()
        if not missing:
            return None
        return f"{self.name} needs {', '.join(missing)}: {install_hint(missing)}"


def _field_types() -> dict[str, tuple[type, ...]]:
    """Each :class:`Strategy` field's types, from its annotation (a choice of names: a string; ``int | None``:
    an integer, or unset)."""
    hints = typing.get_type_hints(Strategy)
    return {
        name: (str,) if typing.get_origin(hint) is Literal else typing.get_args(hint) or (hint,)
        for name, hint in hints.items()
    }


_FIELD_TYPES = _field_types()
_TYPE_WORDS = {str: "a string", int: "an integer", bool: "true or false"}


@dataclass(frozen=True, kw_only=True)
class OptionalPackage:
    """A package some strategies need and perfsuite does not install by default. The pytest markers,
    the skip reasons, the forkserver's preloads, the FLOP cache's stack key and ``perfsuite ab``'s
    probe of a side are all read from :data:`OPTIONAL_PACKAGES`; pyproject.toml's extra of the same
    name installs it (``tests/test_strategies.py`` holds the two together)."""

    module: str
    """Its import name (``lion_pytorch``): what is looked for, imported and preloaded."""
    distribution: str
    """Its name on PyPI (``lion-pytorch``): whose version the FLOP cache's key and a side's probe read."""
    extra: str
    """The perfsuite extra that installs it (``pip install 'perfsuite[lion]'``), also the pytest
    marker of a case or test that needs it."""
    optimizers: tuple[str, ...] = ()
    """The optimizers (:data:`OPTIMIZERS`) it brings."""
    fields: tuple[str, ...] = ()
    """The :class:`Strategy` fields that need it when set (``zero_stage`` above 0)."""
    cuda_at_import: bool = False
    """Whether its import asks CUDA about the GPUs, which a forkserver must not
    (:data:`perfsuite.core.preloads.CUDA_AT_IMPORT`)."""


OPTIONAL_PACKAGES: tuple[OptionalPackage, ...] = (
    # DeepSpeed detects its accelerator at import.
    OptionalPackage(
        module="deepspeed", distribution="deepspeed", extra="deepspeed", fields=("zero_stage",), cuda_at_import=True
    ),
    # bitsandbytes reads every GPU's compute capability at import; peft and galore import it.
    OptionalPackage(
        module="bitsandbytes",
        distribution="bitsandbytes",
        extra="bnb",
        optimizers=("adamw_8bit", "paged_adamw_8bit", "lion_8bit"),
        fields=("quantize_4bit",),
        cuda_at_import=True,
    ),
    OptionalPackage(module="peft", distribution="peft", extra="lora", fields=("lora_rank",), cuda_at_import=True),
    OptionalPackage(module="lion_pytorch", distribution="lion-pytorch", extra="lion", optimizers=("lion",)),
    OptionalPackage(
        module="galore_torch",
        distribution="galore-torch",
        extra="galore",
        optimizers=("galore_adamw",),
        cuda_at_import=True,
    ),
)
"""perfsuite's optional packages, one row each (what a strategy needs beyond the base install)."""

EXTRAS = {p.module: p.extra for p in OPTIONAL_PACKAGES}
"""An optional package (its import name) → the perfsuite extra that installs it (pyproject.toml)."""


def install_hint(modules: Sequence[str]) -> str:
    """The pip command that brings ``modules`` (import names of :data:`EXTRAS`)."""
    return f"pip install 'perfsuite[{','.join(EXTRAS[m] for m in modules)}]'"


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Strategy)}
_IDENTITY = ("name", "description")


def _overrides(strategy: Strategy) -> dict[str, object]:
    """The fields a strategy sets away from vanilla's defaults."""
    return {k: v for k, v in dataclasses.asdict(strategy).items() if k not in _IDENTITY and v != _DEFAULTS[k]}


def compose(*parts: Strategy, name: str | None = None, description: str = "") -> Strategy:
    """Merge strategies field by field; two parts setting one field differently is an error."""
    merged: dict[str, object] = {}
    owner: dict[str, str] = {}
    for part in parts:
        for key, value in _overrides(part).items():
            if key in merged and merged[key] != value:
                raise ValueError(
                    f"cannot combine {owner[key]!r} and {part.name!r}: both set {key} ({merged[key]!r} vs {value!r})"
                )
            merged[key] = value
            owner[key] = part.name
    label = name or "+".join(p.name for p in parts)
    desc = description or " + ".join(p.description or p.name for p in parts)
    return Strategy(name=label, description=desc, **merged)  # type: ignore[arg-type]


_BASE: tuple[Strategy, ...] = (
    Strategy(name="vanilla", description="fp32, torch AdamW, fixed-length padding, shuffled batches"),
    Strategy(name="fp16", precision="fp16", description="fp16 autocast with GradScaler loss scaling"),
    Strategy(name="bf16", precision="bf16", description="bf16 autocast"),
    Strategy(name="grad_accum", grad_accum_steps=4, description="4 micro-batches of 1/4 batch, same effective batch"),
    Strategy(name="grad_ckpt", grad_checkpointing=True, description="gradient (activation) checkpointing"),
    Strategy(name="adafactor", optimizer="adafactor", description="Adafactor optimizer (factored second moment)"),
    Strategy(name="adamw_8bit", optimizer="adamw_8bit", description="bitsandbytes 8-bit AdamW"),
    Strategy(
        name="zero2_offload",
        zero_stage=2,
        offload_optimizer=True,
        description="DeepSpeed ZeRO-2, optimizer state offloaded to CPU",
    ),
    Strategy(
        name="zero3_offload",
        zero_stage=3,
        offload_optimizer=True,
        offload_params=True,
        description="DeepSpeed ZeRO-3, parameters and optimizer offloaded to CPU",
    ),
    Strategy(name="dataloader", num_workers=2, pin_memory=True, description="2 DataLoader workers, pinned memory"),
    Strategy(name="dynamic_padding", padding="longest", description="pad to the longest sequence in the batch"),
    Strategy(
        name="smart_batching",
        padding="longest",
        length_grouped=True,
        description="length-grouped batches + dynamic padding",
    ),
    Strategy(name="fused_adamw", optimizer="adamw_fused", description="torch AdamW, fused kernel (fused=True)"),
    Strategy(name="lion", optimizer="lion", description="Lion optimizer (lion-pytorch): one moment, sign update"),
    Strategy(name="lion_8bit", optimizer="lion_8bit", description="bitsandbytes 8-bit Lion"),
    Strategy(name="galore", optimizer="galore_adamw", description="GaLore AdamW: low-rank projected moments"),
    Strategy(name="eager_attention", attention="eager", description="transformers' eager attention instead of SDPA"),
    Strategy(name="compile", compile=True, description="torch.compile of the model (inductor)"),
    Strategy(name="lora", lora_rank=8, description="LoRA r=8 on the attention projections (peft)"),
    Strategy(
        name="ddp", data_parallel="ddp", description="DistributedDataParallel (accelerate): gradients all-reduced"
    ),
    Strategy(
        name="fsdp2",
        data_parallel="fsdp2",
        description="FSDP2 (torch fully_shard): parameters, gradients and optimizer state sharded",
    ),
    Strategy(name="zero2", zero_stage=2, description="DeepSpeed ZeRO-2: gradients and optimizer state partitioned"),
    Strategy(name="zero3", zero_stage=3, description="DeepSpeed ZeRO-3: parameters partitioned too"),
    Strategy(name="paged_adamw_8bit", optimizer="paged_adamw_8bit", description="bitsandbytes paged 8-bit AdamW"),
    Strategy(name="qlora", lora_rank=8, quantize_4bit=True, description="LoRA r=8 on NF4 4-bit base weights"),
    Strategy(
        name="activation_offload",
        grad_checkpointing=True,
        activation_offload=True,
        description="checkpointing with the saved activations offloaded to host memory",
    ),
)

STRATEGIES: dict[str, Strategy] = {s.name: s for s in _BASE}
STRATEGIES["all"] = compose(
    STRATEGIES["fp16"],
    STRATEGIES["grad_accum"],
    STRATEGIES["grad_ckpt"],
    STRATEGIES["adafactor"],
    name="all",
    description="fp16 + grad_accum + grad_ckpt + adafactor (the published combination)",
)


BUILTIN_STRATEGIES: tuple[str, ...] = tuple(STRATEGIES)
"""perfsuite's own strategies (a project's declarations add to :data:`STRATEGIES`)."""


def resolve(name: str) -> Strategy:
    """Look up a registered strategy, or compose ``a+b+...`` from registered ones."""
    if name in STRATEGIES:
        return STRATEGIES[name]
    parts = name.split("+")
    valid = f"valid: {', '.join(STRATEGIES)} (or a combination like fp16+grad_ckpt)"
    if "" in parts:
        raise UnknownNameError(f"unknown strategy {name!r}: '+' joins two names; {valid}")
    if len(set(parts)) < len(parts):
        twice = sorted({p for p in parts if parts.count(p) > 1})
        raise UnknownNameError(f"strategy {name!r} names {', '.join(twice)} more than once")
    unknown = [p for p in parts if p not in STRATEGIES]
    if unknown or len(parts) < 2:
        raise UnknownNameError(f"unknown strategy {', '.join(repr(p) for p in unknown or [name])}; {valid}")
    return compose(*(STRATEGIES[p] for p in parts), name=name)
