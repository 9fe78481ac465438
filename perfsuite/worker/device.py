"""Everything that asks "CUDA or CPU?": synchronising, step timers, peak memory, names, FLOP rates.

The rest of perfsuite talks to a :class:`Device` and never branches on the device
type itself.
"""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

# Dense peak rates in FLOP/s, by device-name fragment and compute dtype (NVIDIA data
# sheets, SXM parts). "fp32" is the non-tensor-core rate used when TF32 is off (torch's
# default matmul precision), "tf32" when it is on.
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
    "H100": {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
}


class StepTimer:
    """Host-clock timer: synchronise, read the clock, run the step, synchronise, read again."""

    def __init__(self, device: Device) -> None:
        self._device = device
        self._starts: list[float] = []
        self._stops: list[float] = []

    def start(self) -> None:
        self._device.synchronize()  # earlier queued work must not count against this step
        self._starts.append(time.perf_counter())

    def stop(self) -> None:
        self._device.synchronize()  # the step's kernels must have finished
        self._stops.append(time.perf_counter())

    def elapsed(self) -> list[float]:
        """Seconds per timed step."""
        return [b - a for a, b in zip(self._starts, self._stops, strict=True)]


class CudaEventTimer(StepTimer):
    """CUDA events around each step, read once at the end: timing adds no host stalls."""

    def __init__(self, device: Device) -> None:
        super().__init__(device)
        self._events: list[tuple[Any, Any]] = []

    def start(self) -> None:
        begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        begin.record()
        self._events.append((begin, None))

    def stop(self) -> None:
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end.record()
        self._events[-1] = (self._events[-1][0], end)

    def elapsed(self) -> list[float]:
        torch.cuda.synchronize()
        return [begin.elapsed_time(end) / 1e3 for begin, end in self._events]


@dataclass
class Device:
    """One training device and how to measure on it."""

    type: str
    """``cpu`` or ``cuda``."""
    name: str
    """Human-readable device model."""

    @property
    def is_accelerator(self) -> bool:
        return self.type != "cpu"

    def synchronize(self) -> None:
        if self.type == "cuda":
            torch.cuda.synchronize()

    def timer(self) -> StepTimer:
        return CudaEventTimer(self) if self.type == "cuda" else StepTimer(self)

    def reset_peak_memory(self) -> None:
        if self.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak_memory(self) -> dict[str, int] | None:
        """Allocator peaks since the last reset (``None`` on CPU, which has no such counter)."""
        if self.type != "cuda":
            return None
        return {
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "max_memory_reserved": torch.cuda.max_memory_reserved(),
        }

    def precision_unsupported(self, precision: str, *, deepspeed: bool = False) -> str | None:
        """Why this device cannot train in ``precision`` (under DeepSpeed), or ``None`` if it can."""
        if precision == "fp32":
            return None
        if deepspeed and self.type == "cpu" and precision == "fp16":
            # DeepSpeed's own sanity check: fp16 on CPU needs AVX512-FP16 or AMX-FP16 kernels.
            if not torch.ops.mkldnn._is_mkldnn_fp16_supported():
                return "DeepSpeed fp16 on CPU needs AVX512-FP16 or AMX-FP16, which this CPU lacks"
        if self.type == "cuda":
            if precision == "bf16" and not torch.cuda.is_bf16_supported():
                return f"{self.name} has no bf16 support"
            return None
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
        try:
            with torch.autocast("cpu", dtype=dtype):
                torch.ones(2, 2) @ torch.ones(2, 2)
            if precision == "fp16":
                torch.amp.GradScaler("cpu")
        except Exception as exc:  # an old torch without CPU fp16 autocast or GradScaler
            return f"{precision} autocast/loss scaling is not supported on CPU by torch {torch.__version__}: {exc}"
        return None

    def placement(self) -> int | str:
        """Where ``from_pretrained``'s ``device_map`` puts a whole model: this process's GPU, or the CPU."""
        return current_cuda_device() if self.type == "cuda" else "cpu"

    @property
    def pins_memory(self) -> bool:
        """Whether pinned host memory means anything (it speeds host-to-device copies only)."""
        return self.type == "cuda"

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak FLOP/s for the dtype the matmuls run in, if this device is known."""
        if self.type != "cuda":
            return None
        key = precision
        if precision == "fp32" and torch.backends.cuda.matmul.allow_tf32:
            key = "tf32"
        for fragment, rates in PEAK_FLOPS.items():
            if fragment in self.name:
                return rates[key]
        return None

    def profiler_activities(self) -> list[Any]:
        """What torch's profiler records here: the host always, a GPU's kernels and copies too (CUPTI)."""
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if self.type == "cuda" else [ProfilerActivity.CPU]

    @contextlib.contextmanager
    def allocation_history(self) -> Iterator[dict[str, Any]]:
        """On a GPU, the caching allocator's snapshot at the block's end with the stack of every live
        block's allocation, in the yielded dict under ``segments``; nothing elsewhere. The recording
        API is private (``torch.cuda.memory._record_memory_history``): where it is missing, the dict
        says so under ``error``."""
        found: dict[str, Any] = {}
        if self.type != "cuda":
            yield found
            return
        memory = torch.cuda.memory
        record = getattr(memory, "_record_memory_history", None)
        snapshot = getattr(memory, "_snapshot", None)
        if record is None or snapshot is None:
            found["error"] = f"torch {torch.__version__} has no torch.cuda.memory._record_memory_history"
            yield found
            return
        record(enabled="all", context="alloc", stacks="python")
        try:
            yield found
            found["segments"] = snapshot().get("segments", [])
        finally:
            record(enabled=None)

    def describe(self) -> dict[str, Any]:
        """Device facts for a report's ``env`` block."""
        info: dict[str, Any] = {"type": self.type, "name": self.name}
        if self.type == "cuda":
            props = torch.cuda.get_device_properties(0)
            info.update(
                total_memory_bytes=props.total_memory,
                capability=f"{props.major}.{props.minor}",
                cuda=torch.version.cuda,
                driver=_driver_version(),
            )
        else:
            info["threads"] = torch.get_num_threads()
        return info


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: S110 - no NVML bindings: ask nvidia-smi instead
        pass
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return out.stdout.strip().splitlines()[0]
    except Exception:
        return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def get_device(kind: str = "auto") -> Device:
    """The device to train on: ``auto`` takes CUDA when present."""
    if kind not in ("auto", "cpu", "cuda"):
        raise ValueError(f"unknown device {kind!r}; valid: auto, cpu, cuda")
    if kind == "cuda" or (kind == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
        return Device("cuda", torch.cuda.get_device_name(0))
    return Device("cpu", _cpu_name())


def default_device_type() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``, without creating a CUDA context."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def asked_device_type(asked: str) -> str:
    """The device type ``--device`` asks for (``auto``: :func:`default_device_type`); a ``ValueError``
    where it asks for ``cuda`` and torch sees no CUDA GPU, before any case is started on it."""
    if asked == "auto":
        return default_device_type()
    if asked == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA GPU here")
    return asked


def cuda_device_count() -> int:
    """GPUs torch sees (through NVML where it can: no CUDA context is created)."""
    return int(torch.cuda.device_count())


def cuda_built() -> bool:
    """Whether this torch is a CUDA build. Asks the driver nothing, so a process that workers
    are forked from may ask it (asking whether CUDA is available initialises CUDA, which a
    forked worker could not use)."""
    return bool(torch.backends.cuda.is_built())  # type: ignore[no-untyped-call]


def driver_loaded() -> bool:
    """Whether this process has loaded the CUDA driver's library (a CUDA runtime that started:
    ``cuInit``, torch's or a library's own). Asks nothing."""
    with open("/proc/self/maps", "rb") as maps:  # paths are bytes: a mapped file's need not decode
        return b"libcuda.so" in maps.read()


def cuda_started(*, driver_before: bool) -> str | None:
    """How this process has started CUDA, if it has: torch's context (``torch.cuda.is_initialized()``,
    a flag), or the CUDA driver's library loaded since ``driver_before`` said it was not (where it
    was, only torch's flag can tell). A worker forked from a process that started CUDA cannot use it."""
    if torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return "torch.cuda.is_initialized() is true"
    if not driver_before and driver_loaded():
        return "the CUDA driver (libcuda.so) is loaded"
    return None


def cuda_usable() -> bool:
    """Whether torch can train on a CUDA GPU here."""
    return bool(torch.cuda.is_available())


def bind_cuda_device(index: int) -> Any:
    """Make GPU ``index`` this process's current device (a rank's own); returns its ``torch.device``."""
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def current_cuda_device() -> int:
    """The index of this process's current GPU."""
    return int(torch.cuda.current_device())
