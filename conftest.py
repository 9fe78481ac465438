"""perfsuite's test tiers, and which command runs which.

- ``pytest``: everything that runs on any machine: unit tests of the pure modules
  (strategies, stats, report, data), worker isolation tests, CLI tests, and the CPU
  tier (``-m cpu``): real training runs of the tiny models that check every strategy
  does what it claims against a vanilla control run in the same session.
- ``pytest -m gpu``: the GPU-only claims (half precision faster than fp32, offload
  leaves the optimizer state off the device). Skipped, with that reason, on a
  machine without CUDA.
- ``pytest -m "not cpu and not gpu"``: the unit tests alone (seconds).

Markers ``deepspeed`` and ``bnb`` skip a test when that optional package is missing,
naming the install that brings it.
"""

from __future__ import annotations

import importlib.util

import pytest

_OPTIONAL = {
    "deepspeed": ("deepspeed", "pip install 'perfsuite[deepspeed]'"),
    "bnb": ("bitsandbytes", "pip install 'perfsuite[bnb]'"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda: bool | None = None
    for item in items:
        for marker, (module, install) in _OPTIONAL.items():
            if item.get_closest_marker(marker) and importlib.util.find_spec(module) is None:
                item.add_marker(pytest.mark.skip(reason=f"needs {module}: {install}"))
        if item.get_closest_marker("gpu"):
            if has_cuda is None:
                import torch

                has_cuda = torch.cuda.is_available()
            if not has_cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU: run `pytest -m gpu` on a GPU machine"))
