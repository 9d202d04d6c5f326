"""The gradebook: what each (student, exercise) was graded as, kept in the database (``db``).

Each submission is written (in one transaction) the moment it is graded, with its rows, the
resume key and what the late policy and the exports need of the job (its assignment folder,
timestamp, whether anything was submitted). grades.csv, nbgrader_grades.csv, manual.csv and the
feedback are views of the database, rebuilt whole on every run: a run that grades some students
(``--student``, or a folder holding only a resubmission) replaces their submissions alone, and
every other student's rows come back as they were. A crash half-way loses nothing: what was
graded is committed, and the next run rebuilds the views. The hand grades (``edu-dl mark``, an
imported manual.csv) are kept in the same database, each with who gave it and when.

A student leaves the gradebook only through the roster: with ``--roster``, a student kept from
earlier runs who is neither on it nor in this run's submissions is removed (submissions, notes,
feedback and graded notebooks; the runs in .work/ stay, for replay; their hand grades stay,
and come back with them).

Every value read back from the database is checked here, once (``_entry``): a submission the
grader cannot read is logged and graded again.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import math
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import SQLAlchemyError

from edu_dl.grading.model import Exercise, Job, Row, safe_file_name
from edu_dl.grading.term import db
from edu_dl.grading.term.db import DatabaseError, Store
from edu_dl.grading.trust.files import parse_time

MAX_JSON_CHARS = 1 << 20  # a job's facts and the grader's cost are a few lines
Where = Path | Store  # OUT (its SQLite file) or an opened database
HandKey = tuple[str, str, str]  # (student, exercise, cell) as manual.csv writes them
HandGrade = tuple[float, str, str]  # points, comment, answer_id (manual.Filled)


@dataclass
class Entry:
    """One (student, exercise) as the gradebook holds it."""

    student: str
    exercise: str
    rows: list[Row]
    key: str = ""  # the resume key: what the grade depended on, the submission included
    basis: str = ""  # the same without the submission: source, parts, limits, secret
    job: dict[str, Any] = field(default_factory=dict)  # job_facts(): kept_job() reads it
    content: str = ""  # the key without the limits (batch.content_key; --retry-timeouts)
    grader: dict[str, Any] = field(default_factory=dict)  # what grading it cost the grader

    @property
    def submitted(self) -> bool:
        """Whether a notebook was found for it (graded, refused or unreadable); for an entry
        of an older grader, which kept no facts, whether its rows say anything but missing."""
        if not self.job:
            return any(r.status != "missing" for r in self.rows)
        return bool(self.job.get("path") or self.job.get("refused"))


def job_facts(job: Job) -> dict[str, Any]:
    """What a kept job must remember for the late policy, the exports and the HTML feedback."""
    return {"assignment": job.assignment, "path": str(job.path) if job.path else "",
            "refused": job.refused, "timestamp": job.timestamp.isoformat() if job.timestamp
            else "", "timestamp_problem": job.timestamp_problem}


def _failed(store: Store, exc: SQLAlchemyError) -> DatabaseError:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return DatabaseError(f"gradebook database {store!r}: {type(exc).__name__}: {first}")


def write_entry(where: Where, job: Job, rows: list[Row], key: str, basis: str, secret: str,
                content: str = "", grader: dict[str, float] | None = None) -> None:
    """Keep a job's rows, in one transaction (raises DatabaseError: the caller logs it and
    grades it again next time), and ``grader``: what grading it cost the grader itself
    (``cost.Cost.rounded``)."""
    store = db.store(where)
    who = {"student": job.student, "exercise": job.exercise.name}
    try:
        with store.transaction() as conn:
            _delete_submission(conn, job.student, job.exercise.name)
            conn.execute(insert(db.submissions).values(
                **who, key=key, basis=basis, content=content, secret=secret,
                job=db.as_json(job_facts(job)), grader=db.as_json(grader or {})))
            if rows:
                conn.execute(insert(db.rows), [{**who, "seq": i, **db.row_values(r)}
                                               for i, r in enumerate(rows)])
    except SQLAlchemyError as exc:
        raise _failed(store, exc) from None


def _delete_submission(conn: Any, student: str, exercise: str) -> None:
    for table in (db.rows, db.submissions):
        conn.execute(delete(table).where(table.c.student == student,
                                         table.c.exercise == exercise))


def forget(where: Where, student: str, exercise: str) -> None:
    """Take one submission out of the gradebook (``--force``: graded again from nothing)."""
    store = db.store(where)
    if store.exists():
        with store.transaction() as conn:
            _delete_submission(conn, student, exercise)


def read_entries(where: Where, log: Callable[[str], None]) -> dict[tuple[str, str], Entry]:
    """Every (student, exercise) the gradebook holds, read in one transaction. One that cannot
    be read is logged and left out (its submission is graded again when it is in the run)."""
    store = db.store(where)
    found: dict[tuple[str, str], Entry] = {}
    if not store.exists():
        return found
    by_job: dict[tuple[str, str], list[Row | None]] = {}
    try:
        with store.transaction() as conn:
            heads = list(conn.execute(select(db.submissions).order_by(
                db.submissions.c.student, db.submissions.c.exercise)))
            for record in conn.execute(select(db.rows).order_by(
                    db.rows.c.student, db.rows.c.exercise, db.rows.c.seq)):
                row: Row | None = None  # one that does not read: its submission is left out
                try:
                    row = db.as_row(record.student, record.exercise, record)
                except (TypeError, ValueError):
                    pass
                by_job.setdefault((record.student, record.exercise), []).append(row)
    except SQLAlchemyError as exc:
        raise _failed(store, exc) from None
    for head in heads:
        entry = _entry(head, by_job.get((head.student, head.exercise), []))
        if entry is None:
            log(f"{store!r}: the submission of {head.student!r} for {head.exercise!r} is not "
                "one the grader can read; left out")
            continue
        found[(entry.student, entry.exercise)] = entry
    return found


def kept_entry(where: Where, student: str, exercise: str) -> Entry | None:
    """One submission as the gradebook holds it (None: it holds none, or none it can read)."""
    return read_entries(where, lambda _: None).get((student, exercise))


def _entry(head: Any, rows: list[Row | None]) -> Entry | None:
    """A submission as read back, checked: its rows whole, its texts text, its job's facts a
    JSON object whose timestamp parses (kept_job reads it)."""
    try:
        if any(r is None for r in rows):
            return None
        texts = (head.student, head.exercise, head.key, head.basis, head.content, head.job,
                 head.grader)
        if not all(isinstance(t, str) for t in texts) or \
                max(len(head.job), len(head.grader)) > MAX_JSON_CHARS:
            return None
        facts, grader = json.loads(head.job), json.loads(head.grader)
        if not isinstance(facts, dict) or not isinstance(grader, dict):
            return None
        if facts.get("timestamp"):
            parse_time(str(facts["timestamp"]))
        return Entry(head.student, head.exercise, [r for r in rows if r is not None],
                     head.key, head.basis, facts, head.content, grader)
    except (ValueError, TypeError, AttributeError):
        return None


def kept_job(entry: Entry, exercise: Exercise) -> Job:
    """The job a kept entry was graded as (its submission is not read again)."""
    facts = entry.job
    stamp = facts.get("timestamp") or ""
    return Job(entry.student, exercise, Path(facts["path"]) if facts.get("path") else None,
               str(facts.get("assignment") or exercise.name), str(facts.get("refused") or ""),
               parse_time(stamp) if stamp else None, str(facts.get("timestamp_problem") or ""))


def write_collected(where: Where, student: str, rows: list[Row]) -> None:
    """A student's rows from collecting this run, in place of the last run's (none: gone)."""
    store = db.store(where)
    try:
        with store.transaction() as conn:
            conn.execute(delete(db.collected).where(db.collected.c.student == student))
            if rows:
                conn.execute(insert(db.collected), [
                    {"student": student, "exercise": r.exercise, "seq": i, **db.row_values(r)}
                    for i, r in enumerate(rows)])
    except SQLAlchemyError as exc:
        raise _failed(store, exc) from None


def read_collected(where: Where) -> dict[str, list[Row]]:
    """Every student's rows from collecting, by student; a row that will not read is skipped
    (only notes: the student's next run writes them again)."""
    store = db.store(where)
    found: dict[str, list[Row]] = {}
    if not store.exists():
        return found
    with store.transaction() as conn:
        records = list(conn.execute(select(db.collected).order_by(
            db.collected.c.student, db.collected.c.seq)))
    for record in records:
        try:
            found.setdefault(str(record.student), []).append(
                db.as_row(str(record.student), str(record.exercise), record))
        except (TypeError, ValueError):
            continue
    return found


def remove_students(where: Where, out: Path, students: Iterable[str],
                    feedback_dirs: Iterable[str]) -> None:
    """Take students out of the gradebook: their submissions and notes (one transaction),
    feedback pages and graded notebooks in OUT (the runs in .work/ stay, for replay; so do
    their hand grades, which apply again if they come back)."""
    students = list(students)
    store = db.store(where)
    with store.transaction() as conn:
        for table in (db.rows, db.submissions, db.collected):
            conn.execute(delete(table).where(table.c.student.in_(students)))
    for student in students:
        name = safe_file_name(student)
        shutil.rmtree(out / "autograded" / name, ignore_errors=True)
        for folder in feedback_dirs:
            for page in (out / folder).glob(f"{name}.*"):
                if page.stem == name:
                    page.unlink(missing_ok=True)


# Options whose absence in a run changes the gradebooks: the hand grades are in the database,
# so a run without --manual keeps them (it only imports no sheet).
DROPPABLE = ("--due", "--late", "--extensions", "--roster")


def dropped_options(where: Where, applied: dict[str, str]) -> list[str]:
    """Notes on the options the last run applied to every row (due date, late policy,
    extensions, roster) that this run leaves out: a resubmission graded without ``--due``
    would otherwise change every late penalty unnoticed."""
    store = db.store(where)
    if not store.exists():
        return []
    with store.transaction() as conn:
        last = {str(r.name): str(r.value) for r in conn.execute(select(db.options))}
    return [f"the last run applied {flag} {last[flag]}, this one has none: the gradebooks "
            "no longer include it (pass the same options on every run)"
            for flag in applied if flag in DROPPABLE and last.get(flag) and not applied[flag]]


def remember_options(where: Where, applied: dict[str, str]) -> None:
    """What this run applied, for the next run's dropped_options (once its gradebooks are
    written)."""
    store = db.store(where)
    with store.transaction() as conn:
        conn.execute(delete(db.options))
        conn.execute(insert(db.options), [{"name": k, "value": v} for k, v in applied.items()])


def hand_grades(where: Where) -> dict[HandKey, HandGrade]:
    """Every hand grade the gradebook holds: (student, exercise, cell) -> (points, comment,
    answer_id), as manual.read_sheet gives a sheet's (and checked as strictly: a value that is
    not a finite number of points is refused, naming the row)."""
    store = db.store(where)
    if not store.exists():
        return {}
    with store.transaction() as conn:
        records = list(conn.execute(select(db.hand_grades).order_by(
            db.hand_grades.c.student, db.hand_grades.c.exercise, db.hand_grades.c.cell)))
    found: dict[HandKey, HandGrade] = {}
    for r in records:
        points = r.points
        if not isinstance(points, (int, float)) or not math.isfinite(points) or points < 0:
            raise DatabaseError(f"gradebook database {store!r}: the hand grade of "
                                f"{r.student}/{r.exercise}/{r.cell} has points {points!r}")
        found[(str(r.student), str(r.exercise), str(r.cell))] = (
            float(points), str(r.comment), str(r.answer_id))
    return found


def save_hand_grades(where: Where, grades: dict[HandKey, HandGrade | None], grader: str,
                     only_new: bool = False) -> int:
    """Keep hand grades (None: take the grade back), all in one transaction, each with who
    gave it (``grader``) and when; ``only_new``: leave the keys the gradebook has alone.
    Returns how many were written."""
    store = db.store(where)
    now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    written = 0
    try:
        with store.transaction() as conn:
            table = db.hand_grades
            have = {(r.student, r.exercise, r.cell) for r in conn.execute(
                select(table.c.student, table.c.exercise, table.c.cell))} if only_new else set()
            for key, grade in grades.items():
                if key in have:
                    continue
                conn.execute(delete(table).where(table.c.student == key[0],
                                                 table.c.exercise == key[1],
                                                 table.c.cell == key[2]))
                if grade is not None:
                    conn.execute(insert(table).values(
                        student=key[0], exercise=key[1], cell=key[2], points=grade[0],
                        comment=grade[1], answer_id=grade[2], grader=grader, time=now))
                written += 1
    except SQLAlchemyError as exc:
        raise _failed(store, exc) from None
    return written


def who() -> str:
    """The person at this terminal, for a hand grade's grader column."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"
