"""Which hardware decides which number. Pure: no torch, no pytest.

Two keys, because two kinds of figure carry across machines differently:

- the **hardware key** (``cpu``, or a GPU's model) groups baseline files: memory and
  the loss curve, which are the same on every CPU (measured identical on an AMD EPYC
  without AVX512-FP16 and an Intel Xeon with it) but not between a CPU and a GPU;
- the **time class** says whose step times may be compared: on a CPU, the vendor,
  the CPUID family and model (the microarchitecture) and the ISA features torch
  dispatches kernels on (AVX2, AVX-512, VNNI, BF16, FP16, AMX), because those decide
  which kernels run: fp16 runs 4-6x vanilla on an AVX2 EPYC and about 1x on a
  Sapphire Rapids Xeon. On a GPU, its model.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

# (cpuinfo flag, label) in the order they appear in a class key: the features whose
# presence makes torch (ATen's CPU capability, oneDNN, FBGEMM) pick another kernel.
_X86_FEATURES = (
    ("avx512f", "avx512"),
    ("avx512_vnni", "vnni"),
    ("avx512_bf16", "bf16"),
    ("avx512_fp16", "fp16"),
    ("amx_tile", "amx"),
)
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}


def slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``nvidia-h100-80gb-hbm3``."""
    value = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not value:
        raise ValueError(f"cannot derive a key from {name!r}")
    return value


def hardware_key(device_type: str, device_name: str) -> str:
    """``cpu`` for any CPU; a GPU's slugged model name: the directory of its baseline files."""
    return "cpu" if device_type == "cpu" else slug(device_name)


def cpu_class(cpuinfo: str, machine: str = "x86_64") -> str:
    """The time class of a CPU from the text of ``/proc/cpuinfo``.

    ``amd-25.1-avx2`` (an EPYC Milan), ``intel-6.143-avx512-vnni-bf16-fp16-amx``
    (a Sapphire Rapids Xeon); on other architectures, the machine and the CPU's name.
    """
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor describes them all
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    vendor_id = fields.get("vendor_id")
    if vendor_id is None or not flags:
        name = fields.get("model name") or fields.get("Model name") or fields.get("CPU part") or "unknown"
        return slug(f"{machine}-{name}")
    vendor = _VENDORS.get(vendor_id, slug(vendor_id))
    isa = [label for flag, label in _X86_FEATURES if flag in flags]
    if not isa:
        isa = ["avx2"] if "avx2" in flags else ["avx"] if "avx" in flags else ["sse"]
    return f"{vendor}-{fields.get('cpu family', '?')}.{fields.get('model', '?')}-{'-'.join(isa)}"


def local_cpu_class() -> str:
    """This machine's CPU time class."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: the processor string is the best there is
        text = f"model name: {platform.processor() or 'unknown'}\n"
    return cpu_class(text, platform.machine())


def time_class(device_type: str, device_name: str) -> str:
    """The class whose recorded step times this device's may be compared with."""
    return local_cpu_class() if device_type == "cpu" else slug(device_name)
