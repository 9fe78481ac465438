"""The regression matrix: every model × strategy, time, memory and loss gated together against its baseline.

Cases come from the registries through the plugin (ids ``<model>-<strategy>``, so
``-k tiny-bert-fp16`` selects one); tiny models train on the CPU (marker ``cpu``),
full-size ones on a GPU (``gpu``). Baselines live in ``baselines/<hardware>/``;
``perfsuite baselines refresh`` rewrites them.
"""

from __future__ import annotations

from typing import Any

from perfsuite.core.spec import CaseSpec
from perfsuite.session import PerfsuiteSession


def test_case_matches_baseline(perfsuite_case: CaseSpec, perfsuite: PerfsuiteSession, benchmark: Any) -> None:
    perfsuite.check(perfsuite_case, benchmark)
