"""The rows a person grades in ``edu-dl mark``, and where their points are saved.

The rows come from OUT's gradebook (``gradebook.read_entries``, the grader's rows before any
hand grade was merged); what people gave comes from the gradebook's hand grades
(``gradebook.hand_grades``), read again on every request, so a reload, a restart or another
person's save is seen. A sheet that exists when the page starts (one filled in a spreadsheet,
one from before the database) has its lines imported, those of rows not graded in the database
yet. A save checks the points (a number within 0..max; an autograded row only with a reason,
as ``manual.merge`` does) and keeps that one grade in the database (one transaction: two
people saving at once never lose each other's grade), with who gave it and when. Then the
sheet is written again from the database, whole, in manual.csv's format (``manual.sheet``,
``csv_bytes``; a temporary file renamed over it, under an ``fcntl`` lock on the sheet's folder,
so that the sheets of two saves are written in the order of their saves): it is a view, for a
spreadsheet and for ``edu-dl grade --manual``. The next ``edu-dl grade`` applies the database's
hand grades without it.

With ``anonymous``, names never leave this module: a row is shown as "student N" (N by the
sorted names, stable while the gradebook keeps its students), and so is every occurrence of the
student's id or roster names in the answer and the grader's message (``answer``).
"""

from __future__ import annotations

import dataclasses
import fcntl
import html
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edu_dl.grading.authoring import rubric
from edu_dl.grading.model import Refused, Row
from edu_dl.grading.notebooks import write_atomic
from edu_dl.grading.stages.page_names import anchor, page_path
from edu_dl.grading.term import db, gradebook
from edu_dl.grading.term.csvio import csv_bytes
from edu_dl.grading.term.manual import (
    COLUMNS,
    GRADED,
    NEEDS,
    OVERRIDDEN,
    Filled,
    Key,
    answer_id,
    is_manual,
    read_sheet,
    sheet,
    written_key,
)
from edu_dl.grading.term.mark.answer import (
    NameShown,
    answer_html,
    autograded_path,
    graded_cell,
    hidden,
    name_pattern,
)
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.identity import written

SHEET_NAME = "manual-filled.csv"  # beside OUT, unless --sheet or the course config says


class MarkError(ValueError):
    """A save the sheet refuses (points out of range, an override without a reason, a row
    that does not exist); the message is one sentence for the page."""


@dataclass(frozen=True)
class Item:
    """One row a person may grade: the grader's row and where its feedback page is."""

    row: Row
    page: str  # relative to OUT, "" when there is none

    @property
    def key(self) -> Key:
        """(student, exercise, cell) as the sheet writes them."""
        return written_key(self.row)

    @property
    def by_hand(self) -> bool:
        """Whether a person grades it (else it is autograded and may only be overridden)."""
        return is_manual(self.row)


def default_sheet(out: Path, configured: Path | None) -> Path:
    """The sheet ``edu-dl mark`` saves to: the course config's ``manual`` when it has one,
    else ``manual-filled.csv`` beside OUT."""
    return configured if configured is not None else out.resolve().parent / SHEET_NAME


class Desk:
    """OUT's rows that need a person (with ``overrides``, every autograded row too) and the
    sheet they are saved to."""

    def __init__(self, out: Path, sheet_path: Path, *, anonymous: bool = False,
                 overrides: bool = False, source: Path | None = None,
                 log: Callable[[str], None] = lambda _: None, db_url: str | None = None,
                 grader: str | None = None,
                 names: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """``names``: student id -> (first name, last name, e-mail), as a roster gives them:
        hidden in the answers when ``anonymous``, as the id is."""
        self.out, self.sheet_path, self.source = out, sheet_path, source
        self.names = names or {}
        self.store = db.store(out, db_url)
        self.grader = f"edu-dl mark ({grader or gradebook.who()})"
        self.anonymous, self.overrides = anonymous, overrides
        self.rows: list[Row] = []  # every row of the gradebook: the sheet is written from them
        self.pages: dict[tuple[str, str], str] = {}
        self.assignments: dict[tuple[str, str], str] = {}
        self._rubric_lines: dict[tuple[str, str], str] = {}  # (exercise, cell): read once
        for entry in gradebook.read_entries(self.store, log).values():
            self.rows += entry.rows
            assignment = str(entry.job.get("assignment") or entry.exercise)
            self.assignments[(entry.student, entry.exercise)] = assignment
            where = page_path(entry.student, assignment, entry.exercise)
            if (out / where).is_file() and not (out / where).is_symlink():
                self.pages[(entry.student, entry.exercise)] = where
        self.items = [Item(r, self.pages.get((r.student, r.exercise), "")) for r in self.rows
                      if is_manual(r) or (overrides and r.part)]
        students = sorted({r.student for r in self.rows})
        self._alias = {name: f"student {n}" for n, name in enumerate(students, start=1)}
        self._patterns: dict[str, re.Pattern[str]] = {}
        if self.sheet_path.exists() or self.sheet_path.is_symlink():  # read_sheet refuses a link
            sheet_lines: dict[Key, Filled | None] = dict(read_sheet(self.sheet_path))
            gradebook.save_hand_grades(self.store, sheet_lines, f"sheet {self.sheet_path}",
                                       only_new=True)

    # ------------------------------------------------------------------ reading

    def filled(self) -> dict[Key, Filled]:
        """The hand grades the gradebook holds now."""
        return gradebook.hand_grades(self.store)

    def shown_student(self, row: Row) -> str:
        """The student as the page may show them: a pseudonym when anonymous."""
        return self._alias[row.student] if self.anonymous else row.student

    def pattern(self, row: Row) -> re.Pattern[str] | None:
        """The student's names as they may appear in an answer; None when not anonymous."""
        if not self.anonymous:
            return None
        if row.student not in self._patterns:
            self._patterns[row.student] = name_pattern(row.student,
                                                       self.names.get(row.student, ()))
        return self._patterns[row.student]

    def hide(self, row: Row, text: str) -> str:
        """``text`` of a row (its answer, its message) as the page may show it: anonymous, every
        name of the student replaced by their pseudonym."""
        return hidden(text, self.pattern(row), self.shown_student(row))

    def cell(self, item: Item) -> Any | None:
        """The row's cell in the executed notebook grading kept (None when there is none)."""
        row = item.row
        assignment = self.assignments.get((row.student, row.exercise), row.exercise)
        return graded_cell(autograded_path(self.out, row.student, assignment, row.exercise),
                           row.part)

    def where(self, item: Item) -> str:
        """student/exercise/cell for a message, the student as the page may show them."""
        return "/".join((written(self.shown_student(item.row)), *item.key[1:]))

    def item(self, index: int) -> Item:
        """The row at ``index`` of the list; MarkError when there is none."""
        if not 0 <= index < len(self.items):
            raise MarkError(f"there is no row {index} (the list has {len(self.items)})")
        return self.items[index]

    def state(self, item: Item, filled: dict[Key, Filled]) -> dict[str, Any]:
        """The row as the list shows it: status, and the points and comment the sheet holds."""
        row, kept = item.row, filled.get(item.key)
        status, note = row.status, ""
        points: float | None = None
        comment = ""
        if kept is not None:
            if item.by_hand and kept[2] and kept[2] != answer_id(row.answer):
                note = (f"the answer changed since it was graded by hand ({kept[0]:g} points "
                        "for the earlier one): grade it again")
            else:
                points, comment = kept[0], kept[1]
                status = GRADED if item.by_hand else OVERRIDDEN
        return {"student": self.shown_student(row), "exercise": row.exercise,
                "cell": row.part, "max_points": row.max_points, "status": status,
                "graded": points is not None or not item.by_hand,
                "autograded": not item.by_hand, "points": points, "comment": comment,
                "note": note, "grader_points": row.points, "grader_status": row.status}

    def listing(self) -> list[dict[str, Any]]:
        """Every row, in the gradebook's order, as the page lists them."""
        filled = self.filled()
        return [{"index": i, **self.state(item, filled)} for i, item in enumerate(self.items)]

    def detail(self, index: int) -> dict[str, Any]:
        """One row with its answer (as text: the page escapes it; ``rendered``: whether
        :func:`answer_page` shows it as the feedback page does) and the grader's message."""
        item = self.item(index)
        row = item.row
        cell, note = source_cell(self.source, row, self.assignments.get(
            (row.student, row.exercise), row.exercise))
        solution = None if cell is None else cell_text(cell)
        criteria, rubric_note = cell_rubric(cell, f"{row.exercise}.ipynb: cell {row.part!r}")
        return {"index": index, **self.state(item, self.filled()),
                "answer": self.hide(row, row.answer), "message": self.hide(row, row.message),
                "rendered": self.cell(item) is not None, "has_page": bool(item.page),
                "anchor": anchor(row.part), "solution": solution, "solution_note": note,
                "rubric": [dataclasses.asdict(c) for c in criteria], "rubric_note": rubric_note}

    # ------------------------------------------------------------------ saving

    def save(self, index: int, points_text: str, comment: str) -> dict[str, Any]:
        """Check and keep a person's points and comment for the row at ``index`` (blank points
        take its line out of the sheet); returns the row as now saved."""
        item = self.item(index)
        row = item.row
        comment = comment.strip()
        where = self.where(item)
        points = _points(points_text, row, where)
        if points is not None and not item.by_hand and not comment:
            raise MarkError(f"{where} is autograded ({row.status}, "
                            f"{row.points:g} of {row.max_points:g} points): an override needs "
                            "a reason; write why in the comment")
        grade = None if points is None else (points, comment, answer_id(row.answer))
        with self._locked():  # the sheets of two saves are written in the order of the saves
            gradebook.save_hand_grades(self.store, {item.key: grade}, self.grader)
            self._write(self.filled())  # as it is now: every other person's grade stays
        return self.detail(index)

    def _write(self, filled: dict[Key, Filled]) -> None:
        """The sheet in manual.csv's format: ``manual.sheet`` over the rows as ``edu-dl grade
        --manual`` would leave them, then any line that names no row of OUT, kept as given."""
        rows = []
        for row in self.rows:
            kept = filled.get(written_key(row))
            if kept is not None and (is_manual(row) or row.part):
                if is_manual(row):
                    fresh = not kept[2] or kept[2] == answer_id(row.answer)
                    row = dataclasses.replace(row, status=GRADED if fresh else NEEDS)
                else:
                    row = dataclasses.replace(row, status=OVERRIDDEN)
            rows.append(row)
        pages = {key: os.path.relpath(self.out / page, self.sheet_path.parent)
                 for key, page in self.pages.items()}
        lines = sheet(rows, filled, pages, self._rubrics(rows))
        known = {written_key(r) for r in self.rows}
        lines += [[*key, "", "", "", kept[2], f"{kept[0]:g}", kept[1], ""]
                  for key, kept in filled.items() if key not in known]
        _write_sheet(self.sheet_path, csv_bytes(COLUMNS, lines))

    def _rubrics(self, rows: list[Row]) -> dict[tuple[str, str], str]:
        """(exercise, cell) -> the source cell's rubric as manual.csv shows it, for the rows a
        person grades (each source cell read once in this desk's life)."""
        for row in rows:
            key = (row.exercise, row.part)
            if is_manual(row) and key not in self._rubric_lines:
                cell, _ = source_cell(self.source, row, self.assignments.get(
                    (row.student, row.exercise), row.exercise))
                criteria, _ = cell_rubric(cell, f"{row.exercise}.ipynb: cell {row.part!r}")
                self._rubric_lines[key] = rubric.as_text(criteria)
        return self._rubric_lines

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive ``flock`` on the sheet's folder (no lock file is left anywhere)."""
        folder = self.sheet_path.parent
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _points(text: str, row: Row, where: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        points = float(text)
    except ValueError:
        points = math.nan
    if not math.isfinite(points):
        raise MarkError(f"{where}: points {text!r} is not a number")
    if not 0 <= points <= row.max_points:
        raise MarkError(f"{where}: {points:g} points is outside 0..{row.max_points:g}")
    return points


def _write_sheet(path: Path, data: bytes) -> None:
    """The sheet written whole (``write_atomic``: a reader sees the old sheet or the new one),
    flushed to disk. A sheet that exists keeps its mode; a new one is owner-only (it holds
    grades and answers)."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        mode = 0o600
    write_atomic(path, data, mode=mode, durable=True)


MAX_SOURCE_BYTES = 64 << 20


def source_cell(source: Path | None, row: Row, assignment: str) -> tuple[dict[str, Any] | None,
                                                                         str]:
    """The source notebook's cell of the row's grade_id (the solution, or the task's text), as
    read, and a note saying why there is none."""
    if source is None:
        return None, ("the solution is not available: give --source (or the course config's "
                      "source) to see the source notebook's cell beside the answer")
    import json

    import nbformat

    from edu_dl.grading.nbgrader import grade_id

    folder = source if source.is_dir() else source.parent
    names = [folder / assignment / f"{row.exercise}.ipynb", folder / f"{row.exercise}.ipynb"]
    if not source.is_dir():
        names.insert(0, source)
    for path in names:
        if path.stem != row.exercise or not path.is_file():
            continue
        try:
            nb = json.loads(read_bounded(path, MAX_SOURCE_BYTES, "for a source notebook"))
            for cell in nb.get("cells", []):
                if isinstance(cell, dict) and grade_id(nbformat.from_dict(cell)) == row.part:
                    return cell, ""
        except (Refused, OSError, ValueError, AttributeError, TypeError):
            return None, f"the solution is not available: {path} could not be read"
        return None, f"the solution is not available: {path} has no cell {row.part!r}"
    return None, f"the solution is not available: no {row.exercise}.ipynb in {folder}"


def cell_text(cell: dict[str, Any]) -> str:
    """A cell's source as one string (a notebook file may hold it as a list of lines)."""
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else str(text)


def cell_rubric(cell: dict[str, Any] | None, where: str) -> tuple[tuple[rubric.Criterion, ...],
                                                                   str]:
    """The source cell's rubric (``rubric.read``), and a note when it cannot be read (its
    sentence)."""
    if cell is None:
        return (), ""
    import nbformat

    try:
        return rubric.read(nbformat.from_dict(cell), where), ""
    except (rubric.RubricError, AttributeError, TypeError, ValueError) as exc:
        return (), str(exc)


MAX_PAGE_BYTES = 128 << 20
HEADER = re.compile(rb'<div class="edu-header">.*?</table></div>', re.S)


def feedback_page(desk: Desk, index: int) -> bytes:
    """The row's feedback page, as ``edu-dl grade`` wrote it (already sanitized, scripts
    refused by its own policy). Anonymous: without its header, which names the student, and
    refused when the name still shows anywhere on it."""
    item = desk.item(index)
    if not item.page:
        raise MarkError("this notebook has no feedback page")
    try:
        data = read_bounded(desk.out / item.page, MAX_PAGE_BYTES, "for a feedback page")
    except (Refused, OSError) as exc:
        raise MarkError(f"the feedback page cannot be read ({exc})") from None
    if desk.anonymous:
        data = HEADER.sub(b"", data, count=1)
        name = item.row.student
        if any(form.encode() in data for form in {name, html.escape(name), written(name)}):
            raise MarkError("the feedback page shows the student's name elsewhere than in its "
                            "header: not shown while grading anonymously")
    return data


def answer_page(desk: Desk, index: int) -> bytes:
    """The row's cell alone, rendered as its feedback page shows it (Markdown, highlighted
    code, outputs and plots), anonymous without the student's names."""
    item = desk.item(index)
    cell = desk.cell(item)
    if cell is None:
        raise MarkError("this answer has no executed notebook to show it from")
    try:
        return answer_html(cell, desk.pattern(item.row), desk.shown_student(item.row)).encode()
    except NameShown as exc:
        raise MarkError(str(exc)) from None
    except Exception as exc:  # nbconvert on a cell it cannot render: the text still shows
        raise MarkError(f"the answer cannot be rendered ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); its text is beside it") from None
