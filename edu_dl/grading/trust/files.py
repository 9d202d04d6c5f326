"""The submissions folder as the grader reads it: names, notebooks, ``timestamp.txt`` and
``submission_secret.txt``.

Nothing is followed: a link is refused, a FIFO never blocks (O_NONBLOCK), a size is checked on
the open file and no more than the limit is read. A walk looks at a bounded number of entries.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

from edu_dl.grading.model import Refused
from edu_dl.grading.trust.bounded import read_bounded

TIMESTAMP = "timestamp.txt"  # nbgrader's, beside the submitted notebooks
MAX_TIMESTAMP_BYTES = 256
SUBMISSION_SECRET = "submission_secret.txt"  # nbgrader's; its release_feedback names pages by it
MAX_SECRET_BYTES = 256
# nbgrader writes secrets.token_hex(64); letters, digits, - and _ allow any token's alphabet.
SECRET = re.compile(rb"[A-Za-z0-9_-]{1,200}\r?\n?")
# Tool folders that are never a student. Any other name is one, a leading dot or not.
IGNORED = frozenset({".ipynb_checkpoints", "__pycache__", ".git", ".hg", ".svn", ".DS_Store"})
MAX_WALK = 10_000  # entries looked at in one student's folder
MAX_DEPTH = 4  # folders below a student's


def parse_time(text: str) -> datetime:
    """An ISO date and time, or nbgrader's '2024-03-01 12:00:00.000000 UTC'; naive = UTC."""
    text = text.strip()
    for suffix in (" UTC", "UTC", "Z"):
        if text.endswith(suffix):
            text = text[: -len(suffix)].strip()
            break
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-23:59 lies past the last UTC moment
        raise ValueError(f"{text!r} is out of the range of dates") from None


def read_timestamp(folder: Path) -> datetime | None:
    """The submission time nbgrader recorded in ``folder/timestamp.txt``; None if there is
    none or it cannot be read (:func:`timestamp_of` says why)."""
    return timestamp_of(folder)[0]


def timestamp_of(folder: Path) -> tuple[datetime | None, str]:
    """(the time in ``folder/timestamp.txt``, in UTC, or None; why it could not be read, or
    '' when there is none or it was read). Bounded, never through a link, never a FIFO."""
    try:
        data = read_bounded(folder / TIMESTAMP, MAX_TIMESTAMP_BYTES, "for a timestamp")
    except Refused as exc:
        if not (folder / TIMESTAMP).exists() and not (folder / TIMESTAMP).is_symlink():
            return None, ""
        return None, str(exc)
    try:
        return parse_time(data.decode("utf-8")), ""
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"{TIMESTAMP}: not a date and time ({str(exc)[:120]})"


def entries(folder: Path) -> list[os.DirEntry[str]]:
    """The folder's entries by name, tool folders (IGNORED) left out."""
    with os.scandir(folder) as it:
        return sorted((e for e in it if e.name not in IGNORED), key=lambda e: e.name)


def notebooks(student: Path) -> list[tuple[Path, str]]:
    """(path, why refused or '') of every *.ipynb under a student's folder, links not followed."""
    found: list[tuple[Path, str]] = []
    todo, seen = [(student, 0)], 0
    while todo:
        folder, depth = todo.pop()
        for entry in entries(folder):
            seen += 1
            if seen > MAX_WALK:
                return sorted(found)
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    todo.append((path, depth + 1))
            elif entry.name.endswith(".ipynb"):
                why = ("a symbolic link; links are never followed" if entry.is_symlink()
                       else "" if entry.is_file(follow_symlinks=False) else "not a regular file")
                refused = f"{path.relative_to(student)} is {why}; not read" if why else ""
                found.append((path, refused))
    return sorted(found)


def read_submission_secret(folder: Path) -> bytes | None:
    """``folder/submission_secret.txt`` as it was written, when it is one token of letters,
    digits, ``-`` and ``_`` (nothing else reaches the feedback folder through it); None
    otherwise or when absent.
    Bounded, never through a link, never a FIFO."""
    try:
        data = read_bounded(folder / SUBMISSION_SECRET, MAX_SECRET_BYTES, "for a secret")
    except Refused:
        return None
    return data if SECRET.fullmatch(data) else None
