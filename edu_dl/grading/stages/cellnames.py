"""A cell named as a student finds it in JupyterLab: by its first line and the heading above it.

JupyterLab numbers no cell (the ``[8]`` beside a code cell is its execution count, which changes
with every run), but it shows each cell's first line (all of it when the cell is collapsed) and
the Markdown headings in its table of contents. So a report says
``the cell "def mul_backward(dout, x, y):" under "1. Warm-up: two gates"``, never "code cell 8".

The text comes from the student's notebook: it is cut short here, and escaped for a terminal where
it is printed (``trust.text.say``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from edu_dl.grading.nbgrader import check_calls, grade_id, is_grade, is_solution
from edu_dl.speed.tasks import speed_row

MAX_NAME = 60  # characters of a first line or a heading shown
MAX_LINE = 300  # characters of a line looked at for a heading (no regex runs on a huge line)
HEADING = re.compile(r"#{1,6}[ \t]+(\S.*)")


def _source(cell: Any) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_NAME else text[:MAX_NAME - 3] + "..."


def first_line(cell: Any) -> str:
    """The cell's first line that holds something, as JupyterLab shows a collapsed cell."""
    return _short(next((line[:MAX_LINE] for line in _source(cell).splitlines() if line.strip()),
                       ""))


def last_heading(cell: Any) -> str:
    """The last Markdown heading in ``cell`` ('' if none), without its #s: the section that the
    cells after it sit in, as JupyterLab's table of contents shows it."""
    if cell.get("cell_type") != "markdown":
        return ""
    found = ""
    for line in _source(cell).splitlines():
        match = HEADING.match(line[:MAX_LINE].strip())
        if match:
            found = _short(match.group(1).rstrip("# \t"))
    return found


def sections(cells: Sequence[Any]) -> list[str]:
    """For each cell, the heading of the section it sits in (the last one at or above it)."""
    found, current = [], ""
    for cell in cells:
        current = last_heading(cell) or current
        found.append(current)
    return found


def describe(cells: Sequence[Any], index: int, section: Sequence[str] | None = None) -> str:
    """'the cell "first line" under "heading"': a code cell by its first line, a Markdown cell
    (a written answer) by the heading above it (its own text may change). ``section``: what
    :func:`sections` gives for ``cells``, when many cells are named."""
    section = sections(cells) if section is None else section
    cell = cells[index]
    markdown = cell.get("cell_type") == "markdown"
    above = section[index - 1] if markdown and index > 0 else "" if markdown else section[index]
    under = f' under "{above}"' if above else ""
    if markdown:
        return f"the Markdown cell{under}" if under else "a Markdown cell"
    line = first_line(cell)
    imported = package_import(cell)
    if imported:  # the answer is in the student's own package, which this cell imports
        return f'{imported}, imported by the cell "{line}"{under}'
    return (f'the cell "{line}"' if line else "an empty cell") + under


# A locked cell that imports the student's answer from their own package (issue 39):
# "from mytorch.tape import Tape  # yours, in mytorch/tape.py".
PACKAGE_IMPORT = re.compile(r"from[ \t]+([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)[ \t]+import[ \t]+"
                            r"([\w, \t]+?)[ \t]*(?:#.*)?$")


def package_import(cell: Any) -> str:
    """'mytorch/tape.py (Tape)' where ``cell`` is a locked code cell whose one line imports
    from a module of a package other than edu_dl; '' otherwise."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    lines = [line for line in _source(cell)[:MAX_LINE].splitlines() if line.strip()]
    if cell.get("cell_type") != "code" or not isinstance(meta, dict) or \
            not meta.get("locked") or is_grade(cell) or len(lines) != 1:
        return ""
    found = PACKAGE_IMPORT.match(lines[0].strip())
    if not found or found[1] == "edu_dl":
        return ""
    path = found[1] + found[2].replace(".", "/") + ".py"
    return f"{path} ({', '.join(name.strip() for name in found[3].split(','))})"


def answer_index(cells: Sequence[Any], index: int) -> int:
    """Where the student writes the answer a graded cell judges: a test cell checks the solution
    cell before it (nbgrader's order), or what the locked cell before it imports from the
    student's own package; any other graded cell is its own answer."""
    cell = cells[index]
    if not (is_grade(cell) and not is_solution(cell)):
        return index
    return next((j for j in range(index - 1, -1, -1)
                 if is_solution(cells[j]) or package_import(cells[j])), index)


def row_cells(cells: Sequence[Any]) -> dict[str, int]:
    """For each gradebook row's part (a check() part id, its speed row, or a graded cell's
    grade_id), the index of the cell that holds the student's answer to it."""
    found: dict[str, int] = {}
    for index, cell in enumerate(cells):
        gid = grade_id(cell)
        if gid is None:
            continue
        answer = answer_index(cells, index)
        found.setdefault(gid, answer)
        if cell.get("cell_type") == "code":
            for part_id in check_calls(_source(cell)):
                found.setdefault(part_id, answer)
                found.setdefault(speed_row(part_id), answer)
    return found
