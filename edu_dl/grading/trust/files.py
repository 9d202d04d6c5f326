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


# A student's own package (an exercise's metadata edu_dl.package), beside the submitted notebook:
# only its Python files, under names a Python import could reach.
PACKAGE_FILES = 200  # .py files in one student's package
PACKAGE_BYTES = 2 * (1 << 20)  # in all
PACKAGE_DEPTH = 4  # folders below the package's own
MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def read_package(folder: Path, max_files: int = PACKAGE_FILES,
                 max_bytes: int = PACKAGE_BYTES, max_walk: int = MAX_WALK) -> dict[str, bytes]:
    """The ``.py`` files of a student's package ``folder``, by path inside it ('nn/layers.py'),
    or {} when there is no such folder. Other files, tool folders (IGNORED) and names no import
    could reach are left out. Refused, naming the path inside the package, for a link, a special
    file, more than ``max_files`` files, more than ``max_bytes`` in all or more than
    ``max_walk`` entries looked at."""
    name = folder.name
    if not folder.is_symlink() and not folder.exists():
        return {}
    if folder.is_symlink() or not folder.is_dir():
        raise Refused(f"{name} is {'a symbolic link' if folder.is_symlink() else 'not a folder'}"
                      "; your package must be a folder of .py files, and links are never "
                      "followed")
    found: dict[str, bytes] = {}
    total, seen, todo = 0, 0, [(folder, 0)]
    while todo:
        here, depth = todo.pop()
        try:
            listed = entries(here)
        except OSError as exc:
            raise Refused(f"{name}/{here.relative_to(folder).as_posix()}: not readable "
                          f"({exc.strerror})") from None
        for entry in listed:
            seen += 1
            if seen > max_walk:
                raise Refused(f"{name}/ holds over {max_walk} entries; not read")
            path = Path(entry.path)
            inside = f"{name}/{path.relative_to(folder).as_posix()}"
            if entry.is_symlink():
                raise Refused(f"{inside} is a symbolic link; links are never followed")
            if entry.is_dir(follow_symlinks=False):
                if MODULE.fullmatch(entry.name) and depth < PACKAGE_DEPTH:
                    todo.append((path, depth + 1))
                continue
            if not entry.name.endswith(".py") or not MODULE.fullmatch(entry.name[:-3]):
                continue
            if not entry.is_file(follow_symlinks=False):
                raise Refused(f"{inside} is not a regular file")
            if len(found) >= max_files:
                raise Refused(f"{name}/ holds over {max_files} Python files; not read")
            try:
                data = read_bounded(path, max_bytes - total, f"left of the {max_bytes >> 20} MB "
                                    f"a package may hold in all")
            except Refused as exc:  # its message starts with the file's own name
                said = str(exc)
                raise Refused(inside + said[len(entry.name):] if said.startswith(entry.name)
                              else f"{inside}: {said}") from None
            total += len(data)
            found[path.relative_to(folder).as_posix()] = data
    return dict(sorted(found.items()))
