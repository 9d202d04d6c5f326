"""``edu-dl report GRADES``: the class at a glance, from a graded batch's output folder
(built here; shown by ``classreport_show``).

Counted in **students**, never rows: per exercise how many submitted, how many are missing,
late, or crashed or timed out; per part the share of the students who submitted that passed it
and their mean points (a row a person graded counts its points' share of its maximum, 2 of 2 a
pass and 1 of 2 half of one; a row still waiting for a person is counted as waiting, not
judged); a histogram of the scores (``score_histogram.png`` beside the
gradebook); solution cells that two or more students submitted identically once comments,
blank lines and spacing are removed; and the misconception table, how many students made each
typical mistake a hint recognised (the gradebook's ``hint`` column), with one example each.

What a batch records for it at grade time is ``class.json`` in OUT (:func:`record_class`): per
student and solution cell the digest of the normalized cell (``trust.cells``: no text of the
student's), and each part's hints by identifier with their messages (the author's text). Every
text shown that a student could have written (a name) goes through ``trust.text``.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edu_dl.grading.authoring.hints import hint_id
from edu_dl.grading.authoring.spec import GENERIC, GUARD_HINTS
from edu_dl.grading.model import Job, Refused
from edu_dl.grading.nbgrader import grade_id, is_solution, student_version
from edu_dl.grading.notebooks import NotebookError, write_atomic
from edu_dl.grading.settings import MB, Settings
from edu_dl.grading.term.csvio import WrittenCsv
from edu_dl.grading.term.manual import GRADED, NEEDS, OVERRIDDEN
from edu_dl.grading.term.policy import LATE
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.cells import MIN_TOKENS, cell_print
from edu_dl.grading.trust.notebook import parse_notebook
from edu_dl.grading.trust.text import for_terminal, visible

CLASS_DATA = "class.json"
HISTOGRAM = "score_histogram.png"
GRADEBOOK = "grades.csv"
MAX_GRADEBOOK_MB = 512
MAX_CLASS_DATA_MB = 256
FORMAT = 1
# spec.GENERIC's rows: a hint of generic.py recognised the shape of the mistake
GENERIC_MESSAGE = ("a generic hint: a constant factor, a sign, a shift by one, another order or "
                   "another axis")
# A row in one of these says the submission did not run to its end.
BROKEN = frozenset({"crashed", "timeout", "memory", "processes", "grader error", "refused"})
NOT_PARTS = ("", LATE)  # rows that are no part: a refused file, a late penalty
# A row whose points a person gave (manual.merge): judged by its points, not by passing.
BY_A_PERSON = frozenset({GRADED, OVERRIDDEN})


class ReportError(ValueError):
    """The gradebook cannot be read; the message says why."""


# --------------------------------------------------------------------------- recorded at grade time


def record_class(out: Path, jobs: list[Job], settings: Settings,
                 log: Callable[[str], None] = print,
                 kept: frozenset[tuple[str, str]] = frozenset()) -> None:
    """Write OUT/class.json: the normalized solution cells' digests of every submission, and
    every part's hints. The submissions in ``kept`` ((student, exercise) pairs the gradebook
    keeps from an earlier run, say of one resubmission with --student) keep the cells recorded
    then, so grading one student never drops the class's others. Never raises: a submission
    that cannot be read is left out (its row already says why), and a failure to write is
    logged."""
    try:
        before = read_class_data(out / CLASS_DATA).get("cells", []) if kept else []
        cells: list[list[Any]] = [c for c in before if (c[0], c[1]) in kept]
        stubs: dict[str, dict[str, str]] = {}
        for job in jobs:
            if (job.student, job.exercise.name) in kept:
                continue
            try:
                cells += _job_cells(job, settings, stubs)
            except Exception as exc:  # one submission's cells, never the class's
                log(for_terminal(f"{CLASS_DATA}: the cells of {job.student!r} "
                                 f"{job.exercise.name} left out ({type(exc).__name__})"))
        exercises = {id(j.exercise): j.exercise for j in jobs}.values()
        solutions = {exercise.name: _digests(exercise.notebook) for exercise in exercises}
        hints = {exercise.name: {part_id: {**{hint_id(h, i): visible(_message(h))
                                              for i, h in enumerate(part.hints)},
                                           GENERIC: GENERIC_MESSAGE, **GUARD_HINTS}
                                 for part_id, part in exercise.specs.items()}
                 for exercise in exercises}
        data = {"format": FORMAT, "cells": cells, "hints": hints, "solutions": solutions}
        write_atomic(out / CLASS_DATA, json.dumps(data, separators=(",", ":")).encode())
    except Exception as exc:  # the gradebooks are written; the class report is a bonus
        log(for_terminal(f"{CLASS_DATA} could not be written ({type(exc).__name__}: {exc}); "
                         "the gradebooks are complete"))


def _message(hint: Any) -> str:
    return str(hint.message if hasattr(hint, "message") else hint[1])


def _job_cells(job: Job, settings: Settings, stubs: dict[str, dict[str, str]]
               ) -> list[list[Any]]:
    """[student, exercise, grade_id, digest, tokens] of each of the job's solution cells that
    is not trivial: not the released stub, at least MIN_TOKENS tokens."""
    if job.path is None or job.refused:
        return []
    exercise = job.exercise
    if exercise.name not in stubs:
        stubs[exercise.name] = _digests(exercise.notebook, released=True)
    wanted = stubs[exercise.name]
    try:
        nb = parse_notebook(read_bounded(job.path, settings.notebook_mb * MB), job.path.name)
    except (Refused, NotebookError, RecursionError):
        return []
    found: list[list[Any]] = []
    seen: set[str] = set()
    for cell in nb.cells:
        gid = grade_id(cell) if isinstance(cell.get("metadata"), dict) else None
        if gid not in wanted or gid in seen or cell.get("cell_type") != "code":
            continue
        seen.add(gid)
        printed = cell_print(str(cell.get("source", "")))
        if printed is None or printed.tokens < MIN_TOKENS or printed.digest == wanted[gid]:
            continue
        found.append([job.student, exercise.name, gid, printed.digest, printed.tokens])
    return found


def _digests(source: Any, released: bool = False) -> dict[str, str]:
    """grade_id -> digest of each code solution cell of the source, or (``released``) of the
    cell as released, unsolved: the stub."""
    solutions = {grade_id(c) for c in source.cells
                 if c.get("cell_type") == "code" and is_solution(c) and grade_id(c)}
    try:
        cells = student_version(source).cells if released else source.cells
        by_id = {grade_id(c): c for c in cells}
    except Exception:  # a notebook nbgrader could not release: no stub to leave out
        by_id = {}
    digests = {}
    for gid in solutions:
        printed = cell_print(str(by_id[gid].get("source", ""))) if gid in by_id else None
        digests[str(gid)] = printed.digest if printed else ""
    return digests


# --------------------------------------------------------------------------- the report


@dataclass
class ExerciseCount:
    """Students of one exercise, each counted once."""

    exercise: str
    students: int = 0
    submitted: int = 0
    missing: int = 0
    late: int = 0
    crashed_or_timed_out: int = 0
    mean_score: float = 0.0  # over the students who submitted, late penalties included
    max_score: float = 0.0
    waiting: int = 0  # students with a row still waiting for a person (its points 0 until then)


@dataclass
class PartRate:
    exercise: str
    part: str
    students: int  # who submitted
    passed: int  # rows the grader passed
    mean_points: float  # over the judged rows: those waiting for a person left out
    max_points: float
    by_hand: int = 0  # rows a person gave points (graded by hand, or overridden)
    waiting: int = 0  # rows waiting for a person ("needs manual grading")
    hand_share: float = 0.0  # the by_hand rows' points as shares of their maximum, summed

    @property
    def judged(self) -> int:
        """The students whose row has a grade: every one but those waiting for a person."""
        return self.students - self.waiting

    @property
    def pass_rate(self) -> float:
        """The share of the judged students that passed, a row a person graded counting its
        share of the points (0.0 when none is judged yet: check ``judged`` before showing it)."""
        return (self.passed + self.hand_share) / self.judged if self.judged else 0.0


@dataclass
class SharedCell:
    """One solution cell that ``students`` submitted identically (normalized)."""

    exercise: str
    cell: str
    tokens: int
    students: list[str]
    same_as_solution: bool = False  # the source notebook's own solution cell


@dataclass
class Misconception:
    """How many students' rows of a part a hint recognised, with one example student."""

    exercise: str
    part: str
    hint: str
    message: str
    students: int
    example: str


@dataclass
class ClassReport:
    exercises: list[ExerciseCount] = field(default_factory=list)
    parts: list[PartRate] = field(default_factory=list)
    shared_cells: list[SharedCell] = field(default_factory=list)
    misconceptions: list[Misconception] = field(default_factory=list)
    scores: dict[str, list[float]] = field(default_factory=dict)  # exercise -> % per student
    histogram: str = ""  # the PNG's path, when written
    notes: list[str] = field(default_factory=list)


def gradebook_path(grades: Path) -> Path:
    """GRADES as given: the --out folder or its grades.csv."""
    return grades / GRADEBOOK if grades.is_dir() else grades


def read_gradebook(path: Path) -> list[dict[str, str]]:
    """grades.csv's rows, read bounded; ReportError when it is not a gradebook."""
    try:
        text = read_bounded(path, MAX_GRADEBOOK_MB * MB, "for a gradebook").decode("utf-8")
    except (Refused, OSError) as exc:
        raise ReportError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ReportError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    reader = WrittenCsv(text)  # the formula guard taken off, as everywhere it is read
    need = {"student", "exercise", "part", "points", "max_points", "status"}
    try:
        if not need <= set(reader.fieldnames or ()):
            raise ReportError(f"{path}: not a gradebook of edu-dl grade (it needs the "
                              f"columns {', '.join(sorted(need))})")
        return list(reader)
    except csv.Error as exc:  # a field over csv's limit (131,072 characters), a stray NUL
        raise ReportError(f"{path}: not a readable CSV ({exc})") from None


def read_class_data(path: Path) -> dict[str, Any]:
    """class.json, checked entry by entry ({} when there is none or it is unreadable)."""
    try:
        data = json.loads(read_bounded(path, MAX_CLASS_DATA_MB * MB, "for class data"))
    except (Refused, OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    cells = [c for c in data.get("cells", []) if isinstance(c, list) and len(c) == 5
             and all(isinstance(v, str) for v in c[:4]) and isinstance(c[4], int)]
    hints = data.get("hints") if isinstance(data.get("hints"), dict) else {}
    solutions = data.get("solutions") if isinstance(data.get("solutions"), dict) else {}
    return {"cells": cells, "hints": hints, "solutions": solutions}


def _number(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def build(grades: Path) -> ClassReport:
    """The report of the batch whose gradebook is ``grades`` (the folder or grades.csv)."""
    path = gradebook_path(grades)
    rows = read_gradebook(path)
    data = read_class_data(path.parent / CLASS_DATA)
    report = ClassReport()
    by_exercise: dict[str, dict[str, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(
        list))
    for row in rows:
        if row.get("exercise"):
            by_exercise[row["exercise"]][row.get("student", "")].append(row)
    for exercise, students in by_exercise.items():
        report.exercises.append(_count(exercise, students, report.scores))
        report.parts += _rates(exercise, students)
        report.misconceptions += _misconceptions(exercise, students,
                                                 data.get("hints", {}).get(exercise, {}))
    report.shared_cells = shared_cells(data.get("cells", []), data.get("solutions", {}))
    if rows and "hint" not in rows[0]:
        report.notes.append("this gradebook has no hint column (graded by an older edu-dl): "
                            "grade again for the misconception table")
    if not data:
        report.notes.append(f"no {CLASS_DATA} beside the gradebook (graded by an older "
                            "edu-dl): grade again to list identical solution cells")
    return report


def _count(exercise: str, students: dict[str, list[dict[str, str]]],
           scores: dict[str, list[float]]) -> ExerciseCount:
    count = ExerciseCount(exercise, students=len(students))
    totals = []
    for mine in students.values():
        statuses = {r.get("status", "") for r in mine if r.get("part") not in NOT_PARTS}
        if statuses == {"missing"}:
            count.missing += 1
            continue
        count.submitted += 1
        count.late += any(r.get("part") == LATE and r.get("status") == "late" for r in mine)
        count.crashed_or_timed_out += bool(statuses & BROKEN)
        count.waiting += NEEDS in statuses
        got = sum(_number(r.get("points", "")) for r in mine)
        most = sum(_number(r.get("max_points", "")) for r in mine)
        totals.append((got, most))
    if totals:
        count.mean_score = sum(g for g, _ in totals) / len(totals)
        count.max_score = max(m for _, m in totals)
        scores[exercise] = [100.0 * g / m if m else 0.0 for g, m in totals]
    return count


def _submitted(students: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
    return {s: [r for r in mine if r.get("part") not in NOT_PARTS]
            for s, mine in students.items()
            if {r.get("status") for r in mine if r.get("part") not in NOT_PARTS} != {"missing"}}


def _rates(exercise: str, students: dict[str, list[dict[str, str]]]) -> list[PartRate]:
    by_part: dict[str, list[dict[str, str]]] = defaultdict(list)
    for mine in _submitted(students).values():
        for r in mine:
            by_part[r.get("part", "")].append(r)
    return [_rate(exercise, part, rows) for part, rows in by_part.items()]


def _rate(exercise: str, part: str, rows: list[dict[str, str]]) -> PartRate:
    """One part's rate: a row waiting for a person is no grade yet (its 0 points are not
    the student's), a row a person graded counts its share of the points."""
    judged = [r for r in rows if r.get("status") != NEEDS]
    hand = [r for r in judged if r.get("status") in BY_A_PERSON]
    return PartRate(exercise, part, len(rows), sum(r.get("status") == "passed" for r in rows),
                    sum(_number(r.get("points", "")) for r in judged) / len(judged)
                    if judged else 0.0,
                    max(_number(r.get("max_points", "")) for r in rows),
                    by_hand=len(hand), waiting=len(rows) - len(judged),
                    hand_share=sum(_share(r) for r in hand))


def _share(row: dict[str, str]) -> float:
    """A row's points as a share of its maximum, within 0..1 (a row worth no points: 1)."""
    most = _number(row.get("max_points", ""))
    return min(1.0, max(0.0, _number(row.get("points", "")) / most)) if most > 0 else 1.0


def _misconceptions(exercise: str, students: dict[str, list[dict[str, str]]],
                    catalogue: Any) -> list[Misconception]:
    """Per part and hint, the students whose row the hint recognised, most common first."""
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for student, mine in students.items():
        for r in mine:
            for hint in dict.fromkeys((r.get("hint") or "").split()):
                seen[(r.get("part", ""), hint)].append(student)
    found = []
    for (part, hint), who in seen.items():
        messages = catalogue.get(part, {}) if isinstance(catalogue, dict) else {}
        message = messages.get(hint, "") if isinstance(messages, dict) else ""
        found.append(Misconception(exercise, part, hint, str(message), len(who), min(who)))
    return sorted(found, key=lambda m: (m.part, -m.students, m.hint))


def shared_cells(cells: Iterable[list[Any]], solutions: Any = None) -> list[SharedCell]:
    """Groups of two or more students with the same normalized solution cell, the largest
    cells first (short ones are more often alike by chance); ``solutions`` (exercise ->
    grade_id -> digest) marks those equal to the source's own solution."""
    solutions = solutions if isinstance(solutions, dict) else {}
    groups: dict[tuple[str, str, str], tuple[int, set[str]]] = {}
    for student, exercise, cell, digest, tokens in cells:
        groups.setdefault((exercise, cell, digest), (tokens, set()))[1].add(student)
    found = [SharedCell(exercise, cell, tokens, sorted(who),
                        _solution_digest(solutions, exercise, cell) == digest)
             for (exercise, cell, digest), (tokens, who) in groups.items() if len(who) > 1]
    return sorted(found, key=lambda s: (-s.tokens, -len(s.students), s.exercise, s.cell))


def _solution_digest(solutions: dict[str, Any], exercise: str, cell: str) -> Any:
    mine = solutions.get(exercise)
    return mine.get(cell) if isinstance(mine, dict) else None
