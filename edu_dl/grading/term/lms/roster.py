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
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, fields
from pathlib import Path

from edu_dl.grading.model import HASHED, SAFE_NAME
from edu_dl.grading.term.policy import MAX_ROSTER_BYTES, PolicyError
from edu_dl.grading.trust.bounded import read_named_file
from edu_dl.grading.trust.identity import NameClash, check_distinct

MAX_CELL = 200  # characters kept of a roster cell


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
