"""The kernels a run used against its baseline's: a run of other attention kernels compares with
nothing (T5 on transformers 4.x has no SDPA path and runs eager). Pure: no torch, no pytest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfsuite.core.baselines import refresh_command
from perfsuite.core.check import Check
from perfsuite.core.observation import Observation


def check_kernels(case_id: str, baseline: Mapping[str, Any], observed: Observation, hardware: str) -> Check | None:
    """A failing check when the baseline's attention implementation is known and is not the run's.

    ``None`` when they agree, or when either side predates recording it.
    """
    recorded = (baseline.get("spec") or {}).get("attention")
    if recorded is None or observed.attention is None or recorded == observed.attention:
        return None
    return Check(
        "attention",
        False,
        str(recorded),
        observed.attention,
        "other kernels",
        "same kernels",
        f"{case_id}: not compared: the baseline ran {recorded} attention and this run {observed.attention} "
        f"(the installed transformers has no {recorded} path for this model), so no figure compares; "
        "gate a case that runs the same kernels on both stacks (its eager_attention variant), or record "
        f"this stack's own with {refresh_command(case_id, hardware=hardware)}",
    )
