"""Grading by hand: the sheet of what a person must grade (``manual.csv``) and merging it back.

The grader writes one line per "needs manual grading" row (graded answers, tasks): student,
exercise, cell, max points, the answer (capped), points and comment left blank. The instructor
fills in points (and a comment) and passes the sheet with ``--manual sheet.csv`` on the next run;
its points replace the row's, checked to lie within 0..max, and a line that names no row of
the gradebook stops the batch with one sentence (a typo must not lose a grade silently). The
lines are then kept in the gradebook's database (``gradebook.save_hand_grades``), as
``edu-dl mark``'s saves are, and every later run applies those that name a row
(:func:`applicable`) without the sheet.
Each line carries ``answer_id``, a digest of the whole answer: points given to an answer that
has since changed (a resubmission) are not merged, and the row asks to be graded again.

A line for an autograded row (a part, a test cell, even a missing one) overrides its points:
its comment is the reason, required, and kept in the gradebook's ``reason`` column; the row
says what the grader had given, and the next manual.csv keeps the line.
"""

from __future__ import annotations

import csv
import hashlib
import math
from pathlib import Path

from edu_dl.grading.model import BY_HAND, NEEDS, Row, cap_text
from edu_dl.grading.notebooks import NotebookError
from edu_dl.grading.stages.page_names import anchor
from edu_dl.grading.term.csvio import WrittenCsv
from edu_dl.grading.term.renumbered import explained
from edu_dl.grading.trust.bounded import read_named_file
from edu_dl.grading.trust.identity import NameClash, Names, written

COLUMNS = ("student", "exercise", "cell", "max_points", "rubric", "answer", "answer_id",
           "points", "comment", "page")
GRADED = "graded by hand"
OVERRIDDEN = "overridden"
MAX_SHEET_BYTES = 32 << 20
ANSWER_CAP = 4000  # characters of an answer in the sheet
Key = tuple[str, str, str]
Filled = tuple[float, str, str]  # points, comment, answer_id ("" on a sheet without the column)


def answer_id(answer: str) -> str:
    """A short digest of the whole answer (the sheet shows it capped). "id-" keeps spreadsheets
    from reading the hex digits as a number."""
    return "id-" + hashlib.sha256(answer.encode()).hexdigest()[:16]


class ManualSheetError(NotebookError):
    """A filled-in sheet the grader will not merge; the message says which line and why."""


def is_manual(row: Row) -> bool:
    """Whether a person grades ``row``: judged by hand, and still to grade or graded already."""
    return row.judged == BY_HAND and row.status in (NEEDS, GRADED)


def sheet(rows: list[Row], filled: dict[Key, Filled],
          pages: dict[tuple[str, str], str] | None = None,
          rubrics: dict[tuple[str, str], str] | None = None) -> list[list[object]]:
    """The lines of manual.csv: every row a person grades, with what the sheet already holds
    for the answer as it is now, every autograded row a person overrode, and where its
    notebook's feedback page shows it (``pages``: (student, exercise) -> the page's path
    relative to manual.csv): the answer's plots and outputs, which the answer column (source,
    capped) cannot show. ``rubrics``: (exercise, cell) -> the source cell's rubric as one line
    (``rubric.as_text``), shown to the person beside the answer."""
    lines: list[list[object]] = []
    for row in rows:
        if is_manual(row) or row.status == OVERRIDDEN:
            points, comment = None, ""
            kept = filled.get(written_key(row))
            if kept is not None and row.status in (GRADED, OVERRIDDEN):
                points, comment = kept[0], kept[1]
            lines.append([row.student, row.exercise, row.part, f"{row.max_points:g}",
                          (rubrics or {}).get((row.exercise, row.part), ""),
                          cap_text(row.answer, ANSWER_CAP), answer_id(row.answer),
                          "" if points is None else f"{points:g}", comment,
                          _link((pages or {}).get((row.student, row.exercise)), row.part)])
    return lines


def _link(page: str | None, cell: str) -> str:
    return f"{page}#{anchor(cell)}" if page else ""


def written_key(row: Row) -> Key:
    """(student, exercise, cell) as manual.csv holds them (``identity.written``)."""
    return (written(row.student), written(row.exercise), written(row.part))


def read_sheet(path: Path) -> dict[Key, Filled]:
    """(student, exercise, cell) -> (points, comment, answer_id) of every line with points
    filled in."""
    data = read_named_file(path, "--manual", MAX_SHEET_BYTES, ManualSheetError)
    reader = WrittenCsv(data.decode("utf-8-sig", "replace"))  # the formula guard taken off
    try:
        lines = list(reader)
    except csv.Error as exc:  # a NUL byte, a field over csv's size limit
        raise ManualSheetError(f"--manual {path}, line {reader.line_num}: not CSV the grader "
                               f"can read ({exc})") from None
    missing = [c for c in ("student", "exercise", "cell", "points") if c not in
               (reader.fieldnames or [])]
    if missing:
        raise ManualSheetError(f"--manual {path}: no column {', '.join(missing)}; fill in the "
                               "manual.csv the grader wrote")
    filled: dict[Key, Filled] = {}
    first: dict[Key, int] = {}
    for number, line in enumerate(lines, start=2):
        text = (line.get("points") or "").strip()
        if not text:
            continue
        student, exercise, cell = ((line.get(c) or "").strip()
                                   for c in ("student", "exercise", "cell"))
        key = (student, exercise, cell)
        if key in first:  # which of two grades is meant cannot be told
            raise ManualSheetError(f"--manual {path}, lines {first[key]} and {number}: both "
                                   f"give points to {'/'.join(key)}; keep one")
        first[key] = number
        try:
            points = float(text)
        except ValueError:
            points = math.nan
        if not math.isfinite(points):
            raise ManualSheetError(f"--manual {path}, line {number}: points {text!r} is not a "
                                   "number")
        filled[key] = (points, cap_text((line.get("comment") or "").strip()),
                       (line.get("answer_id") or "").strip())
    return filled


def merge(rows: list[Row], filled: dict[Key, Filled], path: Path | str) -> int:
    """Put the sheet's points into the rows a person grades, and override the autograded rows
    it names with a reason; returns how many were merged. Points given to another answer than
    the row's (it changed since) are left out: the row says so and waits to be graded again."""
    # A line's student is one student of the gradebook, exactly, or the line is refused
    # (identity.Names): "alice" never lands on "alice " or "alice\u200b".
    found, unknown = _rows_of(rows, filled, path)
    if unknown:
        shown = "; ".join("/".join(key) for key in unknown[:5])
        known = {r.exercise for r in rows} | {r.part for r in rows}
        raise ManualSheetError(explained(
            f"--manual {path}: {len(unknown)} line(s) name no row of the gradebook ({shown}); "
            "keep student, exercise and cell as manual.csv or grades.csv (its part column) "
            "have them", [name for key in unknown for name in key[1:]], known))
    merged = 0
    for key, (points, comment, graded_answer) in filled.items():
        row = found[key]
        if not 0 <= points <= row.max_points:
            raise ManualSheetError(f"--manual {path}: {'/'.join(key)} has {points:g} points, "
                                   f"outside 0..{row.max_points:g}")
        if not is_manual(row):
            override(row, points, comment, path)
        elif graded_answer and graded_answer != answer_id(row.answer):
            row.message = (f"the answer changed since it was graded by hand ({points:g} "
                           "points for the earlier one): grade it again")
            continue
        else:
            row.points, row.status = points, GRADED
            row.message = cap_text(comment or "graded by hand")
        merged += 1
    return merged


def _rows_of(rows: list[Row], filled: dict[Key, Filled], path: Path | str
             ) -> tuple[dict[Key, Row], list[Key]]:
    """The row each line names, and the lines that name none."""
    manual = {_key(r): r for r in rows if is_manual(r)}
    automatic = {_key(r): r for r in rows if r.part and not is_manual(r)}
    names = Names(r.student for r in rows)
    found: dict[Key, Row] = {}
    unknown: list[Key] = []
    for key in filled:
        try:
            student = names.resolve(key[0], f"--manual {path}, the line for {'/'.join(key)}")
        except NameClash as exc:
            raise ManualSheetError(str(exc)) from None
        row = None if student is None else \
            manual.get((student, *key[1:])) or automatic.get((student, *key[1:]))
        if row is None:
            unknown.append(key)
        else:
            found[key] = row
    return found, unknown


def applicable(rows: list[Row], kept: dict[Key, Filled], where: str) -> dict[Key, Filled]:
    """The gradebook's hand grades (``kept``) that apply to ``rows``: those that name one of
    them, within its points, an override with its reason. The others stay kept, unused (a
    student the roster removed, an exercise not graded in this run)."""
    try:
        found, _ = _rows_of(rows, kept, where)
    except ManualSheetError:
        return {}
    return {key: grade for key, grade in kept.items() if key in found
            and 0 <= grade[0] <= found[key].max_points
            and (is_manual(found[key]) or grade[1])}


def _key(row: Row) -> Key:
    """A row by its student as it is, and its exercise and cell as the sheet writes them."""
    return (row.student, written(row.exercise), written(row.part))


def override(row: Row, points: float, reason: str, path: Path | str) -> None:
    """A person's points in place of the grader's, for the reason given (required: a grade
    that differs from what the grader found must say why)."""
    if not reason:
        raise ManualSheetError(
            f"--manual {path}: {'/'.join(written_key(row))} overrides an autograded row "
            f"({row.status}, {row.points:g} of {row.max_points:g} points) without a reason: "
            "write why in its comment column")
    row.message = cap_text(f"{reason} (overridden by hand; the grader gave {row.points:g} of "
                           f"{row.max_points:g}, {row.status}: {row.message})")
    row.points, row.status, row.reason, row.judged = points, OVERRIDDEN, reason, BY_HAND
