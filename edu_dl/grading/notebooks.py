"""Notebook files: reading the instructor's, writing the grader's (nbformat I/O).

A notebook a student or a sandbox wrote is never read here: ``trust.notebook`` parses those.
nbgrader's metadata and markers are in ``nbgrader.py``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from edu_dl.grading.protocol import skip_slow_optional_imports

# Before nbformat, whichever module or command reaches it first through here (edu-dl's own
# parser does): its validator would otherwise compile rfc3987_syntax's grammars, 1-2 s.
skip_slow_optional_imports()

import nbformat  # noqa: E402

Notebook = nbformat.NotebookNode
Cell = nbformat.NotebookNode


class NotebookError(ValueError):
    """A notebook that cannot be read, or whose markers or metadata are malformed."""


def read_notebook(path: str | Path) -> Notebook:
    """Read an .ipynb file as nbformat 4; a clear NotebookError naming the file otherwise."""
    path = Path(path)
    try:
        return nbformat.read(path, as_version=4)
    except FileNotFoundError:
        raise NotebookError(f"{path}: no such notebook") from None
    except Exception as exc:  # JSON errors, wrong nbformat, binary junk
        raise NotebookError(f"{path}: not a readable Jupyter notebook ({type(exc).__name__}: "
                            f"{exc})") from None


def notebook_bytes(nb: Notebook) -> bytes:
    """The exact bytes nbformat.write would produce (indent 1, trailing newline)."""
    text = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode("utf-8")


def umask() -> int:
    """This process's umask, read without setting it: Linux shows it in /proc/self/status, where
    ``os.umask`` can only read it by changing it, for a moment, under every other thread."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


def write_atomic(path: str | Path, data: bytes, *, mode: int | None = None,
                 durable: bool = False) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file.

    The file gets the mode ``open()`` would give it (0o666 less the umask: 0o644 under the usual
    022, as nbgrader's files), not the temporary file's owner-only 0o600: what ``assign`` releases
    and the feedback pages are for students and web servers to read. ``mode`` gives another (a
    file of grades a person keeps), and ``durable`` flushes the data to disk before the rename,
    so a crash leaves the old file or the new one. A secret is written by code of its own,
    owner-only whatever the umask."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_if_changed(path: str | Path, data: bytes) -> bool:
    """write_atomic, unless the file holds these bytes already (it keeps its time stamp: a
    student's page that did not change is not touched); returns whether it wrote."""
    try:
        if Path(path).read_bytes() == data:
            return False
    except OSError:
        pass
    write_atomic(path, data)
    return True


def write_notebook(nb: Notebook, path: str | Path) -> None:
    """Write ``nb`` to ``path`` atomically, byte for byte as nbformat.write would."""
    write_atomic(path, notebook_bytes(nb))
