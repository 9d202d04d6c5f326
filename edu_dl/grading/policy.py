"""What is due, by when, and for whom: scope, due dates, late penalties and the roster.

- Scope: only the source notebooks the instructor grades are due (``--exercise``, or else every
  source notebook that at least one student submitted); nothing else is ever "missing".
- Dates: nbgrader's ``timestamp.txt`` beside a submission (read by ``trust.files``), a due
  date (``--due``) and a late policy (``--late none|zero|per-hour:P``), applied as nbgrader's
  LateSubmissionPlugin applies its ``none``/``zero``/``subtract`` methods: per started hour
  late, P points off, never more than the score. A penalty is a row of its own in grades.csv
  (negative points), and fills nbgrader_grades.csv's timestamp, duedate and
  late_submission_penalty.
- Roster: a CSV with nbgrader's student columns (id, first_name, last_name, email): its students
  are due every graded exercise (so a student who submitted nothing has "missing" rows), and its
  names and e-mails fill nbgrader_grades.csv.

The roster is the instructor's; a student's timestamp.txt is read in ``trust.files``.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .model import Job, Row

MAX_ROSTER_BYTES = 8 << 20
LATE = "late penalty"  # the part name of a penalty row
POLICY = "late policy"  # its "judged" column


class PolicyError(ValueError):
    """A due date, policy or roster the grader cannot use; the message says how to fix it."""


def parse_time(text: str) -> datetime:
    """An ISO date and time, or nbgrader's '2024-03-01 12:00:00.000000 UTC'; naive = UTC."""
    text = text.strip()
    for suffix in (" UTC", "UTC", "Z"):
        if text.endswith(suffix):
            text = text[: -len(suffix)].strip()
            break
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-23:59 lies past the last UTC moment
        raise ValueError(f"{text!r} is out of the range of dates") from None


@dataclass(frozen=True)
class LatePolicy:
    """nbgrader's late-submission methods: none, zero, or ``per_hour`` points per started hour."""

    method: str = "none"  # none | zero | per-hour
    per_hour: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LatePolicy:
        text = text.strip().lower()
        if text in ("none", "zero"):
            return cls(text)
        if text.startswith("per-hour:"):
            try:
                points = float(text.split(":", 1)[1])
            except ValueError:
                points = -1.0
            if math.isfinite(points) and points >= 0:
                return cls("per-hour", points)
        raise PolicyError(f"--late {text!r}: expected none, zero or per-hour:POINTS "
                          "(e.g. per-hour:0.5)")

    def penalty(self, score: float, seconds_late: float) -> float:
        """Points taken off a score submitted ``seconds_late`` after the due date."""
        if seconds_late <= 0 or self.method == "none":
            return 0.0
        penalty = score if self.method == "zero" else \
            math.ceil(seconds_late / 3600) * self.per_hour
        return max(0.0, min(penalty, score))

    def __str__(self) -> str:
        return f"per-hour:{self.per_hour:g}" if self.method == "per-hour" else self.method


@dataclass(frozen=True)
class Person:
    first_name: str = ""
    last_name: str = ""
    email: str = ""


def read_roster(path: Path) -> dict[str, Person]:
    """student id -> names and e-mail, from a CSV with nbgrader's columns (id required)."""
    try:
        data = path.read_bytes()[: MAX_ROSTER_BYTES + 1]
    except OSError as exc:
        raise PolicyError(f"--roster {path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_ROSTER_BYTES:
        raise PolicyError(f"--roster {path}: over {MAX_ROSTER_BYTES >> 20} MB")
    reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig", "replace")))
    if not reader.fieldnames or "id" not in reader.fieldnames:
        raise PolicyError(f"--roster {path}: needs a header with an 'id' column (and "
                          "optionally first_name, last_name, email), as nbgrader's")
    roster = {}
    for line in reader:
        student = (line.get("id") or "").strip()
        if student:
            roster[student] = Person(*((line.get(k) or "").strip()[:200]
                                       for k in ("first_name", "last_name", "email")))
    return roster


@dataclass(frozen=True)
class Dates:
    """The due date and the late policy of a batch (no due date: nothing is late)."""

    due: datetime | None = None
    late: LatePolicy = LatePolicy()

    def late_rows(self, rows: list[Row], jobs: list[Job]) -> list[Row]:
        """One penalty row per (student, exercise) submitted after the due date."""
        if self.due is None:
            return []
        scores: dict[tuple[str, str], float] = {}
        for row in rows:
            key = (row.student, row.exercise)
            scores[key] = scores.get(key, 0.0) + row.points
        extra = []
        for job in jobs:
            if job.timestamp is None and job.timestamp_problem and job.path is not None:
                extra.append(Row(job.student, job.exercise.name, LATE, 0.0, 0.0,
                                 "timestamp unreadable", f"{job.timestamp_problem}; no late "
                                 "penalty applied: check when it was submitted", "", POLICY))
            if job.timestamp is None or job.path is None:
                continue
            seconds = (job.timestamp - self.due).total_seconds()
            if seconds <= 0:
                continue
            score = scores.get((job.student, job.exercise.name), 0.0)
            penalty = self.late.penalty(score, seconds)
            extra.append(Row(job.student, job.exercise.name, LATE, -penalty, 0.0, "late",
                             f"submitted {_duration(seconds)} after the due date "
                             f"{self.due:%Y-%m-%d %H:%M} UTC; policy {self.late}: "
                             f"{penalty:g} points off", "", POLICY))
        return extra


def _duration(seconds: float) -> str:
    hours, rest = divmod(math.ceil(seconds), 3600)
    return f"{hours} h {rest // 60} min" if hours else f"{max(1, rest // 60)} min"
