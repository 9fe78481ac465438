"""Test-wide fixtures; the tiers are described in the root conftest.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# fault_cases.py must be importable by name in forkserver workers.
sys.path.insert(0, str(Path(__file__).parent))

# matplotlib imported once, before any test: a module first imported inside pytester's in-process run
# is dropped from sys.modules after it, and a second import of matplotlib mixes the classes of two
# (report.html's charts then fail), whichever test happens to import it first.
try:
    import matplotlib.figure  # noqa: F401
    import matplotlib.gridspec  # noqa: F401
except ImportError:  # the report extra is not installed: its tests say so
    pass
# torch for the same reason, and worse: its compiled core cannot be loaded twice in one process, so a
# second import of torch, after an in-process run that imported it first had it dropped, crashes the
# process or raises SystemError (tests/test_plugin.py, then tests/test_ab_lanes.py, in one process).
import torch  # noqa: E402, F401

# The project the plugin's end-to-end tests share (test_plugin.py, test_refresh.py): its fixtures.
from plugin_project import project, recorded  # noqa: E402, F401


@pytest.fixture(scope="session", autouse=True)
def outside_xdist() -> Iterator[None]:
    """A pytest a test starts (pytester's, a subprocess's) is no xdist worker, even when this one is:
    pytest-benchmark reads ``PYTEST_XDIST_WORKER`` and would stand aside. Session-wide, so that the
    fixtures of wider scope that run a pytest see it gone too."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            patch.delenv(name, raising=False)
        yield


@pytest.fixture
def restored_registry() -> Iterator[None]:
    """The registry of models, strategies and engines as it was before the test: what the test
    declared is gone after it."""
    from perfsuite.core import registry

    saved = registry.snapshot()
    yield
    registry.restore(saved)
