"""A case's ranks, launched from its worker through torch's elastic launcher (torchrun's Python API).

The worker is the launcher: ``elastic_launch`` runs torchrun's agent in the worker, which
starts ``world_size`` rank processes (forked on a CPU, so they start in milliseconds
from the worker's imports; spawned where CUDA is, because a forked process cannot use a
CUDA context), rendezvous on 127.0.0.1 at a port the OS picks, and returns each rank's
record. Each rank sets up its process group (gloo on CPUs, NCCL on GPUs) with a short
collective timeout, trains its share of every global batch through
:func:`perfsuite.worker.run.train`, and returns its record; :func:`perfsuite.worker.distributed.aggregate.aggregate`
makes one record of them.

When a rank crashes, the agent stops the others and this raises :class:`RankFailed`
naming the rank and what it died of; a hung rank is stopped by the collective timeout
or, past the case's timeout, with the whole process group of the worker
(:func:`perfsuite.worker.run_isolated` kills the group, and every rank dies with its parent).
Either way that case fails and nothing is left running.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

from perfsuite.core.spec import CaseSkipped, CaseSpec

COLLECTIVE_TIMEOUT_S = 300
"""How long a rank waits in a collective for the others before it fails the case (torch's default is 30 min)."""
SHUTDOWN_GRACE_S = 5
"""How long the agent waits for the other ranks after SIGTERM, once one has failed, before SIGKILL."""
PEER_GRACE_S = 1.0
"""How long a failing rank waits before it ends: a rank killed first is then the failure reported,
not the broken collective it left in the others."""


class RankFailed(RuntimeError):
    """A rank of the case crashed, was killed or timed out in a collective; the message names it."""


def uses_gpus(spec: CaseSpec) -> bool:
    """Whether the case's ranks run on GPUs, asked without creating a CUDA context in the worker."""
    if spec.device == "cpu":
        return False
    from perfsuite.worker.device import cuda_device_count

    visible = cuda_device_count()
    if spec.device == "cuda" and visible == 0:
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    return visible > 0


def _launch_config(spec: CaseSpec, *, gpus: bool, log_dir: str) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    wanted: dict[str, Any] = {
        "min_nodes": 1,
        "max_nodes": 1,
        "nproc_per_node": spec.world_size,
        "run_id": f"perfsuite-{os.getpid()}",
        "rdzv_backend": "c10d",
        "rdzv_endpoint": "127.0.0.1:0",  # port 0: the OS picks a free one
        "local_addr": "127.0.0.1",  # never resolve the host name (gloo's "connectFullMesh failed")
        "max_restarts": 0,  # a failed rank fails the case; a benchmark does not retry
        "monitor_interval": 0.1,
        "start_method": "spawn" if gpus else "fork",
        "logs_specs": DefaultLogsSpecs(log_dir=log_dir),  # else a torchelastic_* directory per case stays in /tmp
        "shutdown_timeout": SHUTDOWN_GRACE_S,  # torch >= 2.12; older ones wait 30 s
    }
    known = {f.name for f in dataclasses.fields(LaunchConfig)}
    return LaunchConfig(**{k: v for k, v in wanted.items() if k in known})


def describe_failure(exc: Any) -> str:
    """``rank 1 (pid 123): killed by signal SIGKILL`` for each rank that failed, first failure first."""
    lines = []
    for rank, failure in sorted(exc.failures.items(), key=lambda item: item[1].timestamp):
        if failure.exitcode < 0:
            what = f"killed by signal {failure.signal_name()}"
        else:
            what = f"exited with code {failure.exitcode}"
        message = failure.message
        if isinstance(message, dict):
            message = message.get("message", "")
        detail = "" if not message or str(message).startswith(("Signal ", "To enable traceback")) else f": {message}"
        lines.append(f"rank {rank} (pid {failure.pid}): {what}{detail}")
    return "; ".join(lines) or str(exc)


TrainFn = Callable[..., Any]
"""``train(spec, rank=, world_size=)`` (:func:`perfsuite.worker.run.train`), handed in by the run
that launches the ranks rather than imported from it, so that this module sits below the run."""


SCRATCH = "PERFSUITE_RANK_LOGS"
"""The environment variable naming the directory the ranks' logs go in, made and removed by the
worker's parent (:mod:`perfsuite.worker.process`): killed at its time limit, the worker could not."""


def run_ranks(spec: CaseSpec, train: TrainFn) -> dict[str, Any]:
    """Launch ``spec``'s ranks, each running ``train`` on its share, wait for them, and return their
    aggregated record."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from perfsuite.worker.distributed.aggregate import aggregate

    gpus = uses_gpus(spec)
    if gpus:
        from perfsuite.worker.device import cuda_device_count

        visible = cuda_device_count()
        if visible < spec.world_size:
            raise CaseSkipped(f"{spec.id} needs {spec.world_size} GPUs; {visible} visible")
    with tempfile.TemporaryDirectory(prefix="perfsuite-ranks-", dir=os.environ.get(SCRATCH)) as log_dir:
        config = _launch_config(spec, gpus=gpus, log_dir=log_dir)
        try:
            results = elastic_launch(config, rank_main)(spec, train)
        except ChildFailedError as exc:
            raise RankFailed(describe_failure(exc)) from None
    records = [results[rank] for rank in sorted(results)]
    skipped = next((r["skipped"] for r in records if "skipped" in r), None)
    if skipped is not None:
        raise CaseSkipped(skipped)
    return aggregate(records)


def _die_with_parent() -> None:
    """Have the kernel kill this rank when the process that started it dies (a killed worker)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _init_process_group(gpus: bool, local_rank: int) -> None:
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    if gpus:
        from perfsuite.worker.device import bind_cuda_device

        dist.init_process_group("nccl", timeout=timeout, device_id=bind_cuda_device(local_rank))
    else:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed's accelerator, should the strategy use it
        dist.init_process_group("gloo", timeout=timeout)


def _rank_main(spec: CaseSpec, train: TrainFn) -> dict[str, Any]:
    """One rank: its process group, its share of the training, its record."""
    import torch.distributed as dist

    from perfsuite.worker.capture import warning_list
    from perfsuite.worker.engines.deepspeed import skip_shm_comm_build
    from perfsuite.worker.start_method import platform_start_method

    _die_with_parent()
    platform_start_method()  # a spawned rank (on GPUs) would otherwise start its loaders by spawn
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    gpus = uses_gpus(spec)
    if spec.strategy_spec.uses_deepspeed:  # else nothing starts deepspeed.comm in this rank
        skip_shm_comm_build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _init_process_group(gpus, local_rank)
        try:
            record: dict[str, Any] = train(spec, rank=rank, world_size=world_size)
        except CaseSkipped as exc:
            return {"skipped": str(exc)}
        except Exception:
            # Once one rank has gone (killed, crashed), a collective fails in every other: wait,
            # so that the agent, which reports the first ended rank it finds, finds that one.
            time.sleep(PEER_GRACE_S)
            raise
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    placed = {"gpu": _visible_gpu(local_rank)} if gpus else {}
    return {**record, "warnings": warning_list(caught), **placed}


def _visible_gpu(local_rank: int) -> str:
    """The GPU a rank uses, as ``CUDA_VISIBLE_DEVICES`` names it (its local rank where that names none)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else None
    return ids[local_rank] if ids and local_rank < len(ids) else str(local_rank)


def rank_main(spec: CaseSpec, train: TrainFn) -> dict[str, Any]:
    """The ranks' entry point; torch's ``record`` writes an exception to the agent's error file."""
    from torch.distributed.elastic.multiprocessing.errors import record

    result = record(_rank_main)(spec, train)
    assert result is not None
    return result
