"""The grader's data: exercises, jobs, gradebook rows, the batch summary, safe file names.

Shared by ``grade`` (which makes them) and ``report`` (which writes them out), so that ``report``
needs nothing from ``grade`` and the two import no cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .notebooks import Notebook


@dataclass
class Row:
    student: str
    exercise: str
    part: str
    points: float
    max_points: float
    status: str
    message: str
    sandbox: str = "bwrap"


@dataclass
class Exercise:
    """One source notebook: its cells by grade_id and the parts its graded cells check."""

    name: str
    notebook: Notebook
    digest: str
    parts: list[tuple[str, str]] = field(default_factory=list)  # (part id, test cell grade_id)


@dataclass
class Job:
    student: str
    exercise: Exercise
    path: Path | None  # None: nothing submitted
    assignment: str  # nbgrader's assignment folder (the exercise name in the flat layout)


@dataclass
class Summary:
    rows: list[Row]
    graded: int  # submissions run this time
    reused: int  # unchanged since the last run
    seconds: float
    isolated: bool
    problem: str = ""


def safe_file_name(name: str) -> str:
    """A student's or assignment's name as one harmless path component."""
    return re.sub(r"[^A-Za-z0-9_.@+-]", "_", name) or "_"
