"""format_bytes: binary units, the caller's number format, whole bytes below 1 KiB."""

from __future__ import annotations

import pytest

from edu_dl.util.units import GiB, KiB, MiB, format_bytes


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
    (3 * MiB, "3.00 MiB"), (2.25 * GiB, "2.25 GiB"), (4096 * GiB, "4096.00 GiB"),
    (-1536, "-1.50 KiB"),
])
def test_format_bytes_in_binary_units(n: float, text: str) -> None:
    assert format_bytes(n) == text


def test_format_bytes_takes_the_number_format() -> None:
    # bench transfer's tables: three significant digits
    assert format_bytes(1536, ".3g") == "1.5 KiB"
    assert format_bytes(3 * GiB + 100 * MiB, ".3g") == "3.1 GiB"
    assert format_bytes(100 * KiB, ".3g") == "100 KiB"
