"""The grading commands: ``edu-dl assign`` (authoring), ``edu-dl validate`` (students),
``edu-dl grade`` (a batch, here or on a Dask cluster) and ``edu-dl replay`` (a stored run judged
again, for a disputed row). Argparse wiring only: each handler
imports the stage it runs, so ``edu-dl --help`` stays instant."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edu_dl.grading.trust.text import say, say_to_stderr
from edu_dl.util.args import positive

if TYPE_CHECKING:
    from edu_dl.grading.stages.cluster import ClusterOptions

Subparsers = Any  # argparse's _SubParsersAction is private


def add_assign(subparsers: Subparsers) -> None:
    """Register ``edu-dl assign SOURCE EXERCISES``: student versions of solution notebooks."""
    parser = subparsers.add_parser(
        "assign",
        help="write the student versions of the solution notebooks",
        description="Generate exercise notebooks from solution notebooks, as nbgrader's "
        "generate_assignment does: solution regions become `raise NotImplementedError()`, "
        "hidden tests are removed, outputs cleared, test cells locked.",
    )
    parser.add_argument("source", type=Path, metavar="SOURCE",
                        help="folder of solution notebooks (or one notebook), e.g. solutions/")
    parser.add_argument("dest", type=Path, metavar="EXERCISES",
                        help="folder for the student versions, e.g. exercises/")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if EXERCISES is not what SOURCE generates")
    parser.add_argument("--no-run-solutions", dest="run_solutions", action="store_false",
                        help="do not grade each solution notebook against its own tests first "
                        "(by default assign does, in the sandbox with the hidden tests, and "
                        "writes nothing if a part fails; a notebook that passed unchanged is "
                        "not run again)")
    add_no_sandbox(parser)
    parser.set_defaults(handler=run_assign)


def add_no_sandbox(parser: argparse.ArgumentParser) -> None:
    """``--no-sandbox``: the explicit opt-in to run notebooks where bwrap cannot be built."""
    parser.add_argument("--no-sandbox", action="store_true",
                        help="where the sandbox (bubblewrap) cannot be built, run the notebooks "
                        "anyway with resource limits only: they see this machine's files, "
                        "network and processes (as root they run as an unprivileged uid of "
                        "their own, never root; as another user, as that user). Without it, "
                        "such a run is refused (exit status 2) and writes nothing. Every "
                        "gradebook row and the summary say 'none (--no-sandbox)'")


def run_assign(args: argparse.Namespace) -> int:
    """``edu-dl assign``: write (with --check, compare) the student versions; 1 when --check
    finds them out of date, 2 for a broken notebook or no sandbox, else 0."""
    from edu_dl.grading.notebooks import NotebookError
    from edu_dl.grading.settings import NO_SANDBOX, NoSandbox
    from edu_dl.grading.term.assign import assign

    dotted: list[str] = []
    warnings: list[str] = []
    try:
        changed = assign(args.source, args.dest, write=not args.check, dotted=dotted,
                         warnings=warnings, run_solutions=args.run_solutions and not args.check,
                         log=say_to_stderr, without_sandbox=NO_SANDBOX if args.no_sandbox else "")
    except (NotebookError, NoSandbox) as exc:
        say(f"edu-dl assign: {exc}", sys.stderr)
        return 2
    for warning in warnings:
        say(f"warning: {warning}", sys.stderr)
    if dotted:
        say(f"not released (names that start with a dot stay beside the source): "
            f"{', '.join(dotted)}")
    if args.check:
        for path in changed:
            say(f"out of date: {path} (run: edu-dl assign {args.source} {args.dest})")
        return 1 if changed else 0
    for path in changed:
        say(f"wrote {path}")
    if not changed:
        say(f"{args.dest} is up to date")
    return 0


def add_validate(subparsers: Subparsers) -> None:
    """Register ``edu-dl validate NOTEBOOK.ipynb...``: grade as ``edu-dl grade`` would and say
    what would fail."""
    parser = subparsers.add_parser(
        "validate",
        help="run an exercise notebook as the grader will and say what would fail",
        description="Grade the notebook exactly as `edu-dl grade` does (restored from the "
        "source, run in the sandbox on the hidden inputs, judged outside) and report each graded "
        "row. Exit status 1 if anything would fail.",
    )
    parser.add_argument("notebook", type=Path, nargs="+", metavar="NOTEBOOK.ipynb")
    parser.add_argument("--source", type=Path, default=None, metavar="PATH",
                        help="the instructor's source notebook or folder to restore and judge "
                        "against (default: the notebook itself). With it the notebook is "
                        "someone else's, as in `edu-dl grade`: where the sandbox cannot be "
                        "built, validate refuses unless --no-sandbox is given")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds per cell before it counts as hanging (default: 120)")
    add_no_sandbox(parser)
    parser.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    """``edu-dl validate``: print each notebook's report; 1 when anything would fail, 2 when the
    sandbox is refused, 130 when interrupted, else 0."""
    from edu_dl.grading.model import Interrupted
    from edu_dl.grading.settings import NO_SANDBOX, NoSandbox

    probe = _probe_the_sandbox()  # while the grading stages are imported
    from edu_dl.grading.term.validate import validate

    probe.join()

    # Without the opt-in, validate decides: one's own notebook falls back, labelled; against an
    # instructor's --source it is someone else's notebook and fails closed, as grade does.
    without_sandbox = NO_SANDBOX if args.no_sandbox else None
    status = 0
    for path in args.notebook:
        try:
            report = validate(path, timeout=args.timeout, source=args.source,
                              without_sandbox=without_sandbox)
        except (Interrupted, KeyboardInterrupt):
            say(f"edu-dl validate: interrupted while validating {path}", sys.stderr)
            return 130
        except NoSandbox as exc:  # --source without the opt-in, or no fallback can run here
            say(f"edu-dl validate: {exc}", sys.stderr)
            return 2
        say(report)
        status = status or (0 if report.ok else 1)
    return status


def _probe_the_sandbox() -> threading.Thread:
    """Start the sandbox's probe (``sandbox.bwrap_problem``, cached: a fifth of a second, most
    of it waiting for bwrap) in a thread: a student's validate asks for it first thing, and the
    imports before that keep this process busy meanwhile. A probe that fails here says nothing:
    the settings ask again and say why."""
    from edu_dl.grading import sandbox

    def probe() -> None:
        with contextlib.suppress(Exception):
            sandbox.bwrap_problem()

    thread = threading.Thread(target=probe, name="sandbox-probe", daemon=True)
    thread.start()
    return thread


def add_grade(subparsers: Any) -> None:
    """Register ``edu-dl grade SUBMISSIONS --source solutions/ --out grades/``."""
    p = subparsers.add_parser(
        "grade",
        help="grade student notebooks in sandboxes; write grades.csv and feedback",
        description="Grade SUBMISSIONS (<student>/<NN_name>.ipynb, or nbgrader's "
        "submitted/<student>/<assignment>/*.ipynb): test and locked cells are restored from "
        "--source by grade_id, each notebook runs in its own bubblewrap sandbox on the "
        "inputs drawn from the grading secret (OUT/.secret: the same for every student and "
        "every run), and the results are compared outside the sandbox. A second run regrades "
        "only what changed. The gradebooks in OUT hold every student graded there: a run "
        "that grades some students (--student, or a folder with one resubmission) updates "
        "their rows and keeps the others'.",
    )
    p.add_argument("submissions", type=Path, help="the folder of submissions")
    p.add_argument("--source", type=Path, required=True,
                   help="the solutions folder (may be a private copy; hidden from the sandbox)")
    p.add_argument("--out", type=Path, required=True, help="where grades.csv and feedback go")
    p.add_argument("--jobs", type=positive(int), default=1, help="submissions graded at once")
    p.add_argument("--ahead", type=int, choices=range(9), default=1, metavar="N",
                   help="sandboxes started ahead (their kernel boots) while --jobs notebooks run; "
                   "each runs its first cell when one of the --jobs slots is free, its time "
                   "limits counted from then (default 1; 0: none)")
    p.add_argument("--force", action="store_true", help="regrade everything, changed or not "
                   "(with --student: those students' submissions)")
    p.add_argument("--student", action="append", dest="students", metavar="ID",
                   help="grade only this student of SUBMISSIONS (repeat, or a comma list: "
                   "alice,bob); the other students' rows stay as they are")
    p.add_argument("--retry-timeouts", action="store_true",
                   help="grade again the submissions whose last grade was a timeout (say on "
                   "a loaded machine), and keep every other grade, even under a new "
                   "--timeout or --budget")
    p.add_argument("--no-skip-after-timeout", dest="skip_after_timeout", action="store_const",
                   const=False, default=None,
                   help="run the cells after one that timed out (by default they are skipped "
                   "and their parts say 'not run: an earlier cell timed out')")
    p.add_argument("--exercise", action="append", dest="exercises", metavar="NAME",
                   help="a source notebook (without .ipynb) that is due; repeat for more "
                   "(default: every source notebook at least one student submitted)")
    p.add_argument("--due", metavar="DATETIME", help="the due date, ISO (e.g. "
                   "2026-03-01T23:59; UTC unless it names an offset); a later timestamp.txt "
                   "is late")
    p.add_argument("--late", default="none", metavar="POLICY",
                   help="late policy: none (default), zero, per-hour:RATE (off per started "
                   "hour, as nbgrader's 'subtract') or per-day:RATE (per started day); RATE "
                   "is points, or a percentage of the exercise's points (per-day:10%%)")
    p.add_argument("--grace", metavar="DURATION", help="a submission at most this late is on "
                   "time (15m, 2h, 1d); a later one is late by its whole delay")
    p.add_argument("--late-cap", metavar="AMOUNT", help="the most a late penalty takes: points, "
                   "or a percentage of the exercise's points (50%%)")
    p.add_argument("--extensions", type=Path, metavar="CSV", help="per-student due dates: "
                   "columns student, due and optionally exercise (blank: every exercise), "
                   "e.g. 'alice,02_mini,2026-03-08T23:59'")
    p.add_argument("--roster", type=Path, metavar="CSV", help="students (nbgrader's columns: "
                   "id, first_name, last_name, email): all are due; names fill the export; a "
                   "student graded before who is neither on it nor in SUBMISSIONS is removed "
                   "from OUT")
    p.add_argument("--manual", type=Path, metavar="CSV", help="a filled-in manual.csv (points "
                   "and comments for what a person grades) to import into the gradebook; a "
                   "line naming an autograded row (its part as cell) overrides its points, "
                   "the comment giving the reason (required); imported grades stay for later "
                   "runs")
    add_db(p)
    # Defaults (None) come from settings.Settings, so `edu-dl --help` need not import the grader.
    for flag, kind, dest, text in (
        ("--timeout", float, "timeout_s", "seconds per cell (default 60)"),
        ("--budget", float, "budget_s", "seconds per submission in all, sandbox and kernel start "
                                        "included, however many cells it has (default 600)"),
        ("--max-notebook-mb", int, "notebook_mb", "a larger submitted notebook is refused "
                                                  "unread (default 16)"),
        ("--memory", int, "memory_mb", "MB per process and (x1.25) per submission "
                                       "(default 4096)"),
        ("--cpu", int, "cpu_s", "CPU seconds per process (default 900)"),
        ("--processes", int, "processes", "processes+threads per submission (default 512)"),
        ("--file-size", int, "file_mb", "MB per written file (default 64)"),
        ("--tmp-size", int, "tmp_mb", "MB of the sandbox's private /tmp (default 512)"),
        ("--max-beside-files", int, "beside_files", "files beside the source notebooks, each "
                                                    "copied into every sandbox (default 256)"),
        ("--max-beside-mb", float, "beside_mb", "MB those files may hold in all (default 64)"),
    ):
        p.add_argument(flag, type=positive(kind), dest=dest, default=None, help=text,
                       metavar="S" if kind is float else "N")
    p.add_argument("--secret-file", type=Path, metavar="PATH",
                   help="the grading secret every part's hidden inputs are drawn from "
                   "(default: OUT/.secret; created, owner-only, when it does not exist)")
    p.add_argument("--rotate-secret", action="store_true",
                   help="replace the grading secret by a fresh one before grading: new hidden "
                   "inputs, and every submission is graded again")
    add_no_sandbox(p)
    add_cluster_arguments(p)
    p.set_defaults(handler=run_grade)


def run_grade(args: argparse.Namespace) -> int:
    """``edu-dl grade``: grade the batch into --out (gradebook, feedback, exports) and print the
    summary; 2 for a broken notebook, policy, cluster, secret or missing sandbox, 130 when
    interrupted (what was graded stays saved), else 0."""
    from edu_dl.grading.model import Interrupted
    from edu_dl.grading.notebooks import NotebookError
    from edu_dl.grading.settings import NO_SANDBOX, NoSandbox, Settings
    from edu_dl.grading.stages.cluster import ClusterError
    from edu_dl.grading.stages.secret import SecretError, load_or_create, rotate, secret_path
    from edu_dl.grading.term.batch import grade
    from edu_dl.grading.term.classreport_show import after_batch as class_at_a_glance
    from edu_dl.grading.term.db import DatabaseError
    from edu_dl.grading.term.policy import (
        Dates,
        LatePolicy,
        PolicyError,
        read_extensions,
        read_roster,
    )
    from edu_dl.grading.term.report import summary_text
    from edu_dl.grading.trust.files import parse_time

    chosen = {k: getattr(args, k) for k in ("timeout_s", "budget_s", "memory_mb", "cpu_s",
                                            "processes", "file_mb", "tmp_mb", "notebook_mb",
                                            "beside_files", "beside_mb",
                                            "skip_after_timeout")
              if getattr(args, k) is not None}
    settings = Settings(**chosen, without_sandbox=NO_SANDBOX if args.no_sandbox else "")
    try:
        settings = settings.checked()  # fails closed before anything is written
        try:
            due = parse_time(args.due) if args.due else None
        except ValueError:
            raise PolicyError(f"--due {args.due!r}: not a date and time; write it as ISO, "
                              "e.g. 2026-03-01T23:59 or 2026-03-01T23:59+01:00") from None
        dates = Dates(due, LatePolicy.parse(args.late, args.grace, args.late_cap),
                      read_extensions(args.extensions) if args.extensions else {})
        roster = read_roster(args.roster) if args.roster else None
        where = args.secret_file or secret_path(args.out)
        if args.rotate_secret:
            say(f"new grading secret in {where} (fingerprint {rotate(where).fingerprint}): "
                "every submission is graded again", sys.stderr)
        secret = load_or_create(where)[0] if args.secret_file or args.rotate_secret else None
        summary = grade(args.submissions, args.source, args.out, settings=settings,
                        jobs=args.jobs, force=args.force,
                        log=say_to_stderr,
                        exercises_due=args.exercises, dates=dates, roster=roster,
                        manual=args.manual, cluster=cluster_options(args), secret=secret,
                        students=_students(args.students),
                        retry_timeouts=args.retry_timeouts, db_url=args.db, ahead=args.ahead)
    except (NotebookError, PolicyError, ClusterError, SecretError, NoSandbox,
            DatabaseError) as exc:
        say(f"edu-dl grade: {exc}", sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt) as exc:
        done = (f"{exc.saved} of {exc.todo} submissions graded and saved"
                if isinstance(exc, Interrupted) else "nothing new was saved")
        say(f"edu-dl grade: interrupted; {done}; to go on where it stopped, run: "
            f"{command_again(args.argv)}", sys.stderr)
        return 130
    say(summary_text(summary))
    say(class_at_a_glance(args.out))
    slow = timed_out_submissions(summary.rows)
    if slow:
        say(f"{slow} submission(s) timed out; to grade only them again (say with a longer "
            f"--timeout), run: {command_again(args.argv, '--retry-timeouts')}")
    say(f"wrote {args.out / 'grades.csv'}, {args.out / 'manual.csv'}, "
          f"{args.out / 'feedback'}/, {args.out / 'feedback_html'}/, "
          f"{args.out / 'nbgrader_grades.csv'}")
    return 0


def _students(chosen: list[str] | None) -> list[str] | None:
    """--student's names: repeated, or comma lists; None when none was given."""
    names = [name.strip() for given in chosen or () for name in given.split(",")]
    return [name for name in dict.fromkeys(names) if name] or None


def timed_out_submissions(rows: list[Any]) -> int:
    """How many (student, exercise) of the gradebook's rows timed out."""
    from edu_dl.grading.model import timed_out

    by_job: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        by_job.setdefault((row.student, row.exercise), []).append(row)
    return sum(timed_out(mine) for mine in by_job.values())


def command_again(argv: list[str], *extra: str) -> str:
    """The ``edu-dl grade`` command line to run next (after an interruption, or to retry the
    timeouts): the same, without ``--force`` (the grades kept so far stay kept) or
    ``--rotate-secret`` (rotated once already), with the flags of ``extra`` it lacks."""
    import shlex

    once = ("--force", "--rotate-secret")  # argparse takes a long option's prefix too
    kept = [arg for arg in argv
            if not (arg.startswith("--") and len(arg) > 3 and any(o.startswith(arg) for o in once))]
    return shlex.join(["edu-dl", *kept, *(flag for flag in extra if flag not in kept)])


def add_replay(subparsers: Subparsers) -> None:
    """Register ``edu-dl replay OUT STUDENT EXERCISE``: judge a stored run again, case by case."""
    parser = subparsers.add_parser(
        "replay",
        help="judge a stored run again and show each case: inputs, results, verdicts",
        description="For a disputed row: the run of STUDENT's EXERCISE kept in OUT (what the "
        "sandbox returned) is judged again against --source on the same hidden inputs, drawn "
        "again from the grading secret. Prints, per part and case, the inputs, what the "
        "student's code returned, the expected value and the verdict, then the rows; exit "
        "status 1 if they differ from the gradebook's. Nothing is run again.",
    )
    parser.add_argument("out", type=Path, metavar="OUT", help="the grading output folder")
    parser.add_argument("student")
    parser.add_argument("exercise", metavar="EXERCISE", help="the source notebook's name, "
                        "without .ipynb")
    parser.add_argument("--source", type=Path, required=True,
                        help="the solutions folder it was graded against")
    parser.add_argument("--secret-file", type=Path, metavar="PATH",
                        help="the grading secret (default: OUT/.secret)")
    parser.add_argument("--full", action="store_true", help="print arrays whole")
    add_db(parser)
    parser.set_defaults(handler=run_replay)


def add_db(parser: argparse.ArgumentParser) -> None:
    """The ``--db URL`` option of the commands that read or write the gradebook."""
    parser.add_argument("--db", metavar="URL", help="the gradebook database, as an SQLAlchemy "
                        "URL (default: sqlite:///OUT/gradebook.db); a course server's "
                        "PostgreSQL: postgresql+psycopg://USER@HOST/DATABASE")


def run_replay(args: argparse.Namespace) -> int:
    """``edu-dl replay``: print each case and the rows; 0 when they match the gradebook's, 1 when
    not, 2 when the run, the secret or the source cannot be read."""
    from edu_dl.grading.notebooks import NotebookError
    from edu_dl.grading.stages.replay import ReplayError, replay, replay_text
    from edu_dl.grading.stages.secret import SecretError, read_secret
    from edu_dl.grading.term.db import DatabaseError, store
    from edu_dl.grading.term.gradebook import kept_entry
    from edu_dl.grading.term.renumbered import explained

    try:
        secret = read_secret(args.secret_file) if args.secret_file else None
        kept = kept_entry(store(args.out, args.db), args.student, args.exercise)
        found = replay(args.out, args.student, args.exercise, args.source, secret,
                       kept.rows if kept is not None else None)
    except (ReplayError, SecretError, NotebookError, DatabaseError) as exc:
        source = args.source
        known = ({p.stem for p in source.glob("*.ipynb")} if source.is_dir() else {source.stem})
        say(f"edu-dl replay: {explained(str(exc), [args.exercise], known)}", sys.stderr)
        return 2
    say(replay_text(found, full=args.full))
    return 0 if found.same else 1


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """``--scheduler``, ``--local-cluster`` and the TLS files, on ``edu-dl grade``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="grade on this Dask cluster: tls://HOST:PORT (with the --tls-* "
                       "files), or tcp://127.0.0.1:PORT on this machine; one task per "
                       "submission, each in its worker's own sandbox")
    where.add_argument("--local-cluster", type=int, metavar="N", dest="local_workers",
                       help="start a Dask cluster of N one-thread workers on this machine "
                       "(loopback, TLS with a throwaway certificate) and grade on it")
    for flag, dest, text in (("--tls-ca-file", "tls_ca_file", "the CA's certificate (PEM)"),
                             ("--tls-cert", "tls_cert", "this client's certificate (PEM)"),
                             ("--tls-key", "tls_key", "this client's private key (PEM)")):
        parser.add_argument(flag, type=Path, dest=dest, metavar="FILE",
                            help=f"for tls://: {text}")


def cluster_options(args: argparse.Namespace) -> ClusterOptions | None:
    """The cluster chosen on the command line, or None to grade here."""
    from edu_dl.grading.stages.cluster import ClusterError, ClusterOptions, check_address

    if args.local_workers is not None and args.local_workers < 1:
        raise ClusterError(f"--local-cluster {args.local_workers}: needs at least one worker")
    if not args.scheduler and not args.local_workers:
        return None
    if args.scheduler:
        check_address(args.scheduler)  # refused before anything is read or graded
    return ClusterOptions(scheduler=args.scheduler or "", local_workers=args.local_workers or 0,
                          tls_ca_file=args.tls_ca_file, tls_cert=args.tls_cert,
                          tls_key=args.tls_key)


def add_report(subparsers: Subparsers) -> None:
    """Register ``edu-dl report GRADES``: the class at a glance."""
    parser = subparsers.add_parser(
        "report",
        help="the class at a glance: students, pass rates, histogram, shared cells, mistakes",
        description="Read a graded batch (edu-dl grade's --out folder, or its grades.csv) and "
        "print, counted in students (not rows): per exercise who submitted, is missing, late, "
        "crashed or timed out; per part the pass rate and mean points; the typical mistakes "
        "each hint recognised (how many students, one example); and the solution cells two or "
        "more students submitted identically once comments, blank lines and spacing are "
        "removed (for a person to look at: identical code proves nothing by itself). Writes "
        "score_histogram.png beside the gradebook.",
    )
    parser.add_argument("grades", type=Path, metavar="GRADES",
                        help="the --out folder of edu-dl grade, or its grades.csv")
    parser.add_argument("--format", choices=("text", "markdown", "json"), default="text",
                        help="text for a terminal (default), markdown for a page, json for "
                        "a program (every number, every shared cell)")
    parser.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    """``edu-dl report``: print the class report in --format and write score_histogram.png beside
    the gradebook (a note where it cannot); 2 when GRADES cannot be read, else 0."""
    from edu_dl.grading.term.classreport import HISTOGRAM, ReportError, build, gradebook_path
    from edu_dl.grading.term.classreport_show import render, write_histogram

    try:
        report = build(args.grades)
    except ReportError as exc:
        say(f"edu-dl report: {exc}", sys.stderr)
        return 2
    try:
        write_histogram(report, gradebook_path(args.grades).parent / HISTOGRAM)
    except (OSError, ValueError) as exc:  # a read-only folder: the numbers all the same
        report.notes.append(f"the histogram could not be written ({exc})")
    say(render(report, args.format))
    return 0
