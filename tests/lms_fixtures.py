"""Canvas and Moodle downloads as these tests assume the LMSs write them (no real export was at
hand: each assumption is named in site/instructors.md's "Canvas and Moodle" section).

Archives are generated, never stored: a zip with members of given names and bytes, and the
hostile members ``zipfile`` will not write (raw non-UTF-8 names, links, devices, corrupt data)
made by editing the bytes it wrote.
"""

from __future__ import annotations

import csv
import functools
import io
import stat
import struct
import warnings
import zipfile
from pathlib import Path

import nbformat
from hostile import corpus

MINI = corpus.EXERCISE  # "02_mini": the tiny two-part exercise of the hostile corpus


@functools.cache
def notebook(kind: str = "good") -> bytes:
    """The corpus's solved notebook ("good"), its half-rate mistake ("wrong") or the stub."""
    nb = corpus.student(solved=kind != "stub")
    if kind == "wrong":
        corpus.WRONG(nb)
    return nbformat.writes(nb).encode()


def write_zip(path: Path, members: list[tuple[str, bytes]], *,
              modes: dict[str, int] | None = None, dates: dict[str, tuple[int, ...]] | None = None,
              methods: dict[str, int] | None = None) -> Path:
    """A zip of ``members`` in order (a name may repeat); ``modes`` gives a member a Unix
    file type and mode (a link, a device), as zip tools on Unix record it; ``dates`` its
    modification time (default 2026-03-01 12:00); ``methods`` its compression (default
    deflate)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate name: wanted here
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in members:
                info = zipfile.ZipInfo(name, (dates or {}).get(name, (2026, 3, 1, 12, 0, 0)))
                info.compress_type = (methods or {}).get(name, zipfile.ZIP_DEFLATED)
                info.create_system = 3
                info.external_attr = ((modes or {}).get(name, stat.S_IFREG | 0o644)) << 16
                zf.writestr(info, data)
    return path


def rename_raw(path: Path, placeholder: str, raw: bytes) -> None:
    """Give a member a name of raw bytes (not UTF-8, no UTF-8 flag), as zip tools on a
    non-UTF-8 system write it: ``placeholder`` (ASCII, as long) is replaced in place."""
    assert len(placeholder.encode()) == len(raw)
    data = path.read_bytes()
    assert data.count(placeholder.encode()) == 2  # the local header and the central directory
    path.write_bytes(data.replace(placeholder.encode(), raw))


def declare_size(path: Path, name: str, size: int) -> None:
    """Make a member's headers (local and central) claim ``size`` uncompressed bytes: a zip
    bomb that lies about what it holds."""
    data = bytearray(path.read_bytes())
    local, central = (i for i in range(len(data)) if data.startswith(name.encode(), i))
    assert data[local - 30:local - 26] == b"PK\x03\x04"
    assert data[central - 46:central - 42] == b"PK\x01\x02"
    data[local - 8:local - 4] = struct.pack("<I", size)  # at 22 of the 30-byte header
    data[central - 22:central - 18] = struct.pack("<I", size)  # at 24 of the 46-byte one
    path.write_bytes(bytes(data))


def csv_file(path: Path, header: list[str], lines: list[list[str]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(lines)
    path.write_text(buffer.getvalue())
    return path


def read_csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as f:
        return list(csv.reader(f))


ROSTER_HEADER = ["id", "first_name", "last_name", "email", "canvas_id", "sis_user_id",
                 "sis_login_id", "section", "id_number"]
