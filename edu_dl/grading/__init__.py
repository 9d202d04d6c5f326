"""Exercises and auto-grading: ``check`` for students, ``assign`` / ``validate`` / ``grade`` for
instructors. nbgrader's markers and metadata; no Docker, no server.

In an exercise notebook: ``from edu_dl.grading import check`` and ``check("ex08.relu_backward",
relu_backward)``.

Rooms by role (issue 42), bottom first; each imports only its own and those below:
``trust/`` (every byte a student or a sandbox wrote, parsed strictly), the sandbox (``sandbox``,
``cgroups`` and what runs inside it: ``runner``, ``speed_driver``), ``authoring/`` (what an
instructor writes: parts, hints, the release), ``stages/`` (one submission: load, prepare, run,
receive, judge, feedback) and ``term/`` (grade(), validate, gradebooks, hand grades, policies,
reports, the LMS, the commands). At the top beside them: ``protocol``, ``notebooks``, ``model``,
``nbgrader``, ``settings`` and ``cost``, which every room shares, and ``checking``, a student's
``check()``. ``tests/install/test_package_layout.py`` holds the order.
"""

from edu_dl.grading.authoring.spec import (
    Accuracy,
    Part,
    Verdict,
    Withheld,
    default_compare,
    tolerance,
)
from edu_dl.grading.checking import CheckFailed, check

__all__ = ["Accuracy", "CheckFailed", "Part", "Verdict", "Withheld", "check", "default_compare",
           "tolerance"]
