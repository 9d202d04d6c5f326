"""Graded cells that no Part judges, scored as nbgrader 0.9 scores them (``utils.determine_grade``).

An nbgrader course grades with assert-style test cells: the cell runs after the student's code,
and its outputs decide. :func:`determine_grade` follows nbgrader 0.9.6 rule for rule:

- a graded solution cell (code or Markdown) whose checksum is the released one (untouched): 0;
  otherwise it needs a person (None);
- a code test cell: the first output that is an error or a stderr stream gives 0; the first
  ``execute_result`` before those gives partial credit (``partial_grade``); no such output: full;
- any other graded cell (Markdown, not a solution): needs a person (None).

Task cells are never scored automatically. The outputs come from the executed notebook, which
the student's own code produced inside the sandbox: as under nbgrader, a student can fool an
assert cell (the check/Part path is the one judged outside).
"""

from __future__ import annotations

from typing import Any

from . import notebooks as nbs
from .model import GradedCell


class PartialCreditError(ValueError):
    """nbgrader raises (and stops) on partial credit above the cell's points."""


def classify(cell: nbs.Cell) -> GradedCell | None:
    """The graded cell a source cell is, or None (ungraded, or judged by a Part's check())."""
    gid = nbs.grade_id(cell)
    if gid is None:
        return None
    meta = nbs.nbgrader(cell)
    if nbs.is_grade(cell):
        if cell.cell_type == "code" and not nbs.is_solution(cell):
            if nbs.check_calls(str(cell.get("source", ""))):
                return None  # a Part's test cell
            return GradedCell(gid, nbs.points(cell), "tests")
        return GradedCell(gid, nbs.points(cell), "answer")
    if meta.get("task"):
        return GradedCell(gid, float(meta.get("points", 0.0) or 0.0), "task")
    return None


def partial_grade(text: Any, max_points: float) -> float:
    """nbgrader's get_partial_grade on an execute_result's text/plain."""
    if not text:
        raise PartialCreditError("the cell's result has no text/plain")
    if isinstance(text, list):
        if len(text) > 1:
            return max_points
        text = text[0]
    try:
        grade = float(text)
    except (ValueError, TypeError):
        return max_points
    if grade >= 0.0:
        if grade > max_points:
            raise PartialCreditError(f"partial credit {grade:g} is greater than the cell's "
                                     f"{max_points:g} points")
        return grade
    return max_points  # negative or NaN: nbgrader gives full credit (with a warning)


def determine_grade(cell: nbs.Cell, max_points: float, released_checksum: str | None
                    ) -> float | None:
    """nbgrader's determine_grade: points, or None where a person must grade.

    ``cell`` carries the source's nbgrader flags (restored); ``released_checksum`` is the
    checksum of the cell in the student version (what OverwriteCells writes back)."""
    if nbs.is_solution(cell):
        if released_checksum is not None and released_checksum == nbs.checksum(cell):
            return 0.0
        return None
    if cell.get("cell_type") == "code":
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error" or (kind == "stream" and output.get("name") == "stderr"):
                return 0.0
            if kind == "execute_result":
                data = output.get("data")
                if not isinstance(data, dict):
                    return max_points
                return partial_grade(data.get("text/plain"), max_points)
        return max_points
    return None


def released_checksums(nb: nbs.Notebook) -> dict[str, str]:
    """grade_id -> nbgrader checksum of each graded solution cell as released to students."""
    from .assign import student_version

    try:
        released = student_version(nb)
    except nbs.NotebookError:
        return {}
    return {str(nbs.grade_id(c)): str(nbs.nbgrader(c)["checksum"]) for c in released.cells
            if nbs.is_solution(c) and nbs.is_grade(c) and "checksum" in nbs.nbgrader(c)}
