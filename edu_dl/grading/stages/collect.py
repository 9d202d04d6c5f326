"""Collect: which notebook of which student answers which exercise, and what is due.

Two layouts: ``<student>/<NN_name>.ipynb`` (flat) and nbgrader's
``submitted/<student>/<assignment>/*.ipynb``. Every name and file here is the students': it is
read through ``trust.files`` (bounded, never through a link).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from edu_dl.grading.model import Exercise, Job, NothingToGrade, Row
from edu_dl.grading.notebooks import NotebookError
from edu_dl.grading.trust.files import entries, notebooks, timestamp_of
from edu_dl.grading.trust.identity import check_distinct

# An nbgrader course folder: submitted/ beside nbgrader's other folders (and nothing else).
NBGRADER_FOLDERS = frozenset({"submitted", "source", "release", "autograded", "feedback",
                              "downloaded", "outbound", "inbound"})


def is_nbgrader_course(submissions: Path) -> bool:
    """Is ``submissions`` an nbgrader course folder (``submitted/`` among nbgrader's folders
    alone)?"""
    folders = {e.name for e in entries(submissions) if e.is_dir(follow_symlinks=False)}
    return "submitted" in folders and folders <= NBGRADER_FOLDERS


Note = Callable[[str], str]  # a name -> what the grader knows of it ("": nothing)


def _no_note(name: str) -> str:
    return ""


def collect(submissions: Path, exercises: dict[str, Exercise], note: Note = _no_note
            ) -> tuple[list[Job], list[Row]]:
    """Jobs for ``<student>/<NN_name>.ipynb`` or ``submitted/<student>/<assignment>/*.ipynb``.

    Every student gets a job per exercise (a missing notebook is graded as missing); a notebook
    that matches no exercise gets a row of its own. Nothing is followed: a student folder or a
    notebook that is a symbolic link, or not a regular file, is refused with a row that says so.
    nbgrader's layout is taken only when ``submitted/`` sits among nbgrader's own folders alone
    (source/, release/, autograded/, feedback/...), so a student named "submitted" is still
    graded. It is taken literally: the notebook and its ``timestamp.txt`` come from
    ``submitted/<student>/<assignment>/`` alone, and a notebook anywhere else in the student's
    folder is ignored with a row that says so. In the flat layout the shallowest copy of a
    notebook is graded (other copies get an "ignored" row), and ``timestamp.txt`` is whatever
    the student's folder holds. ``note``: a clause added to the row of a notebook that matches
    no exercise (the term's: an old name of one, say), or "".
    """
    if not submissions.is_dir():
        raise NotebookError(f"{submissions}: not a folder of submissions")
    nbgrader_layout = is_nbgrader_course(submissions)
    root = submissions / "submitted" if nbgrader_layout else submissions
    jobs: list[Job] = []
    extra: list[Row] = []
    for entry in entries(root):
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            if entry.is_symlink() or entry.name.endswith(".ipynb"):
                what = "a symbolic link" if entry.is_symlink() else "a file, not a folder"
                extra.append(Row(entry.name, "", "", 0.0, 0.0, "refused",
                                 f"{entry.name!r} is {what}; each student needs a folder of "
                                 "their own, and links are never followed"))
            continue
        folder = Path(entry.path)
        found, ignored = _choose(folder, exercises, nbgrader_layout, note)
        extra += [Row(entry.name, stem, "", 0.0, 0.0, status, message)
                  for stem, status, message in ignored]
        for name, ex in exercises.items():
            hit = found.get(name)
            job = Job(entry.name, ex, *hit) if hit else Job(entry.name, ex, None, name)
            if hit:
                # nbgrader's collect writes it beside the notebook; the flat layout has one per
                # student, written by whoever made the folder (the student, unless an LMS import)
                job.timestamp, job.timestamp_problem = timestamp_of(
                    hit[0].parent if nbgrader_layout else folder)
            jobs.append(job)
    if not jobs:
        top = [e.name for e in entries(root) if e.name.endswith(".ipynb")]
        raise NothingToGrade(
            f"{submissions}: no student folders here"
            + (f" (only {len(top)} notebook(s) at the top level)" if top else "")
            + "; expected <student>/<notebook>.ipynb or nbgrader's "
            "submitted/<student>/<assignment>/<notebook>.ipynb")
    return jobs, extra


def _choose(folder: Path, exercises: dict[str, Exercise], nbgrader_layout: bool,
            note: Note = _no_note
            ) -> tuple[dict[str, tuple[Path, str, str]], list[tuple[str, str, str]]]:
    """(exercise -> (notebook, assignment, why refused), [(name, status, message)] of the
    notebooks not graded) for one student's folder."""
    found: dict[str, tuple[Path, str, str]] = {}
    ignored: list[tuple[str, str, str]] = []
    where = f"{folder.name}/"
    # Shallowest first, so a copy in a subfolder (0/, say, which sorts first) never wins.
    listed = sorted(notebooks(folder), key=lambda item: (len(item[0].parts), item[0]))
    for path, refused in listed:
        shown = where + path.relative_to(folder).as_posix()
        depth = len(path.relative_to(folder).parts) - 1
        if nbgrader_layout and depth != 1:
            ignored.append((path.stem, "ignored", f"{shown} is not in nbgrader's "
                            "submitted/<student>/<assignment>/ folder; not graded"))
        elif path.stem not in exercises:
            ignored.append((path.stem, "not an exercise", noted(
                f"{shown} matches no source notebook ({', '.join(exercises)}); not graded",
                [path.stem], note)))
        elif path.stem in found:
            ignored.append((path.stem, "ignored", f"{shown} is another copy of "
                            f"{path.name}; the one graded is {where}"
                            f"{found[path.stem][0].relative_to(folder).as_posix()}"))
        else:
            assignment = path.parent.name if path.parent != folder else path.stem
            found[path.stem] = (path, assignment, refused)
    return found, ignored


def check_students(names: Iterable[str]) -> None:
    """Every student of the batch (folders, the roster, the gradebook's) is one name: two that
    are one once escapes, spaces, case, invisible characters or NFKC are set aside stop the
    batch, naming both (``trust.identity``); neither is graded in the other's place."""
    check_distinct(names, "the students (folders, roster ids, students graded before)",
                   "rename one (its folder, or its roster id) so that each student is one "
                   "name; nothing was graded")


def noted(message: str, names: Iterable[str], note: Note) -> str:
    """``message`` and what ``note`` says of each of ``names`` (each clause once, the empty
    ones left out), "; "-joined."""
    return "; ".join([message, *[c for c in dict.fromkeys(map(note, names)) if c]])


def scope(jobs: list[Job], exercises: dict[str, Exercise], chosen: list[str] | None,
          roster: dict[str, Any] | None = None, note: Note = _no_note) -> list[Job]:
    """The jobs that are due: of the chosen exercises (default: every exercise at least one
    student submitted), for every student found and every student on the roster. ``note``:
    a clause added for each unknown name chosen (as :func:`collect`'s)."""
    if chosen:
        unknown = [name for name in chosen if name not in exercises]
        if unknown:
            raise NothingToGrade(noted(
                f"--exercise {', '.join(unknown)}: no such source notebook with graded cells "
                f"(the source has: {', '.join(exercises)})", unknown, note))
        due = set(chosen)
    else:
        due = {j.exercise.name for j in jobs if j.path is not None or j.refused}
        if not due:
            students = len({j.student for j in jobs})
            raise NothingToGrade(
                f"none of the {students} student folder(s) holds a notebook named like a source "
                f"notebook ({', '.join(list(exercises)[:8])}); check that --source is the "
                "assignment's source, or name the exercises that are due with --exercise")
    kept = [j for j in jobs if j.exercise.name in due]
    present = {j.student for j in kept}
    for student in sorted(set(roster or ()) - present):
        kept += [Job(student, exercises[name], None, name) for name in exercises if name in due]
    return kept


def only(jobs: list[Job], extra: list[Row], students: list[str], submissions: Path,
         roster: dict[str, Any] | None = None) -> tuple[list[Job], list[Row]]:
    """The jobs and rows of the chosen students (``--student``); a name that is neither a
    student folder of SUBMISSIONS nor on the roster stops the batch (a typo grades nobody)."""
    known = {j.student for j in jobs} | {r.student for r in extra} | set(roster or ())
    unknown = [s for s in students if s not in known]
    if unknown:
        raise NothingToGrade(f"--student {', '.join(unknown)}: no such student folder in "
                             f"{submissions}" + (" and not on the roster" if roster else ""))
    chosen = set(students)
    return ([j for j in jobs if j.student in chosen], [r for r in extra if r.student in chosen])
