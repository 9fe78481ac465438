"""The software and hardware a run measured: the ``env`` block of every report."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

LIBRARIES = ("torch", "transformers", "accelerate", "deepspeed", "bitsandbytes", "datasets", "numpy", "perfsuite")


def library_versions() -> dict[str, str | None]:
    """Installed versions, without importing the packages (``None`` when absent)."""
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def environment(device_type: str = "auto") -> dict[str, Any]:
    """Versions of python and the training stack, plus the device's facts."""
    from perfsuite.device import get_device

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
