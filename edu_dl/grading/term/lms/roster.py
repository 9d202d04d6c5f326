"""The course roster with the learning-management system's ids.

nbgrader's columns (``id``, ``first_name``, ``last_name``, ``email``; ``id`` required, as
``edu-dl grade --roster`` reads them) and, optionally, the LMS's:

- ``canvas_id``: Canvas's user id (the number in a download's file names, the gradebook's "ID");
- ``sis_user_id``, ``sis_login_id``: the SIS ids Canvas shows ("SIS User ID", "SIS Login ID");
- ``section``: Canvas's section name, copied to its gradebook import;
- ``id_number``: Moodle's "ID number" of the user;
- ``moodle_participant_id``: Moodle's participant id of the student in one assignment (it
  differs between assignments; the grading worksheet maps it for you instead).

``edu-dl grade --roster`` reads the same file and ignores the extra columns. The roster is the
instructor's, but it is read bounded all the same.

``lms collect canvas`` records the Canvas ids it learned of each student it identified (the
user id in a file's name; through ``--metadata``, the SIS ids Canvas gives that user) in
``OUT/canvas_ids.csv``, a roster of the columns ``IDS_COLUMNS``, written and read here alone
(:func:`ids_csv`, :func:`read_ids`, strictly: a line it cannot vouch for stops the command);
``lms export canvas --collected OUT`` puts them before the roster's own (:func:`with_learned`).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, fields, replace
from pathlib import Path

from edu_dl.grading.model import HASHED, SAFE_NAME
from edu_dl.grading.term.csvio import WrittenCsv, csv_bytes
from edu_dl.grading.term.policy import MAX_ROSTER_BYTES, PolicyError
from edu_dl.grading.trust.bounded import read_named_file
from edu_dl.grading.trust.identity import NameClash, check_distinct

MAX_CELL = 200  # characters kept of a roster cell
IDS_FILE = "canvas_ids.csv"  # in lms collect's OUT: the Canvas ids collect learned
IDS_COLUMNS = ("id", "canvas_id", "sis_user_id", "sis_login_id")
MAX_IDS_BYTES = 16 << 20


@dataclass(frozen=True)
class Student:
    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    canvas_id: str = ""
    sis_user_id: str = ""
    sis_login_id: str = ""
    section: str = ""
    id_number: str = ""
    moodle_participant_id: str = ""


COLUMNS = tuple(f.name for f in fields(Student))
# Keys an LMS id is looked up by; each must name one student at most.
KEYS = ("canvas_id", "sis_user_id", "sis_login_id", "email", "id_number",
        "moodle_participant_id")


class Roster:
    """The students in the roster's order, and an index per LMS key."""

    def __init__(self, students: list[Student]) -> None:
        try:  # "Alice" and "alice" would share a folder on a case-blind disk, and a reader's eye
            check_distinct((s.id for s in students), "--roster: the ids",
                           "each student needs an id of their own")
        except NameClash as exc:
            raise PolicyError(str(exc)) from None
        self.students = students
        self.by: dict[str, dict[str, Student]] = {key: {} for key in KEYS}
        for student in students:
            for key in KEYS:
                value = _key(key, getattr(student, key))
                if not value:
                    continue
                other = self.by[key].get(value)
                if other is not None:
                    raise PolicyError(f"--roster: {other.id} and {student.id} share the "
                                      f"{key} {value!r}; each must be one student's")
                self.by[key][value] = student

    def find(self, key: str, value: str) -> Student | None:
        """The student whose ``key`` column holds ``value`` (e-mails in any case)."""
        return self.by[key].get(_key(key, value)) if value else None


def _key(key: str, value: str) -> str:
    value = value.strip()
    return value.lower() if key in ("email", "sis_login_id") else value


def read_lms_roster(path: Path) -> Roster:
    """The roster at ``path``: PolicyError (one sentence) when it cannot be used."""
    data = read_named_file(path, "--roster", MAX_ROSTER_BYTES, PolicyError)
    reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig", "replace")))
    if not reader.fieldnames or "id" not in reader.fieldnames:
        raise PolicyError(f"--roster {path}: needs a header with an 'id' column (and "
                          f"optionally {', '.join(COLUMNS[1:])})")
    try:
        return Roster(_students(path, reader))
    except csv.Error as exc:  # a cell over csv's field limit (128 KB), a NUL
        raise PolicyError(f"--roster {path}: line {reader.line_num}: {exc}") from None


def _students(path: Path, reader: csv.DictReader[str]) -> list[Student]:
    students: list[Student] = []
    seen: set[str] = set()
    for line in reader:
        values = {c: (line.get(c) or "").strip()[:MAX_CELL] for c in COLUMNS}
        if not values["id"]:
            continue
        if not SAFE_NAME.fullmatch(values["id"]) or HASHED.fullmatch(values["id"]):
            raise PolicyError(f"--roster {path}: the id {values['id']!r} is not a plain name "
                              "(letters, digits, _.@+-, not starting with a dot); it names "
                              "the student's folder of submissions")
        if values["id"] in seen:
            raise PolicyError(f"--roster {path}: the id {values['id']!r} appears twice")
        seen.add(values["id"])
        students.append(Student(**values))
    return students


def usable_id(column: str, value: str) -> bool:
    """Can ``value`` be recorded as a student's ``column`` (an IDS_COLUMNS id)? A Canvas user
    id is at most 18 ASCII digits; any other a printable text of at most MAX_CELL characters."""
    if column == "canvas_id":
        return value.isascii() and value.isdigit() and len(value) <= 18
    return bool(value) and value == value.strip() and value.isprintable() and \
        len(value) <= MAX_CELL


def ids_csv(ids: dict[str, dict[str, str]]) -> bytes:
    """``canvas_ids.csv``: student id -> {column: value} (IDS_COLUMNS), students sorted."""
    return csv_bytes(IDS_COLUMNS, ([student, *(ids[student].get(c, "") for c in
                                               IDS_COLUMNS[1:])] for student in sorted(ids)))


def read_ids(path: Path) -> dict[str, dict[str, str]]:
    """The ids ``lms collect`` recorded (``canvas_ids.csv``): student id -> {column: value}.
    Strict: a header other than IDS_COLUMNS, a student id that is not a plain name or comes
    twice, an id that is not usable (:func:`usable_id`) or is two students' stops the command
    with PolicyError naming the file and line."""
    data = read_named_file(path, f"the ids lms collect recorded ({IDS_FILE})", MAX_IDS_BYTES,
                           PolicyError)
    reader = WrittenCsv(data.decode("utf-8", "replace"))
    redo = "; it is lms collect's record: delete it and collect again, or fix the line"
    if tuple(reader.fieldnames or ()) != IDS_COLUMNS:
        raise PolicyError(f"{path}: not the ids lms collect records (its header is "
                          f"{','.join(IDS_COLUMNS)}){redo}")
    found: dict[str, dict[str, str]] = {}
    owner: dict[tuple[str, str], str] = {}
    try:
        for line in reader:
            where = f"{path}: line {reader.line_num}"
            if None in line or any(v is None for v in line.values()):
                raise PolicyError(f"{where}: not {len(IDS_COLUMNS)} cells{redo}")
            student = line["id"]
            if not SAFE_NAME.fullmatch(student) or HASHED.fullmatch(student):
                raise PolicyError(f"{where}: {student[:40]!r} is not a student id{redo}")
            if student in found:
                raise PolicyError(f"{where}: {student} appears twice{redo}")
            ids = {c: line[c] for c in IDS_COLUMNS[1:] if line[c]}
            for column, value in ids.items():
                if not usable_id(column, value):
                    raise PolicyError(f"{where}: {value[:40]!r} is not a {column}{redo}")
                other = owner.setdefault((column, _key(column, value)), student)
                if other != student:
                    raise PolicyError(f"{where}: {other} and {student} share the {column} "
                                      f"{value!r}{redo}")
            found[student] = ids
    except csv.Error as exc:
        raise PolicyError(f"{path}: line {reader.line_num}: {exc}{redo}") from None
    return found


def with_learned(roster: Roster, learned: dict[str, dict[str, str]]
                 ) -> tuple[Roster, list[str]]:
    """The roster with the ids collect learned in place of its own (a roster id kept where
    nothing was learned), and a line for each id that differs from the roster's."""
    differ: list[str] = []
    students: list[Student] = []
    for s in roster.students:
        ids = learned.get(s.id, {})
        for column, value in sorted(ids.items()):
            if getattr(s, column) and _key(column, getattr(s, column)) != _key(column, value):
                differ.append(f"{s.id}: Canvas gave the {column} {value!r} at collect, the "
                              f"roster has {getattr(s, column)!r}; exported: {value!r}")
        students.append(replace(s, **ids))
    try:
        return Roster(students), differ
    except PolicyError as exc:
        raise PolicyError(f"the roster with the ids lms collect recorded: {exc}") from None
