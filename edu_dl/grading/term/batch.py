"""Batch: ``edu-dl grade``, every submission through the stages, and the gradebooks written.

collect -> (per submission) prepare -> run -> receive -> judge -> report. A second run regrades
only what changed: each submission's rows are kept in the gradebook database (``gradebook``,
``db``: OUT/gradebook.db, or the ``db`` URL given), in a transaction per submission, with a key
of everything its grade depends on, the grading secret's fingerprint included (``secret``: the
hidden inputs, the same for every submission and every run, come from it). The gradebooks are
rebuilt from every kept submission, so a run that grades some students (``students``, or a
folder with one resubmission) changes their rows alone. A failure grading one submission
becomes that submission's rows; nothing one student sent can stop the batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tqdm import tqdm

from edu_dl.grading import cost, sandbox
from edu_dl.grading.model import (
    Exercise,
    Interrupted,
    Job,
    NothingToGrade,
    Refused,
    Row,
    Summary,
    rows_for,
    safe_file_name,
    timed_out,
)
from edu_dl.grading.notebooks import Notebook, NotebookError
from edu_dl.grading.settings import GRADER_VERSION, MB, Settings
from edu_dl.grading.stages.cluster import check_workers, grade_on_cluster, sigint_ignored
from edu_dl.grading.stages.collect import check_students, collect, is_nbgrader_course, only, scope
from edu_dl.grading.stages.judge import judge_run
from edu_dl.grading.stages.load import load_parts, load_source, refuse_released
from edu_dl.grading.stages.prepare import Prepared, prepare, submission_bytes
from edu_dl.grading.stages.receive import received, record_cost
from edu_dl.grading.stages.run import run
from edu_dl.grading.stages.secret import (
    Secret,
    SecretError,
    check_unseen,
    load_or_create,
    read_secret,
    secret_path,
)
from edu_dl.grading.stages.speed import Measurement
from edu_dl.grading.stages.speed_rows import measure_ahead, speed_rows
from edu_dl.grading.term import db, gradebook, renumbered
from edu_dl.grading.term.classreport import record_class
from edu_dl.grading.term.manual import applicable, read_sheet
from edu_dl.grading.term.manual import merge as merge_sheet
from edu_dl.grading.term.policy import Dates
from edu_dl.grading.term.report import HTML_FEEDBACK, write_outputs
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.notebook import parse_notebook
from edu_dl.grading.trust.scopes import parse_one_at_a_time_everywhere
from edu_dl.grading.trust.text import say_to_stderr


def grade_one(job: Job, out: Path, settings: Settings, hide: list[Path], secret: Secret,
              data: bytes | None = None, speed_ahead: bool = False,
              gate: sandbox.Gate | None = None) -> list[Row]:
    """Grade one (student, exercise); never raises: every outcome becomes rows.

    ``data``: the notebook's bytes when the caller has read them already (the same bytes its
    resume key was computed from). ``speed_ahead``: measure its speed tasks while its notebook
    runs (speed_rows.measure_ahead), not after. ``gate``: its sandbox starts at once and its
    cells wait for a slot (sandbox.Gate).
    """
    try:
        return _grade_one(job, out, settings, hide, secret, data, speed_ahead, gate)
    except Exception as exc:  # a grader bug must not stop the batch
        return rows_for(job, "grader error", f"{type(exc).__name__}: {exc}",
                        settings.isolation())


def _grade_one(job: Job, out: Path, settings: Settings, hide: list[Path], secret: Secret,
               data: bytes | None, speed_ahead: bool = False,
               gate: sandbox.Gate | None = None) -> list[Row]:
    """prepare, run, judge: the three steps of one submission."""
    prepared = prepare(job, out, settings, data, secret)
    if isinstance(prepared, list):  # nothing to run: these rows say why
        return prepared
    if not speed_ahead:
        return _run_and_judge(job, prepared, settings, hide, secret, gate=gate)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="speed-ahead") as pool:
        ahead = measure_ahead(job, prepared.notebook, secret, settings, hide, pool)
        return _run_and_judge(job, prepared, settings, hide, secret, ahead, gate)


def _run_and_judge(job: Job, prepared: Prepared, settings: Settings, hide: list[Path],
                   secret: Secret, ahead: dict[str, Future[Measurement]] | None = None,
                   gate: sandbox.Gate | None = None) -> list[Row]:
    try:
        started = time.perf_counter()
        done = run(prepared, settings, hide, gate)
        sandbox_s = time.perf_counter() - started  # the sandbox's time, not the grader's
        prepared.files = {}  # the sandbox had them: not held while its result is read
        ran = received(prepared, done, settings)
        record = ran.returned.record
        # Started ahead: the runner's wait for a slot (at most the time before the gate opened,
        # which the watchdog measured) is neither the sandbox's cost nor the kernel's.
        sandbox_s -= min(record.gate_seconds, done.gate_s)
        cost.ran(sandbox_s, record.kernel_seconds, record.cells_seconds)
        cost.checkpoint()  # the parsed result is held now: its size counts on a busy machine too
        rows = judge_run(job, prepared, ran, settings)
    finally:
        if not prepared.boxed:  # the unisolated run's private folder; run.json stays
            shutil.rmtree(prepared.root, ignore_errors=True)
    return rows + speed_rows(job, prepared.notebook, rows, secret, settings, hide, ahead)


def job_key(job: Job, settings: Settings, data: bytes | None, fingerprint: str) -> str:
    """What a grade depends on: the submission, its source, the part specs, the limits and the
    secret its inputs are drawn from (``fingerprint``: a rotated secret regrades it)."""
    h = hashlib.sha256(content_key(job, data, fingerprint).encode())
    h.update(json.dumps(settings.key_fields(), sort_keys=True).encode())
    return h.hexdigest()


def content_key(job: Job, data: bytes | None, fingerprint: str) -> str:
    """:func:`job_key` without the limits: what ``--retry-timeouts`` compares, so that the
    grades it keeps stay kept under a new ``--timeout``."""
    h = hashlib.sha256(GRADER_VERSION.encode())
    h.update(f"secret {fingerprint}\0".encode())
    h.update(job.exercise.digest.encode())
    h.update(job.refused.encode())
    for name, beside in sorted(job.exercise.files.items()):
        h.update(hashlib.sha256(name.encode() + b"\0" + beside).digest())
    if data is not None:
        h.update(data)
    for name, module in job.package.items():  # the student's package, read with the notebook
        h.update(hashlib.sha256(b"package\0" + name.encode() + b"\0" + module).digest())
    h.update(job.exercise.specs_digest.encode())
    return h.hexdigest()


def planned_keys(job: Job, settings: Settings, data: bytes | None, fingerprint: str,
                 retry_timeouts: bool) -> tuple[str, str | None]:
    """The job's key and its content key (``--retry-timeouts``), as a run plans; the package read
    with ``data`` is dropped (read again to grade): no class's packages are held at once."""
    key = job_key(job, settings, data, fingerprint)
    retry = content_key(job, data, fingerprint) if retry_timeouts else None
    job.package = {}
    return key, retry


def job_basis(job: Job, settings: Settings, fingerprint: str) -> str:
    """What a grade depends on besides the submission: a kept grade whose basis differs from
    this run's was graded against another source, other parts, limits or secret."""
    h = hashlib.sha256(GRADER_VERSION.encode())
    for text in (fingerprint, job.exercise.digest, job.exercise.specs_digest,
                 json.dumps(settings.key_fields(), sort_keys=True)):
        h.update(f"{text}\0".encode())
    for name, beside in sorted(job.exercise.files.items()):
        h.update(hashlib.sha256(name.encode() + b"\0" + beside).digest())
    return h.hexdigest()


def grade(submissions: Path, source: Path, out: Path, *, settings: Settings | None = None,
          jobs: int = 1, force: bool = False, progress: bool = True,
          log: Callable[[str], None] | None = None, exercises_due: list[str] | None = None,
          dates: Dates | None = None, roster: dict[str, Any] | None = None,
          manual: Path | None = None, cluster: Any = None,
          secret: Secret | None = None, students: list[str] | None = None,
          retry_timeouts: bool = False, allow_released: bool = False,
          db_url: str | None = None, speed_ahead: bool = False,
          feedback_pages: bool = True, ahead: int = 1) -> Summary:
    """Grade every submission; write grades.csv, feedback/ and the nbgrader export into ``out``.

    The gradebooks hold every student ``out`` has graded: this run's rows replace those of the
    students it grades (``students``: only these of SUBMISSIONS), the others' come back as
    kept; a notebook not found for a student never replaces one graded before. With a
    ``roster``, a kept student neither on it nor in this run is removed.

    ``secret``: what every part's inputs are drawn from (default: ``out/.secret``, created on
    the first run).
    ``retry_timeouts``: grade again the submissions whose kept grade is a timeout; keep every
    other kept grade, even one kept under other limits (a new ``--timeout``).
    ``db_url``: the gradebook database (default: ``sqlite:///OUT/gradebook.db``).
    ``speed_ahead``: measure each submission's speed tasks while its notebook runs, not after
    (``edu-dl validate``: one notebook, two cores; here, not on a cluster).
    ``feedback_pages``: render each notebook's HTML feedback page (``edu-dl validate`` shows
    its report in the terminal and throws the folder away: no page, a second of its time).
    ``ahead``: this many more sandboxes start (their runner and kernel boot) while ``jobs``
    notebooks run; each runs its first cell only when one of the ``jobs`` slots is free, and
    its time limits count from then (0: each sandbox starts when a slot is free).
    ``allow_released``: grade against a source that is a student version (``edu-dl validate``
    on a notebook of its own); else such a source raises NothingToGrade.
    Ctrl-C raises :class:`Interrupted`: the running sandboxes are stopped, what was graded is
    kept for the next run, and nothing half-graded is.
    ``cluster`` (cluster.ClusterOptions): run the sandboxes on Dask workers instead of
    ``jobs`` threads here. Raises NothingToGrade (one sentence: why, and what to do) when the
    batch could not grade anything: no graded cell in the source, no student folder, nothing
    due submitted."""
    parse_one_at_a_time_everywhere()  # NumPy's and the grader's parses share the threads
    batch = Batch(Request(submissions, source, out, jobs, force, progress, exercises_due,
                          roster, manual, cluster, students, retry_timeouts, allow_released,
                          db_url, speed_ahead, feedback_pages, ahead),
                  settings, dates, log, secret)
    batch.plan()
    try:
        batch.execute()
        return batch.write()
    except KeyboardInterrupt:
        raise Interrupted(len(batch.saved), len(batch.todo)) from None


@dataclass(frozen=True)
class Request:
    """What ``grade`` was asked to do (its arguments, less the four a batch fills in)."""

    submissions: Path
    source: Path
    out: Path
    jobs: int = 1
    force: bool = False
    progress: bool = True
    exercises_due: list[str] | None = None
    roster: dict[str, Any] | None = None
    manual: Path | None = None
    cluster: Any = None
    students: list[str] | None = None
    retry_timeouts: bool = False
    allow_released: bool = False
    db_url: str | None = None
    speed_ahead: bool = False
    feedback_pages: bool = True
    ahead: int = 1


class Batch:
    """One ``edu-dl grade``, its state in one place: :meth:`plan` reads the course and the
    submissions and decides what to grade again; :meth:`execute` grades that (threads here,
    or a Dask cluster); :meth:`write` makes the gradebooks from this run's rows and the kept
    ones and returns the Summary."""

    def __init__(self, request: Request, settings: Settings | None, dates: Dates | None,
                 log: Callable[[str], None] | None, secret: Secret | None) -> None:
        # Fails closed (NoSandbox) before anything is read or written. Asked here even for a
        # cluster: the speed tasks run on this machine.
        self.request = request
        self.settings = (settings or Settings()).checked()
        self.dates = dates or Dates()
        self.log = log or say_to_stderr
        self.given_secret = secret
        self.store = db.store(request.out, request.db_url)
        self.start = time.monotonic()
        self.todo: list[tuple[Job, Path]] = []  # graded in this run, each with its work folder
        self.saved: list[tuple[Job, Path]] = []  # of those, kept so far
        self.rows_by_job: dict[tuple[str, str], list[Row]] = {}
        self.costs: dict[tuple[str, str], cost.Cost] = {}  # the grader's own, per submission
        self.notes: list[str] = []

    def plan(self) -> None:
        """Read the sheet, the source and the submissions; decide who is graded now and what
        is kept; create the secret on a first run. Everything that can refuse the whole
        batch refuses here, before a sandbox starts."""
        r, settings, log = self.request, self.settings, self.log
        self.filled = read_sheet(r.manual) if r.manual is not None else {}  # broken: now
        exercises = load_source(r.source, exclude=(r.submissions, r.out), settings=settings,
                                log=log)
        load_parts(exercises, r.source)
        note = partial(renumbered.explain, known=exercises)  # an exercise's old name, said so
        found, extra = collect(r.submissions, exercises, note)
        folders = {j.student for j in found} | {row.student for row in extra}
        if r.students:
            found, extra = only(found, extra, r.students, r.submissions, r.roster)
        entries = gradebook.read_entries(self.store, log)
        # Grades kept under an exercise's old name were drawn from other part ids: never mixed.
        renumbered.refuse_old_grades(r.out, {name for _, name in entries}, exercises,
                                     r.submissions, r.source)
        # One name per student, decided here: every later step (manual.csv, --extensions, the
        # exports) finds a student by this name alone.
        students_known = folders | set(r.roster or ()) | {student for student, _ in entries}
        check_students(students_known)
        self.dates, unknown_extensions = self.dates.for_students(students_known)
        try:
            all_jobs = scope(found, exercises,
                             r.exercises_due or _submitted(found, entries, exercises), r.roster,
                             note)
        except NothingToGrade as exc:  # nothing due: the notebooks' old names, if that is why
            if r.exercises_due:
                raise
            raise NothingToGrade(renumbered.explained(
                str(exc), [row.exercise for row in extra], exercises)) from None
        if r.students:
            all_jobs = [j for j in all_jobs if j.student in r.students]
        # Nothing found for a student now never replaces a submission graded before (a folder
        # holding one resubmission, a roster student's earlier work).
        all_jobs = [j for j in all_jobs if j.path is not None or j.refused
                    or not _has_submission(entries.get((j.student, j.exercise.name)))]
        if not r.allow_released:
            refuse_released(list({job.exercise.name: job.exercise for job in all_jobs}.values()),
                            r.source)
        if r.cluster is not None and (r.force or not _all_kept(
                all_jobs, entries, settings, r.out, self.given_secret, r.retry_timeouts)):
            # Every worker must have the sandbox too: asked before anything is written (a
            # batch with nothing to grade does not ask).
            check_workers(r.cluster, settings.sandbox_problem or "", log)
        r.out.mkdir(parents=True, exist_ok=True)
        self.notes = list(unknown_extensions)
        self.problem = settings.sandbox_problem or ""  # only --no-sandbox, validate's fallback
        if self.problem:
            self.notes.append(unsandboxed_warning(self.problem, settings))
            log(self.notes[-1])
            if (self.given_secret is None or not self.given_secret.public) and \
                    os.geteuid() != 0:
                self.notes.append(
                    "WARNING: without a sandbox the student code runs as you and can read the "
                    "grading secret (and so every hidden input); rotate it (edu-dl grade "
                    "--rotate-secret) once a sandbox works")
                log(self.notes[-1])
        secret = self.given_secret
        if secret is None:
            secret, created = load_or_create(secret_path(r.out))
            if created:
                log(f"created the grading secret {secret_path(r.out)} (fingerprint "
                    f"{secret.fingerprint}): every part's hidden inputs are drawn from it")
        check_unseen(secret, r.out, [*sandbox.software(), Path("/usr")])
        self.secret = secret
        self.hide = _hidden_paths(r.source, r.out, r.submissions)
        self.collected = {j.student for j in found} | {row.student for row in extra}
        for student in self.collected:  # this run's notes on their folders replace the old
            gradebook.write_collected(self.store, student,
                                      [row for row in extra if row.student == student])
        for job in all_jobs:
            data = submission_bytes(job, settings)
            key, retry = planned_keys(job, settings, data, secret.fingerprint, r.retry_timeouts)
            entry = entries.get((job.student, job.exercise.name))
            if entry is not None and not r.force and _reusable(entry, key, retry):
                self.rows_by_job[(job.student, job.exercise.name)] = entry.rows
                if entry.key == key and entry.job != gradebook.job_facts(job):  # new timestamp
                    _keep(self.store, job, entry.rows, key, settings, secret, log,
                          entry.content)
            else:
                self.todo.append((job, r.out / ".work" / safe_file_name(job.student)
                                  / job.exercise.name))
        if r.force:  # so that a --force cut short by Ctrl-C resumes, without it, where it stopped
            for job, _ in self.todo:
                gradebook.forget(self.store, job.student, job.exercise.name)
        self.entries, self.all_jobs, self.exercises = entries, all_jobs, exercises

    def _record(self, item: tuple[Job, Path], data: bytes | None, rows: list[Row],
                spent: cost.Cost | None = None) -> None:
        job = item[0]
        self.rows_by_job[(job.student, job.exercise.name)] = rows
        if spent is not None:
            self.costs[(job.student, job.exercise.name)] = spent
        if _keep(self.store, job, rows,
                 job_key(job, self.settings, data, self.secret.fingerprint), self.settings,
                 self.secret, self.log, content_key(job, data, self.secret.fingerprint), spent):
            self.saved.append(item)
        job.package = {}  # its student's package: graded and keyed, no longer needed

    def execute(self) -> None:
        """Grade every planned submission, each kept as soon as it is graded. Ctrl-C stops the
        running sandboxes; what was graded stays kept, nothing half-graded is."""
        r, settings = self.request, self.settings
        stopping = threading.Event()  # Ctrl-C: a run that ends now is cut short, not graded
        # Grading ahead: slots go to the submissions in the batch's order (their tickets).
        turns = sandbox.Turns(max(1, r.jobs)) if r.ahead > 0 else None

        def work(ticket: int, item: tuple[Job, Path]) -> None:
            gate = sandbox.Gate(turns, ticket) if turns is not None else None
            try:
                if stopping.is_set():
                    return
                began = time.time()
                with cost.metered() as spent:
                    # Read again and grade exactly these bytes; the key stored is theirs.
                    data = submission_bytes(item[0], settings)
                    rows = grade_one(item[0], r.out, settings, self.hide, self.secret, data,
                                     r.speed_ahead, gate)
            finally:  # no sandbox reached its gate (refused, failed, stopped): the next's turn
                if turns is not None:
                    turns.pass_turn(ticket)
            if not stopping.is_set():
                record_cost(r.out, item[0], spent.rounded(), began)
                self._record(item, data, rows, spent)

        sandbox.STOP.clear()
        with tqdm(total=len(self.todo), desc="grading", unit="submission",
                  disable=not r.progress or not self.todo, file=sys.stderr) as bar:
            if r.cluster is not None and self.todo:
                began = time.time()  # the run records written after it are this batch's
                # closed at once on Ctrl-C: its tasks cancelled, its cluster closed
                with closing(grade_on_cluster(r.cluster, self.todo, r.out, settings, self.hide,
                                              self.log, self.secret)) as graded_on_cluster:
                    for item, data, graded, spent in graded_on_cluster:
                        record_cost(r.out, item[0], spent.rounded(), began)
                        self._record(item, data, graded, spent)
                        bar.update(1)
                return
            # Grading ahead: r.ahead more sandboxes start (runner and kernel) while --jobs run;
            # each waits for one of the --jobs slots before its first cell (sandbox.Gate).
            pool = ThreadPoolExecutor(max_workers=max(1, r.jobs) + max(0, r.ahead))
            try:
                for _ in pool.map(work, range(len(self.todo)), self.todo):
                    bar.update(1)
            except BaseException:
                stopping.set()
                sandbox.STOP.set()  # every running sandbox is killed within a poll
                raise
            finally:
                with sigint_ignored():  # a second Ctrl-C must not leave threads behind
                    pool.shutdown(wait=True, cancel_futures=True)

    def write(self) -> Summary:
        """The gradebooks, from this run's rows and every kept submission's; the summary (with
        the grader's own cost per submission graded now, its feedback page added)."""
        r, settings, log, notes = self.request, self.settings, self.log, self.notes
        out, roster, dates, collected = r.out, r.roster, self.dates, self.collected
        keep = (lambda student: True) if roster is None else \
            (lambda student: student in roster or student in collected)
        kept, stale = _others(self.entries, self.all_jobs, self.exercises, keep, settings,
                              self.secret, self.rows_by_job)
        leaving = sorted({s for s, _ in self.entries} - collected - set(roster or ())) \
            if roster else []
        if leaving:
            gradebook.remove_students(self.store, out, leaving, ("feedback", HTML_FEEDBACK))
            notes.append(f"removed {len(leaving)} student(s) not on the roster from the "
                         f"gradebook: {', '.join(leaving[:10])}"
                         f"{' ...' if len(leaving) > 10 else ''}")
        if kept:
            notes.append(f"{len(kept)} submission(s) not graded in this run kept as graded "
                         "before")
        if stale:
            notes.append(f"kept submissions of {', '.join(sorted(stale))} were graded against "
                         "another source, part files, limits or secret (or by an older "
                         "grader): grade the whole folder (without --student) to bring them up "
                         "to date")
        applied = {"--due": f"{dates.due:%Y-%m-%dT%H:%M}" if dates.due else "",
                   "--late": str(dates.late) if dates.late.method != "none" else "",
                   "--extensions": f"({len(dates.extensions)} lines)" if dates.extensions else "",
                   "--manual": str(r.manual or ""),
                   "--roster": f"({len(roster)} students)" if roster else ""}
        notes += gradebook.dropped_options(self.store, applied)
        order = {name: i for i, name in enumerate(self.exercises)}
        book = sorted([*self.all_jobs, *kept], key=lambda j: (j.student, order[j.exercise.name]))
        rows = [row for job in book for row in self.rows_by_job[(job.student, job.exercise.name)]]
        filled = self._hand_grades(rows)
        rows += dates.late_rows(rows, book)
        notes_kept = gradebook.read_collected(out)
        rows += [row for student in sorted(set(notes_kept) | collected) if keep(student)
                 for row in notes_kept.get(student, [])]
        pages: dict[tuple[str, str], cost.Cost] = {}
        write_outputs(out, rows, book, dates=dates, roster=roster, filled=filled,
                      executed=(lambda job: executed_notebook(out, job, settings))
                      if r.feedback_pages else None,
                      course=r.submissions if is_nbgrader_course(r.submissions) else None,
                      log=log, costs=pages)
        record_class(out, book, settings, log=log,  # for edu-dl report: cells' digests, hints
                     kept=frozenset((j.student, j.exercise.name) for j in kept))
        gradebook.remember_options(self.store, applied)
        graded = len(self.todo)
        return Summary(rows, graded, len(self.all_jobs) - graded, time.monotonic() - self.start,
                       not self.problem, self.problem, self.secret.fingerprint, notes,
                       {key: (spent, pages.get(key)) for key, spent in self.costs.items()},
                       cost.process_peak_mb())

    def _hand_grades(self, rows: list[Row]) -> dict[Any, Any]:
        """Merge the hand grades into ``rows``: a ``--manual`` sheet's lines are checked
        strictly (a line that names no row stops the batch) and imported into the gradebook
        first; then every hand grade the gradebook keeps that names a row applies. Returns
        them all, for the next manual.csv."""
        r = self.request
        if r.manual is not None:
            merge_sheet([dataclasses.replace(row) for row in rows], self.filled, r.manual)
            gradebook.save_hand_grades(self.store, dict(self.filled), f"--manual {r.manual}")
        kept = gradebook.hand_grades(self.store)
        merge_sheet(rows, applicable(rows, kept, repr(self.store)), repr(self.store))
        return kept


def _all_kept(jobs: list[Job], entries: dict[tuple[str, str], gradebook.Entry],
              settings: Settings, out: Path, secret: Secret | None, retry_timeouts: bool) -> bool:
    """Whether every job's kept grade stands for this run, read without writing anything (a
    first run, with no grading secret yet, has everything to grade)."""
    if secret is None:
        try:
            secret = read_secret(secret_path(out)) if secret_path(out).is_file() else None
        except SecretError:
            secret = None
    if secret is None:
        return not jobs
    for job in jobs:
        key, retry = planned_keys(job, settings, submission_bytes(job, settings),
                                  secret.fingerprint, retry_timeouts)
        entry = entries.get((job.student, job.exercise.name))
        if entry is None or not _reusable(entry, key, retry):
            return False
    return True


def unsandboxed_warning(problem: str, settings: Settings) -> str:
    """What the log and the summary say of a batch graded without the sandbox."""
    who = ("an unprivileged uid of their own (the grader runs as root)" if os.geteuid() == 0
           else f"you (uid {os.getuid()}), reading and writing whatever you may")
    return (f"WARNING: grading WITHOUT a sandbox ({problem}): submissions run with resource "
            f"limits only, as {who}, and see this machine's files, network and processes; "
            f"the gradebook says '{settings.isolation()}'")


def _others(entries: dict[tuple[str, str], gradebook.Entry], graded: list[Job],
            exercises: dict[str, Exercise], keep: Callable[[str], bool], settings: Settings,
            secret: Secret, rows_by_job: dict[tuple[str, str], list[Row]]
            ) -> tuple[list[Job], set[str]]:
    """The jobs the gradebook keeps from earlier runs (their rows put in ``rows_by_job``), and
    the exercises of those graded on another basis. Left out: what this run graded, exercises
    not in this source (their files stay) and students ``keep`` lets go."""
    now = {(j.student, j.exercise.name) for j in graded}
    kept, stale = [], set()
    for (student, name), entry in entries.items():
        if (student, name) in now or name not in exercises or not keep(student):
            continue
        job = gradebook.kept_job(entry, exercises[name])
        kept.append(job)
        rows_by_job[(student, name)] = entry.rows
        if entry.basis != job_basis(job, settings, secret.fingerprint):  # "": an older grader's
            stale.add(name)
    return kept, stale


def _submitted(found: list[Job], entries: dict[tuple[str, str], gradebook.Entry],
               exercises: dict[str, Exercise]) -> list[str] | None:
    """The exercises due by default: those a student submitted, in this run or before (None:
    none, and scope says so)."""
    names = {j.exercise.name for j in found if j.path is not None or j.refused}
    names |= {name for (_, name), entry in entries.items() if entry.submitted}
    return [name for name in exercises if name in names] or None


def _has_submission(entry: gradebook.Entry | None) -> bool:
    return entry is not None and entry.submitted


def _keep(store: db.Store, job: Job, rows: list[Row], key: str, settings: Settings, secret: Secret,
          log: Callable[[str], None], content: str = "", spent: cost.Cost | None = None
          ) -> bool:
    """Write the job's rows to the gradebook (one transaction), with what grading it cost the
    grader; whether they were written."""
    try:
        gradebook.write_entry(store, job, rows, key,
                              job_basis(job, settings, secret.fingerprint), secret.fingerprint,
                              content, spent.rounded() if spent is not None else None)
    except (OSError, db.DatabaseError) as exc:  # graded all the same; graded again next time
        log(f"could not keep the grade of {job.student!r} for the next run ({exc})")
        return False
    return True


def _reusable(entry: gradebook.Entry, key: str, retry: str | None) -> bool:
    """Whether a kept entry stands for this run: its key is this run's, or, with ``retry``
    (``--retry-timeouts``: the submission's :func:`content_key`), it did not time out and only
    the limits changed."""
    if retry is None:
        return entry.key == key
    return not timed_out(entry.rows) and (entry.key == key or entry.content == retry)


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

