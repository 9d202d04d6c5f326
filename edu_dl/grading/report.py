"""What ``edu-dl grade`` writes and prints: grades.csv, feedback/<student>.md, the nbgrader export
and the terminal summary.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .model import Job, Row, Summary, safe_file_name
from .notebooks import write_atomic

COLUMNS = ("student", "exercise", "part", "points", "max_points", "status", "message", "sandbox",
           "judged")
NBGRADER_COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
                    "email", "raw_score", "late_submission_penalty", "score", "max_score")


def write_outputs(out: Path, rows: list[Row], jobs: list[Job], *, dates: Any = None,
                  roster: dict[str, Any] | None = None) -> None:
    """grades.csv, feedback/<student>.md and nbgrader_grades.csv, each written atomically.

    ``dates`` (policy.Dates) and ``roster`` (id -> policy.Person) fill nbgrader's duedate,
    timestamp, late penalty and name columns."""
    from .policy import LATE

    table = ([getattr(r, c) for c in COLUMNS] for r in rows)
    write_atomic(out / "grades.csv", _csv(COLUMNS, table))
    by_student: dict[str, list[Row]] = {}
    for row in rows:
        by_student.setdefault(row.student, []).append(row)
    for student, mine in by_student.items():
        write_atomic(out / "feedback" / f"{safe_file_name(student)}.md",
                     feedback(student, mine).encode())
    by_job = {(j.student, j.exercise.name): j for j in jobs}
    totals: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        if row.part:
            t = totals.setdefault((row.student, row.exercise), [0.0, 0.0, 0.0])
            if row.part == LATE:
                t[2] -= row.points
            else:
                t[0] += row.points
                t[1] += row.max_points
    due = getattr(dates, "due", None)
    table2 = []
    for (student, exercise), (raw, most, penalty) in totals.items():
        job = by_job.get((student, exercise))
        person = (roster or {}).get(student)
        stamp = job.timestamp if job is not None else None
        table2.append([
            job.assignment if job is not None else exercise,
            f"{due:%Y-%m-%d %H:%M:%S} UTC" if due else "",
            f"{stamp:%Y-%m-%d %H:%M:%S} UTC" if stamp else "", student,
            getattr(person, "last_name", ""), getattr(person, "first_name", ""),
            getattr(person, "email", ""), f"{raw:g}", f"{penalty:g}" if penalty else "0.0",
            f"{raw - penalty:g}", f"{most:g}"])
    write_atomic(out / "nbgrader_grades.csv", _csv(NBGRADER_COLUMNS, table2))


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet will not run as a formula (OWASP's CSV injection rule): one
    that starts with = + - @ or a tab/CR gets a leading apostrophe. Numbers stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv(header: Iterable[str], rows: Iterable[list[Any]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([spreadsheet_safe(v) for v in row] for row in rows)
    return buffer.getvalue().encode("utf-8")


def feedback(student: str, rows: list[Row]) -> str:
    """A student's Markdown feedback: per exercise, each part with its points and message."""
    lines = [f"# Feedback for {student}", ""]
    for exercise in dict.fromkeys(r.exercise for r in rows):
        mine = [r for r in rows if r.exercise == exercise]
        got, total = sum(r.points for r in mine), sum(r.max_points for r in mine)
        lines += [f"## {exercise}: {got:g} / {total:g}", "",
                  "| part | points | status | message |", "|---|---|---|---|"]
        for r in mine:
            message = r.message.replace("|", "\\|").replace("\n", "<br>")
            lines.append(f"| {r.part or '-'} | {r.points:g} / {r.max_points:g} | {r.status} | "
                         f"{message} |")
        lines.append("")
    return "\n".join(lines)


def summary_text(summary: Summary) -> str:
    """The terminal summary: per exercise, submissions, mean score and statuses."""
    lines = [f"graded {summary.graded} submissions ({summary.reused} unchanged, reused) in "
             f"{summary.seconds:.1f} s; sandbox: "
             + ("bwrap" if summary.isolated else f"NONE ({summary.problem})")]
    by_ex: dict[str, list[Row]] = {}
    for row in summary.rows:
        by_ex.setdefault(row.exercise, []).append(row)
    lines.append(f"{'exercise':32} {'students':>8} {'mean':>7} {'max':>5}  statuses")
    for exercise, rows in by_ex.items():
        students = {r.student for r in rows}
        scores = Counter()  # type: Counter[str]
        for r in rows:
            scores[r.student] += r.points  # type: ignore[assignment]
        total = sum(r.max_points for r in rows) / max(1, len(students))
        mean = sum(scores.values()) / max(1, len(students))
        statuses = ", ".join(f"{s} {n}" for s, n in Counter(r.status for r in rows).most_common())
        lines.append(f"{exercise:32} {len(students):>8} {mean:>7.2f} {total:>5g}  {statuses}")
    return "\n".join(lines)
