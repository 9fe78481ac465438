"""What collection decides about the matrix's cases before any runs: which ones cannot run here
(a package missing, no CUDA GPU, too few GPUs) and are skipped saying why, and which ones count
towards whether the session gated anything."""

from __future__ import annotations

import importlib.util

import pytest

from perfsuite.core.spec import CaseSpec
from perfsuite.core.strategies import OPTIONAL_PACKAGES, install_hint
from perfsuite.session.scope import gpu_tier_selected

OPTIONAL = {p.extra: (p.module, install_hint([p.module])) for p in OPTIONAL_PACKAGES}
"""Marker → (the module it needs, the install that brings it)."""

MARKER_OF_MODULE = {module: marker for marker, (module, _) in OPTIONAL.items()}

NO_GPU = (
    "the GPU tier is selected (-m gpu) but torch sees no CUDA GPU here, so nothing would be "
    "measured; run it on a GPU machine, or pass --perfsuite-no-gpu=skip to skip its tests"
)

NOT_FOR_HERE = pytest.StashKey[bool]()
"""On a case skipped because this machine has no CUDA GPU (``--perfsuite-no-gpu=skip``): it was
never this machine's to gate, so it does not count towards whether the session gated anything."""


def mark_unrunnable(config: pytest.Config, items: list[pytest.Item], spec_of: dict[str, CaseSpec]) -> None:
    """Skip, saying why, each item that cannot run here: a package its marker names is missing, it
    is a GPU test and torch sees no CUDA GPU (a usage error where the GPU tier was asked for and
    ``--perfsuite-no-gpu`` is ``fail``), or its case needs more GPUs than ``--perfsuite-gpus`` selects.
    ``spec_of`` maps a matrix item's node id to its case."""
    has_cuda: bool | None = None
    selected: list[str] = []
    gpus = ""
    for item in items:
        for marker, (module, install) in OPTIONAL.items():
            if item.get_closest_marker(marker) and importlib.util.find_spec(module) is None:
                item.add_marker(pytest.mark.skip(reason=f"needs {module}: {install}"))
        if not item.get_closest_marker("gpu"):
            continue
        if has_cuda is None:
            from perfsuite.worker.device import cuda_usable
            from perfsuite.worker.pool import machine_gpus

            has_cuda = cuda_usable()
            try:
                selected = machine_gpus(config.getoption("perfsuite_gpus")) if has_cuda else []
            except ValueError as exc:
                raise pytest.UsageError(f"--perfsuite-gpus: {exc}") from None
            gpus = f"--perfsuite-gpus selects {len(selected)} ({', '.join(selected)})"
        if not has_cuda:
            if gpu_tier_selected(config) and config.getoption("perfsuite_no_gpu") == "fail":
                raise pytest.UsageError(NO_GPU)
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on a GPU machine"))
            item.stash[NOT_FOR_HERE] = True
            continue
        spec = spec_of.get(item.nodeid)
        if spec is not None and spec.world_size > len(selected):
            item.add_marker(pytest.mark.skip(reason=f"needs {spec.world_size} GPUs; {gpus}"))


def skipped_why(item: pytest.Item) -> str | None:
    """Why collection skipped ``item`` (``None``: it is to run)."""
    skip = item.get_closest_marker("skip")
    return None if skip is None else str(skip.kwargs.get("reason", skip.args[0] if skip.args else ""))
