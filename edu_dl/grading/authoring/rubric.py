"""A rubric for a cell graded by hand: what a person awards points for, written by the instructor.

A written answer or a task (nbgrader's manually graded cells) may carry one in its source cell's
metadata, ``edu_dl.rubric``: a list of criteria, each worth some of the cell's points, that add up
to exactly the cell's points::

    "metadata": {"nbgrader": {"grade": true, "solution": true, "grade_id": "report",
                              "points": 4, ...},
                 "edu_dl": {"rubric": [
                     {"points": 2, "criterion": "names the step that took most of the time"},
                     {"points": 2, "criterion": "says what a GPU would change, and why"}]}}

It stays with the source: the student version leaves every cell's ``edu_dl`` metadata out
(``nbgrader.student_version``), since a rubric often names what a good answer contains. The
person who grades sees it: in ``manual.csv``'s ``rubric`` column and beside the answer in
``edu-dl mark``. It never grades anything itself; the points stay the person's.

The source is the instructor's, but a typo must not reach a grading session: :func:`read`
refuses a malformed rubric with one sentence naming the notebook, the cell and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edu_dl.grading.nbgrader import AssignError, classify, grade_id

KEY = "rubric"  # in a cell's metadata.edu_dl
MAX_CRITERIA = 20
MAX_CRITERION_CHARS = 500
EXAMPLE = ('"edu_dl": {"rubric": [{"points": 2, "criterion": "names the slowest step"}, '
           '{"points": 1, "criterion": "..."}]}')


class RubricError(AssignError):
    """A source cell's rubric that cannot be shown to a person grading: where, and the fix."""


@dataclass(frozen=True)
class Criterion:
    """Something a person awards ``points`` for."""

    points: float
    criterion: str


def read(cell: Mapping[str, Any], where: str) -> tuple[Criterion, ...]:
    """The cell's rubric (its metadata ``edu_dl.rubric``), () where it has none; RubricError,
    naming ``where`` (the notebook and the cell), when it is malformed, sits on a cell no person
    grades, or does not add up to the cell's points."""
    meta = cell.get("metadata", {}).get("edu_dl", {})
    raw = meta.get(KEY) if isinstance(meta, Mapping) else None
    if raw is None:
        return ()
    graded = classify(cell)  # type: ignore[arg-type]

    def refuse(problem: str) -> RubricError:
        return RubricError(f"{where}: its metadata edu_dl.rubric {problem}; write it as "
                           f"{EXAMPLE}")

    if graded is None or graded.kind not in ("answer", "task"):
        raise refuse("is on a cell no person grades (a rubric belongs to a graded answer or "
                     "a task)")
    if not isinstance(raw, list) or not raw:
        raise refuse("is not a list of criteria")
    if len(raw) > MAX_CRITERIA:
        raise refuse(f"has {len(raw)} criteria, over the {MAX_CRITERIA} a person can weigh")
    criteria = []
    for number, item in enumerate(raw, start=1):
        if not isinstance(item, Mapping) or set(item) != {"points", "criterion"}:
            raise refuse(f"has criterion {number} that is not an object with exactly "
                         "\"points\" and \"criterion\"")
        value, text = item["points"], item["criterion"]
        number_like = isinstance(value, int | float) and not isinstance(value, bool)
        if not number_like or not math.isfinite(value) or value <= 0:
            raise refuse(f"gives criterion {number} points={value!r}: a number above 0")
        # Whitespace (a line break in the JSON) becomes one space; any other control
        # character (a terminal escape) is refused.
        line = " ".join(text.split()) if isinstance(text, str) else ""
        if not line or len(line) > MAX_CRITERION_CHARS or not line.isprintable():
            raise refuse(f"gives criterion {number} a text that is not one printable line of "
                         f"1 to {MAX_CRITERION_CHARS} characters")
        criteria.append(Criterion(float(value), line))
    total = sum(c.points for c in criteria)
    if not math.isclose(total, graded.points, rel_tol=0, abs_tol=1e-9):
        raise refuse(f"adds up to {total:g} points, but the cell is worth {graded.points:g}")
    return tuple(criteria)


def of_notebook(nb: Any, where: str) -> dict[str, tuple[Criterion, ...]]:
    """grade_id -> rubric, for every cell of the source notebook ``nb`` that has one."""
    found = {}
    for index, cell in enumerate(nb.cells):
        criteria = read(cell, f"{where}: cell {index} ({grade_id(cell) or 'no grade_id'})")
        if criteria:
            found[str(grade_id(cell))] = criteria
    return found


def as_text(criteria: tuple[Criterion, ...]) -> str:
    """One line for a sheet: "2 pts: names the slowest step | 1 pt: ..." ("" for none)."""
    return " | ".join(f"{c.points:g} pt{'' if c.points == 1 else 's'}: {c.criterion}"
                      for c in criteria)
