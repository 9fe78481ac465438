"""Test-wide fixtures; the tiers are described in the root conftest.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# fault_cases.py must be importable by name in forkserver workers.
sys.path.insert(0, str(Path(__file__).parent))

# The project the plugin's end-to-end tests share (test_plugin.py, test_refresh.py): its fixtures.
from plugin_project import project, recorded  # noqa: E402, F401


@pytest.fixture
def restored_registry() -> Iterator[None]:
    """The registry of models, strategies and engines as it was before the test: what the test
    declared is gone after it."""
    from perfsuite.core import registry

    saved = registry.snapshot()
    yield
    registry.restore(saved)
