"""The gradebook's truth: one state file per (student, exercise) under ``OUT/.state``.

Each file is written (atomically) the moment its submission is graded, and holds the rows, the
resume key and what the late policy and the exports need of the job (its assignment folder,
timestamp, whether anything was submitted). grades.csv, nbgrader_grades.csv, manual.csv and the
feedback are views of these files, rebuilt whole on every run: a run that grades some students
(``--student``, or a folder holding only a resubmission) replaces their files alone, and every
other student's rows come back as they were. A crash half-way loses nothing: what was graded is
on disk, and the next run rebuilds the views.

A student leaves the gradebook only through the roster: with ``--roster``, a student kept from
earlier runs who is neither on it nor in this run's submissions is removed (state, feedback
and graded notebooks; the runs in .work/ stay, for replay).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edu_dl.grading.model import Exercise, Job, Refused, Row, safe_file_name
from edu_dl.grading.notebooks import write_atomic
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.files import parse_time

STATE = ".state"
# A student's rows from collecting (ignored copies, refused folders). An exercise's file ends in
# .json, so no exercise name can take this one.
COLLECTED = "collected.rows"
OPTIONS = ".options.json"  # what the last run applied; no student folder starts with a dot
MAX_STATE_BYTES = 16 << 20  # rows are capped (model.MESSAGE_CAP), so a state file is small


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

    @property
    def submitted(self) -> bool:
        """Whether a notebook was found for it (graded, refused or unreadable); for a file of
        an older grader, which kept no facts, whether its rows say anything but missing."""
        if not self.job:
            return any(r.status != "missing" for r in self.rows)
        return bool(self.job.get("path") or self.job.get("refused"))


def state_path(out: Path, student: str, exercise: str) -> Path:
    """The state file of ``student``'s ``exercise``: ``OUT/.state/<student>/<exercise>.json``,
    the name made file-safe."""
    return out / STATE / safe_file_name(student) / f"{exercise}.json"


def job_facts(job: Job) -> dict[str, Any]:
    """What a kept job must remember for the late policy, the exports and the HTML feedback."""
    return {"assignment": job.assignment, "path": str(job.path) if job.path else "",
            "refused": job.refused, "timestamp": job.timestamp.isoformat() if job.timestamp
            else "", "timestamp_problem": job.timestamp_problem}


def write_entry(out: Path, job: Job, rows: list[Row], key: str, basis: str, secret: str,
                content: str = "", grader: dict[str, float] | None = None) -> None:
    """Keep a job's rows (raises OSError: the caller logs it and grades it again next time),
    and ``grader``: what grading it cost the grader itself (``cost.Cost.rounded``)."""
    write_atomic(state_path(out, job.student, job.exercise.name), json.dumps({
        "key": key, "secret": secret, "basis": basis, "content": content,
        "student": job.student,
        "exercise": job.exercise.name, "job": job_facts(job),
        "rows": [asdict(r) for r in rows], "grader": grader or {}}).encode())


def read_entries(out: Path, log: Callable[[str], None]) -> dict[tuple[str, str], Entry]:
    """Every (student, exercise) the gradebook holds. A file that cannot be read is logged and
    left where it is (its submission is graded again when it is in the run)."""
    found: dict[tuple[str, str], Entry] = {}
    root = out / STATE
    if not root.is_dir():
        return found
    for path in sorted(root.glob("*/*.json")):
        entry = _entry(path)
        if entry is None:
            log(f"{path}: not a gradebook state file the grader can read; left out")
            continue
        found[(entry.student, entry.exercise)] = entry
    return found


def _entry(path: Path) -> Entry | None:
    try:
        data = json.loads(read_bounded(path, MAX_STATE_BYTES, "for a state file"))
        rows = [Row(**r) for r in data["rows"]]
        student = data.get("student", rows[0].student if rows else "")
        exercise = data.get("exercise", path.stem)
        if state_path(path.parents[2], student, exercise) != path:  # not where it belongs
            return None
        facts = dict(data.get("job", {}))
        if facts.get("timestamp"):
            parse_time(str(facts["timestamp"]))  # kept_job reads it: checked here, once
        return Entry(student, exercise, rows, str(data["key"]), str(data.get("basis", "")),
                     facts, str(data.get("content", "")))
    except (Refused, OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def kept_job(entry: Entry, exercise: Exercise) -> Job:
    """The job a kept entry was graded as (its submission is not read again)."""
    facts = entry.job
    stamp = facts.get("timestamp") or ""
    return Job(entry.student, exercise, Path(facts["path"]) if facts.get("path") else None,
               str(facts.get("assignment") or exercise.name), str(facts.get("refused") or ""),
               parse_time(stamp) if stamp else None, str(facts.get("timestamp_problem") or ""))


def write_collected(out: Path, student: str, rows: list[Row]) -> None:
    """A student's rows from collecting this run (none: the file goes)."""
    path = out / STATE / safe_file_name(student) / COLLECTED
    if rows:
        write_atomic(path, json.dumps({"student": student,
                                       "rows": [asdict(r) for r in rows]}).encode())
    else:
        path.unlink(missing_ok=True)


def read_collected(out: Path) -> dict[str, list[Row]]:
    """Every student's rows from collecting, by student; a file that will not read is skipped."""
    found: dict[str, list[Row]] = {}
    for path in sorted((out / STATE).glob(f"*/{COLLECTED}")):
        try:
            data = json.loads(read_bounded(path, MAX_STATE_BYTES, "for a state file"))
            found[str(data["student"])] = [Row(**r) for r in data["rows"]]
        except (Refused, OSError, ValueError, TypeError, KeyError):
            continue  # only notes (an ignored copy); the student's next run writes them again
    return found


def remove_students(out: Path, students: Iterable[str], feedback_dirs: Iterable[str]) -> None:
    """Take students out of the gradebook: their state, feedback pages and graded notebooks
    (the runs in .work/ stay, for replay)."""
    for student in students:
        name = safe_file_name(student)
        shutil.rmtree(out / STATE / name, ignore_errors=True)
        shutil.rmtree(out / "autograded" / name, ignore_errors=True)
        for folder in feedback_dirs:
            for page in (out / folder).glob(f"{name}.*"):
                if page.stem == name:
                    page.unlink(missing_ok=True)



def dropped_options(out: Path, applied: dict[str, str]) -> list[str]:
    """Notes on the options the last run applied to every row (due date, late policy,
    extensions, manual sheet, roster) that this run leaves out: a resubmission graded without
    ``--manual`` would otherwise drop every hand grade from the gradebooks unnoticed."""
    try:
        last = json.loads(read_bounded(out / STATE / OPTIONS, 1 << 20, "for a state file"))
    except (Refused, OSError, ValueError):
        return []
    return [f"the last run applied {flag} {last[flag]}, this one has none: the gradebooks "
            "no longer include it (pass the same options on every run)"
            for flag in applied if isinstance(last, dict) and last.get(flag)
            and not applied[flag]]


def remember_options(out: Path, applied: dict[str, str]) -> None:
    """What this run applied, for the next run's dropped_options (once its gradebooks are
    written)."""
    try:
        write_atomic(out / STATE / OPTIONS, json.dumps(applied, sort_keys=True).encode())
    except OSError:
        pass  # only a reminder is lost
