"""Every file an instructor names on the command line is read by one bounded reader: no link is
followed, a FIFO never blocks, nothing over the limit is read, and the error names the flag."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edu_dl.grading.term import manual, policy
from edu_dl.grading.term.lms import export, metadata, roster

# (flag in the message, the reader, the module and name of its limit)
READERS: list[tuple[str, Callable[[Path], Any], Any, str]] = [
    ("--roster", policy.read_roster, policy, "MAX_ROSTER_BYTES"),
    ("--extensions", policy.read_extensions, policy, "MAX_EXTENSIONS_BYTES"),
    ("--manual", manual.read_sheet, manual, "MAX_SHEET_BYTES"),
    ("--roster", roster.read_lms_roster, roster, "MAX_ROSTER_BYTES"),
    ("--metadata", metadata._read, metadata, "MAX_METADATA_BYTES"),
    ("the grades", export.read_grades, export, "MAX_GRADES_BYTES"),
]
IDS = ["roster", "extensions", "manual", "lms-roster", "lms-metadata", "lms-grades"]


# What a refused instructor file raises: the policy's error or the manual sheet's.
ERRORS: tuple[type[Exception], ...] = (policy.PolicyError, manual.ManualSheetError)


@pytest.mark.parametrize(("flag", "read", "module", "limit"), READERS, ids=IDS)
def test_a_link_is_refused_and_named(tmp_path: Path, flag: str, read: Callable[[Path], Any],
                                     module: Any, limit: str) -> None:
    target = tmp_path / "real.csv"
    target.write_text("id,student,due\n")
    link = tmp_path / "grades.csv"
    link.symlink_to(target)
    with pytest.raises(ERRORS) as raised:
        read(link)
    assert str(raised.value).startswith(flag) and "symbolic link" in str(raised.value)


@pytest.mark.parametrize(("flag", "read", "module", "limit"), READERS, ids=IDS)
def test_a_file_over_the_limit_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           flag: str, read: Callable[[Path], Any], module: Any,
                                           limit: str) -> None:
    monkeypatch.setattr(module, limit, 64)
    big = tmp_path / "grades.csv"
    big.write_text("id\n" + "x" * 1000 + "\n")
    with pytest.raises(ERRORS) as raised:
        read(big)
    assert str(raised.value).startswith(flag) and "over the limit of 64 bytes" in str(raised.value)


@pytest.mark.parametrize(("flag", "read", "module", "limit"), READERS, ids=IDS)
def test_a_fifo_does_not_block(tmp_path: Path, flag: str, read: Callable[[Path], Any],
                               module: Any, limit: str) -> None:
    fifo = tmp_path / "grades.csv"
    os.mkfifo(fifo)
    with pytest.raises(ERRORS) as raised:
        read(fifo)  # a plain open() would wait here for a writer that never comes
    assert str(raised.value).startswith(flag) and "not a regular file" in str(raised.value)
