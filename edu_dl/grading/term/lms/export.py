"""grades.csv as a learning-management system's gradebook import.

- Canvas (Grades > Import): ``Student, ID, SIS User ID, SIS Login ID, Section``, then one
  column per assignment, named as Canvas names it in its own export (``Autograd (1234)``: the
  number is the assignment's id, by which Canvas matches the column; a name without one makes
  a new assignment), and a second line ``Points Possible`` with each assignment's maximum.
  The ids are the roster's, or, with ``--collected``, first those ``lms collect`` learned from
  Canvas (``roster.with_learned``); lines left with an empty ID are named once
  (:func:`empty_ids`).
- Moodle (Grades > Import > CSV file): an identifier column (``Email address`` or ``ID
  number``, mapped to the user field of that name on import), one column per grade item and,
  with ``feedback``, one ``<item> feedback`` column each (map it to the item's feedback).

A student's score for an exercise is the sum of its rows' points in grades.csv (late penalties,
which are negative rows, included), the maximum the sum of its rows' max points. Roster
students without a row get an empty cell (the LMS leaves it as it is); a student without the
id the LMS matches by gets no line (and a warning). Every text cell is
spreadsheet-safe (``csvio.csv_cell``): names are the students'. grades.csv is read back
through ``csvio.WrittenCsv``, which undoes that guard.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from edu_dl.grading.term.csvio import WrittenCsv, csv_bytes
from edu_dl.grading.term.lms.roster import Roster, Student
from edu_dl.grading.term.policy import LATE, PolicyError
from edu_dl.grading.term.renumbered import explained
from edu_dl.grading.trust.bounded import read_named_file
from edu_dl.grading.trust.identity import NameClash, Names

MAX_GRADES_BYTES = 256 << 20
CANVAS_IDS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "    Points Possible"  # as Canvas's own export writes it
MOODLE_IDS = {"email": "Email address", "id_number": "ID number"}


@dataclass
class Score:
    points: float = 0.0
    max_points: float = 0.0
    parts: list[str] = field(default_factory=list)  # "part points/max status", for feedback


@dataclass
class Gradebook:
    """(student, exercise) -> score, the exercises in order, and their maxima."""

    scores: dict[tuple[str, str], Score]
    exercises: list[str]
    maxima: dict[str, float]


def read_grades(folder: Path) -> Gradebook:
    """grades.csv of an ``edu-dl grade --out`` folder, summed per student and exercise."""
    path = folder / "grades.csv" if folder.is_dir() else folder
    data = read_named_file(path, "the grades (the folder edu-dl grade wrote with --out)",
                           MAX_GRADES_BYTES, PolicyError)
    reader = WrittenCsv(data.decode("utf-8", "replace"))  # '-jdoe back to -jdoe
    needed = {"student", "exercise", "part", "points", "max_points", "status"}
    if not needed <= set(reader.fieldnames or ()):
        raise PolicyError(f"{path}: not an edu-dl grades.csv (needs {', '.join(sorted(needed))})")
    try:
        return _sum(path, reader)
    except csv.Error as exc:
        raise PolicyError(f"{path}: line {reader.line_num}: {exc}") from None


def _sum(path: Path, reader: WrittenCsv) -> Gradebook:
    scores: dict[tuple[str, str], Score] = {}
    exercises: list[str] = []
    for line in reader:
        student, exercise = line["student"], line["exercise"]
        if not student or not exercise:
            continue  # a row of no exercise (a refused folder): nothing to export
        try:
            points, most = float(line["points"]), float(line["max_points"])
        except ValueError:
            raise PolicyError(f"{path}: {line['points']!r} or {line['max_points']!r} is not "
                              "a number") from None
        if exercise not in exercises:
            exercises.append(exercise)
        score = scores.setdefault((student, exercise), Score())
        score.points += points
        score.max_points += 0.0 if line["part"] == LATE else most
        score.parts.append(f"{line['part']} {points:g}/{most:g} {line['status']}")
    maxima: dict[str, float] = {}
    for (_, exercise), score in scores.items():
        maxima[exercise] = max(maxima.get(exercise, 0.0), score.max_points)
    return Gradebook(scores, exercises, maxima)


def column_names(exercises: list[str], chosen: dict[str, str]) -> list[str]:
    """Each exercise's column: the name given with --column, else the exercise's."""
    unknown = sorted(set(chosen) - set(exercises))
    if unknown:
        raise PolicyError(explained(f"--column {', '.join(unknown)}: no such exercise in "
                                    f"grades.csv (it has {', '.join(exercises)})", unknown,
                                    exercises))
    return [chosen.get(e, e) for e in exercises]


def _points(book: Gradebook, student: Student, exercise: str) -> float | str:
    """A number (csv_cell leaves numbers alone: a negative one must not become text), or ''."""
    score = book.scores.get((student.id, exercise))
    return round(score.points, 6) if score is not None else ""


def canvas_csv(book: Gradebook, roster: Roster, columns: dict[str, str]) -> bytes:
    """Canvas's gradebook import: a line per roster student, in the roster's order."""
    names = column_names(book.exercises, columns)
    lines: list[list[str | float]] = [
        [POINTS_POSSIBLE, "", "", "", "", *(round(book.maxima[e], 6) for e in book.exercises)]]
    for s in roster.students:
        if not (s.canvas_id or s.sis_user_id or s.sis_login_id):
            continue  # nothing Canvas could match the line by (unexported() says so)
        display = f"{s.last_name}, {s.first_name}" if s.last_name or s.first_name else s.id
        lines.append([display, s.canvas_id, s.sis_user_id, s.sis_login_id, s.section,
                      *(_points(book, s, e) for e in book.exercises)])
    return csv_bytes([*CANVAS_IDS, *names], lines)


def empty_ids(roster: Roster, collected: bool) -> list[str]:
    """One line naming the Canvas lines exported with an empty ID (a student with SIS ids but
    no Canvas user id, neither learned at collect nor on the roster), or none."""
    empty = [s.id for s in roster.students
             if not s.canvas_id and (s.sis_user_id or s.sis_login_id)]
    if not empty:
        return []
    where = "" if collected else "give --collected with the folder lms collect wrote, or "
    return [f"{len(empty)} line(s) with an empty ID (Canvas's user id), which Canvas matches "
            f"by SIS User ID or SIS Login ID alone: {', '.join(empty)}; {where}fill the "
            "roster's canvas_id to match them by ID"]


def moodle_csv(book: Gradebook, roster: Roster, columns: dict[str, str],
               identifier: str = "email", feedback: bool = False) -> bytes:
    """Moodle's grade import: an identifier column, a column per grade item (and feedback)."""
    names = column_names(book.exercises, columns)
    header = [MOODLE_IDS[identifier], *names]
    if feedback:
        header += [f"{name} feedback" for name in names]
    lines: list[list[str | float]] = []
    for s in roster.students:
        if not getattr(s, identifier):
            continue  # nothing Moodle could match the line by (unexported() says so)
        line: list[str | float] = [getattr(s, identifier),
                                   *(_points(book, s, e) for e in book.exercises)]
        if feedback:
            line += [_feedback(book, s, e) for e in book.exercises]
        lines.append(line)
    return csv_bytes(header, lines)


def _feedback(book: Gradebook, student: Student, exercise: str) -> str:
    score = book.scores.get((student.id, exercise))
    if score is None:
        return ""
    return (f"{score.points:g} / {score.max_points:g} points: " + "; ".join(score.parts))[:4000]


def unexported(book: Gradebook, roster: Roster, key: str) -> list[str]:
    """Why some grades cannot reach the LMS: students graded but not on the roster, and
    roster students without the id the LMS matches by (``key``)."""
    ids = {s.id for s in roster.students}
    graded = sorted({student for student, _ in book.scores} - ids)
    names = Names(ids)
    problems = [_not_on_roster(student, names) for student in graded]
    keys = key.split("|")
    problems += [f"{s.id}: the roster has no {' or '.join(keys)} for this student, which "
                 "the LMS matches by; not exported" for s in roster.students
                 if not any(getattr(s, k) for k in keys)]
    return problems


def _not_on_roster(student: str, names: Names) -> str:
    """Why a graded student's grade is not exported; a look-alike on the roster is named, never
    given the grade."""
    try:
        names.resolve(student, f"{student}: graded but not on the roster")
    except NameClash as exc:
        return f"{exc}; not exported"
    return f"{student}: graded but not on the roster; not exported"
