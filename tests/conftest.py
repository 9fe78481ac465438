"""Test-wide fixtures; the tiers are described in the root conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

# fault_cases.py must be importable by name in forkserver workers.
sys.path.insert(0, str(Path(__file__).parent))
