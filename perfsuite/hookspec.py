"""Hooks perfsuite's pytest plugin adds; a ``conftest.py`` or plugin may implement them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from perfsuite.core.record import CaseRecord
from perfsuite.core.spec import CaseSpec


@pytest.hookspec(firstresult=True)
def pytest_perfsuite_run_case(
    config: pytest.Config, spec: CaseSpec, timeout_s: float, env: dict[str, str]
) -> CaseRecord | Mapping[str, Any] | None:
    """Run one case and return its record: a :class:`~perfsuite.core.record.CaseRecord`, or the JSON object
    :func:`perfsuite.worker.run.run_case` makes (checked and typed as it is taken).

    ``env`` is what the case's process must have set before it starts: for a GPU case, the
    ``CUDA_VISIBLE_DEVICES`` of the GPUs it holds (of those ``--perfsuite-gpus`` selects); for a CPU
    case, empty.

    The default runs it in an isolated worker process on this machine. Implement it to
    run cases elsewhere (a remote GPU box) or, in perfsuite's own plugin tests, to feed
    chosen measurements through the gates.

    It may be called from several threads at once: the GPU pool's, one per GPU, and the CPU
    cases measured side by side before the tests (``--perfsuite-lanes``; ``1`` calls it from one
    thread at a time).
    """
