"""Reading a file whose size nobody vouches for: never through a link, never more than a limit.

``read_bounded`` reads what a student or a sandbox wrote; ``read_named_file`` reads an
instructor's file named by a command-line flag (a roster, a manual sheet, an LMS download), with
the same guarantees and an error that names the flag.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from edu_dl.grading.model import Refused

MB = 1 << 20


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
            raise Refused(f"{path.name} is {_size(st.st_size, '.1f')}, over the limit of "
                          f"{_size(max_bytes)} {limit}; not read")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"{path.name} grew past the limit of {_size(max_bytes)} while read")
    return data


def _size(n: int, spec: str = "g") -> str:
    return f"{n / MB:{spec}} MB" if n >= MB else f"{n} bytes"



def read_named_file(path: Path, flag: str, max_bytes: int,
                    error: Callable[[str], Exception]) -> bytes:
    """The bytes of the file ``flag`` names (``flag`` as the user typed it, e.g. "--roster"),
    read as :func:`read_bounded` reads; ``error(sentence)`` is raised, naming the flag and the
    file, when it cannot be read or is over ``max_bytes``."""
    try:
        return read_bounded(path, max_bytes, limit=f"for {flag}")
    except Refused as exc:
        raise error(f"{flag}: {exc}") from None
