"""What ``edu-dl grade`` writes and prints: grades.csv, feedback/<student>.md, the nbgrader export
and the terminal summary.

Every string a student could have written (a name, a file name, an exception, an output, a
source) goes through ``trust.text`` on its way out: no writer can fail on it, no terminal obeys
it, no page runs it. The gradebooks are written first and whole; a student's feedback is written
apart, so a failure there costs only that student's page (and is logged).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

from edu_dl.grading.authoring import rubric
from edu_dl.grading.model import Job, Row, Summary, safe_file_name
from edu_dl.grading.notebooks import write_if_changed
from edu_dl.grading.term import manual
from edu_dl.grading.term.csvio import csv_bytes
from edu_dl.grading.term.policy import LATE
from edu_dl.grading.trust.text import for_markdown, for_terminal, visible

COLUMNS = ("student", "exercise", "part", "points", "max_points", "status", "message", "sandbox",
           "judged", "failed_cases", "hint", "reason")
HTML_FEEDBACK = "feedback_html"  # <student>.html, an index linking the notebooks' pages
# feedback/ holds <student>.md and (feedback.py) <student>/<assignment>/<notebook>.html
NBGRADER_COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
                    "email", "raw_score", "late_submission_penalty", "score", "max_score")


def write_outputs(out: Path, rows: list[Row], jobs: list[Job], *, dates: Any = None,
                  roster: dict[str, Any] | None = None, filled: dict[Any, Any] | None = None,
                  executed: Callable[[Job], Any] | None = None, course: Path | None = None,
                  log: Callable[[str], None] = print, costs: dict[Any, Any] | None = None
                  ) -> None:
    """grades.csv, each notebook's feedback page (feedback.py), manual.csv,
    nbgrader_grades.csv, then feedback/<student>.md and feedback_html/<student>.html (an
    index linking the pages), each written atomically.

    ``dates`` (policy.Dates) and ``roster`` (id -> policy.Person) fill nbgrader's duedate,
    timestamp, late penalty and name columns; ``filled`` (a merged manual sheet) keeps its points
    and comments in the new manual.csv; ``executed(job)`` gives the executed notebook of a job
    (or None) for the feedback pages; ``course``: an nbgrader course folder, whose
    feedback/ gets the pages too (nbgrader's release_feedback sends them). A student's
    feedback that cannot be written is logged and skipped: it never stops the others'.
    ``costs`` gets what each page made now cost the grader ((student, exercise) -> Cost)."""
    table = ([getattr(r, c) for c in COLUMNS] for r in rows)
    write_if_changed(out / "grades.csv", csv_bytes(COLUMNS, table))
    pages: dict[tuple[str, str], str] = {}  # manual.csv links them
    if executed is not None:  # feedback.py imports nbconvert (0.3 s): only to render pages
        from edu_dl.grading.stages.feedback import write_pages

        pages = write_pages(out, rows, jobs, executed, course, log, costs)
    exercises = {job.exercise.name: job.exercise for job in jobs}  # each once, not per student
    rubrics = {(name, gid): rubric.as_text(criteria) for name, exercise in exercises.items()
               for gid, criteria in exercise.rubrics.items()}
    write_if_changed(out / "manual.csv", csv_bytes(manual.COLUMNS, manual.sheet(
        rows, filled or {}, pages, rubrics)))
    write_if_changed(out / "nbgrader_grades.csv",
                 csv_bytes(NBGRADER_COLUMNS, _nbgrader_table(rows, jobs, dates, roster)))
    by_student: dict[str, list[Row]] = {}
    for row in rows:
        by_student.setdefault(row.student, []).append(row)
    for student, mine in by_student.items():
        try:
            mine_pages = {exercise: page for (who, exercise), page in pages.items()
                          if who == student}
            write_if_changed(out / "feedback" / f"{safe_file_name(student)}.md",
                             feedback(student, mine, mine_pages).encode())
            write_if_changed(out / HTML_FEEDBACK / f"{safe_file_name(student)}.html",
                             feedback_html(student, mine, mine_pages).encode())
        except Exception as exc:  # one student's page must not cost the others theirs
            log(for_terminal(f"feedback for {student!r} could not be written "
                             f"({type(exc).__name__}: {exc}); the gradebooks are complete"))


def _nbgrader_table(rows: list[Row], jobs: list[Job], dates: Any,
                    roster: dict[str, Any] | None) -> list[list[Any]]:
    """nbgrader_grades.csv's lines: one per (student, exercise), penalties apart."""
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
    due_for = getattr(dates, "due_for", None)  # a student's extension, else the batch's
    table = []
    for (student, exercise), (raw, most, penalty) in totals.items():
        job = by_job.get((student, exercise))
        person = (roster or {}).get(student)
        stamp = job.timestamp if job is not None else None
        due = due_for(student, exercise)[0] if due_for is not None else None
        table.append([
            job.assignment if job is not None else exercise,
            f"{due:%Y-%m-%d %H:%M:%S} UTC" if due else "",
            f"{stamp:%Y-%m-%d %H:%M:%S} UTC" if stamp else "", student,
            getattr(person, "last_name", ""), getattr(person, "first_name", ""),
            getattr(person, "email", ""), f"{raw:g}", f"{penalty:g}" if penalty else "0.0",
            f"{raw - penalty:g}", f"{most:g}"])
    return table


def feedback(student: str, rows: list[Row], pages: dict[str, str] | None = None) -> str:
    """A student's Markdown feedback: per exercise, each part with its points and message,
    and a link to the notebook's page (``pages``: exercise -> path relative to --out).
    Every text is escaped: a student's message is shown, never rendered."""
    lines = [f"# Feedback for {for_markdown(student)}", ""]
    for exercise in dict.fromkeys(r.exercise for r in rows):
        mine = [r for r in rows if r.exercise == exercise]
        got, total = sum(r.points for r in mine), sum(r.max_points for r in mine)
        lines += [f"## {for_markdown(exercise)}: {got:g} / {total:g}", ""]
        if pages and exercise in pages:  # the path is ours: safe_file_name's characters
            lines += [f"[Your notebook, as graded]({pages[exercise].removeprefix('feedback/')})",
                      ""]
        lines += ["| part | points | status | message |", "|---|---|---|---|"]
        for r in mine:
            lines.append(f"| {for_markdown(r.part or '-')} | {r.points:g} / {r.max_points:g} | "
                         f"{for_markdown(r.status)} | {for_markdown(r.message)} |")
        lines.append("")
    return "\n".join(lines)


HTML_STYLE = ("body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:.2em .5em;"
              "border-bottom:1px solid #ddd;text-align:left}")


def _h(text: Any) -> str:
    """Text as HTML: escaped, control characters written out."""
    return escape(for_terminal(text))


def feedback_html(student: str, rows: list[Row], pages: dict[str, str]) -> str:
    """A student's index page: per exercise the table of rows and a link to the notebook's
    feedback page (``pages``: exercise -> its path relative to --out; feedback.py renders
    them). Every text is escaped."""
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Feedback for "
             f"{_h(student)}</title><style>{HTML_STYLE}</style></head><body>",
             f"<h1>Feedback for {_h(student)}</h1>"]
    for exercise in dict.fromkeys(r.exercise for r in rows):
        mine = [r for r in rows if r.exercise == exercise]
        got, total = sum(r.points for r in mine), sum(r.max_points for r in mine)
        parts.append(f"<h2>{_h(exercise)}: {got:g} / {total:g}</h2>")
        if exercise in pages:
            parts.append(f'<p><a href="../{escape(pages[exercise])}">Your notebook, as graded'
                         "</a></p>")
        parts.append("<table><tr><th>part</th><th>points</th><th>status</th><th>message</th>"
                     "</tr>")
        parts += [f"<tr><td>{_h(r.part or '-')}</td><td>{r.points:g} / {r.max_points:g}"
                  f"</td><td>{_h(r.status)}</td><td>{_h(r.message)}</td></tr>" for r in mine]
        parts.append("</table>")
    parts.append("</body></html>")
    return visible("\n".join(parts))


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
    if summary.secret:
        lines.append(f"hidden inputs drawn from the grading secret {summary.secret}")
    lines += cost_lines(summary)
    lines += summary.notes
    return for_terminal("\n".join(lines))


def cost_lines(summary: Summary) -> list[str]:
    """What grading cost the grader itself (grading.cost): per submission graded now, its page
    included, the median and the most of its seconds and the most memory; the process's peak."""
    if not summary.costs:
        return []
    totals = {key: spent.plus(page) if page is not None else spent
              for key, (spent, page) in summary.costs.items()}
    seconds = sorted(c.seconds for c in totals.values())
    slowest = max(totals, key=lambda k: totals[k].seconds)
    largest = max(totals, key=lambda k: totals[k].peak_mb)
    return [f"the grader's own work per submission (outside the sandbox, its feedback page "
            f"included): median {seconds[len(seconds) // 2]:.1f} s, most "
            f"{totals[slowest].seconds:.1f} s ({slowest[0]}, {slowest[1]}); resident memory "
            f"at most {totals[largest].peak_mb:.0f} MB ({largest[0]}, {largest[1]}: "
            f"{totals[largest].added_mb:.0f} MB above where it began); the grading process's "
            f"resident peak: {summary.peak_mb:.0f} MB", *split_lines(summary.costs),
            *speed_lines(totals)]


def split_lines(costs: dict[tuple[str, str], Any]) -> list[str]:
    """One line: where the submissions' time went, summed over those graded now: starting and
    ending the sandbox and its runner, starting the kernel, the cells, the grader's own work
    (reading, judging) and the feedback pages. None where no notebook ran."""
    runs = [spent for spent, _ in costs.values() if spent.sandbox_seconds > 0]
    if not runs:
        return []
    kernel = sum(c.kernel_seconds for c in runs)
    cells = sum(c.cells_seconds for c in runs)
    start = sum(c.sandbox_seconds for c in runs) - kernel - cells
    own = sum(spent.seconds for spent, _ in costs.values())
    pages = sum(page.seconds for _, page in costs.values() if page is not None)
    parts = {"sandbox and runner start and stop": start, "kernel start": kernel,
             "cells": cells, "reading and judging": own, "feedback pages": pages}
    total = sum(parts.values()) or 1.0
    return [f"where the time went ({len(runs)} notebook runs, seconds summed; the speed "
            "tasks apart): " + ", ".join(f"{name} {seconds:.1f} s ({100 * seconds / total:.0f}%)"
                                         for name, seconds in parts.items())]


def speed_lines(totals: dict[tuple[str, str], Any]) -> list[str]:
    """One line: how long measuring the speed tasks took (sandboxed runs of each speed part's
    function and its reference), in all and at most for one submission; none if nothing was."""
    measured = {key: c.speed_seconds for key, c in totals.items() if c.speed_seconds > 0}
    if not measured:
        return []
    most = max(measured, key=lambda k: measured[k])
    return [f"measuring the speed tasks (sandboxed runs, not in the grader's own work above): "
            f"{sum(measured.values()):.1f} s in all for {len(measured)} submission(s), most "
            f"{measured[most]:.1f} s ({most[0]}, {most[1]})"]
