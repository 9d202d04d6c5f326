"""The submissions folder as the grader reads it: names, notebooks and ``timestamp.txt``.

Nothing is followed: a link is refused, a FIFO never blocks (O_NONBLOCK), a size is checked on
the open file and no more than the limit is read. A walk looks at a bounded number of entries.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import datetime
from pathlib import Path

from ..model import Refused
from ..policy import parse_time

MB = 1 << 20
TIMESTAMP = "timestamp.txt"  # nbgrader's, beside the submitted notebooks
MAX_TIMESTAMP_BYTES = 256
# Tool folders that are never a student. Any other name is one, a leading dot or not.
IGNORED = frozenset({".ipynb_checkpoints", "__pycache__", ".git", ".hg", ".svn", ".DS_Store"})
MAX_WALK = 10_000  # entries looked at in one student's folder
MAX_DEPTH = 4  # folders below a student's


def read_bounded(path: Path, max_bytes: int,
                 limit: str = "for one notebook (--max-notebook-mb)") -> bytes:
    """The file's bytes, never through a link, never from anything but a regular file.

    O_NOFOLLOW refuses a link planted after collecting; O_NONBLOCK keeps a FIFO from hanging the
    grader; the size is checked on the open file, and no more than the limit is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise Refused(f"{path.name}: not read ({reason})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path.name}: not a regular file; not read")
        if st.st_size > max_bytes:
            raise Refused(f"{path.name} is {st.st_size / MB:.1f} MB, over the limit of "
                          f"{max_bytes / MB:g} MB {limit}; not read")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"{path.name} grew past the limit of {max_bytes / MB:g} MB while read")
    return data


def read_timestamp(folder: Path) -> datetime | None:
    """The submission time nbgrader recorded in ``folder/timestamp.txt``; None if there is
    none or it cannot be read (bounded, never through a link, never a FIFO)."""
    try:
        fd = os.open(folder / TIMESTAMP, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EACCES):
            raise
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        data = f.read(MAX_TIMESTAMP_BYTES + 1)
    if len(data) > MAX_TIMESTAMP_BYTES:
        return None
    try:
        return parse_time(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


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
