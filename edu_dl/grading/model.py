"""The grader's data: exercises, jobs, gradebook rows, the batch summary, safe file names.

Every stage of the pipeline (collect, restore, prepare, run, receive, judge, report, batch)
shares these; none of them imports another stage's module for its data.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from edu_dl.grading.notebooks import Notebook, NotebookError


class NothingToGrade(NotebookError):
    """The batch cannot produce a single grade; the message says why and what to do."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a batch: ``saved`` of the ``todo`` submissions to grade were graded and
    kept for the next run; the others were not (nothing cut short is kept). A
    KeyboardInterrupt still, so that no ``except Exception`` takes it for a grader error."""

    def __init__(self, saved: int, todo: int) -> None:
        super().__init__(f"interrupted: {saved} of {todo} submissions graded and saved")
        self.saved, self.todo = saved, todo


class Refused(ValueError):
    """Input the grader will not read or use (a link, an oversized notebook or result, a
    compressed result member); the message says which bound it broke."""


MESSAGE_CAP = 2000  # characters of a gradebook message: a student's exception can be megabytes
# Where a row was judged (the gradebook's "judged" column). Only the first is covered by the
# sandbox's tamper guarantees: an assert cell's outcome is observed inside the student's process.
OUTSIDE = "outside the sandbox (check/Part)"
INSIDE = "inside the sandbox (assert cell)"
BY_HAND = "by hand"
# The status of a row waiting for a person's points (an answer, a task, a borderline speed).
NEEDS = "needs manual grading"
# The message of a part whose cell was skipped because an earlier cell timed out (judge).
AFTER_TIMEOUT = "not run: an earlier cell timed out"
# A graded answer left as released: 0 points, never sent to a person (nbgrader scores it 0).
NOT_ANSWERED = "not answered"


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
    judged: str = OUTSIDE
    answer: str = ""  # a row graded by hand: the student's answer (the task's text), for the sheet
    failed_cases: str = ""  # a check part's failed cases, "2, 5-7 of 7" (judge.case_numbers)
    hint: str = ""  # the hints that recognised a mistake, "2:Transposed" (hints.hint_id)
    reason: str = ""  # why a person overrode the autograded points (manual.merge)

    def __post_init__(self) -> None:
        self.message = cap_text(self.message)
        self.reason = cap_text(self.reason)
        self.answer = cap_text(self.answer, 4 * MESSAGE_CAP)


def cap_text(text: str, limit: int = MESSAGE_CAP) -> str:
    """text, cut to ``limit`` characters with a note saying how much was left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters cut]"


@dataclass(frozen=True)
class GradedCell:
    """A graded cell that no Part judges: an nbgrader test cell ("tests": its asserts run in the
    sandbox and the cell is scored as nbgrader scores it), a graded answer ("answer": a graded
    solution cell, code or Markdown) or a task ("task"); the last two are graded by hand."""

    grade_id: str
    points: float
    kind: str

    @property
    def judged(self) -> str:
        return INSIDE if self.kind == "tests" else BY_HAND


@dataclass(frozen=True)
class Budget:
    """What one run of an exercise's notebook may cost, measured from outside the sandbox: CPU
    seconds of its whole process tree and its peak memory in MB, as the sandbox counts them
    (either may be None: not judged); ``points`` for keeping within it (stages/budget.py)."""

    points: float
    cpu_s: float | None = None
    memory_mb: float | None = None


def budget_row(exercise: str) -> str:
    """The gradebook row of an exercise's budget: '<exercise>.budget'."""
    return f"{exercise}.budget"


@dataclass
class Exercise:
    """One source notebook: its cells by grade_id and what its graded cells grade."""

    name: str
    notebook: Notebook
    digest: str
    parts: list[tuple[str, str]] = field(default_factory=list)  # (part id, test cell grade_id)
    cells: list[GradedCell] = field(default_factory=list)  # graded cells without a check()
    points: dict[str, float] = field(default_factory=dict)  # max points by part id (load_parts)
    checksums: dict[str, str] = field(default_factory=dict)  # grade_id -> released cell's
    released: dict[str, str] = field(default_factory=dict)  # grade_id -> released answer
    files: dict[str, bytes] = field(default_factory=dict)  # beside the source, read-only inside
    specs: dict[str, Any] = field(default_factory=dict)  # part id -> Part (load_parts)
    calls: dict[str, bytes] = field(default_factory=dict)  # part id -> its call=, pickled
    specs_digest: str = ""  # of the part files the specs came from: in the resume key
    speed: dict[str, float] = field(default_factory=dict)  # speed row -> max points (load_parts)
    budget: Budget | None = None  # the notebook's metadata edu_dl.budget (load.read_budget)
    # the student's own package (metadata edu_dl.package, load.read_package_name): the folder
    # of that name beside each submission reaches its sandbox; the source's never does
    package: str = ""
    # grade_id -> the rubric a person grades that cell by (authoring.rubric: Criterion tuples)
    rubrics: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def items(self) -> list[tuple[str, float, str]]:
        """(row name, max points, judged) of every gradebook row this exercise has."""
        return ([(p, self.points.get(p, 0.0), OUTSIDE) for p, _ in self.parts]
                + [(c.grade_id, c.points, c.judged) for c in self.cells]
                + [(row, points, OUTSIDE) for row, points in self.speed.items()]
                + ([(budget_row(self.name), self.budget.points, OUTSIDE)] if self.budget
                   else []))


@dataclass
class Job:
    student: str
    exercise: Exercise
    path: Path | None  # None: nothing submitted
    assignment: str  # nbgrader's assignment folder (the exercise name in the flat layout)
    refused: str = ""  # why the submission is not read at all (a link, not a regular file)
    timestamp: datetime | None = None  # nbgrader's timestamp.txt beside it, in UTC
    timestamp_problem: str = ""  # why a timestamp.txt there could not be read
    # the student's package beside the notebook (Exercise.package), read with it
    # (prepare.submission_bytes): path inside the package -> bytes
    package: dict[str, bytes] = field(default_factory=dict)


def rows_for(job: Job, status: str, message: str, isolation: str) -> list[Row]:
    """One row per gradebook item of the job's exercise, all with the same status: nothing of
    the submission could be judged (missing, refused, a grader error, a worker lost)."""
    return [Row(job.student, job.exercise.name, name, 0.0, points, status, message,
                isolation, judged)
            for name, points, judged in job.exercise.items()]


def timed_out(rows: list[Row]) -> bool:
    """Did this submission's run time out (a cell, or the whole notebook's budget)? What
    ``edu-dl grade --retry-timeouts`` runs again."""
    return any(r.status == "timeout" or (r.status == "not run" and (
        "timed out" in r.message or "time budget" in r.message)) for r in rows)


@dataclass
class Summary:
    rows: list[Row]
    graded: int  # submissions run this time
    reused: int  # unchanged since the last run
    seconds: float
    isolated: bool
    problem: str = ""
    secret: str = ""  # the fingerprint of the grading secret the inputs came from
    notes: list[str] = field(default_factory=list)  # warnings for the summary
    # The grader's own cost (grading.cost.Cost) of each submission graded in this run, and of
    # its feedback page (None: no page made now), by (student, exercise)
    costs: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)
    peak_mb: float = 0.0  # the grader process's resident peak (ru_maxrss)


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
