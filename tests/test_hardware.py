"""Time classes: which CPUs (and GPUs) may compare step times (pure)."""

from __future__ import annotations

import pytest

from perfsuite.core.hardware import cpu_class, hardware_key, time_class

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
"""

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu avx avx2 avx512f avx512dq avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""

GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer\t: 0x41
CPU part\t: 0xd40
"""


@pytest.mark.parametrize(
    ("cpuinfo", "machine", "expected"),
    [
        (EPYC, "x86_64", "amd-25.1-avx2"),
        (XEON, "x86_64", "intel-6.143-avx512-vnni-bf16-fp16-amx"),
        (GRAVITON, "aarch64", "aarch64-0xd40"),
    ],
)
def test_cpu_class_is_vendor_family_model_and_dispatch_isa(cpuinfo: str, machine: str, expected: str) -> None:
    assert cpu_class(cpuinfo, machine) == expected


def test_the_two_cpus_whose_fp16_kernels_differ_are_different_classes() -> None:
    assert cpu_class(EPYC) != cpu_class(XEON)
    assert hardware_key("cpu", "AMD EPYC") == hardware_key("cpu", "Intel Xeon") == "cpu"  # memory and loss shared


def test_a_gpu_is_its_own_class_and_directory() -> None:
    assert time_class("cuda", "NVIDIA H100 80GB HBM3") == hardware_key("cuda", "NVIDIA H100 80GB HBM3")
