"""Batch: ``edu-dl grade``, every submission through the stages, and the gradebooks written.

collect -> (per submission) prepare -> run -> receive -> judge -> report. A second run regrades
only what changed: each submission's rows are kept under ``.state/`` with a key of everything its
grade depends on, the grading secret's fingerprint included (``secret``: the hidden inputs, the
same for every submission and every run, come from it). A failure grading one submission becomes
that submission's rows; nothing one student sent can stop the batch.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from . import sandbox
from .cluster import grade_on_cluster
from .collect import collect, is_nbgrader_course, scope
from .judge import judge_run
from .load import load_parts, load_source
from .manual import merge as merge_sheet
from .manual import read_sheet
from .model import Job, Refused, Row, Summary, rows_for, safe_file_name
from .notebooks import Notebook, NotebookError, write_atomic
from .policy import Dates
from .prepare import prepare, submission_bytes
from .receive import received
from .report import write_outputs
from .run import run
from .secret import Secret, check_unseen, load_or_create, secret_path
from .settings import GRADER_VERSION, MB, Settings
from .trust.files import read_bounded
from .trust.notebook import parse_notebook
from .trust.text import say_to_stderr


def grade_one(job: Job, out: Path, settings: Settings, hide: list[Path], secret: Secret,
              data: bytes | None = None) -> list[Row]:
    """Grade one (student, exercise); never raises: every outcome becomes rows.

    ``data``: the notebook's bytes when the caller has read them already (the same bytes its
    resume key was computed from).
    """
    try:
        return _grade_one(job, out, settings, hide, secret, data)
    except Exception as exc:  # a grader bug must not stop the batch
        return rows_for(job, "grader error", f"{type(exc).__name__}: {exc}",
                        sandbox.isolation())


def _grade_one(job: Job, out: Path, settings: Settings, hide: list[Path], secret: Secret,
               data: bytes | None) -> list[Row]:
    """prepare, run, judge: the three steps of one submission."""
    prepared = prepare(job, out, settings, data, secret)
    if isinstance(prepared, list):  # nothing to run: these rows say why
        return prepared
    ran = received(prepared, run(prepared, settings, hide), settings)
    try:
        return judge_run(job, prepared, ran, settings)
    finally:
        if not prepared.boxed:  # the unisolated run's files; run.json stays
            for name in ("grading", "work", "tmp"):
                shutil.rmtree(prepared.work / name, ignore_errors=True)


def job_key(job: Job, settings: Settings, data: bytes | None, fingerprint: str) -> str:
    """What a grade depends on: the submission, its source, the part specs, the limits and the
    secret its inputs are drawn from (``fingerprint``: a rotated secret regrades it)."""
    h = hashlib.sha256(GRADER_VERSION.encode())
    h.update(f"secret {fingerprint}\0".encode())
    h.update(job.exercise.digest.encode())
    h.update(json.dumps(asdict(settings), sort_keys=True).encode())
    h.update(job.refused.encode())
    for name, beside in sorted(job.exercise.files.items()):
        h.update(hashlib.sha256(name.encode() + b"\0" + beside).digest())
    if data is not None:
        h.update(data)
    h.update(job.exercise.specs_digest.encode())
    return h.hexdigest()


def grade(submissions: Path, source: Path, out: Path, *, settings: Settings | None = None,
          jobs: int = 1, force: bool = False, progress: bool = True,
          log: Callable[[str], None] | None = None, exercises_due: list[str] | None = None,
          dates: Dates | None = None, roster: dict[str, Any] | None = None,
          manual: Path | None = None, cluster: Any = None,
          secret: Secret | None = None) -> Summary:
    """Grade every submission; write grades.csv, feedback/ and the nbgrader export into ``out``.

    ``secret``: what every part's inputs are drawn from (default: ``out/.secret``, created on
    the first run).
    ``cluster`` (cluster.ClusterOptions): run the sandboxes on Dask workers instead of
    ``jobs`` threads here. Raises NothingToGrade (one sentence: why, and what to do) when the
    batch could not grade anything: no graded cell in the source, no student folder, nothing
    due submitted."""
    settings = settings or Settings()
    dates = dates or Dates()
    log = log or say_to_stderr
    start = time.monotonic()
    filled = read_sheet(manual) if manual is not None else {}  # a broken sheet: before grading
    exercises = load_source(source, exclude=(submissions, out), settings=settings, log=log)
    load_parts(exercises, source)
    all_jobs, extra = collect(submissions, exercises)
    all_jobs = scope(all_jobs, exercises, exercises_due, roster)
    out.mkdir(parents=True, exist_ok=True)
    notes = []
    # On a cluster every worker must have the sandbox (cluster.py refuses one without it).
    problem = "" if cluster is not None else sandbox.bwrap_problem()
    if problem:
        log(f"WARNING: grading WITHOUT a sandbox: {problem}. Submissions run with resource "
            "limits only and can read and write what the grading user can; the gradebook "
            "says 'rlimits only'.")
        if secret is None or not secret.public:
            notes.append(
                "WARNING: without a sandbox the student code runs as you and can read the "
                "grading secret (and so every hidden input); rotate it (edu-dl grade "
                "--rotate-secret) once a sandbox works")
            log(notes[-1])
    if secret is None:
        secret, created = load_or_create(secret_path(out))
        if created:
            log(f"created the grading secret {secret_path(out)} (fingerprint "
                f"{secret.fingerprint}): every part's hidden inputs are drawn from it")
    check_unseen(secret, out, [*sandbox.software(), Path("/usr")])
    hide = _hidden_paths(source, out, submissions)
    state_dir = out / ".state"
    todo, rows_by_job = [], {}
    for job in all_jobs:
        key = job_key(job, settings, submission_bytes(job, settings), secret.fingerprint)
        state = state_dir / safe_file_name(job.student) / f"{job.exercise.name}.json"
        kept = None if force else _kept_rows(state, key)
        if kept is not None:
            rows_by_job[(job.student, job.exercise.name)] = kept
        else:
            todo.append((job, state))

    def record(item: tuple[Job, Path], data: bytes | None, rows: list[Row]) -> None:
        job, state = item
        rows_by_job[(job.student, job.exercise.name)] = rows
        try:  # compact: the rows hold what the student's code printed and raised
            write_atomic(state, json.dumps({"key": job_key(job, settings, data,
                                                           secret.fingerprint),
                                            "secret": secret.fingerprint,
                                            "rows": [asdict(r) for r in rows]}).encode())
        except OSError as exc:  # graded all the same; the next run grades it again
            log(f"could not keep the grade of {job.student!r} for the next run ({exc})")

    def work(item: tuple[Job, Path]) -> None:
        # Read again and grade exactly these bytes; the key stored is theirs.
        data = submission_bytes(item[0], settings)
        record(item, data, grade_one(item[0], out, settings, hide, secret, data))

    with tqdm(total=len(todo), desc="grading", unit="submission",
              disable=not progress or not todo, file=sys.stderr) as bar:
        if cluster is not None and todo:
            for item, data, graded in grade_on_cluster(cluster, todo, out, settings, hide, log,
                                                       secret):
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
                  executed=lambda job: executed_notebook(out, job, settings),
                  course=submissions if is_nbgrader_course(submissions) else None, log=log)
    summary = Summary(rows, len(todo), len(all_jobs) - len(todo), time.monotonic() - start,
                      not problem, problem, secret.fingerprint, notes)
    return summary


def executed_notebook(out: Path, job: Job, settings: Settings) -> Notebook | None:
    """The executed, restored notebook saved in autograded/ (read bounded, never through a
    link), or None when there is none."""
    if job.path is None or job.refused:
        return None
    path = (out / "autograded" / safe_file_name(job.student) / safe_file_name(job.assignment)
            / f"{job.exercise.name}.ipynb")
    try:
        data = read_bounded(path, settings.notebook_mb * MB + 4 * settings.output_cap)
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


def _kept_rows(path: Path, key: str) -> list[Row] | None:
    """The rows a previous run kept for this key, or None (none, another key, or a state file
    that is not what this grader writes: the submission is graded again)."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        return [Row(**r) for r in data["rows"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None
