"""A few training steps under torch's profiler, Python frames included, as one side's
:class:`~perfsuite.core.explain.records.StepProfile` (an explanation run's, never a measurement's:
the Python tracer pays for every call it records).

Every host event inside the profiled steps becomes one stack (its frames from the step down,
outermost first) with its self time: its own duration less its children's. The events are read
once, nested as torch's ``prof.events()`` nests them (``cpu_parent``) but without building its
``FunctionEvent`` per event (:func:`host_events`), before anything aggregates them: torch's
``key_averages`` rewrites the events' times as it goes (pytorch#43869), and the tables that
explanations diff are sums of these stacks, so they and the flame graph agree to the microsecond.
On a GPU the device's kernels, copies and sets come from the Chrome trace the profiler writes,
the only place their bytes are.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.core.explain.frames import OP, frame_name, kind
from perfsuite.core.explain.records import DeviceRow, StackRow, StepProfile
from perfsuite.core.explain.traces import device_rows
from perfsuite.worker.frame_names import qualifier

if TYPE_CHECKING:
    from perfsuite.worker.device import Device
    from perfsuite.worker.engines.driven import Driven

_STEP = "ProfilerStep"
_NODE = "autograd::engine::evaluate_function: "


def profile_steps(engine: Driven, device: Device, steps: int, trace: str | None = None) -> StepProfile:
    """``steps`` steps of ``engine`` recorded after one step of the profiler's own warm-up; the
    Chrome trace is written to ``trace`` (a ``.json.gz``) when given."""
    from torch.profiler import profile, schedule

    # An engine that steps in a thread of its own (the Trainer's) leaves this thread waiting on it:
    # that wait is the step's time twice over, and noise, not work; its thread's ops are recorded
    # only when the profiler follows every thread (a private switch, torch >= 2.5).
    here = float(threading.get_native_id())
    elsewhere = engine.in_training_thread(lambda: float(threading.get_native_id())) != here
    named = qualifier()
    # The profiler's first active step pays for its own start (the schedule's warm-up takes it).
    with profile(
        activities=device.profiler_activities(),
        with_stack=True,
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        experimental_config=_all_threads() if elsewhere else None,
    ) as prof:
        for _ in range(steps + 1):
            engine.step()
            prof.step()
    events = host_events(prof)
    frames, stacks = host_stacks(events, cwd=str(Path.cwd()), skip_marking_thread=elsewhere, named=named)
    rows: tuple[DeviceRow, ...] = ()
    if trace is not None or device.is_accelerator:
        path = Path(trace) if trace is not None else Path(tempfile.mkdtemp(prefix="perfsuite-trace-")) / "t.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))  # gzipped by its suffix
        if device.is_accelerator:
            with gzip.open(path, "rt") as f:
                rows = tuple(device_rows(json.load(f)))
        if trace is None:
            path.unlink()
            path.parent.rmdir()
    return StepProfile(steps=steps, frames=frames, stacks=stacks, device=rows, trace=trace)


def _all_threads() -> Any:
    """The profiler's switch to record every thread's ops, where this torch has it (else ``None``)."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError):
        return None


def host_stacks(
    events: Sequence[Any],
    cwd: str = "",
    *,
    skip_marking_thread: bool = False,
    named: Callable[[str], str] | None = None,
) -> tuple[tuple[str, ...], tuple[StackRow, ...]]:
    """The profiled steps' host events as stacks: ``(frames, rows)``.

    An event counts when it lies wholly inside the profiled steps (from the first step's start to
    the last one's end). Its stack runs from just below its step (the main thread) or from its
    outermost ancestor inside the steps (another thread: the Trainer's, a DataLoader's pin thread).
    ``skip_marking_thread``: leave out the thread that marked the steps (it only waited for another).
    ``named``: a Python frame's function named as it says (:func:`qualifier`), before its path is.
    """
    from torch.profiler import DeviceType

    marks = [e for e in events if e.name.startswith(_STEP)]
    if not marks:
        return (), ()
    marking = {e.thread for e in marks} if skip_marking_thread else set()
    low = min(e.time_range.start for e in marks)
    high = max(e.time_range.end for e in marks)
    index: dict[str, int] = {}
    paths: dict[int, tuple[int, ...]] = {}
    totals: dict[tuple[tuple[int, ...], tuple[int, ...]], list[float]] = {}
    qualified = named or (lambda raw: raw)

    def inside(event: Any) -> bool:
        return bool(low <= event.time_range.start and event.time_range.end <= high)

    def path_of(event: Any) -> tuple[int, ...]:
        key = id(event)
        if key not in paths:
            parent = event.cpu_parent
            above = () if parent is None or parent.name.startswith(_STEP) or not inside(parent) else path_of(parent)
            name = frame_name(qualified(event.name), cwd)
            paths[key] = (*above, index.setdefault(name, len(index)))
        return paths[key]

    def node_of(event: Any) -> Any:
        """The autograd node's event (``autograd::engine::evaluate_function: MmBackward0``) that ``event``
        runs within, or ``None`` (a forward's event)."""
        key = id(event)
        if key not in nodes:
            parent = event.cpu_parent
            inner = None if parent is None or not inside(parent) else node_of(parent)
            nodes[key] = event if event.name.startswith(_NODE) else inner
        return nodes[key]

    counted = [
        e
        for e in events
        if e.device_type == DeviceType.CPU and not e.name.startswith(_STEP) and inside(e) and e.thread not in marking
    ]
    nodes: dict[int, Any] = {}
    # Every op run with gradients on reads the next sequence number, one that makes no node too (a
    # mask's ``aten::ones``); the node's maker is the last to read it before it moves on.
    makers: dict[tuple[int, int], Any] = {}
    for event in counted:
        sequence = getattr(event, "sequence_nr", -1)
        if sequence >= 0 and node_of(event) is None:
            found = makers.get((sequence, event.thread))
            if found is None or event.time_range.start >= found.time_range.start:
                makers[(sequence, event.thread)] = event
    origins = {key: path_of(event) for key, event in makers.items()}  # an autograd node's forward op: its path
    for event in counted:
        own = event.time_range.elapsed_us() - sum(c.time_range.elapsed_us() for c in event.cpu_children)
        node = node_of(event) if kind(event.name) == OP else None  # an op's: its node's forward
        origin = () if node is None else origins.get((node.sequence_nr, node.fwd_thread or node.thread), ())
        total = totals.setdefault((path_of(event), origin), [0.0, 0])
        total[0] += max(own, 0.0)
        total[1] += 1
    frames = tuple(sorted(index, key=index.__getitem__))
    rows = tuple(StackRow(path, round(us, 3), int(calls), origin) for (path, origin), (us, calls) in totals.items())
    return frames, rows


class HostEvent:
    """One event of a profile as torch's ``prof.events()`` would make it, with only what
    :func:`host_stacks` reads (torch's own ``FunctionEvent`` costs about 40 µs each to build:
    11 s for a DeepSpeed step's 275,000 Python calls and ops). It is its own ``time_range``."""

    __slots__ = (
        "name", "thread", "start", "end", "device_type", "is_async", "sequence_nr", "fwd_thread", "cpu_parent",
        "cpu_children",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        thread: int,
        start: float,
        end: float,
        device_type: Any,
        is_async: bool,
        sequence_nr: int = -1,
        fwd_thread: int = 0,
    ) -> None:
        self.name, self.thread, self.start, self.end = name, thread, start, end
        self.device_type, self.is_async = device_type, is_async
        self.sequence_nr, self.fwd_thread = sequence_nr, fwd_thread
        self.cpu_parent: HostEvent | None = None
        self.cpu_children: list[HostEvent] = []

    @property
    def time_range(self) -> HostEvent:
        return self

    def elapsed_us(self) -> float:
        return self.end - self.start


def host_events(prof: Any) -> list[HostEvent]:
    """The profile's events as torch's ``prof.events()`` lists them, nested as it nests them, in a
    quarter of its time (the stacks :func:`host_stacks` makes of both are the same to the microsecond)."""
    from torch.autograd.profiler_util import _filter_name, _rewrite_name
    from torch.profiler import DeviceType

    result = prof.profiler.kineto_results
    origin = result.trace_start_ns()
    events: list[HostEvent] = []
    frontend: dict[int, HostEvent] = {}
    raws = result.events()
    hidden = bool(raws) and hasattr(raws[0], "is_hidden_event")
    linked: list[tuple[int, HostEvent]] = []
    names: dict[str, str | None] = {}  # torch demangles each event's name afresh: once per name here
    for raw in raws:
        name = raw.name()
        if name not in names:  # torch's own filter and rewriting (untyped)
            dropped = _filter_name(name)  # type: ignore[no-untyped-call]
            names[name] = None if dropped else _rewrite_name(name=name, with_wildcard=True)  # type: ignore[no-untyped-call]
        shown = names[name]
        if shown is None or (hidden and raw.is_hidden_event()):
            continue
        is_async = raw.is_async() or raw.start_thread_id() != raw.end_thread_id()
        start = (raw.start_ns() - origin) / 1000
        event = HostEvent(
            shown,
            raw.start_thread_id(),
            start,
            (raw.end_ns() - origin) / 1000,
            raw.device_type(),
            is_async,
            raw.sequence_nr(),
            raw.fwd_thread_id(),
        )
        events.append(event)
        corr = raw.linked_correlation_id()
        if corr > 0:
            linked.append((corr, event))
        elif event.device_type == DeviceType.CPU and not is_async:
            frontend[raw.correlation_id()] = event  # the last of one id, as torch leaves it
    for corr, event in linked:  # a device runtime call (CPU) belongs to the thread of the op that made it
        if corr in frontend and event.device_type == DeviceType.CPU:
            event.thread = frontend[corr].thread
    _nest(events)
    return events


def _nest(events: list[HostEvent]) -> None:
    """Parents and children by time, per thread, then a parent's lone namesake child folded into
    it: what torch's ``EventList`` does (``_populate_cpu_children``, ``_remove_dup_nodes``)."""
    from torch.profiler import DeviceType

    events.sort(key=lambda e: (e.start, -e.end))
    by_thread: dict[int, list[HostEvent]] = {}
    for event in events:
        if not event.is_async and event.device_type == DeviceType.CPU:
            by_thread.setdefault(event.thread, []).append(event)
    for thread_events in by_thread.values():
        open_: list[HostEvent] = []
        for event in thread_events:  # already by start, then longest first
            while open_:
                parent = open_[-1]
                if event.start >= parent.end or event.end > parent.end:
                    open_.pop()
                else:
                    parent.cpu_children.append(event)
                    event.cpu_parent = parent
                    break
            open_.append(event)
    while True:
        folded = set()
        for event in events:
            above = event.cpu_parent
            if above is not None and above.name == event.name and len(above.cpu_children) == 1:
                above.cpu_children = event.cpu_children
                for child in event.cpu_children:
                    child.cpu_parent = above
                folded.add(id(event))
        if not folded:
            return
        events[:] = [e for e in events if id(e) not in folded]
