"""What is due, by when, and for whom: scope, due dates, late penalties and the roster.

- Scope: only the source notebooks the instructor grades are due (``--exercise``, or else every
  source notebook that at least one student submitted); nothing else is ever "missing".
- Dates: nbgrader's ``timestamp.txt`` beside a submission (read by ``trust.files``), a due
  date (``--due``), per-student extensions (``--extensions``) and a late policy (``--late
  none|zero|per-hour:R|per-day:R``, R points or a percentage of the exercise's points, with
  ``--grace`` and ``--late-cap``), applied as nbgrader's LateSubmissionPlugin applies its
  ``none``/``zero``/``subtract`` methods: per started hour (or day) late, R off, never more
  than the score. A penalty is a row of its own in grades.csv (negative points) that names the
  due date applied, and fills nbgrader_grades.csv's timestamp, duedate and
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
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from edu_dl.grading.model import Job, Row
from edu_dl.grading.trust.bounded import read_named_file
from edu_dl.grading.trust.files import parse_time
from edu_dl.grading.trust.identity import NameClash, Names, check_distinct, quoted

MAX_ROSTER_BYTES = 8 << 20
LATE = "late penalty"  # the part name of a penalty row
POLICY = "late policy"  # its "judged" column


class PolicyError(ValueError):
    """A due date, policy or roster the grader cannot use; the message says how to fix it."""


UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|min|h|d)")
PERIODS = {"per-hour": 3600, "per-day": 86400}


def parse_duration(text: str, flag: str) -> float:
    """Seconds of '90s', '15m' (or '15min'), '2h', '1.5d'; '0' is none."""
    match = DURATION.fullmatch(text.strip().lower())
    if text.strip() == "0":
        return 0.0
    if match is None:
        raise PolicyError(f"{flag} {text!r}: expected a duration such as 15m, 2h or 1d "
                          "(s, m, h, d)")
    return float(match.group(1)) * UNITS[match.group(2)]


@dataclass(frozen=True)
class Amount:
    """Points, or a percentage of the exercise's points (``percent``)."""

    value: float
    percent: bool = False

    @classmethod
    def parse(cls, text: str, flag: str, example: str) -> Amount:
        text = text.strip()
        percent = text.endswith("%")
        try:
            value = float(text[:-1] if percent else text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (percent and value > 100):
            raise PolicyError(f"{flag} {text!r}: expected points or a percentage of the "
                              f"exercise's points, e.g. {example}")
        return cls(value, percent)

    def points(self, max_points: float) -> float:
        return self.value * max_points / 100 if self.percent else self.value

    def __str__(self) -> str:
        return f"{self.value:g}{'%' if self.percent else ''}"


@dataclass(frozen=True)
class LatePolicy:
    """nbgrader's late-submission methods (none, zero, or ``rate`` off per started hour), a
    rate per started day, and around them a grace period and a cap.

    A submission at most ``grace_s`` late is on time; a later one is late by its whole delay
    (counted from the due date, not from the end of the grace). ``cap``: the most a penalty
    takes. Never more than the score, as nbgrader's ``subtract``."""

    method: str = "none"  # none | zero | per-hour | per-day
    rate: Amount = Amount(0.0)  # off per started hour or day: points or % of the exercise's
    grace_s: float = 0.0
    cap: Amount | None = None

    @classmethod
    def parse(cls, text: str, grace: str | None = None, cap: str | None = None) -> LatePolicy:
        """``--late`` (``--grace``, ``--late-cap``): every error names its flag."""
        text = text.strip().lower()
        grace_s = parse_duration(grace, "--grace") if grace else 0.0
        limit = Amount.parse(cap, "--late-cap", "50% or 3") if cap else None
        if text in ("none", "zero"):
            return cls(text, grace_s=grace_s, cap=limit)
        method, _, rate = text.partition(":")
        if method in PERIODS and rate:
            return cls(method, Amount.parse(rate, f"--late {method}:",
                                            f"{method}:10% or {method}:0.5"), grace_s, limit)
        raise PolicyError(f"--late {text!r}: expected none, zero, per-hour:RATE or "
                          "per-day:RATE, RATE in points or a percentage of the exercise's "
                          "points (e.g. per-hour:0.5, per-day:10%)")

    def penalty(self, score: float, seconds_late: float, max_points: float = 0.0) -> float:
        """Points taken off a score (of ``max_points``) submitted ``seconds_late`` after its
        due date."""
        if seconds_late <= self.grace_s or self.method == "none":
            return 0.0
        if self.method == "zero":
            penalty = score
        else:
            started = math.ceil(seconds_late / PERIODS[self.method])
            penalty = started * self.rate.points(max_points)
        if self.cap is not None:
            penalty = min(penalty, self.cap.points(max_points))
        return round(max(0.0, min(penalty, score)), 9)  # 3 x 10% of 2 is 0.6, not 0.600...1

    def __str__(self) -> str:
        text = f"{self.method}:{self.rate}" if self.method in PERIODS else self.method
        if self.grace_s:
            text += f", grace {_duration(self.grace_s)}"
        if self.cap is not None:
            text += f", at most {self.cap}{'' if self.cap.percent else ' points'}"
        return text


@dataclass(frozen=True)
class Person:
    first_name: str = ""
    last_name: str = ""
    email: str = ""


def read_roster(path: Path) -> dict[str, Person]:
    """student id -> names and e-mail, from a CSV with nbgrader's columns (id required)."""
    data = read_named_file(path, "--roster", MAX_ROSTER_BYTES, PolicyError)
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
    try:
        check_distinct(roster, f"--roster {path}: the ids", "each student needs an id of "
                       "their own")
    except NameClash as exc:
        raise PolicyError(str(exc)) from None
    return roster


Extensions = dict[tuple[str, str], datetime]  # (student, exercise or "" for all) -> due date
MAX_EXTENSIONS_BYTES = 8 << 20


def read_extensions(path: Path) -> Extensions:
    """Per-student due dates from a CSV with columns student, due and optionally exercise
    (blank: every exercise of the student). The instructor's file, read strictly: every line
    that cannot be used stops the batch with its file and line."""
    data = read_named_file(path, "--extensions", MAX_EXTENSIONS_BYTES, PolicyError)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"--extensions {path}: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start})") from None
    reader = csv.DictReader(io.StringIO(text))
    columns = [c.strip() for c in reader.fieldnames or []]
    if "student" not in columns or "due" not in columns:
        raise PolicyError(f"--extensions {path}, line 1: needs a header with the columns "
                          "student and due (and optionally exercise), e.g. "
                          "'student,exercise,due'")
    reader.fieldnames = columns
    extensions: Extensions = {}
    try:
        for line in reader:
            where = f"--extensions {path}, line {reader.line_num}"
            student = (line.get("student") or "").strip()
            exercise = (line.get("exercise") or "").strip()
            due = (line.get("due") or "").strip()
            if not student:
                raise PolicyError(f"{where}: no student")
            try:
                moment = parse_time(due)
            except ValueError:
                raise PolicyError(f"{where}: due {due!r} is not a date and time; write it as "
                                  "ISO, e.g. 2026-03-08T23:59 (UTC unless it names an "
                                  "offset)") from None
            key = (student, exercise)
            if key in extensions:
                raise PolicyError(f"{where}: a second due date for {student!r}"
                                  + (f" and {exercise!r}" if exercise else ""))
            extensions[key] = moment
    except csv.Error as exc:
        raise PolicyError(f"--extensions {path}, line {reader.line_num}: not CSV the grader "
                          f"can read ({exc})") from None
    return extensions


@dataclass(frozen=True)
class Dates:
    """The due date and the late policy of a batch (no due date: nothing is late), and the
    students' extensions, which replace the due date for one student (and exercise)."""

    due: datetime | None = None
    late: LatePolicy = LatePolicy()
    extensions: Extensions = field(default_factory=dict)

    def due_for(self, student: str, exercise: str) -> tuple[datetime | None, bool]:
        """(the due date that applies, whether it is an extension): the student's for this
        exercise, else the student's for every exercise, else the batch's."""
        for key in ((student, exercise), (student, "")):
            if key in self.extensions:
                return self.extensions[key], True
        return self.due, False

    def for_students(self, students: Iterable[str]) -> tuple[Dates, list[str]]:
        """These dates with each extension keyed by the one student its line names (a line
        names a student as the gradebook writes the name); notes on the lines that name no
        student. PolicyError for a line that is a student only once case, spaces or
        invisible characters are set aside, or is two: an extension is never guessed."""
        names = Names(students)
        extensions: Extensions = {}
        unknown: list[str] = []
        for (given, exercise), due in self.extensions.items():
            try:
                student = names.resolve(given, "--extensions")
            except NameClash as exc:
                raise PolicyError(str(exc)) from None
            if student is None:
                unknown.append(quoted(given))
            else:  # one line per (student, exercise): read_extensions, resolve exact only
                extensions[(student, exercise)] = due
        notes = [f"--extensions names no student of the gradebook: {', '.join(unknown[:10])}"
                 f"{' ...' if len(unknown) > 10 else ''}; those lines were not applied"
                 ] if unknown else []
        return replace(self, extensions=extensions), notes

    def late_rows(self, rows: list[Row], jobs: list[Job]) -> list[Row]:
        """One penalty row per (student, exercise) submitted after its due date."""
        if self.due is None and not self.extensions:
            return []
        scores: dict[tuple[str, str], list[float]] = {}
        for row in rows:
            got = scores.setdefault((row.student, row.exercise), [0.0, 0.0])
            got[0] += row.points
            got[1] += row.max_points
        extra = []
        for job in jobs:
            due, extended = self.due_for(job.student, job.exercise.name)
            if due is None:
                continue
            if job.timestamp is None and job.timestamp_problem and job.path is not None:
                extra.append(Row(job.student, job.exercise.name, LATE, 0.0, 0.0,
                                 "timestamp unreadable", f"{job.timestamp_problem}; no late "
                                 "penalty applied: check when it was submitted", "", POLICY))
            if job.timestamp is None or job.path is None:
                continue
            seconds = (job.timestamp - due).total_seconds()
            if seconds <= 0:
                continue
            score, most = scores.get((job.student, job.exercise.name), [0.0, 0.0])
            penalty = self.late.penalty(score, seconds, most)
            which = "extended due date" if extended else "due date"
            within = " (within the grace period)" if seconds <= self.late.grace_s else ""
            extra.append(Row(job.student, job.exercise.name, LATE, -penalty if penalty else 0.0,
                             0.0,
                             "within grace" if within else "late",
                             f"submitted {_duration(seconds)} after the {which} "
                             f"{due:%Y-%m-%d %H:%M} UTC{within}; policy {self.late}: "
                             f"{penalty:g} points off", "", POLICY))
        return extra


def _duration(seconds: float) -> str:
    hours, rest = divmod(math.ceil(seconds), 3600)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h {rest // 60} min"
    return f"{hours} h {rest // 60} min" if hours else f"{max(1, rest // 60)} min"
