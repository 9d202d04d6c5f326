"""Notebook helpers shared by assign, check, validate and grade: nbformat I/O and nbgrader metadata.

The markers and metadata are nbgrader's (schema version 3), so an nbgrader user can take the
notebooks as they are. A marker is any line that contains its text, as in nbgrader.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import nbformat

Notebook = nbformat.NotebookNode
Cell = nbformat.NotebookNode

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
# nbgrader's ClearSolutions.code_stub["python"] and text_stub: the same stubs, the same output.
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"
SCHEMA_VERSION = 3
# A check call in a test cell: check("ex05.relu_backward", relu_backward ...
CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](?P<part>[^"']+)["']""")


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


def parse_notebook(data: bytes, name: str) -> Notebook:
    """A notebook from bytes already read (``name`` only for the message), as read_notebook."""
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # JSON errors, wrong nbformat, binary junk
        raise NotebookError(f"{name}: not a readable Jupyter notebook ({type(exc).__name__}: "
                            f"{str(exc)[:300]})") from None


def notebook_bytes(nb: Notebook) -> bytes:
    """The exact bytes nbformat.write would produce (indent 1, trailing newline)."""
    text = nbformat.writes(nb)
    return (text if text.endswith("\n") else text + "\n").encode("utf-8")


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_notebook(nb: Notebook, path: str | Path) -> None:
    write_atomic(path, notebook_bytes(nb))


# --------------------------------------------------------------------------- nbgrader metadata


def nbgrader(cell: Cell) -> dict[str, Any]:
    """The cell's metadata.nbgrader ({} for an ordinary cell)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_solution(cell: Cell) -> bool:
    return bool(nbgrader(cell).get("solution", False))


def is_grade(cell: Cell) -> bool:
    return bool(nbgrader(cell).get("grade", False))


def is_locked(cell: Cell) -> bool:
    """Locked as nbgrader reads it: solution cells never are; grade cells always are."""
    if is_solution(cell):
        return False
    return is_grade(cell) or bool(nbgrader(cell).get("locked", False))


def grade_id(cell: Cell) -> str | None:
    value = nbgrader(cell).get("grade_id")
    return str(value) if value is not None else None


def points(cell: Cell) -> float:
    return float(nbgrader(cell).get("points", 0.0)) if is_grade(cell) else 0.0


def graded_cells(nb: Notebook) -> list[Cell]:
    return [cell for cell in nb.cells if is_grade(cell)]


def check_calls(source: str) -> list[str]:
    """The part ids named by check("...") calls in a cell's source, in order."""
    return [m.group("part") for m in CHECK_CALL.finditer(source)]


def uses_check(nb: Notebook) -> bool:
    """Does the notebook use edu_dl's check() (an import of edu_dl.grading or a check call in a
    test cell)? If not, it is an nbgrader assignment graded by its cells' outputs."""
    return any(cell.cell_type == "code" and ("edu_dl.grading" in cell.source or (
        is_grade(cell) and check_calls(cell.source))) for cell in nb.cells)


def checksum(cell: Cell) -> str:
    """nbgrader's utils.compute_checksum: md5 of source, type, flags, grade_id and points."""
    m = hashlib.md5()
    for text in (cell.source, cell.cell_type, str(is_grade(cell)), str(is_solution(cell)),
                 str(is_locked(cell)), nbgrader(cell)["grade_id"]):
        m.update(text.encode("utf-8"))
    if is_grade(cell):
        m.update(str(float(nbgrader(cell)["points"])).encode("utf-8"))
    return m.hexdigest()


# --------------------------------------------------------------------------- marker regions


def replace_regions(source: str, begin: str, end: str, stub: str | None,
                    where: str) -> tuple[str, list[str]]:
    """Replace each begin..end region (markers included) by ``stub`` at the begin line's indent.

    ``stub=None`` removes the region. Returns (new source, the indents of the regions found).
    Lines are split on "\\n" exactly as nbgrader does, so the result matches it byte for byte.
    """
    out: list[str] = []
    indents: list[str] = []
    inside = False
    for number, line in enumerate(source.split("\n"), start=1):
        if begin.lstrip("# ") in line:
            if inside:
                raise NotebookError(f"{where}: line {number}: {begin!r} inside another region")
            inside = True
            indent = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
            indents.append(indent)
            if stub is not None:
                out.extend(indent + stub_line for stub_line in stub.split("\n"))
        elif end.lstrip("# ") in line:
            if not inside:
                raise NotebookError(f"{where}: line {number}: {end!r} without {begin!r}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise NotebookError(f"{where}: {begin!r} has no matching {end!r}")
    return "\n".join(out), indents


def clear_solutions(source: str, where: str) -> tuple[str, list[str]]:
    """Solution regions -> nbgrader's code stub; returns (source, region indents)."""
    return replace_regions(source, BEGIN_SOLUTION, END_SOLUTION, CODE_STUB, where)


def remove_hidden_tests(source: str, where: str) -> tuple[str, int]:
    """Drop hidden-test regions; returns (source, number of regions removed)."""
    new, indents = replace_regions(source, BEGIN_HIDDEN, END_HIDDEN, None, where)
    return new, len(indents)
