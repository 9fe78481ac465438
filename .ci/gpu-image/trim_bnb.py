"""Rewrite a bitsandbytes wheel with only its CPU and CUDA 13 libraries (the GPU image's torch is cu130).

    python .ci/gpu-image/trim_bnb.py .whl/bitsandbytes-*.whl

The wheel ships one native library per CUDA, ROCm and XPU version, 43 MB in all; an offline
image's wheels travel with the checkout, so only the two it loads are kept (about 7 MB).
RECORD loses the dropped files' lines, so the wheel stays valid.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

KEEP = re.compile(r"libbitsandbytes_(cpu|cuda13\d)\.so$")


def trim(wheel: Path) -> None:
    trimmed = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as dst:
        dropped = {n for n in src.namelist() if n.endswith(".so") and not KEEP.search(n)}
        for info in src.infolist():
            if info.filename in dropped:
                continue
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if line.split(",", 1)[0] not in dropped).encode()
            dst.writestr(info, data)
    trimmed.replace(wheel)
    print(f"{wheel.name}: dropped {len(dropped)} native libraries, {wheel.stat().st_size / 2**20:.1f} MiB left")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        trim(Path(name))
