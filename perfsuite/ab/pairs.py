"""One pair: a run of a case on each side, next to each other in time, and its log ratio.

Two ways to run a pair (``perfsuite ab --mode``):

- **duet** (a CPU case in one process with one thread, on a machine with two cores or more):
  both sides' workers run at once, each pinned to its own core (the cores swap from pair
  to pair), and start their timed steps together (:mod:`perfsuite.worker.duet`). Whatever
  else the machine does in those seconds slows both; the pair's difference is the median
  over steps of ``log(B_step / A_step)`` (step *i* of each side ran at about the same
  time), so a burst that hit a few of one side's steps does not move it.
- **alternate** (everything else: multi-rank and DataLoader-worker cases need both cores,
  and a GPU runs one side at a time): one side's run, then the other's, A first in even
  pairs and B first in odd ones; the difference is ``log(median B / median A)``.

A run that fails makes the pair fail with that side's error; in a duet the other side's
worker is released at once instead of waiting for a peer that will never come.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import statistics
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perfsuite.ab.envs import EnvError
from perfsuite.ab.sides import Side
from perfsuite.core.loss import max_difference, weights_apart
from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.duet import CPUS, PEER, READY, STOP

Mode = Literal["duet", "alternate"]
Choice = Literal["auto", "duet", "alternate"]
MODES: tuple[Choice, ...] = ("auto", "duet", "alternate")
"""``perfsuite ab --mode``: auto runs each case as a duet where it fits (:func:`duet_fits`)."""


@dataclass(frozen=True)
class Pair:
    records: tuple[CaseRecord | None, CaseRecord | None]
    """Each side's run (``None`` for a side whose run did not come back, or that did not run: see ``error``)."""
    mode: Mode
    log_ratio: float
    """``log(B / A)``: the median per-step log ratio of a duet, the ratio of the two medians otherwise."""
    error: str | None = None
    skipped: bool = False
    """Both sides skipped the case (a strategy its engine does not apply, say): ``error`` says why."""
    candidate_failed: bool = False
    """B's own run failed (``error``) where A's, before it or beside it in this pair, ran."""
    seeds: tuple[tuple[float, ...], ...] = ()
    """A's loss curves at other seeds, where the two runs started from other initial weights (:func:`other_seeds`)."""
    seeds_error: str | None = None
    """Why those curves are missing: a run at another seed failed."""


def duet_cores() -> tuple[int, int] | None:
    """The two cores a duet runs on (the first two this process may use), or ``None`` with fewer."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[0], cores[1]) if len(cores) >= 2 else None


def duet_fits(spec: CaseSpec, device_type: str) -> bool:
    """Whether ``spec`` runs in one process on one core: a duet's half."""
    return (
        device_type == "cpu"
        and spec.threads == 1
        and not spec.launches_ranks
        and spec.strategy_spec.num_workers == 0
        and duet_cores() is not None
    )


def check_mode(specs: Sequence[CaseSpec], device_type: str, mode: Choice) -> None:
    """``--mode duet`` with a case that cannot be one: a ``ValueError`` naming them."""
    if mode == "duet" and (unfit := [spec.id for spec in specs if not duet_fits(spec, device_type)]):
        raise ValueError(
            f"--mode duet needs CPU cases in one process on one thread, and two cores: not {', '.join(unfit)}"
        )


def step_times(record: CaseRecord | None) -> list[float]:
    """A run's timed steps (s)."""
    assert record is not None  # a pair without an error has both runs
    return [float(s) for s in record.timed().samples]


def step_log_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """The median over steps of ``log(b_i / a_i)``: step ``i`` of each side of a duet ran at about the same time."""
    if len(a) != len(b) or not a:
        raise ValueError(f"a duet's sides timed {len(a)} and {len(b)} steps")
    return statistics.median(math.log(y / x) for x, y in zip(a, b, strict=True))


def failure(side: Side, record: CaseRecord | None, error: str | None = None) -> str | None:
    """Why ``side``'s run failed (its record's error, or ``error`` where none came back), or ``None``."""
    if record is None:  # a side's EnvError names the side and its environment already
        return error if error and error.startswith(f"{side.name} (") else f"{side.name}: {error}"
    return None if record.ok else f"{side.name}: {record.error or record.status}"


def _unpaired(
    sides: tuple[Side, Side], records: tuple[CaseRecord | None, CaseRecord | None], errors: list[str | None], mode: Mode
) -> Pair | None:
    """The pair whose two runs did not both time their steps: both skipped (the case is *skipped*, as
    the suite skips it), else a side's error (the base's first; in a duet, the side whose own run
    failed, not the one that stopped because its peer had); ``None`` where both ran."""
    if all(r is not None and r.status == "skipped" for r in records):
        return Pair(records, mode, math.nan, (records[0] and records[0].error) or "skipped", skipped=True)
    said = [failure(sides[w], records[w], errors[w]) for w in (0, 1)]
    failed = [e for e in said if e]
    # In a duet, a side whose peer failed says only that: the peer's own error is the cause.
    caused = [e for e in failed if "PeerGone: " not in e] or failed
    if not caused:
        return None
    # B's own run failed (not its wait for a peer: a slow base leaves a duet's candidate waiting) and A's did not.
    own = [e is not None and "PeerGone: " not in e for e in said]
    b = records[1]
    alone = own[1] and not own[0] and b is not None and b.status != "skipped"
    return Pair(records, mode, math.nan, caused[0], candidate_failed=alone)


def alternate(
    sides: tuple[Side, Side], fields: dict[str, Any], index: int, timeout_s: float, env: dict[str, str] | None = None
) -> Pair:
    records: dict[int, CaseRecord] = {}
    for which in (0, 1) if index % 2 == 0 else (1, 0):
        try:
            records[which] = sides[which].run(fields, timeout_s, env=env)
        except EnvError as exc:  # its server died or answered no record: this side's error, not a traceback
            return Pair((records.get(0), records.get(1)), "alternate", math.nan, failure(sides[which], None, str(exc)))
        if records[which].status != "skipped" and failure(sides[which], records[which]):  # a skip: the other says
            ran = which == 1 and 0 in records and records[0].ok  # A ran first (an even pair), and B failed
            error = failure(sides[which], records[which])
            return Pair((records.get(0), records.get(1)), "alternate", math.nan, error, candidate_failed=ran)
    ended = _unpaired(sides, (records[0], records[1]), [None, None], "alternate")
    if ended is not None:
        return ended
    a, b = records[0], records[1]
    ratio = math.log(float(b.timed().median) / float(a.timed().median))
    return Pair((a, b), "alternate", ratio)


def duet_core(cores: tuple[int, int], which: int, index: int) -> int:
    """The core side ``which`` (0: A, 1: B) of pair ``index`` runs on: the cores swap sides every pair."""
    return cores[(which + index) % 2]


def duet(
    sides: tuple[Side, Side],
    fields: dict[str, Any],
    index: int,
    timeout_s: float,
    cores: tuple[int, int],
    cancel: threading.Event | None = None,
) -> Pair:
    """Pair ``index`` as a duet on ``cores``; once ``cancel`` is set (the comparison was stopped while
    this pair ran in a lane of its own), both workers are released as Ctrl-C releases them."""
    records: list[CaseRecord | None] = [None, None]
    errors: list[str | None] = [None, None]  # where a side's run did not come back
    with tempfile.TemporaryDirectory(prefix="perfsuite-duet-") as meet:
        stop = Path(meet, "stop")

        def run(which: int) -> None:
            env = {
                READY: str(Path(meet, str(which))),
                PEER: str(Path(meet, str(1 - which))),
                STOP: str(stop),
                CPUS: str(duet_core(cores, which, index)),
            }
            try:
                records[which] = sides[which].run(fields, timeout_s, env=env)
            except EnvError as exc:  # its server died (Ctrl-C reaches it too): this side's error, not a traceback
                errors[which] = str(exc)
            if failure(sides[which], records[which], errors[which]):
                with contextlib.suppress(OSError):  # gone once an interrupted duet was left
                    stop.touch()  # release the other side's worker: its peer is not coming

        threads = [threading.Thread(target=run, args=(which,), daemon=True) for which in (0, 1)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(None if cancel is None else 0.1)
                    if cancel is not None and cancel.is_set():
                        with contextlib.suppress(OSError):
                            stop.touch()
        except KeyboardInterrupt:  # release both workers, give their runs a moment to end, then stop
            stop.touch()
            for thread in threads:
                thread.join(timeout_s / 10)
            raise
    ended = _unpaired(sides, (records[0], records[1]), errors, "duet")
    if ended is not None:
        return ended
    return Pair((records[0], records[1]), "duet", step_log_ratio(step_times(records[0]), step_times(records[1])))


def run_pair(
    sides: tuple[Side, Side],
    fields: dict[str, Any],
    index: int,
    timeout_s: float,
    *,
    mode: Mode,
    cores: tuple[int, int] | None = None,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
    seeds: int = 0,
) -> Pair:
    """Pair ``index`` of the case ``fields`` (a :class:`CaseSpec`'s fields) in ``mode``: a duet on
    ``cores`` (by default the first two this process may use), or alternating with ``env`` set in
    both workers (a lane's GPU, :mod:`perfsuite.ab.lanes`); with ``seeds``, :func:`other_seeds` after."""
    cores = cores or duet_cores()
    if mode == "duet" and cores is not None:
        pair = duet(sides, fields, index, timeout_s, cores, cancel)
    else:
        pair = alternate(sides, fields, index, timeout_s, env)
    return other_seeds(pair, sides[0], fields, seeds, timeout_s, env, cancel) if seeds else pair


LOSS_SEEDS = 5
"""Other seeds the base runs a case at where its sides start from other initial weights (``--loss-seeds``):
with the base's own, 6 curves, whose prediction intervals at 0.9986 (alpha 0.05 over 35 cases) were 3.3-11%
of the mean loss either side for six tiny-model cases on a CPU (``benchmarks/ab/seeds_aa.py``); each is one
more run of the case, unprofiled."""


def other_seeds(
    pair: Pair,
    side: Side,
    fields: dict[str, Any],
    count: int,
    timeout_s: float,
    env: dict[str, str] | None = None,
    cancel: threading.Event | None = None,
) -> Pair:
    """``pair`` with ``side``'s (A's) loss curves at ``count`` other seeds (the case's seed + 1, + 2, …,
    each run alone, unprofiled, once per side: :attr:`Side.at_seeds`), where its two runs started from
    other initial weights and their curves of one length differ: B's curve is then judged against A's
    spread over seeds, not step by step (:func:`perfsuite.core.loss.check_against_seeds`). As it was
    otherwise; without them, saying why, where a run at another seed failed or started from A's own
    weights (a model that ignores the seed), or once ``cancel`` is set (the comparison stopped while this
    ran in a lane of its own)."""
    a, b = pair.records
    if pair.error is not None or a is None or b is None or not weights_apart(a.initial_weights, b.initial_weights):
        return pair
    if len(a.loss) != len(b.loss) or not max_difference(a.loss, b.loss):  # the step-by-step check says it
        return pair
    curves = []
    for seed in range(fields["seed"] + 1, fields["seed"] + 1 + count):
        if cancel is not None and cancel.is_set():
            return dataclasses.replace(pair, seeds_error="the comparison was stopped")
        asked = {**fields, "seed": seed, "profile": False}
        key = json.dumps([asked, env], sort_keys=True)
        record = side.at_seeds.get(key)
        if record is None:
            try:
                record = side.run(asked, timeout_s, env=env)
            except EnvError as exc:
                return dataclasses.replace(pair, seeds_error=f"at seed {seed}: {exc}")
            if record.ok:  # a failure is not kept: a time limit or a signal may not come again
                side.at_seeds[key] = record
        if not record.ok or len(record.loss) != len(b.loss):
            said = failure(side, record) or f"{len(record.loss)} steps, not {len(b.loss)}"
            return dataclasses.replace(pair, seeds_error=f"at seed {seed}: {said}")
        if not weights_apart(a.initial_weights, record.initial_weights):
            said = "it started from the same initial weights: the case's seed does not draw them"
            return dataclasses.replace(pair, seeds_error=f"at seed {seed}: {said}")
        curves.append(tuple(record.loss))
    return dataclasses.replace(pair, seeds=tuple(curves))
