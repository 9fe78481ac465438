"""The software and hardware a run measured: the ``env`` block of every report."""

from __future__ import annotations

import platform
import sys
from typing import Any

from perfsuite.core.provenance import library_versions


def environment(device_type: str = "auto") -> dict[str, Any]:
    """Versions of python and the training stack, plus the device's facts."""
    from perfsuite.worker.device import get_device

    device = get_device(device_type)
    import torch

    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "host": platform.node(),
        "cuda": torch.version.cuda,
        "driver": device.describe().get("driver"),
        "device": device.describe(),
        "versions": library_versions(),
    }
