"""Runs each case in its own process, so one case's memory, crash or hang stays its own.

Workers fork from a forkserver that has already imported torch, transformers and
accelerate (``perfsuite.worker.preload``), so starting one costs milliseconds rather than
the seconds a fresh interpreter needs. A worker that overruns its timeout is killed;
one that dies without answering (a segfault, ``os._exit``, the OOM killer) is
reported with its exit code. Either way the case fails and the run goes on.

A worker is quiet: what third-party code prints (DeepSpeed's FutureWarnings, a
transformers note per case, a JIT compiler's log) and every Python warning go into
the case's record (``warnings``, ``output``), not between the caller's progress lines.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfsuite.core.record import CaseRecord, CaughtWarning
from perfsuite.core.spec import CaseSkipped, CaseSpec
from perfsuite.worker import duet
from perfsuite.worker.capture import captured_output, described_error, warning_list
from perfsuite.worker.start_method import platform_start_method

CaseFn = Callable[[CaseSpec], dict[str, Any]]

_PRELOAD = ["perfsuite.worker.forkserver", "perfsuite.worker.preload", "perfsuite.worker.frozen"]
_RUNNING: set[multiprocessing.process.BaseProcess] = set()
"""Workers started and not yet reaped, from any thread (the GPU pool's): :func:`stop_workers` kills them."""
_RUNNING_LOCK = threading.Lock()
_STOPS = 0
"""How many times :func:`stop_workers` has run: a worker whose start a stop overlapped (its pid
not yet known, so not killed) is killed once its start returns."""
OUTPUT_LIMIT = 20_000
"""Characters of a worker's captured output kept in its record (the end, where errors are)."""


def _context() -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def renew_forkserver() -> bool:
    """Stop the forkserver, so that the next worker starts a new one: a new interpreter, so a new
    randomised address-space layout, which every worker forked from it inherits. One layout
    moves a case's step time by a few percent the same way in every run (docs/ab.md), so
    repeats and retries of a time each get a fresh draw. ``False`` when there was none."""
    stop = getattr(multiprocessing.forkserver._forkserver, "_stop", None)
    if stop is None:
        return False
    stop()
    return True


def _ready() -> None:
    """What :func:`start_forkserver` forks: nothing."""


BOOT_LIMIT_S = 600.0
"""The longest :func:`start_forkserver` waits for a forkserver's boot (a first CPU Adam build included)."""


def start_forkserver(limit_s: float = BOOT_LIMIT_S) -> float:
    """Boot the forkserver now, and return once it has imported everything (seconds taken), so that
    no case's run shares the machine with its imports. A worker started later forks at once.
    Raises :class:`ForkserverHung` after ``limit_s``."""
    started = time.perf_counter()
    probe = _context().Process(target=_ready)
    _start_within(probe, limit_s)  # answered only once the forkserver has finished its preloads
    probe.join()
    return time.perf_counter() - started


class ForkserverHung(RuntimeError):
    """The forkserver did not finish its imports in time: one of them, or a build, hangs."""


class ForkserverDied(RuntimeError):
    """The forkserver exited during its imports: one of them raised (a library that no longer
    imports beside another's version, say), which a worker would only see as an EOFError."""


def _preload_error() -> str | None:
    """What importing the forkserver's preloads raises, in a fresh interpreter of this environment:
    the exception's line and where it was raised; ``None`` when they import."""
    code = f"import importlib\nfor name in {_PRELOAD!r}:\n    importlib.import_module(name)"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=BOOT_LIMIT_S)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    where = [line.strip() for line in lines if line.lstrip().startswith('File "')]
    last = lines[-1] if lines else f"exit {done.returncode}"
    return last + (f" ({where[-1]})" if where else "")


def _start_within(proc: multiprocessing.process.BaseProcess, limit_s: float, *, case: bool = False) -> None:
    """``proc.start()``, which waits for the forkserver's preloads; past ``limit_s`` the forkserver is
    killed (renewed for the next worker) and :class:`ForkserverHung` says so, instead of a wait for ever:
    where ``limit_s`` is a ``case``'s time limit shorter than a boot may take, that the limit ran out."""
    done = threading.Event()

    def stop() -> None:
        pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
        if not done.is_set() and pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    watchdog = threading.Timer(limit_s, stop)
    watchdog.daemon = True
    watchdog.start()
    try:
        proc.start()
    except (EOFError, OSError) as exc:
        if not watchdog.finished.is_set():
            why = _preload_error()
            if why is None:
                raise
            renew_forkserver()
            raise ForkserverDied(f"the worker's forkserver exited during its imports: {why}") from exc
        renew_forkserver()
        if case and limit_s < BOOT_LIMIT_S:
            raise ForkserverHung(
                f"its time limit ({limit_s:.3g} s) ran out while the worker's forkserver was still importing "
                "what the session's cases need: give it a longer one (--time-limit, --timeout; a first DeepSpeed "
                f"CPU Adam build alone takes 30 s or more); imports that outlast {BOOT_LIMIT_S:g} s hang"
            ) from exc
        raise ForkserverHung(
            f"the worker's forkserver did not finish its imports in {limit_s:g} s and was stopped "
            f"(an import or DeepSpeed's CPU Adam build hangs; a build lock left by an interrupted one?)"
        ) from exc
    finally:
        done.set()
        watchdog.cancel()


def stop_workers() -> None:
    """Kill every worker this process is running, each with its process group, and the forkserver
    (which may still be importing torch): an interrupted run ends at once, with no process left."""
    global _STOPS
    with _RUNNING_LOCK:
        _STOPS += 1
        running = list(_RUNNING)
    for proc in running:
        _kill_group(proc)
    forkserver = multiprocessing.forkserver._forkserver
    pid = getattr(forkserver, "_forkserver_pid", None)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        renew_forkserver()  # reaps it


def _child(target: CaseFn, spec: CaseSpec, conn: multiprocessing.connection.Connection, env: dict[str, str]) -> None:
    # A process group of its own: a timeout kills the worker with everything it started (ranks, loaders).
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the forkserver ignores it (perfsuite.worker.forkserver)
    platform_start_method()  # the case's own processes start as they would in a training script
    os.environ.update(env)  # before anything asks CUDA which GPUs it sees
    duet.pin()  # a duet run's core (perfsuite ab), before anything starts threads
    _send(conn, ("started", time.monotonic()))
    from perfsuite.worker import preload, teardown

    with captured_output() as captured, warnings.catch_warnings(record=True) as caught, teardown.deferred():
        warnings.simplefilter("always")
        try:
            preload.check_gpu_usable(spec)
            message: tuple[str, Any] = ("result", target(spec))
        except CaseSkipped as exc:
            message = ("skipped", str(exc))
        except BaseException as exc:  # the worker reports everything; the parent decides
            message = ("error", described_error(exc))
            traceback.print_exc()
    output = preload.IMPORT_OUTPUT + captured["output"]
    diagnostics = {
        "preloaded": list(preload.PRELOADED),
        "warnings": warning_list(preload.IMPORT_WARNINGS + caught),
        "output": output[-OUTPUT_LIMIT:],
        "output_truncated": len(output) > OUTPUT_LIMIT,
    }
    _send(conn, (*message, diagnostics))
    conn.close()
    # The record is sent: no engine teardown, no interpreter shutdown (collecting a model's
    # objects, a process group's atexit). The worker ends its own process group, itself and
    # whatever it started (DataLoader workers), while that group is surely its own.
    teardown.discard()
    sys.stdout.flush()
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)


def _send(conn: multiprocessing.connection.Connection, message: tuple[Any, ...]) -> None:
    """Send ``message`` to the parent; where it is gone (an interrupted run), end quietly: nobody
    reads the record, and a BrokenPipeError's traceback would land in the run's output."""
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        os.killpg(0, signal.SIGKILL)


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "worker did not exit"
    if code < 0:
        try:
            return f"worker killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with code {code} before reporting a result"


def _kill_group(proc: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL the worker's process group: the worker, its ranks and DataLoader workers."""
    if proc.pid is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class _Ran:
    """What a worker answered and how it ran."""

    kind: str
    """``result``, ``skipped``, ``error`` or ``timeout``."""
    payload: Any
    """The target's answer (``result``), or what stopped it."""
    startup_s: float | None
    """From the worker's launch to its first word (``None``: it never spoke)."""
    wall_s: float
    diagnostics: dict[str, Any]
    """What the worker preloaded, warned and printed (empty where it died before saying)."""

    def answer(self, spec: CaseSpec) -> dict[str, Any]:
        """The target's answer as the JSON object it sent; a failed case's record where it raised, timed out or died."""
        from perfsuite.worker.record import failed_record

        if self.kind == "result":
            return dict(self.payload)
        status = "skipped" if self.kind == "skipped" else "failed"
        return dict(failed_record(spec, status=status, error=str(self.payload)))

    def worker_json(self) -> dict[str, Any]:
        """The worker's start-up, wall time, preloads, warnings and output (cut: said), as a record's keys hold them."""
        return {
            "worker_startup_s": self.startup_s,
            "wall_s": self.wall_s,
            "preloaded": self.diagnostics.get("preloaded", []),
            "warnings": self.diagnostics.get("warnings", []),
            "output": self.diagnostics.get("output", ""),
            **self.cut(),
        }

    def cut(self) -> dict[str, bool]:
        """``output_truncated``, a key only where the output was cut."""
        return {"output_truncated": True} if self.diagnostics.get("output_truncated") else {}


def run_isolated(
    spec: CaseSpec, *, timeout_s: float, target: CaseFn | None = None, env: dict[str, str] | None = None
) -> CaseRecord:
    """Run one case in a fresh worker and return its record, typed (never raises for the case's faults).

    ``target`` defaults to :func:`perfsuite.worker.run.run_case`; tests pass functions that
    crash or hang to show the run goes on. ``env`` is set in the worker before the case
    starts (the GPU pool's ``CUDA_VISIBLE_DEVICES``). What the worker sent is made a
    :class:`~perfsuite.core.record.CaseRecord` here, once, and the worker's start-up, wall time,
    preloads, warnings and output are set on it (last, where it has none of them); a ``target``
    whose answer is not a case's record (an explanation run's, a check's) runs through
    :func:`run_in_worker`.
    """
    ran = _run(spec, timeout_s=timeout_s, target=target, env=env)
    try:
        record = CaseRecord.from_json(ran.answer(spec), spec.id)
    except ValueError as exc:  # the case's own fault (an engine's evidence of the wrong type): its case fails
        record = CaseRecord.failed(spec, status="failed", error=f"its record: {exc}")
    caught = ran.diagnostics.get("warnings", [])
    return record.updated(
        worker_startup_s=ran.startup_s,
        wall_s=ran.wall_s,
        preloaded=tuple(ran.diagnostics.get("preloaded", ())),
        warnings=tuple(CaughtWarning.from_json(w, f"{spec.id}: warnings[{i}]") for i, w in enumerate(caught)),
        output=ran.diagnostics.get("output", ""),
        **ran.cut(),
    )


def run_in_worker(
    spec: CaseSpec, *, timeout_s: float, target: CaseFn | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """:func:`run_isolated`'s run: what ``target`` answered in a fresh worker, as the JSON object it sent,
    with the worker's start-up, wall time, preloads, warnings and output added (a failed case's record
    where it raised, timed out or died)."""
    ran = _run(spec, timeout_s=timeout_s, target=target, env=env)
    return {**ran.answer(spec), **ran.worker_json()}


def _run(spec: CaseSpec, *, timeout_s: float, target: CaseFn | None, env: dict[str, str] | None) -> _Ran:
    """Run ``target`` (a case's run by default) in a fresh worker: what it answered, and how it ran; a
    multi-rank case's ranks' logs in a directory made and removed here (a killed worker cannot)."""
    if not spec.launches_ranks:
        return _run_in(spec, timeout_s=timeout_s, target=target, env=env)
    from perfsuite.worker.distributed.launch import SCRATCH

    scratch = tempfile.mkdtemp(prefix="perfsuite-ranks-")
    try:
        return _run_in(spec, timeout_s=timeout_s, target=target, env={**(env or {}), SCRATCH: scratch})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_in(spec: CaseSpec, *, timeout_s: float, target: CaseFn | None, env: dict[str, str] | None) -> _Ran:
    from perfsuite.worker.run import run_case

    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    # Not a daemon: a daemonic process may not start DataLoader workers of its own.
    proc = ctx.Process(
        target=_child, args=(target or run_case, spec, sender, dict(env or {})), name=f"perfsuite-{spec.id}"
    )
    launched = time.monotonic()
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
        stops = _STOPS
    try:
        _start_within(proc, timeout_s, case=True)  # the case's limit covers its worker's start
    except (ForkserverHung, ForkserverDied) as exc:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
        receiver.close()
        sender.close()
        failed = "timeout" if isinstance(exc, ForkserverHung) else "error"
        return _Ran(failed, str(exc), None, time.monotonic() - launched, {})
    sender.close()
    with _RUNNING_LOCK:
        stopped_while_starting = _STOPS != stops
    if stopped_while_starting:  # a stop came before its pid was known: it must not run on
        _kill_group(proc)
        proc.kill()  # in case it has not made its process group yet
    startup: float | None = None
    kind: str = "error"
    payload: Any = None
    diagnostics: dict[str, Any] = {}
    deadline = launched + timeout_s
    at_once = True  # until the worker answers: an interrupt (KeyboardInterrupt) kills it at once
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not receiver.poll(remaining):
                kind, payload = "timeout", f"timed out after {timeout_s:g} s; worker killed"
                break
            try:
                kind, payload, *rest = receiver.recv()
                diagnostics = rest[0] if rest else {}
            except EOFError:
                proc.join(5)
                kind, payload = "error", _exit_reason(proc.exitcode)
                break
            if kind == "started":
                startup = payload - launched
                continue
            break
        at_once = kind == "timeout"
    finally:
        receiver.close()
        proc.join(0 if at_once else 5)
        if proc.is_alive():
            _kill_group(proc)
            proc.kill()
            proc.join()
        if kind not in ("result", "skipped"):
            _kill_group(proc)  # whatever a failed worker left behind (a rank that outlived it)
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    return _Ran(kind, payload, startup, time.monotonic() - launched, diagnostics)
