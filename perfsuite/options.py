"""Options that ``perfsuite`` and the pytest plugin both take, defined once.

Each is the keyword arguments of ``argparse``'s ``add_argument``, which pytest's
``addoption`` takes too: ``perfsuite run --gpus`` and ``pytest --perfsuite-gpus`` mean the
same thing with the same default and help. No torch, no pytest.
"""

from __future__ import annotations

from typing import Any

GPUS: dict[str, Any] = {
    "default": "all",
    "metavar": "GPUS",
    "help": "GPUs the cases share: all (default), a count, or ids (0,2); with more than one, single-GPU cases run "
    "side by side, one per GPU, and a case on N ranks gets N (perfsuite.pool)",
}
REPEATS: dict[str, Any] = {
    "type": int,
    "default": 3,
    "metavar": "N",
    "help": "runs per case when refreshing; their spread sets the time tolerance (default 3)",
}
