"""Restore: the submission with every locked cell of the source back in place.

A student cannot edit a test into passing: test and read-only cells come back from the source by
grade_id (hidden tests with them); the student's solution cells are kept, never filled in.
"""

from __future__ import annotations

import json
from typing import Any

import nbformat

from edu_dl.grading.nbgrader import BEGIN_HIDDEN, grade_id, is_locked, is_solution
from edu_dl.grading.notebooks import Notebook


def restore(submitted: Notebook, source: Notebook) -> tuple[Notebook, list[str]]:
    """The submission with every locked cell of the source back in place; returns (nb, notes).

    Locked cells (tests with their hidden region, read-only setup) are replaced by the source's
    cell with the same grade_id; deleted ones are inserted after their source predecessor.
    Solution cells are the student's, and are never filled in from the source.
    """
    locked = {grade_id(c): c for c in source.cells if grade_id(c) and is_locked(c)}
    notes: list[str] = []
    cells = []
    for cell in submitted.cells:
        gid = grade_id(cell)
        if gid in locked:
            original = locked[gid]
            if cell.get("source") != original.source.split(BEGIN_HIDDEN)[0].rstrip() and \
                    cell.get("source") != original.source:
                notes.append(f"cell {gid!r} was edited; restored from the source")
            cell = copy_cell(original)
        elif cell.get("cell_type") == "code":
            cell = copy_cell(cell)
        cells.append(cell)
    present = [grade_id(c) for c in cells]
    for position, original in enumerate(source.cells):
        gid = grade_id(original)
        if not gid or gid not in locked or gid in present:
            continue
        notes.append(f"cell {gid!r} was missing; restored from the source")
        before = [grade_id(c) for c in source.cells[:position]]
        anchor = next((present.index(b) for b in reversed(before) if b in present), -1)
        cells.insert(anchor + 1, copy_cell(original))
        present.insert(anchor + 1, gid)
    nb = source.copy()
    nb.cells = cells
    return nb, notes


def copy_cell(cell: Any) -> Any:
    """A deep copy of ``cell``; a code cell comes back fresh (a new id, no outputs, no execution
    count) with its source and metadata."""
    if cell.get("cell_type") != "code":
        return nbformat.from_dict(json.loads(json.dumps(cell)))
    new = nbformat.v4.new_code_cell(cell.get("source", ""))
    new.metadata = nbformat.from_dict(json.loads(json.dumps(cell.get("metadata", {}))))
    return new


def is_other_exercise(submitted: Notebook, source: Notebook) -> bool:
    """True when the submission shares no graded or solution cell id with its source."""
    ids = {grade_id(c) for c in source.cells if grade_id(c) and (is_solution(c) or is_locked(c))}
    return bool(ids) and not ids & {grade_id(c) for c in submitted.cells}
