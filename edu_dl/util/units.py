"""Sizes as people read them: bytes in binary units (KiB, MiB, GiB)."""

from __future__ import annotations

KiB, MiB, GiB = 2**10, 2**20, 2**30


def format_bytes(n: float, spec: str = ".2f") -> str:
    """Bytes in binary units: '512 B', '1.50 KiB', '2.25 GiB'.

    ``spec`` formats the number of units ('.3g': three significant digits, '1.5 KiB');
    fewer than 1 KiB is a whole number of bytes.
    """
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:{spec}} {unit}"
    return f"{n:.0f} B"
