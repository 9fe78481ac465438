"""perfsuite's matrix: every declared case, its step time, peak memory and loss curve gated
against baselines/ (cases and tiers are declared in pyproject.toml's [tool.perfsuite]).

    pytest tests/test_perfsuite.py                 # the CPU tier (tiny models)
    pytest tests/test_perfsuite.py -m gpu          # full-size models, on a GPU machine
    perfsuite baselines refresh                    # record or re-record this machine's baselines
"""

from __future__ import annotations

from typing import Any


def test_case_matches_baseline(perfsuite_case: Any, perfsuite: Any, benchmark: Any) -> None:
    perfsuite.check(perfsuite_case, benchmark)
