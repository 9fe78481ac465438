"""A GPU's activities in a profiler's Chrome trace, by kind and name: kernels, copies, sets and the
communication library's collectives, each with its calls, time and bytes.

The profiler's own tables attribute a kernel's time to the op that launched it and keep no byte
counts; the trace keeps both (a copy's ``bytes``, a collective's message size). Only the profiled
steps are in a trace written at the end of a profiler schedule's active steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from perfsuite.core.explain.frames import HARNESS
from perfsuite.core.explain.records import AllocationSite, DeviceRow

_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1, "Char": 1}
COLLECTIVE_MARKS = ("nccl", "rccl", "allreduce", "all_reduce", "reducescatter", "allgather", "all_gather")


def _kind(event: Mapping[str, Any]) -> str | None:
    kind = _KINDS.get(str(event.get("cat", "")).lower())
    if kind == "kernel" and any(mark in str(event.get("name", "")).lower() for mark in COLLECTIVE_MARKS):
        return "collective"
    return kind


def _bytes(args: Mapping[str, Any]) -> int:
    if "bytes" in args:
        return int(args["bytes"])
    elements = args.get("In msg nelems") or args.get("Out msg nelems")
    if elements:
        return int(elements) * _DTYPE_BYTES.get(str(args.get("dtype")), 0)
    return 0


def device_rows(trace: Mapping[str, Any]) -> list[DeviceRow]:
    """Every device activity of ``trace`` (a Chrome trace's JSON), summed by kind and name."""
    return summed(trace.get("traceEvents") or ())


def summed(events: Iterable[Mapping[str, Any]]) -> list[DeviceRow]:
    totals: dict[tuple[str, str], list[float]] = {}
    for event in events:
        kind = _kind(event)
        if kind is None or event.get("ph") != "X":
            continue
        total = totals.setdefault((kind, str(event.get("name", ""))), [0, 0.0, 0])
        total[0] += 1
        total[1] += float(event.get("dur", 0.0))
        total[2] += _bytes(event.get("args") or {})
    return [DeviceRow(k, name, int(n), round(us, 3), int(size)) for (k, name), (n, us, size) in totals.items()]


def allocation_sites(segments: Iterable[Mapping[str, Any]], limit: int = 20) -> list[AllocationSite]:
    """The bytes of every live block of a CUDA allocator snapshot (``torch.cuda.memory._snapshot()``'s
    ``segments``), by the innermost frame outside torch and perfsuite's worker that allocated it: the
    library or model line that asked for them. The ``limit`` largest sites, largest first."""
    totals: dict[str, list[int]] = {}
    for segment in segments:
        for block in segment.get("blocks") or ():
            if block.get("state") != "active_allocated":
                continue
            frames = block.get("frames") or ()
            site = next(
                (f"{_short_file(f)}:{f.get('line')} {f.get('name')}" for f in frames if not _internal(f)),
                "(no Python frame outside torch)",
            )
            total = totals.setdefault(site, [0, 0])
            total[0] += int(block.get("size", 0))
            total[1] += 1
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:limit]
    return [AllocationSite(site, size, blocks) for site, (size, blocks) in ranked]


def _short_file(frame: Mapping[str, Any]) -> str:
    file = str(frame.get("filename", "?"))
    return file.rsplit("site-packages/", 1)[-1]


def _internal(frame: Mapping[str, Any]) -> bool:
    file = _short_file(frame)
    return file.startswith(HARNESS) or not file.endswith(".py")
