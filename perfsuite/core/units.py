"""How a step time and a number of bytes read where a person reads them: one rule for every table,
message and explanation. Pure: no torch, no pytest."""

from __future__ import annotations

UNITS = ((1, "B", 0), (2**10, "KiB", 1), (2**20, "MiB", 2))
"""The units a number of bytes reads in, smallest first: (bytes in one, name, decimal places)."""


def format_time(value: float, unit: str) -> str:
    return f"{value:.3f}× calibration" if unit == "calibrated" else f"{value * 1e3:,.2f} ms"


def byte_unit(change: float) -> tuple[int, str, int]:
    """The unit ``change`` bytes (a size, or a change of one) read in, and its places: MiB (two); below a
    hundredth of a MiB, where MiB would read ``0.00``, KiB (one); below a KiB, bytes (nothing:
    ``0.00 MiB``)."""
    if abs(change) >= 2**20 / 100 or change == 0:
        return UNITS[2]
    return UNITS[1] if abs(change) >= 2**10 else UNITS[0]


def format_bytes(value: float, *, signed: bool = False) -> str:
    """Bytes in :func:`byte_unit`'s unit (``1,234.56 MiB``, ``4.0 KiB``, ``512 B``; signed: ``+1.50 MiB``):
    every size and change of bytes a person reads."""
    scale, unit, places = byte_unit(value)
    return f"{value / scale:{'+' if signed else ''},.{places}f} {unit}"


def format_byte_change(change: float) -> str:
    """A change of bytes, signed, in :func:`byte_unit`'s unit: ``+4.0 KiB``, ``-1.50 MiB``."""
    return format_bytes(change, signed=True)


def format_byte_range(a: float, b: float) -> str:
    """``2.00 → 5.00 MiB``, ``1,024.0 → 1,026.0 KiB``: both sides in the unit their change reads in
    (:func:`byte_unit`; two equal sides, in the unit of their size), a larger one where a side would
    need a million of it (a change of 500 B on a GiB reads ``1,024.00 → 1,024.00 MiB``)."""
    largest = max(abs(a), abs(b))
    at = UNITS.index(byte_unit(b - a if a != b else largest))
    while at < len(UNITS) - 1 and largest / UNITS[at][0] >= 1e6:
        at += 1
    scale, unit, places = UNITS[at]
    return f"{a / scale:,.{places}f} → {b / scale:,.{places}f} {unit}"
