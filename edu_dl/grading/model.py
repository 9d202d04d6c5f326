"""The grader's data: exercises, jobs, gradebook rows, the batch summary, safe file names.

Shared by ``grade`` (which makes them) and ``report`` (which writes them out), so that ``report``
needs nothing from ``grade`` and the two import no cycle.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .notebooks import Notebook

MESSAGE_CAP = 2000  # characters of a gradebook message: a student's exception can be megabytes


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

    def __post_init__(self) -> None:
        self.message = cap_text(self.message)


def cap_text(text: str, limit: int = MESSAGE_CAP) -> str:
    """text, cut to ``limit`` characters with a note saying how much was left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters cut]"


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
    refused: str = ""  # why the submission is not read at all (a link, not a regular file)


@dataclass
class Summary:
    rows: list[Row]
    graded: int  # submissions run this time
    reused: int  # unchanged since the last run
    seconds: float
    isolated: bool
    problem: str = ""


SAFE_NAME = re.compile(r"[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]{0,99}")
HASHED = re.compile(r".*-[0-9a-f]{10}")


def safe_file_name(name: str) -> str:
    """A student's or assignment's name as one harmless path component, different for every name.

    A plain name (letters, digits, ``_.@+-``, not starting with a dot) stays as it is; any other
    gets its unsafe characters replaced and a hash of the real name appended, so '李娜' and '王伟'
    never share a file. A plain name never ends like a hashed one, so no name can take another's.
    """
    if SAFE_NAME.fullmatch(name) and not HASHED.fullmatch(name):
        return name
    readable = re.sub(r"[^A-Za-z0-9_.@+-]", "_", name)[:60].lstrip(".") or "_"
    return f"{readable}-{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:10]}"
