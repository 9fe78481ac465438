"""FLOPs counted once per case and stack, then reused: the count skipped where its answer is known.

The counts (:class:`perfsuite.worker.measure.StepCounts`) are taken in an untimed optimizer step
under FlopCounterMode, the memory profile's: the FLOPs of a step, the dtypes its matmuls ran
in and the attention kernels that ran. Every one of those follows from what the key below holds,
so a second run of the same case on the same stack counts the same numbers
(``tests/test_flop_cache.py`` recounts and compares):

- the case: every field of its :class:`~perfsuite.core.spec.CaseSpec` but ``calibrate``
  (which brackets timed steps and changes nothing counted), its declared model and
  strategy in full (a team's declaration may change under one name), and the digest of
  its initial weights;
- the stack: the installed version of every library a step goes through (a ``perfsuite
  ab`` overlay has its own) and a digest of perfsuite's own source; a library installed
  from a working tree (editable) has no version that follows its code, so with one
  nothing is cached;
- the environment that can change what a step runs: ``PERFSUITE_*`` (the test suite's
  injected regressions, ``perfsuite ab``'s injected slowdowns), ``TORCH*``, ``CUBLAS*``,
  ``NVIDIA_TF32*``, ``ACCELERATE_*``, ``TRANSFORMERS_*``, ``DS_*`` and ``HF_*`` variables;
- the hardware: the device's time class (a GPU's model, whose generation picks its attention
  kernels; a CPU's family and instruction sets, which pick its bf16 paths).

Each count is one JSON file under ``<cache>/flops/`` (:func:`perfsuite.core.cache.cache_root`),
written atomically (the two sides of a duet may count one case at once). A record says
where its counts came from (``flops_source``: ``counted`` or ``cache``). ``PERFSUITE_FLOP_CACHE=0``
counts every time. Cases of several ranks always count (each rank its own share), and so do cases
that read their data from a file, and cases of a project's own model and engine: their code
(its package, what it imports, what it reads) has no version this key could follow, and one
step of such a model costs what counting it does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from perfsuite.core.baselines import write_json_atomic
from perfsuite.core.cache import cache_root
from perfsuite.core.hardware import time_class
from perfsuite.core.preloads import ENV as PRELOAD_ENV
from perfsuite.core.preloads import MODEL_CLASSES_ENV
from perfsuite.core.provenance import LIBRARIES, direct_url
from perfsuite.core.spec import CaseSpec
from perfsuite.core.strategies import OPTIONAL_PACKAGES
from perfsuite.worker.duet import CPUS, PEER, READY, STOP

ENV = "PERFSUITE_FLOP_CACHE"
"""``0`` counts FLOPs in every run."""
VERSION = 1
"""Bumped when what a count holds changes shape."""
EDITABLE = "editable"
# The libraries a step goes through: those every written file names, and every optional package.
_STACK = tuple(dict.fromkeys((*LIBRARIES, *(p.distribution for p in OPTIONAL_PACKAGES), "tokenizers")))
_ENV_PREFIXES = ("PERFSUITE_", "TORCH", "CUBLAS", "NVIDIA_TF32", "ACCELERATE_", "TRANSFORMERS_", "DS_", "HF_")
_ENV_IGNORED = {
    # Where things are kept, what is preloaded, how a duet meets, which pids a test collects:
    # nothing a step computes.
    ENV,
    PRELOAD_ENV,
    MODEL_CLASSES_ENV,
    CPUS,
    READY,
    PEER,
    STOP,
    "PERFSUITE_CACHE",
    "PERFSUITE_GPUS",
    "PERFSUITE_TEST_PIDS",
    "TORCH_EXTENSIONS_DIR",
}


@functools.cache
def stack() -> dict[str, str | None]:
    """The versions of the libraries a step goes through, and a digest of perfsuite's source
    (read once per process: the worker forkserver reads it for every worker it forks)."""
    versions: dict[str, str | None] = {}
    for name in _STACK:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
            continue
        versions[name] = dist.version
        if name == "perfsuite":
            continue
        direct = direct_url(dist)
        if (direct.get("dir_info") or {}).get("editable"):
            versions[name] = EDITABLE
        elif direct.get("vcs_info"):  # a git install keeps one version across commits
            versions[name] = f"{dist.version} {direct.get('url')}@{direct['vcs_info'].get('commit_id')}"
    source = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        source.update(str(path.relative_to(package)).encode())
        source.update(path.read_bytes())
    versions["perfsuite source"] = source.hexdigest()
    return versions


def cache_key(spec: CaseSpec, *, initial_weights: str, device_type: str, device_name: str) -> str:
    """The key of ``spec``'s FLOP count on this stack and device (a hex digest)."""
    case = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.init and f.name != "calibrate"}
    what = {
        "version": VERSION,
        "case": case,
        "model": dataclasses.asdict(spec.model_spec),
        "strategy": dataclasses.asdict(spec.strategy_spec),
        "initial_weights": initial_weights,
        "stack": stack(),
        "environment": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES) and k not in _ENV_IGNORED
        },
        "hardware": time_class(device_type, device_name),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def enabled(spec: CaseSpec) -> bool:
    """Whether ``spec``'s counts may come from the cache: one rank, not opted out, no editable library,
    no data read from a file (a file edited under the same name would batch other shapes), and
    perfsuite's own engine and model building (a project's code may change under one name)."""
    from_files = spec.dataset is not None or spec.model_spec.data is not None
    projects_code = spec.engine_spec is not None or spec.model_spec.factory is not None
    return (
        spec.world_size == 1
        and not from_files
        and not projects_code
        and os.environ.get(ENV, "1") != "0"
        and EDITABLE not in stack().values()
    )


def _path(key: str) -> Path:
    return cache_root() / "flops" / f"{key}.json"


def cached(key: str | None) -> dict[str, Any] | None:
    """The counts stored under ``key`` (with ``source``: ``cache``), or ``None``: not there, or ``key``
    ``None`` (a case that always counts)."""
    if key is None:
        return None
    try:
        counts: dict[str, Any] = json.loads(_path(key).read_text())
    except (OSError, ValueError):
        return None  # not there (or a torn file from a crash): count it
    return {**counts, "source": "cache"}


def counted(key: str | None, counts: dict[str, Any]) -> dict[str, Any]:
    """``counts``, just counted, stored under ``key`` (unless ``None``), with ``source``: ``counted``."""
    if key is not None:
        _store(_path(key), counts)
    return {**counts, "source": "counted"}


def _store(path: Path, counts: dict[str, Any]) -> None:
    try:
        write_json_atomic(path, counts)
    except (OSError, ValueError):
        pass  # a read-only or full cache (or a count that is not JSON) costs the next run a count, nothing else
