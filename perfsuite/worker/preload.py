"""Imported once by the worker forkserver, so each case's process starts with these loaded.

Importing torch and transformers' model classes takes seconds; forking a process
that already has them takes milliseconds. The session's cases add what they need
(:func:`perfsuite.core.preloads.preload_for`). Nothing here may start threads or touch a
GPU (a forked child cannot use a CUDA context its parent created).

Warnings raised by these imports are kept in :data:`IMPORT_WARNINGS`, and what the
session's extra imports print in :data:`IMPORT_OUTPUT`, both reported with every case
(the forkserver's stderr is the caller's terminal).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import select
import signal
import time
import warnings

from perfsuite.core.preloads import CPU_ADAM_ENV, CUDA_AT_IMPORT, ENV, MODEL_CLASSES_ENV, NVML_ENV
from perfsuite.core.spec import CaseSpec
from perfsuite.worker.capture import captured_output

CUDA_STARTED: str | None = None
"""Which preload started CUDA, and how (:data:`perfsuite.core.preloads.NVML_ENV`); ``None``: none did."""


def import_extras(names: list[str], *, gpu: bool, nvml: bool = False, deepspeed_setup: bool = False) -> list[str]:
    """Import ``names`` (empty ones ignored) and return those imported; with ``gpu``, none that
    would create a CUDA context (:data:`perfsuite.core.preloads.CUDA_AT_IMPORT`), unless ``nvml``:
    then those last, each that starts no CUDA (:func:`import_asking_nvml`). A package that is not
    installed is left to the case, which skips itself saying what to install. ``deepspeed_setup``
    (the forkserver's): right after DeepSpeed's import, its questions about the machine asked and,
    with a CPU build, its CPU Adam loaded, for every worker (and checked with its import)."""
    imported, asking = [], []
    for name in filter(None, names):
        if gpu and name in CUDA_AT_IMPORT:
            asking += [name] if nvml else []
        elif _imported(name, asks=deepspeed_setup):
            imported.append(name)
    return imported + import_asking_nvml(asking, asks=deepspeed_setup)


def import_asking_nvml(names: list[str], *, asks: bool = False) -> list[str]:
    """Import those of ``names`` whose import starts no CUDA, with torch asking NVML whether CUDA is
    there. Each is first imported in a child forked from here, all at once, and left to the workers
    where that started CUDA (said in the output every case carries); the rest are imported here,
    each checked again after, and after one that started CUDA all the same (:data:`CUDA_STARTED`)
    none more. ``asks``: DeepSpeed's questions asked with its import (:func:`import_extras`)."""
    global CUDA_STARTED
    from perfsuite.worker.device import cuda_started, driver_loaded

    imported: list[str] = []
    names = list(dict.fromkeys(names))  # one child a module
    if not names:
        return imported
    driver_before = driver_loaded()
    before = os.environ.get(_NVML_CHECK)
    os.environ[_NVML_CHECK] = "1"
    try:
        for name, started in zip(names, _each_in_a_child(names, driver_before, asks=asks), strict=True):
            if started:
                print(f"perfsuite: {name} left to each worker: imported in a child of the forkserver, {started}")
                continue
            if _imported(name, asks=asks):
                imported.append(name)
            started = cuda_started(driver_before=driver_before)
            if started:
                CUDA_STARTED = f"importing {name}: {started}"
                break
    finally:  # the workers see the environment they would without this
        if before is None:
            del os.environ[_NVML_CHECK]
        else:
            os.environ[_NVML_CHECK] = before
    return imported


_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
_FORK_WITH_THREADS = r".*multi-threaded, use of fork\(\) may lead to deadlocks"
PROBE_LIMIT_S = 120.0
"""How long a child's import may take before its module is left to the workers (3-11 s on a GPU host)."""


def _each_in_a_child(names: list[str], driver_before: bool, *, asks: bool) -> list[str | None]:
    """For each of ``names``, how importing it in a child forked from here started CUDA, or that the
    import killed the child or did not end within :data:`PROBE_LIMIT_S` (``None``: neither, or it
    is not installed); the children run at once, their output discarded (the forkserver's own
    imports print theirs). No wait here is unbounded: a child that will not end is killed and left."""
    children: list[tuple[str, int, int]] = []  # name, the child's pid, the read end of its pipe
    ended: set[int] = set()
    try:
        for name in names:
            read, write = os.pipe()
            try:
                with warnings.catch_warnings():  # Python 3.12+ warns of any fork with threads; this
                    # child only imports, under a deadline, and the warning would join every case's
                    warnings.filterwarnings("ignore", _FORK_WITH_THREADS, DeprecationWarning)
                    pid = os.fork()
            except OSError:
                os.close(read)
                os.close(write)
                raise
            if pid == 0:
                _probe(name, write, driver_before, asks)
                os._exit(1)  # never reached: _probe leaves the process
            os.close(write)
            children.append((name, pid, read))
        return _answers(children, ended)
    finally:  # a child still there (past the deadline, or an error here) is killed; none left unread
        for _name, pid, read in children:
            os.close(read)
            if pid not in ended:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _ended(pid, time.monotonic() + 5)


def _probe(name: str, write: int, driver_before: bool, asks: bool) -> None:
    """In the child: import ``name``, write how that started CUDA (empty: it did not), and leave
    without Python's exit (nothing of the forkserver's runs), whatever happens."""
    answer = "its import failed"
    try:
        from perfsuite.worker.device import cuda_started

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        _imported(name, asks=asks)
        answer = cuda_started(driver_before=driver_before) or ""
    finally:
        try:
            os.write(write, answer.encode())  # under PIPE_BUF: one write, read in one
        finally:
            os._exit(0)


def _answers(children: list[tuple[str, int, int]], ended: set[int]) -> list[str | None]:
    """Each child's answer, in order (the pid of each that ended, in ``ended``); one that has not
    answered and ended by the deadline is left to the caller to kill."""
    deadline = time.monotonic() + PROBE_LIMIT_S
    answers: list[str | None] = []
    for _name, pid, read in children:
        ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
        status = _ended(pid, deadline) if ready else None
        if status is None:
            answers.append(f"it did not end in {PROBE_LIMIT_S:.0f} s")
            continue
        ended.add(pid)
        answer = os.read(read, 4096).decode()
        answers.append(answer or None if status == 0 else f"it ended the child with status {status}")
    return answers


def _ended(pid: int, until: float) -> int | None:
    """``pid``'s exit code once it has ended (reaped), or ``None`` if it has not by ``until``."""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already (the forkserver's own loop reaps what it finds)
            return -1
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= until:
            return None
        time.sleep(0.01)


def _imported(name: str, *, asks: bool) -> bool:
    """Import ``name``; for DeepSpeed, with ``asks`` its questions about the machine asked once here,
    and with a CPU build of torch its CPU Adam loaded where a case offloads (:data:`CPU_ADAM_ENV`)."""
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    if name == "deepspeed" and asks:
        from perfsuite.worker.device import cuda_built
        from perfsuite.worker.engines.deepspeed import deepspeed_asks_once, load_cpu_adam

        deepspeed_asks_once(now=True)
        if os.environ.get(CPU_ADAM_ENV) == "1" and not cuda_built():
            load_cpu_adam()
    return True


def check_gpu_usable(spec: CaseSpec) -> None:
    """Raise, saying why, where this worker's forkserver started CUDA and ``spec`` runs on a GPU."""
    if CUDA_STARTED and spec.device != "cpu":
        raise RuntimeError(
            f"this worker's forkserver started CUDA ({CUDA_STARTED}) under {NVML_ENV}=1, so no worker "
            f"forked from it can use the GPU: unset {NVML_ENV}"
        )


with warnings.catch_warnings(record=True) as IMPORT_WARNINGS:
    warnings.simplefilter("always")
    import accelerate  # noqa: F401
    import numpy  # noqa: F401
    import threadpoolctl  # noqa: F401
    import torch  # noqa: F401
    import transformers

    import perfsuite.worker.calibrate  # noqa: F401
    import perfsuite.worker.data  # noqa: F401
    import perfsuite.worker.device  # noqa: F401
    from perfsuite.core.engines import ENGINES, OWN_ENGINES

    importlib.import_module(OWN_ENGINES[ENGINES[0]].module)  # the default engine's (the others': preloads)
    import perfsuite.worker.flop_cache
    import perfsuite.worker.measure  # noqa: F401
    import perfsuite.worker.run  # noqa: F401
    from perfsuite.core.models import MODELS

    perfsuite.worker.flop_cache.stack()  # the libraries' versions and perfsuite's source, read once

    # transformers imports model code lazily; resolve every registered class now, unless no case
    # of the session builds a transformers model (perfsuite.core.preloads.MODEL_CLASSES_ENV).
    for _spec in MODELS.values() if os.environ.get(MODEL_CLASSES_ENV) != "0" else ():
        for _name in (_spec.config_class, _spec.model_class):
            if _name:
                getattr(transformers, _name)

    # What this session's cases import beyond the above (perfsuite.core.preloads), each once
    # here instead of in every worker; with a CUDA build of torch none that asks CUDA about the
    # GPUs (nor may this: device.cuda_built asks nothing), unless NVML_ENV has those tried, each
    # checked. What they print (DeepSpeed logs its accelerator) goes with every case's output, as
    # it did when each worker imported them, not onto the caller's terminal.
    with captured_output() as _printed:
        PRELOADED = import_extras(
            os.environ.get(ENV, "").split(","),
            gpu=perfsuite.worker.device.cuda_built(),
            nvml=os.environ.get(NVML_ENV) == "1",
            deepspeed_setup=True,
        )
    IMPORT_OUTPUT = _printed["output"]
