"""What an explanation run of one side records (typed both ways: the request and the record).

An explanation run is never a measurement: it builds the case as its timed runs do, trains the
same steps on the same data, and records what the timed runs do not (a profile with Python
frames, every tensor by name, each parameter's gradient norm per step). Its figures are read
only against the other side's explanation runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from perfsuite.core.explain.initial import ParamStat
from perfsuite.core.typed_json import read_as

KINDS = ("parameter", "gradient", "optimizer_state", "buffer", "other")
"""A tensor's role in the inventory; the first four are what the memory breakdown files under
``parameters``, ``gradients``, ``optimizer_state`` and ``buffers``."""


@dataclass(frozen=True, kw_only=True)
class ExplainAsk:
    """What one explanation run records."""

    profile_steps: int = 0
    """Steps recorded by the profiler after the warm-up (0: no profile)."""
    trace: str | None = None
    """Where the profiler's Chrome trace is written (``.json.gz``); ``None``: not kept."""
    grads_until: int = -1
    """Each parameter's gradient norm is recorded for steps 0 to this one (-1: none)."""
    inventory: bool = False
    """Whether every parameter, gradient, optimizer state and buffer is listed after a step."""

    def __post_init__(self) -> None:
        if self.profile_steps < 0 or self.grads_until < -1:
            raise ValueError(
                f"profile_steps {self.profile_steps} and grads_until {self.grads_until}: not an explanation"
            )

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "an explanation's request") -> ExplainAsk:
        """:meth:`as_json`'s object; a ``ValueError`` names the key of a wrong value."""
        return read_as(cls, data, where)


@dataclass(frozen=True)
class StackRow:
    """One distinct stack of the profiled steps: its frames (indices into :attr:`StepProfile.frames`,
    outermost first; the last one is the frame the time is spent in), its self time and its calls."""

    path: tuple[int, ...]
    self_us: float
    calls: int
    origin: tuple[int, ...] = ()
    """For an op the autograd engine ran, the path of the forward op whose backward it is (the
    outermost op that made its autograd node); ``()`` otherwise, or where the forward was not profiled."""


@dataclass(frozen=True)
class DeviceRow:
    """A device activity of the profiled steps, by kind and name (a GPU's kernels, copies, sets)."""

    kind: str
    """``kernel``, ``memcpy``, ``memset`` or ``collective`` (a communication library's kernel)."""
    name: str
    calls: int
    us: float
    bytes: int = 0


@dataclass(frozen=True)
class StepProfile:
    """The profiler's view of ``steps`` training steps: every host stack (ops and Python frames) with
    its self time, and on a GPU the device's activities."""

    steps: int
    frames: tuple[str, ...]
    stacks: tuple[StackRow, ...]
    device: tuple[DeviceRow, ...] = ()
    trace: str | None = None
    """The Chrome trace file (Perfetto opens it), when one was kept."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the inventory."""

    kind: str
    """One of :data:`KINDS`."""
    name: str
    """The parameter's or buffer's name (``bert.encoder.layer.0.attention.self.query.weight``); an
    optimizer state's is the parameter's and the state's (``...query.weight:exp_avg``); another tensor's,
    where it is held (``somemodule.CACHE[0]``), else empty."""
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class AllocationSite:
    """Bytes live on a GPU after a step, by the frame that allocated them (``torch.cuda.memory`` snapshots)."""

    frame: str
    bytes: int
    blocks: int


@dataclass(frozen=True)
class StepFacts:
    """One training step of an explanation run."""

    loss: float
    data: str
    """A digest of every tensor the model was called with in this step."""
    lr: tuple[float, ...]
    """Each parameter group's learning rate after the step."""
    grads: dict[str, float] | None = None
    """Each parameter's gradient norm before clipping (the whole step's, accumulated), when asked."""
    last_micro: dict[str, float] | None = None
    """Where the engine accumulates apart from ``.grad`` (DeepSpeed's ZeRO), each parameter's gradient
    norm from the step's last micro-batch alone, when ``grads`` is asked: an update that drops the
    earlier micro-batches uses this one."""


@dataclass(frozen=True)
class ExplainRecord:
    """An explanation run's record."""

    initial_weights: str
    num_parameters: int
    steps: tuple[StepFacts, ...] = ()
    initial: tuple[ParamStat, ...] = ()
    """Each parameter's statistics as the model was built, before the first step."""
    profile: StepProfile | None = None
    tensors: tuple[TensorEntry, ...] = ()
    allocation_sites: tuple[AllocationSite, ...] = ()
    forward_activations: dict[str, int] = field(default_factory=dict)
    """Per module (MemTracker's name), the activation bytes its forward left alive in one step,
    its submodules' included, when the memory is asked and MemTracker could follow the step."""
    wall_s: float = 0.0
    notes: tuple[str, ...] = field(default=())
    """What could not be recorded, and why (a profiler without Python frames, an engine without an optimizer)."""

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str = "an explanation run's record") -> ExplainRecord:
        """:meth:`as_json`'s object; a ``ValueError`` names the key of a wrong value."""
        return read_as(cls, data, where)
