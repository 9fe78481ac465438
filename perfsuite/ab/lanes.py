"""Lanes: ``perfsuite ab`` on more of the machine (``--jobs``).

A lane is a pair of servers, one per side, of the same environments as every other lane's
(the overlays are built once; only the server processes multiply), and the place its pairs
run: on a CPU two cores for duets (they swap sides from pair to pair), or the cores left
over for the cases that alternate (multi-rank, DataLoader workers); on a machine with GPUs
one GPU at a time, the sides alternating on it. Within a round the open cases are handed to
free lanes in the round's order (:func:`hand_out`); a case that fits no lane of its own
(alternating, with every core taken by duets; multi-rank on GPUs) runs after the others,
alone. With one lane (``--jobs 1``, the default) every pair runs as it always has: in this
thread, in the round's order, duets on the first two cores, nothing pinned.

The plan (:func:`plan_lanes`), the hand-out (:func:`next_start`) and the choice of a GPU
(:func:`pick_gpu`) are pure functions of the cores, GPUs and cases they are given.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from perfsuite.ab.pairs import Choice, Mode, Pair, duet_fits, run_pair
from perfsuite.ab.sides import Side
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.pool import gpu_env

Need = Literal["duet", "alternate", "whole"]
"""What a case's pair needs: a duet lane, an alternating lane, or the whole machine (after the others)."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one lane's pairs run."""

    cores: tuple[int, ...] = ()
    """The cores its servers, forkservers and workers are pinned to; none for a single lane."""
    duets: bool = True
    """Whether it runs duets (on its first two cores; a single lane on the first two this process may use)."""
    alternates: bool = True
    """Whether it runs the cases that alternate."""

    @property
    def duet_cores(self) -> tuple[int, int] | None:
        return (self.cores[0], self.cores[1]) if self.duets and len(self.cores) >= 2 else None


@dataclasses.dataclass(frozen=True)
class Plan:
    """The lanes of one comparison, and the GPUs they share (none: the workers see what this process sees)."""

    slots: tuple[Slot, ...] = (Slot(),)
    gpus: tuple[str, ...] = ()
    after: int = 0
    """How many cases fit no lane of their own and run after the others, one at a time."""

    def need(self, mode: Mode, *, ranks: bool) -> Need:
        if self.gpus:
            return "whole" if ranks else "alternate"
        if mode == "duet":
            return "duet"
        return "alternate" if any(slot.alternates for slot in self.slots) else "whole"

    def describe(self) -> str | None:
        """One line for the start of a comparison on several lanes (``None`` for one)."""
        if len(self.slots) == 1:
            return None
        if self.gpus:
            line = f"perfsuite: {len(self.slots)} lanes, one GPU each of {', '.join(self.gpus)}"
        else:
            duets = [_cores(slot.cores) for slot in self.slots if slot.duets]
            line = f"perfsuite: {len(self.slots)} lanes: duets on cores {', '.join(duets)}"
            line += "".join(f"; alternating on cores {_cores(s.cores)}" for s in self.slots if s.alternates)
        if self.after:
            line += f"; {self.after} case(s) after the others, one at a time"
        return line


def _cores(cores: Sequence[int]) -> str:
    return (
        f"{cores[0]}-{cores[-1]}" if list(cores) == list(range(cores[0], cores[-1] + 1)) else ",".join(map(str, cores))
    )


def plan_lanes(
    jobs: int, *, cores: Sequence[int], gpus: Sequence[str] = (), device_type: str, duets: int, alternates: int
) -> Plan:
    """At most ``jobs`` lanes for ``duets`` cases that can be duets and ``alternates`` that cannot, on
    ``cores`` (a CPU), or for ``alternates`` single-GPU cases on ``gpus`` (``device_type`` cuda: the
    sides alternate on a GPU). A ``ValueError`` when ``jobs`` asks for more duets than the cores
    allow, or more lanes than GPUs. One lane is :class:`Plan`'s default: today's single lane."""
    if jobs < 1:
        raise ValueError(f"--jobs {jobs}: must be at least 1")
    if device_type == "cuda":
        if jobs > max(1, len(gpus)):
            raise ValueError(
                f"--jobs {jobs}: {jobs} lanes need a GPU each; {len(gpus)} visible ({', '.join(gpus) or 'none'})"
            )
        lanes = min(jobs, len(gpus), alternates)
        return Plan((Slot(duets=False),) * lanes, tuple(gpus)) if lanes > 1 else Plan()
    cores = sorted(cores)
    if jobs > max(1, len(cores) // 2):
        raise ValueError(
            f"--jobs {jobs}: {jobs} lanes need {2 * jobs} cores, two each; this process may use {len(cores)} "
            f"({_cores(cores) if cores else 'none'})"
        )
    pairs = min(jobs, len(cores) // 2, duets)
    slots = [Slot(tuple(cores[2 * i : 2 * i + 2]), alternates=False) for i in range(pairs)]
    left = tuple(cores[2 * pairs :])
    if alternates and pairs < jobs and len(left) >= 2:
        slots.append(Slot(left, duets=False))
    return Plan(tuple(slots)) if len(slots) > 1 else Plan()


def plan_for(
    specs: Sequence[CaseSpec],
    device_type: str,
    mode: Choice,
    jobs: int,
    *,
    cores: Sequence[int] | None = None,
    gpus: Sequence[str] | None = None,
) -> Plan:
    """:func:`plan_lanes` for these cases, on the cores this process may use and the GPUs it sees
    (``CUDA_VISIBLE_DEVICES``, ``PERFSUITE_GPUS``; asked only for several lanes on a GPU)."""
    modes: list[Mode] = ["duet" if mode != "alternate" and duet_fits(s, device_type) else "alternate" for s in specs]
    if device_type == "cuda":
        if gpus is None and jobs > 1:
            from perfsuite.worker.pool import machine_gpus

            # NVML answers: no CUDA context here, and this process forks no worker anyway (the sides exec theirs).
            gpus = machine_gpus("all")
        single = sum(not spec.launches_ranks for spec in specs)
        plan = plan_lanes(jobs, cores=(), gpus=gpus or (), device_type=device_type, duets=0, alternates=single)
    else:
        duets = modes.count("duet")
        plan = plan_lanes(
            jobs,
            cores=sorted(os.sched_getaffinity(0)) if cores is None else cores,
            device_type=device_type,
            duets=duets,
            alternates=len(specs) - duets,
        )
    whole = [plan.need(m, ranks=s.launches_ranks) == "whole" for s, m in zip(specs, modes, strict=True)]
    return dataclasses.replace(plan, after=sum(whole))


def next_start(
    needs: Sequence[Need], free: Sequence[int], *, busy: int, whole: bool, slots: Sequence[Slot]
) -> tuple[int, int] | None:
    """The next pair to start, as (its place in ``needs``, the free lane it goes to), or ``None``
    until a lane frees: the first waiting case some free lane can run. A case that needs the
    whole machine (those come last) starts once every lane is idle, and nothing starts beside it."""
    if whole or not free:
        return None
    for place, need in enumerate(needs):
        if need == "whole":
            return (place, free[0]) if busy == 0 else None
        for lane in free:
            if slots[lane].duets if need == "duet" else slots[lane].alternates:
                return place, lane
    return None


def pick_gpu(free: Sequence[str], used: Sequence[str]) -> str:
    """Of the ``free`` GPUs, the one a case ran on least (``used``: its pairs' GPUs so far), then the
    one it ran on longest ago: a case's pairs move between GPUs, so no case is tied to one device."""

    def key(gpu: str) -> tuple[int, int]:
        return used.count(gpu), max((i for i, seen in enumerate(used) if seen == gpu), default=-1)

    return min(free, key=key)


@dataclasses.dataclass
class Lane:
    """A side's server each, and where their pairs run."""

    sides: tuple[Side, Side]
    slot: Slot = Slot()

    def pair(
        self,
        fields: dict[str, Any],
        index: int,
        timeout_s: float,
        *,
        mode: Mode,
        gpu: str | None = None,
        cancel: threading.Event | None = None,
        seeds: int = 0,
    ) -> Pair:
        env = gpu_env([gpu]) if gpu is not None else None
        cores = self.slot.duet_cores
        return run_pair(
            self.sides, fields, index, timeout_s, mode=mode, cores=cores, env=env, cancel=cancel, seeds=seeds
        )

    def reset(self) -> None:
        """Both sides' forkservers renewed at once (an alternating pair would otherwise wait for two boots)."""
        _together([side.reset for side in self.sides])

    def close(self) -> None:
        for side in self.sides:
            side.close()


def _together(calls: Sequence[Callable[[], None]]) -> None:
    """Every call at once, each in a thread of its own; the first error is raised here once all are done."""
    errors: list[BaseException] = []

    def one(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as exc:  # raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _each(lanes: Sequence[Lane], call: Callable[[Lane], None]) -> None:
    """``call`` on every lane: in this thread for one, else all at once (each lane on its own cores)."""
    if len(lanes) == 1:
        call(lanes[0])
        return
    _together([functools.partial(call, lane) for lane in lanes])


def reset_lanes(lanes: Sequence[Lane]) -> None:
    """Renew every lane's forkservers (both sides'), all at once, as before every round."""
    _each(lanes, Lane.reset)


def close_lanes(lanes: Sequence[Lane]) -> None:
    _each(lanes, Lane.close)


def open_lanes(plan: Plan, first: tuple[Side, Side]) -> list[Lane]:
    """The plan's lanes: ``first`` (already started and checked) the first lane's servers, the
    others' started here, of the same environments, each pinned to its lane's cores."""
    lanes = [Lane(first, plan.slots[0])]
    made: dict[tuple[int, int], Side] = {}

    def start(lane: int, which: int) -> None:
        made[lane, which] = Side(first[which].name, first[which].env, cores=plan.slots[lane].cores)

    try:
        _together([functools.partial(start, lane, which) for lane in range(1, len(plan.slots)) for which in (0, 1)])
    except BaseException:  # Ctrl-C too: a server still starting then ends with this process (its stdin closes)
        for side in list(made.values()):
            side.close()
        raise
    return lanes + [Lane((made[lane, 0], made[lane, 1]), plan.slots[lane]) for lane in range(1, len(plan.slots))]


PairFn = Callable[[Lane, str, str | None, threading.Event | None], Pair]
"""Runs case ``id``'s pair of this round on a lane, with its GPU (or ``None``) and the comparison's stop."""


def hand_out(
    lanes: Sequence[Lane],
    plan: Plan,
    cases: Sequence[str],
    needs: Mapping[str, Need],
    pair: PairFn,
    done: Callable[[str, Pair], None],
    gpus_used: dict[str, list[str]],
) -> None:
    """One round: a pair of each of ``cases`` (in that order, those that need the whole machine
    last), each on the next free lane that can run it, and ``done`` told of each in this thread as
    it finishes. ``gpus_used``: each case's GPUs so far, kept across rounds.

    Ctrl-C or SIGTERM (a ``KeyboardInterrupt`` here) drops every pair in flight: their duets are
    released, their results never told; the pairs that finished before it are told, then it is
    raised again."""
    order = sorted(cases, key=lambda case: needs[case] == "whole")
    if len(lanes) == 1:
        for case in order:
            done(case, pair(lanes[0], case, None, None))
        return
    finished: queue.Queue[tuple[int, str, Pair | BaseException]] = queue.Queue()
    cancel = threading.Event()
    waiting, free = list(order), list(range(len(lanes)))
    held: dict[int, str] = {}  # lane → the GPU its pair runs on
    whole = False

    def work(lane: int, case: str, gpu: str | None) -> None:
        try:
            outcome: Pair | BaseException = pair(lanes[lane], case, gpu, cancel)
        except BaseException as exc:  # told in the caller's thread
            outcome = exc
        finished.put((lane, case, outcome))

    try:
        while waiting or len(free) < len(lanes):
            slots = [lane.slot for lane in lanes]
            busy = len(lanes) - len(free)
            while (
                start := next_start([needs[c] for c in waiting], free, busy=busy, whole=whole, slots=slots)
            ) is not None:
                place, lane = start
                case = waiting.pop(place)
                free.remove(lane)
                busy += 1
                whole = needs[case] == "whole"
                gpu = None
                if plan.gpus and not whole:
                    gpu = pick_gpu([g for g in plan.gpus if g not in held.values()], gpus_used.setdefault(case, []))
                    gpus_used[case].append(gpu)
                    held[lane] = gpu
                threading.Thread(target=work, args=(lane, case, gpu), daemon=True).start()
            if len(free) == len(lanes):  # a plan made for other cases: say so rather than wait for ever
                raise RuntimeError(f"no lane of {len(lanes)} can run {waiting[0]} ({needs[waiting[0]]})")
            lane, case, outcome = finished.get()
            free.append(lane)
            free.sort()
            held.pop(lane, None)
            whole = False
            if isinstance(outcome, BaseException):
                raise outcome
            done(case, outcome)
    except KeyboardInterrupt:
        cancel.set()
        while not finished.empty():
            _, case, outcome = finished.get_nowait()
            if isinstance(outcome, Pair):
                done(case, outcome)
        raise
    finally:
        cancel.set()  # a side's error ends the round: the other lanes' duets are released too
