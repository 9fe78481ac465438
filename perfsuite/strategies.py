"""The strategy registry: what each memory/speed technique changes in a training run.

A :class:`Strategy` is a frozen description. The engine reads its fields; nothing
here imports torch, so the registry is cheap to load for the CLI and for test
collection. ``a+b`` composes two strategies field by field (see :func:`resolve`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from typing import Literal

Precision = Literal["fp32", "fp16", "bf16"]
OptimizerName = Literal["adamw", "adafactor", "adamw_8bit"]
Padding = Literal["max_length", "longest"]

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")
OPTIMIZERS: tuple[str, ...] = ("adamw", "adafactor", "adamw_8bit")
PADDINGS: tuple[str, ...] = ("max_length", "longest")


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
    grad_checkpointing: bool = False
    """Recompute activations in the backward pass instead of storing them."""
    optimizer: OptimizerName = "adamw"
    """``adamw`` (torch), ``adafactor`` (transformers) or ``adamw_8bit`` (bitsandbytes)."""
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

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"{self.name}: precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"{self.name}: optimizer must be one of {OPTIMIZERS}, not {self.optimizer!r}")
        if self.padding not in PADDINGS:
            raise ValueError(f"{self.name}: padding must be one of {PADDINGS}, not {self.padding!r}")
        if self.grad_accum_steps < 1:
            raise ValueError(f"{self.name}: grad_accum_steps must be >= 1")
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

    @property
    def uses_deepspeed(self) -> bool:
        return self.zero_stage > 0

    @property
    def requires(self) -> tuple[str, ...]:
        """Import names of the optional packages this strategy needs."""
        needs = []
        if self.uses_deepspeed:
            needs.append("deepspeed")
        if self.optimizer == "adamw_8bit":
            needs.append("bitsandbytes")
        return tuple(needs)

    def missing_requirements(self) -> list[str]:
        """Optional packages this strategy needs that are not installed."""
        return [pkg for pkg in self.requires if importlib.util.find_spec(pkg) is None]


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


def resolve(name: str) -> Strategy:
    """Look up a registered strategy, or compose ``a+b+...`` from registered ones."""
    if name in STRATEGIES:
        return STRATEGIES[name]
    parts = name.split("+")
    unknown = [p for p in parts if p not in STRATEGIES]
    if unknown or len(parts) < 2:
        raise UnknownNameError(
            f"unknown strategy {', '.join(repr(p) for p in unknown or [name])}; "
            f"valid: {', '.join(STRATEGIES)} (or a combination like fp16+grad_ckpt)"
        )
    return compose(*(STRATEGIES[p] for p in parts), name=name)
