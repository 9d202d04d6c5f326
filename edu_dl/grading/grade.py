"""``edu-dl grade``: grade a folder of submissions, each in its own sandbox, judged outside it.

For one submission: restore every test and locked cell from the source by grade_id (hidden tests
come with them), draw fresh inputs for each part from a secret seed, run the notebook in a bwrap
sandbox (``edu_dl.grading.runner`` executes it there), read back the student's raw results and
compare them here with the part's oracle. A part passes only on that positive evidence: nothing the
student's process prints, patches or exits with can make a wrong answer pass.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import protocol, sandbox
from .cells import PartialCreditError, classify, determine_grade, released_checksums
from .manual import merge as merge_sheet
from .manual import read_sheet
from .model import OUTSIDE, Exercise, Job, Refused, Row, Summary, cap_text, safe_file_name
from .notebooks import (
    BEGIN_HIDDEN,
    Notebook,
    NotebookError,
    check_calls,
    grade_id,
    is_locked,
    is_solution,
    nbgrader,
    notebook_bytes,
    parse_notebook,
    read_notebook,
    write_atomic,
)
from .policy import Dates, read_timestamp
from .protocol import ErrorText, encode_inputs, roundtrip
from .report import write_outputs
from .results import RunResult, read_run
from .source import find_source, judge_source
from .spec import Part, judge_case, plain_call, trusted_result

GRADER_VERSION = "3"  # bump to force a regrade of everything
MB = 1 << 20
GRADING_TMP_MB = 128  # the grading dir's own tmpfs: a student filling /tmp cannot block results
STATUS_OF_KILL = {"timeout": "timeout", "memory": "memory", "processes": "processes"}


@dataclass(frozen=True)
class Settings:
    """What the instructor chose on the command line."""

    timeout_s: float = 60.0  # per cell
    budget_s: float = 600.0  # per submission, everything included: however many cells it has
    memory_mb: int = 4096
    cpu_s: int = 900
    processes: int = 512  # threads count: TF and torch start dozens
    file_mb: int = 64  # per written file, and the result the sandbox returns
    tmp_mb: int = 512
    output_cap: int = 1 << 20  # bytes of cell output the runner keeps
    notebook_mb: int = 16  # a larger submission is refused unread
    beside_files: int = 256  # files beside the source notebooks: each reaches every sandbox
    beside_mb: float = 64  # ... and their size in all

    def limits(self) -> sandbox.Limits:
        # The runner stops running cells a little before the budget, to pack what it has; the
        # watchdog kills the sandbox at the budget, whatever the notebook does.
        return sandbox.Limits(wall_s=self.budget_s, memory_mb=self.memory_mb, cpu_s=self.cpu_s,
                              processes=self.processes, file_mb=self.file_mb, tmp_mb=self.tmp_mb)

    def runner_budget(self) -> float:
        return self.budget_s - min(15.0, 0.25 * self.budget_s)


# --------------------------------------------------------------------------- collecting


class NothingToGrade(NotebookError):
    """The batch cannot produce a single grade; the message says why and what to do."""


def load_source(source: Path, exclude: tuple[Path, ...] = (), settings: Settings | None = None
                ) -> dict[str, Exercise]:
    """The exercises of the source folder, by notebook name (e.g. '05_autograd_from_scratch'):
    every notebook with at least one graded cell (a check() test, an nbgrader test cell, a
    graded answer or a task)."""
    if not source.exists():
        raise NothingToGrade(f"{source}: no such folder or notebook; pass the folder of "
                             "source notebooks (with their solutions and hidden tests) as "
                             "--source")
    paths = sorted(p for p in source.glob("*.ipynb")) if source.is_dir() else [source]
    if not paths:
        raise NothingToGrade(f"{source}: no source notebooks (*.ipynb) here; pass the folder "
                             "that holds the assignment's source notebooks as --source (for "
                             "an nbgrader course: source/<assignment>/)")
    exercises = {}
    settings = settings or Settings()
    beside = read_beside(source if source.is_dir() else source.parent, exclude,
                         settings.beside_files, settings.beside_mb)
    for path in paths:
        nb = read_notebook(path)
        ex = Exercise(path.stem, nb, hashlib.sha256(path.read_bytes()).hexdigest())
        ex.files = beside
        for cell in nb.cells:
            gid = grade_id(cell)
            if gid is not None and cell.cell_type == "code":
                for part_id in dict.fromkeys(check_calls(cell.source)):
                    if all(part_id != p for p, _ in ex.parts):
                        ex.parts.append((part_id, gid))
            graded = classify(cell)
            if graded is not None and all(graded.grade_id != c.grade_id for c in ex.cells):
                ex.cells.append(graded)
        if ex.parts or ex.cells:
            ex.checksums = released_checksums(nb)
            exercises[ex.name] = ex
    if not exercises:
        raise NothingToGrade(f"{source}: none of its {len(paths)} notebook(s) has a graded "
                             "cell; mark test cells, graded answers or tasks with nbgrader's "
                             "metadata (grade: true, a grade_id and points) and grade again")
    return exercises


# Files beside the source notebooks (data, images) reach each submission's sandbox read-only, next
# to the notebook; what nbgrader's CourseDirectory.ignore skips does not, nor notebooks (other
# exercises' sources), nor the instructor's part specs (parts/), nor links or special files.
NBGRADER_IGNORE = (".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback")
PARTS_FOLDER = "parts"
MAX_BESIDE_DEPTH = 8


def read_beside(folder: Path, exclude: tuple[Path, ...] = (),
                max_files: int = Settings.beside_files, max_mb: float = Settings.beside_mb
                ) -> dict[str, bytes]:
    """The files beside the source notebooks, by path relative to ``folder``, read bounded and
    never through a link; NothingToGrade when there are more than ``max_files`` or more than
    ``max_mb`` in all (``--max-beside-files``, ``--max-beside-mb``). ``exclude``: folders never
    read, wherever they lie (the submissions, the grades)."""
    import fnmatch

    skip = {p.resolve() for p in exclude}
    found: dict[str, bytes] = {}
    total, todo = 0, [(folder, 0)]
    while todo:
        here, depth = todo.pop()
        with os.scandir(here) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if any(fnmatch.fnmatch(entry.name, pattern) for pattern in NBGRADER_IGNORE) or \
                    entry.is_symlink() or entry.name.endswith(".ipynb") or \
                    (depth == 0 and entry.name == PARTS_FOLDER):
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_BESIDE_DEPTH and path.resolve() not in skip:
                    todo.append((path, depth + 1))
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if len(found) >= max_files:
                raise NothingToGrade(f"{folder}: over {max_files} files beside the "
                                     "source notebooks (each reaches every sandbox); move "
                                     "what the notebooks do not read out of the source folder, "
                                     "or raise --max-beside-files")
            left = int(max_mb * MB) - total
            try:
                data = read_submission(path, left, f"left of the {max_mb:g} MB that the "
                                       "files beside the source notebooks may hold in all "
                                       "(--max-beside-mb)")
            except Refused as exc:
                raise NothingToGrade(f"{folder}: {exc}; move what the notebooks do not read "
                                     "out of the source folder") from None
            total += len(data)
            found[path.relative_to(folder).as_posix()] = data
    return found


# Tool folders that are never a student. Any other name is one, a leading dot or not.
# An nbgrader course folder: submitted/ beside nbgrader's other folders (and nothing else).
NBGRADER_FOLDERS = frozenset({"submitted", "source", "release", "autograded", "feedback",
                              "downloaded", "outbound", "inbound"})
IGNORED = frozenset({".ipynb_checkpoints", "__pycache__", ".git", ".hg", ".svn", ".DS_Store"})
MAX_WALK = 10_000  # entries looked at in one student's folder
MAX_DEPTH = 4  # folders below a student's


def collect(submissions: Path, exercises: dict[str, Exercise]) -> tuple[list[Job], list[Row]]:
    """Jobs for ``<student>/<NN_name>.ipynb`` or ``submitted/<student>/<assignment>/*.ipynb``.

    Every student gets a job per exercise (a missing notebook is graded as missing); a notebook
    that matches no exercise gets a row of its own. Nothing is followed: a student folder or a
    notebook that is a symbolic link, or not a regular file, is refused with a row that says so.
    nbgrader's layout is taken only when ``submitted/`` sits among nbgrader's own folders alone
    (source/, release/, autograded/, feedback/...), so a student named "submitted" is still
    graded.
    """
    if not submissions.is_dir():
        raise NotebookError(f"{submissions}: not a folder of submissions")
    folders = {e.name for e in _entries(submissions) if e.is_dir(follow_symlinks=False)}
    nbgrader_layout = "submitted" in folders and folders <= NBGRADER_FOLDERS
    root = submissions / "submitted" if nbgrader_layout else submissions
    jobs: list[Job] = []
    extra: list[Row] = []
    for entry in _entries(root):
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            if entry.is_symlink() or entry.name.endswith(".ipynb"):
                what = "a symbolic link" if entry.is_symlink() else "a file, not a folder"
                extra.append(Row(entry.name, "", "", 0.0, 0.0, "refused",
                                 f"{entry.name!r} is {what}; each student needs a folder of "
                                 "their own, and links are never followed"))
            continue
        found: dict[str, tuple[Path, str, str]] = {}
        for path, refused in _notebooks(Path(entry.path)):
            assignment = path.parent.name if path.parent != Path(entry.path) else path.stem
            if path.stem in exercises and path.stem not in found:
                found[path.stem] = (path, assignment, refused)
            elif path.stem not in exercises:
                extra.append(Row(entry.name, path.stem, "", 0.0, 0.0, "not an exercise",
                                 f"{path.relative_to(root)} matches no source notebook "
                                 f"({', '.join(exercises)}); not graded"))
        for name, ex in exercises.items():
            hit = found.get(name)
            job = Job(entry.name, ex, *hit) if hit else Job(entry.name, ex, None, name)
            if hit:
                job.timestamp = read_timestamp(hit[0].parent) or read_timestamp(Path(entry.path))
            jobs.append(job)
    if not jobs:
        top = [e.name for e in _entries(root) if e.name.endswith(".ipynb")]
        raise NothingToGrade(
            f"{submissions}: no student folders here"
            + (f" (only {len(top)} notebook(s) at the top level)" if top else "")
            + "; expected <student>/<notebook>.ipynb or nbgrader's "
            "submitted/<student>/<assignment>/<notebook>.ipynb")
    return jobs, extra


def scope(jobs: list[Job], exercises: dict[str, Exercise], chosen: list[str] | None,
          roster: dict[str, Any] | None = None) -> list[Job]:
    """The jobs that are due: of the chosen exercises (default: every exercise at least one
    student submitted), for every student found and every student on the roster."""
    if chosen:
        unknown = [name for name in chosen if name not in exercises]
        if unknown:
            raise NothingToGrade(f"--exercise {', '.join(unknown)}: no such source notebook "
                                 f"with graded cells (the source has: {', '.join(exercises)})")
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


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return sorted((e for e in it if e.name not in IGNORED), key=lambda e: e.name)


def _notebooks(student: Path) -> list[tuple[Path, str]]:
    """(path, why refused or '') of every *.ipynb under a student's folder, links not followed."""
    found: list[tuple[Path, str]] = []
    todo, seen = [(student, 0)], 0
    while todo:
        folder, depth = todo.pop()
        for entry in _entries(folder):
            seen += 1
            if seen > MAX_WALK:
                return sorted(found)
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    todo.append((path, depth + 1))
            elif entry.name.endswith(".ipynb"):
                why = ("a symbolic link; links are never followed" if entry.is_symlink()
                       else "" if entry.is_file(follow_symlinks=False) else "not a regular file")
                refused = f"{path.relative_to(student)} is {why}; not read" if why else ""
                found.append((path, refused))
    return sorted(found)


def read_submission(path: Path, max_bytes: int,
                    limit: str = "for one notebook (--max-notebook-mb)") -> bytes:
    """The notebook's bytes, never through a link, never from anything but a regular file.

    O_NOFOLLOW refuses a link planted after collecting; O_NONBLOCK keeps a FIFO from hanging the
    grader; the size is checked on the open file, and no more than the limit is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise Refused(f"{path.name}: not read ({reason})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path.name}: not a regular file; not read")
        if st.st_size > max_bytes:
            raise Refused(f"{path.name} is {st.st_size / MB:.1f} MB, over the limit of "
                          f"{max_bytes / MB:g} MB {limit}; not read")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"{path.name} grew past the limit of {max_bytes / MB:g} MB while read")
    return data


# --------------------------------------------------------------------------- restoring


def restore(submitted: Notebook, source: Notebook) -> tuple[Notebook, list[str]]:
    """The submission with every locked cell of the source back in place; returns (nb, notes).

    Locked cells (tests with their hidden region, read-only setup) are replaced by the source's
    cell with the same grade_id; deleted ones are inserted after their source predecessor.
    Solution cells are the student's, and are never filled in from the source.
    """
    locked = {grade_id(c): c for c in source.cells if grade_id(c) and is_locked(c)}
    notes: list[str] = []
    cells = []
    for cell in submitted.cells:
        gid = grade_id(cell)
        if gid in locked:
            original = locked[gid]
            if cell.get("source") != original.source.split(BEGIN_HIDDEN)[0].rstrip() and \
                    cell.get("source") != original.source:
                notes.append(f"cell {gid!r} was edited; restored from the source")
            cell = _copy_cell(original)
        elif cell.get("cell_type") == "code":
            cell = _copy_cell(cell)
        cells.append(cell)
    present = [grade_id(c) for c in cells]
    for position, original in enumerate(source.cells):
        gid = grade_id(original)
        if not gid or gid not in locked or gid in present:
            continue
        notes.append(f"cell {gid!r} was missing; restored from the source")
        before = [grade_id(c) for c in source.cells[:position]]
        anchor = next((present.index(b) for b in reversed(before) if b in present), -1)
        cells.insert(anchor + 1, _copy_cell(original))
        present.insert(anchor + 1, gid)
    nb = source.copy()
    nb.cells = cells
    return nb, notes


def _copy_cell(cell: Any) -> Any:
    import nbformat

    if cell.get("cell_type") != "code":
        return nbformat.from_dict(json.loads(json.dumps(cell)))
    new = nbformat.v4.new_code_cell(cell.get("source", ""))
    new.metadata = nbformat.from_dict(json.loads(json.dumps(cell.get("metadata", {}))))
    return new


def is_other_exercise(submitted: Notebook, source: Notebook) -> bool:
    """True when the submission shares no graded or solution cell id with its source."""
    ids = {grade_id(c) for c in source.cells if grade_id(c) and (is_solution(c) or is_locked(c))}
    return bool(ids) and not ids & {grade_id(c) for c in submitted.cells}


# --------------------------------------------------------------------------- one submission


def grade_one(job: Job, out: Path, settings: Settings, hide: list[Path],
              data: bytes | None = None) -> list[Row]:
    """Grade one (student, exercise); never raises: every outcome becomes rows.

    ``data``: the notebook's bytes when the caller has read them already (the same bytes its
    resume key was computed from).
    """
    try:
        return _grade_one(job, out, settings, hide, data)
    except Exception as exc:  # a grader bug must not stop the batch
        return _rows(job, "grader error", f"{type(exc).__name__}: {exc}")


def _rows(job: Job, status: str, message: str, isolation: str = "") -> list[Row]:
    return [Row(job.student, job.exercise.name, name, 0.0, points, status, message,
                isolation or _isolation(), judged)
            for name, points, judged in job.exercise.items()]


def _isolation() -> str:
    return "rlimits only" if sandbox.bwrap_problem() else "bwrap"


def _grade_one(job: Job, out: Path, settings: Settings, hide: list[Path],
               data: bytes | None) -> list[Row]:
    """prepare, run, judge: the three steps of one submission."""
    prepared = prepare(job, out, settings, data)
    if isinstance(prepared, list):  # nothing to run: these rows say why
        return prepared
    ran = run(prepared, settings, hide)
    try:
        return judge_run(job, prepared, ran, settings)
    finally:
        if not prepared.boxed:  # the unisolated run's files; run.json stays
            for name in ("grading", "work", "tmp"):
                shutil.rmtree(prepared.work / name, ignore_errors=True)


@dataclass
class Prepared:
    """A submission ready to run: the restored notebook, the files handed to the sandbox, and
    the inputs drawn for each part (kept here, on the trusted side, to judge against)."""

    notebook: Notebook  # restored: every locked cell from the source, hidden tests included
    notes: list[str]  # what restoring changed ("cell 'x' was edited; restored ...")
    work: Path  # the grader's own folder for this submission (run.json)
    autograded: Path  # where the (executed) restored notebook is saved
    seed: int
    parts: dict[str, Part]
    cases: dict[str, list[tuple[Any, ...]]]
    files: dict[str, bytes]  # path inside the sandbox -> bytes, all read-only
    root: str  # the sandbox's folder for work/ and grading/
    boxed: bool  # False: no bwrap, the same run unisolated in ``work``


@dataclass
class Ran:
    """What came back from the sandbox, read with every bound."""

    done: sandbox.Result
    returned: RunResult
    isolation: str


def prepare(job: Job, out: Path, settings: Settings, data: bytes | None,
            boxed: bool | None = None) -> Prepared | list[Row]:
    """Read, parse and restore the submission, draw fresh inputs; rows instead when there is
    nothing to run (missing, refused, unreadable, another exercise's notebook). ``boxed``: will
    it run in bwrap (default: whether bwrap works here; a cluster's workers say for
    themselves)."""
    if job.refused:
        return _rows(job, "refused", job.refused)
    if job.path is None:
        return _rows(job, "missing", f"no {job.exercise.name}.ipynb was submitted")
    try:
        data = read_submission(job.path, settings.notebook_mb * MB) if data is None else data
        submitted = parse_notebook(data, job.path.name)
    except Refused as exc:
        return _rows(job, "refused", str(exc))
    except NotebookError as exc:
        return _rows(job, "unreadable", str(exc))
    if is_other_exercise(submitted, job.exercise.notebook):
        return _rows(job, "wrong notebook", f"{job.path.name} holds none of the cells of "
                     f"{job.exercise.name} (a notebook for another exercise?)")
    nb, notes = restore(submitted, job.exercise.notebook)
    work = out / ".work" / safe_file_name(job.student) / job.exercise.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    restored = notebook_bytes(nb)
    # nbgrader's layout: autograded/<student>/<assignment>/<notebook> (instructor-only: it
    # holds the hidden tests).
    autograded = (out / "autograded" / safe_file_name(job.student)
                  / safe_file_name(job.assignment) / f"{job.exercise.name}.ipynb")
    write_atomic(autograded, restored)
    # Fresh inputs from a secret seed: what a student saw while working tells nothing.
    seed = secrets.randbits(63)
    rng = np.random.default_rng(seed)
    if boxed is None:  # else: the same run in the work folder, unisolated
        boxed = not sandbox.bwrap_problem()
    root = "/tmp" if boxed else str(work)
    files = {f"{root}/work/{name}": data for name, data in job.exercise.files.items()}
    files[f"{root}/work/notebook.ipynb"] = restored
    prepared = Prepared(nb, notes, work, autograded, seed, {}, {}, files, root, boxed)
    for part_id, _ in job.exercise.parts:
        prepared.parts[part_id] = part = job.exercise.specs[part_id]
        drawn = [*part.cases(rng, False), *part.cases(rng, True)]
        prepared.files.update(grading_files(f"{root}/grading", part_id, drawn,
                                            job.exercise.calls.get(part_id)))
        prepared.cases[part_id] = roundtrip(drawn)  # exactly what the student's function gets
    return prepared


def run(prepared: Prepared, settings: Settings, hide: list[Path]) -> Ran:
    """Execute the restored notebook in a sandbox; read back its result with every bound, and
    save the executed notebook (outputs included) over the restored one."""
    done = run_sandboxed(prepared.files, settings, hide, prepared.root, prepared.boxed,
                         prepared.work)
    return received(prepared, done, settings)


def run_sandboxed(files: dict[str, bytes], settings: Settings, hide: list[Path],
                  root: str = "/tmp", boxed: bool = True,
                  fallback_dir: Path | None = None) -> sandbox.Result:
    """The runner on ``files`` in a sandbox of this machine (its Python, its environment): the
    one step a cluster worker does (``edu_dl.grading.cluster``)."""
    argv = [sandbox.python(), "-m", "edu_dl.grading.runner", f"{root}/work/notebook.ipynb",
            f"{root}/grading", "--timeout", f"{settings.timeout_s:g}",
            "--budget", f"{settings.runner_budget():g}", "--output-cap", str(settings.output_cap)]
    return sandbox.run(
        argv, limits=settings.limits(), hide=hide,
        env=sandbox_env(f"{root}/tmp" if not boxed else "/tmp"),
        files=files, cwd=f"{root}/work", fallback_dir=fallback_dir,
        output_limit=settings.file_mb * MB,
        tmpfs=[("/tmp/grading", GRADING_TMP_MB)] if boxed else (),
    )


def received(prepared: Prepared, done: sandbox.Result, settings: Settings) -> Ran:
    """The sandbox's result read back with every bound; the executed notebook and run.json
    saved beside the submission's other files."""
    returned = read_run(done.output, done.output_size, settings.file_mb * MB,
                        settings.notebook_mb * MB + 2 * settings.output_cap)
    if returned.executed:  # the notebook with its outputs replaces the unexecuted copy
        try:
            executed = notebook_bytes(parse_notebook(returned.executed, "executed notebook"))
            write_atomic(prepared.autograded, executed)
        except (NotebookError, RecursionError):
            pass  # a forged or broken one: the restored notebook stays
    (prepared.work / "run.json").write_text(json.dumps(
        {"seed": prepared.seed, "record": returned.record, "sandbox": asdict(done) | {
            "log": done.log[-4000:], "output": f"{done.output_size} bytes",
            "uids_seen": sorted(done.uids_seen)}}, indent=1, default=str))
    return Ran(done, returned, "bwrap" if done.isolated else "rlimits only")


def judge_run(job: Job, prepared: Prepared, ran: Ran, settings: Settings) -> list[Row]:
    """One row per part: the student's raw results judged here, or why there are none."""
    returned = ran.returned
    rows = []
    for part_id, test_id in job.exercise.parts:
        part = prepared.parts[part_id]
        status, message, got = _outcome(part_id, test_id, returned.record, returned.outputs,
                                        ran.done, returned.problem, settings)
        points = 0.0
        if got is not None:
            source = find_source(prepared.notebook, part_id) if part.source_check else None
            status, message = judge(part, prepared.cases[part_id], got, source)
            points = float(part.points) if status == "passed" else 0.0
        note = "; ".join(n for n in prepared.notes if f"'{test_id}'" in n)
        if note and status != "passed":
            message = f"{message} ({note})"
        rows.append(Row(job.student, job.exercise.name, part_id, points, float(part.points),
                        status, message, ran.isolation, OUTSIDE))
    return rows + judge_cells(job, prepared, ran, settings)


def judge_cells(job: Job, prepared: Prepared, ran: Ran, settings: Settings) -> list[Row]:
    """Rows of the graded cells no Part judges: nbgrader test cells scored from the executed
    notebook as nbgrader's determine_grade scores them, and what a person must grade."""
    returned = ran.returned
    executed = None
    if returned.executed:
        try:
            executed = parse_notebook(returned.executed, "executed notebook")
        except (NotebookError, RecursionError):
            executed = None
    ran_cells = {grade_id(c): c for c in executed.cells} if executed is not None else {}
    restored = {grade_id(c): c for c in prepared.notebook.cells if grade_id(c)}
    source = {grade_id(c): c for c in job.exercise.notebook.cells if grade_id(c)}
    rows = []
    for graded in job.exercise.cells:
        gid, max_points = graded.grade_id, graded.points
        row = Row(job.student, job.exercise.name, gid, 0.0, max_points, "", "", ran.isolation,
                  graded.judged)
        rows.append(row)
        if graded.kind == "task":
            row.status, row.message = "needs manual grading", "a task: graded by hand"
            row.answer = cap_text(f"(the task) {source[gid].get('source', '')}", 8000)
            continue
        if graded.kind == "answer":
            cell = _as_source(restored.get(gid), source[gid])
            row.answer = cap_text(str(cell.get("source", "")) if cell is not None else "", 8000)
            score = determine_grade(cell, max_points, job.exercise.checksums.get(gid)) \
                if cell is not None else 0.0
            if score is None:
                row.status, row.message = "needs manual grading", "an answer: graded by hand"
            else:
                row.status, row.message = "not answered", "the answer cell was left as released"
            continue
        status, message, _ = _outcome(f"test cell {gid!r}", gid, returned.record, {},
                                      ran.done, returned.problem, settings)
        if status not in ("no result", "error"):  # never ran, timed out, killed, crashed
            row.status, row.message = status, message
            continue
        cell = ran_cells.get(gid)
        if cell is None or cell.get("cell_type") != "code":
            row.status, row.message = "no result", f"test cell {gid!r} is not in the " \
                "executed notebook"
            continue
        cell = _as_source(cell, source[gid])
        try:
            score = determine_grade(cell, max_points, None)
        except PartialCreditError as exc:
            row.status, row.message = "error", f"test cell {gid!r}: {exc}"
            continue
        row.points = float(score or 0.0)
        row.status = ("passed" if row.points == max_points else
                      "partial" if row.points > 0 else "failed")
        row.message = _test_cell_message(gid, cell, row.points, max_points)
        if row.points > 0 and _wrote_stderr(returned.record, gid):
            # the runner's output cap dropped the stderr output nbgrader would have seen
            row.points, row.status = 0.0, "failed"
            row.message = (f"test cell {gid!r} wrote to stderr (nbgrader scores that 0; the "
                           "output itself was cut by the output cap)")
    for row in rows:
        note = "; ".join(n for n in prepared.notes if f"'{row.part}'" in n)
        if note and row.status != "passed":
            row.message = cap_text(f"{row.message} ({note})")
    return rows


def _wrote_stderr(record: dict[str, Any], gid: str) -> bool:
    """Whether the runner saw the test cell write to stderr (the record is the sandbox's: as
    with every assert cell, the student's process could forge it)."""
    cells = record.get("cells")
    return isinstance(cells, list) and any(
        isinstance(c, dict) and c.get("grade_id") == gid and c.get("stderr") is True
        for c in cells)


def _as_source(cell: Any, original: Any) -> Any:
    """The cell with the source's nbgrader metadata (points, flags, grade_id): what is judged
    never rests on metadata the student could edit."""
    if cell is None:
        return None
    cell = _copy_cell(cell) if cell.get("cell_type") != "code" else _with_outputs(cell)
    cell.metadata["nbgrader"] = json.loads(json.dumps(nbgrader(original)))
    return cell


def _with_outputs(cell: Any) -> Any:
    import nbformat

    return nbformat.from_dict(json.loads(json.dumps(cell)))


def _test_cell_message(gid: str, cell: Any, points: float, max_points: float) -> str:
    """What decided an nbgrader test cell's score, in one line."""
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "error":
            error = f"{output.get('ename', '')}: {output.get('evalue', '')}".rstrip(": ")
            return cap_text(f"test cell {gid!r} failed: {error}")
        if kind == "stream" and output.get("name") == "stderr":
            return cap_text(f"test cell {gid!r} wrote to stderr (nbgrader scores that 0): "
                            f"{str(output.get('text', ''))[:300].strip()}")
        if kind == "execute_result":
            return f"test cell {gid!r}: partial credit {points:g} of {max_points:g}"
    return f"test cell {gid!r} passed"


def sandbox_env(tmp: str = "/tmp") -> dict[str, str]:
    """The sandbox's whole environment: no secrets of the grader, one thread per library."""
    package_root = str(Path(__file__).resolve().parents[2])
    venv_bin = str(Path(sys.executable).parent)
    one = "1"
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": f"{tmp}/home",
        "USER": "student", "LOGNAME": "student",
        "PYTHONPATH": package_root, "PYTHONNOUSERSITE": one, "PYTHONDONTWRITEBYTECODE": one,
        "JUPYTER_RUNTIME_DIR": f"{tmp}/runtime", "IPYTHONDIR": f"{tmp}/ipython",
        "MPLCONFIGDIR": f"{tmp}/mpl", "TMPDIR": tmp, "MPLBACKEND": "Agg",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        # Parallel jobs share the cores: one thread per library keeps them from fighting.
        "OMP_NUM_THREADS": one, "OPENBLAS_NUM_THREADS": one, "MKL_NUM_THREADS": one,
        "TF_NUM_INTRAOP_THREADS": one, "TF_NUM_INTEROP_THREADS": one, "LANG": "C.UTF-8",
    }


def _outcome(part_id: str, test_id: str, record: dict[str, Any], outputs: dict[str, Any],
             done: sandbox.Result, problem: str, settings: Settings) -> tuple[str, str, Any]:
    """(status, message, results or None): the results when the student's process left some.

    ``record`` was written inside the sandbox: every field is checked before it is used.
    """
    if part_id in outputs:
        return "", "", outputs[part_id]
    if done.killed:
        what = {"timeout": f"the notebook ran over its time budget of {settings.budget_s:g} s",
                "memory": f"the notebook used over {done.peak_rss_mb:.0f} MB of memory",
                "processes": f"the notebook started over {done.peak_tasks} processes/threads"}
        return STATUS_OF_KILL[done.killed], f"{what[done.killed]}; the sandbox was killed", None
    if problem:
        return ("refused" if problem.startswith("refused") else "crashed"), problem, None
    cells = record.get("cells")
    cell = next((c for c in cells if isinstance(c, dict) and c.get("grade_id") == test_id),
                None) if isinstance(cells, list) else None
    kernel = str(record.get("kernel", ""))
    message = cap_text(str(record.get("message") or ""))
    if cell is None:
        return "crashed", message or "the test cell never ran", None
    status, error = str(cell.get("status", "")), cap_text(str(cell.get("error", "")))
    if status == "timeout":
        return "timeout", f"test cell {test_id!r}: {error}", None
    if status == "died" or (status == "not run" and kernel == "died"):
        return "crashed", message or "the kernel died", None
    if status == "not run":
        return "not run", message or "the test cell was not run", None
    if status == "error":
        return "error", f"test cell {test_id!r} failed: {error}", None
    return "no result", (f"test cell {test_id!r} ran but recorded no result for {part_id} "
                         "(was check replaced or the cell rewritten?)"), None


def judge(part: Part, cases: list[tuple[Any, ...]], got: list[Any],
          source: str | None = None) -> tuple[str, str]:
    """Judge the student's raw results outside the sandbox, from data only.

    Each result is compared with the oracle on the same inputs (and checked against the inputs
    where the part says so); outputs the student's process only observed (counts, flags) are
    ignored. Parts that grade how a result was computed judge ``source``, the checked function's
    text found in the notebook (``source.find_source``), and fail without it.
    """
    if len(got) != len(cases):
        return "failed", f"results for {len(got)} of {len(cases)} cases"
    errors = [g for g in got if isinstance(g, ErrorText)]
    if errors and all(str(g) == "not implemented yet" for g in errors):
        return "not implemented", "not implemented yet"
    for i, (args, result) in enumerate(zip(cases, got)):
        if isinstance(result, ErrorText):
            return "failed", f"case {i + 1} of {len(cases)} raised {result}"
        expected = part.expected(*args)
        verdict = judge_case(part, i, len(cases), args, expected,
                             trusted_result(part, expected, result))
        if not verdict.ok:
            return "failed", verdict.message
    verdict = judge_source(part, source)
    if not verdict.ok:
        return "failed", f"the values are right, but {verdict.message}"
    return "passed", f"{len(cases)} fresh cases passed"


# --------------------------------------------------------------------------- the batch


def job_key(job: Job, settings: Settings, data: bytes | None) -> str:
    """What a grade depends on: the submission, its source, the part specs and the limits."""
    h = hashlib.sha256(GRADER_VERSION.encode())
    h.update(job.exercise.digest.encode())
    h.update(json.dumps(asdict(settings), sort_keys=True).encode())
    h.update(job.refused.encode())
    for name, beside in sorted(job.exercise.files.items()):
        h.update(hashlib.sha256(name.encode() + b"\0" + beside).digest())
    if data is not None:
        h.update(data)
    h.update(job.exercise.specs_digest.encode())
    return h.hexdigest()


def _submission_bytes(job: Job, settings: Settings) -> bytes | None:
    """The bytes to grade (None: nothing to read, or refused; grade_one says why)."""
    if job.path is None or job.refused:
        return None
    try:
        return read_submission(job.path, settings.notebook_mb * MB)
    except Refused as exc:
        job.refused = str(exc)
        return None


def load_parts(exercises: dict[str, Exercise], source: Path | None = None) -> None:
    """Import every part the source checks, before any submission runs: the grader trusts only
    code it loaded while no sandbox had yet run (a missing part fails here, loudly). The
    parts beside ``source`` (parts/<exercise>.py and its private half
    parts/<exercise>.private.py), the course's own as an instructor's."""
    import IPython.core.inputtransformer2  # noqa: F401  (source.py reads cells with it)

    from . import parts as package

    folder = source if source is None or source.is_dir() else source.parent
    try:
        course = package.course_parts(folder) if folder is not None else {}
    except KeyError as exc:
        raise NothingToGrade(str(exc.args[0]) if exc.args else str(exc)) from None
    files = package.part_files(folder) if folder is not None else {}
    for ex in exercises.values():
        h = hashlib.sha256()
        for part_id, _ in ex.parts:
            try:
                ex.specs[part_id] = part = package.get(part_id, course)
            except KeyError as exc:
                raise NothingToGrade(f"{ex.name}: {exc.args[0]}; define the part in "
                                     f"{package.FOLDER}/<exercise>.py beside the source "
                                     "notebook") from None
            ex.points[part_id] = float(part.points)
            call = pickled_call(part)
            if call is not None:
                ex.calls[part_id] = call
            exercise = part_id.split(".")[0]
            for path in files.get(exercise, []):
                h.update(path.name.encode() + b"\0" + path.read_bytes())
        ex.specs_digest = h.hexdigest()


def grading_files(grading_dir: str, part_id: str, cases: list[tuple[Any, ...]],
                  call: bytes | None) -> dict[str, bytes]:
    """What the sandbox gets for one part: its cases and, if it has one, its pickled call=."""
    files = {protocol.inputs_path(grading_dir, part_id): encode_inputs(cases)}
    if call is not None:
        files[protocol.call_path(grading_dir, part_id)] = call
    return files


def pickled_call(part: Part) -> bytes | None:
    """A part's own ``call=`` by value, for the sandbox (None: it has none, fn(*args)); the
    part file itself never goes there. cloudpickle sends a part file's functions by value:
    no sandbox could import them."""
    import cloudpickle

    if part.call is plain_call:
        return None
    try:
        return cloudpickle.dumps(part.call)
    except Exception as exc:
        raise NothingToGrade(f"{part.id}: its call= cannot be sent to the sandbox "
                             f"({type(exc).__name__}: {exc}); use plain functions and "
                             "data in it") from None


def grade(submissions: Path, source: Path, out: Path, *, settings: Settings | None = None,
          jobs: int = 1, force: bool = False, progress: bool = True,
          log: Callable[[str], None] = print, exercises_due: list[str] | None = None,
          dates: Dates | None = None, roster: dict[str, Any] | None = None,
          manual: Path | None = None, cluster: Any = None) -> Summary:
    """Grade every submission; write grades.csv, feedback/ and the nbgrader export into ``out``.

    ``cluster`` (cluster.ClusterOptions): run the sandboxes on Dask workers instead of
    ``jobs`` threads here. Raises NothingToGrade (one sentence: why, and what to do) when the
    batch could not grade anything: no graded cell in the source, no student folder, nothing
    due submitted."""
    settings = settings or Settings()
    dates = dates or Dates()
    start = time.monotonic()
    filled = read_sheet(manual) if manual is not None else {}  # a broken sheet: before grading
    exercises = load_source(source, exclude=(submissions, out), settings=settings)
    load_parts(exercises, source)
    all_jobs, extra = collect(submissions, exercises)
    all_jobs = scope(all_jobs, exercises, exercises_due, roster)
    out.mkdir(parents=True, exist_ok=True)
    # On a cluster every worker must have the sandbox (cluster.py refuses one without it).
    problem = "" if cluster is not None else sandbox.bwrap_problem()
    if problem:
        log(f"WARNING: grading WITHOUT a sandbox: {problem}. Submissions run with resource "
            "limits only and can read and write what the grading user can; the gradebook "
            "says 'rlimits only'.")
    hide = _hidden_paths(source, out, submissions)
    state_dir = out / ".state"
    todo, rows_by_job = [], {}
    for job in all_jobs:
        key = job_key(job, settings, _submission_bytes(job, settings))
        state = state_dir / safe_file_name(job.student) / f"{job.exercise.name}.json"
        previous = _load_state(state)
        if not force and previous.get("key") == key:
            rows_by_job[(job.student, job.exercise.name)] = [Row(**r) for r in previous["rows"]]
        else:
            todo.append((job, state))

    def record(item: tuple[Job, Path], data: bytes | None, rows: list[Row]) -> None:
        job, state = item
        rows_by_job[(job.student, job.exercise.name)] = rows
        write_atomic(state, json.dumps({"key": job_key(job, settings, data),
                                        "rows": [asdict(r) for r in rows]}, indent=1).encode())

    def work(item: tuple[Job, Path]) -> None:
        # Read again and grade exactly these bytes; the key stored is theirs.
        data = _submission_bytes(item[0], settings)
        record(item, data, grade_one(item[0], out, settings, hide, data))

    from tqdm import tqdm

    with tqdm(total=len(todo), desc="grading", unit="submission",
              disable=not progress or not todo, file=sys.stderr) as bar:
        if cluster is not None and todo:
            from .cluster import grade_on_cluster

            for item, data, graded in grade_on_cluster(cluster, todo, out, settings, hide, log):
                record(item, data, graded)
                bar.update(1)
        else:
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                for _ in pool.map(work, todo):
                    bar.update(1)
    rows = [r for job in all_jobs for r in rows_by_job[(job.student, job.exercise.name)]]
    if manual is not None:
        merge_sheet(rows, filled, manual)
    rows += dates.late_rows(rows, all_jobs)
    rows += extra
    write_outputs(out, rows, all_jobs, dates=dates, roster=roster, filled=filled,
                  executed=lambda job: executed_notebook(out, job, settings))
    summary = Summary(rows, len(todo), len(all_jobs) - len(todo), time.monotonic() - start,
                      not problem, problem)
    return summary


def executed_notebook(out: Path, job: Job, settings: Settings) -> Notebook | None:
    """The executed, restored notebook saved in autograded/ (read bounded, never through a
    link), or None when there is none."""
    if job.path is None or job.refused:
        return None
    path = (out / "autograded" / safe_file_name(job.student) / safe_file_name(job.assignment)
            / f"{job.exercise.name}.ipynb")
    try:
        data = read_submission(path, settings.notebook_mb * MB + 4 * settings.output_cap)
        return parse_notebook(data, path.name)
    except (Refused, NotebookError, RecursionError):
        return None


def _hidden_paths(*paths: Path) -> list[Path]:
    """What the sandbox must not see: the solutions, the grades, all other submissions."""
    found = []
    for path in paths:
        path = path.resolve()
        found.append(path if path.is_dir() else path.parent)
    return found


def _load_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) and "rows" in data else {}
    except (OSError, ValueError):
        return {}
