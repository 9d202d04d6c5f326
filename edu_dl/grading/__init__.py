"""Exercises and auto-grading: ``check`` for students, ``assign`` / ``validate`` / ``grade`` for
instructors. nbgrader's markers and metadata; no Docker, no server.

In an exercise notebook: ``from edu_dl.grading import check`` and ``check("ex05.relu_backward",
relu_backward)``.
"""

from edu_dl.grading.checking import CheckFailed, check
from edu_dl.grading.spec import Part, Verdict, default_compare, tolerance

__all__ = ["CheckFailed", "Part", "Verdict", "check", "default_compare", "tolerance"]
