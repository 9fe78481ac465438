"""Where perfsuite keeps what it builds or counts once and reuses: ``$PERFSUITE_CACHE``, else
``~/.cache/perfsuite`` (``perfsuite ab``'s overlays and DeepSpeed builds, the FLOP counts)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("PERFSUITE_CACHE") or Path.home() / ".cache" / "perfsuite")
