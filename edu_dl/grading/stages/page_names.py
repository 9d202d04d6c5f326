"""Where a notebook's feedback page lies and how its graded cells are anchored.

Kept apart from feedback.py, which renders the pages with nbconvert and bleach (a third of a
second to import): the gradebooks, manual.csv and ``edu-dl validate`` name pages without
rendering any.
"""

from __future__ import annotations

import re

from edu_dl.grading.model import safe_file_name

PAGES = "feedback"  # below --out and below an nbgrader course folder


def page_path(student: str, assignment: str, exercise: str) -> str:
    """Where a notebook's page lies, relative to --out (and to an nbgrader course folder)."""
    return (f"{PAGES}/{safe_file_name(student)}/{safe_file_name(assignment)}/"
            f"{safe_file_name(exercise)}.html")


def anchor(cell_id: str) -> str:
    """The page's anchor of a graded cell's banner (a link target: letters, digits, _.-)."""
    return "grade-" + re.sub(r"[^A-Za-z0-9_.-]", "_", cell_id)
