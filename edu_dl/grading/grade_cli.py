"""``edu-dl grade``: argparse wiring; the work is in grade.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..bench.args import positive


def add_grade(subparsers: Any) -> None:
    """Register ``edu-dl grade SUBMISSIONS --source solutions/ --out grades/``."""
    p = subparsers.add_parser(
        "grade",
        help="grade student notebooks in sandboxes; write grades.csv and feedback",
        description="Grade SUBMISSIONS (<student>/<NN_name>.ipynb, or nbgrader's "
        "submitted/<student>/<assignment>/*.ipynb): test and locked cells are restored from "
        "--source by grade_id, each notebook runs in its own bubblewrap sandbox on fresh "
        "inputs, and the results are compared outside the sandbox. A second run regrades only "
        "what changed.",
    )
    p.add_argument("submissions", type=Path, help="the folder of submissions")
    p.add_argument("--source", type=Path, required=True,
                   help="the solutions folder (may be a private copy; hidden from the sandbox)")
    p.add_argument("--out", type=Path, required=True, help="where grades.csv and feedback go")
    p.add_argument("--jobs", type=positive(int), default=1, help="submissions graded at once")
    p.add_argument("--force", action="store_true", help="regrade everything, changed or not")
    p.add_argument("--exercise", action="append", dest="exercises", metavar="NAME",
                   help="a source notebook (without .ipynb) that is due; repeat for more "
                   "(default: every source notebook at least one student submitted)")
    p.add_argument("--due", metavar="DATETIME", help="the due date, ISO (e.g. "
                   "2026-03-01T23:59; UTC unless it names an offset); a later timestamp.txt "
                   "is late")
    p.add_argument("--late", default="none", metavar="POLICY",
                   help="late policy: none (default), zero, or per-hour:POINTS (points off per "
                   "started hour, as nbgrader's 'subtract')")
    p.add_argument("--roster", type=Path, metavar="CSV", help="students (nbgrader's columns: "
                   "id, first_name, last_name, email): all are due; names fill the export")
    p.add_argument("--manual", type=Path, metavar="CSV", help="a filled-in manual.csv (points "
                   "and comments for what a person grades) to merge into the gradebooks")
    # Defaults (None) come from grade.Settings, so `edu-dl --help` need not import the grader.
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
    from .cluster import add_arguments as add_cluster_arguments  # no Dask import: stays fast

    add_cluster_arguments(p)
    p.set_defaults(handler=run_grade)


def run_grade(args: argparse.Namespace) -> int:
    from .cluster import ClusterError, options_from
    from .grade import Settings, grade
    from .notebooks import NotebookError
    from .policy import Dates, LatePolicy, PolicyError, parse_time, read_roster
    from .report import summary_text

    chosen = {k: getattr(args, k) for k in ("timeout_s", "budget_s", "memory_mb", "cpu_s",
                                            "processes", "file_mb", "tmp_mb", "notebook_mb",
                                            "beside_files", "beside_mb")
              if getattr(args, k) is not None}
    settings = Settings(**chosen)
    try:
        try:
            due = parse_time(args.due) if args.due else None
        except ValueError:
            raise PolicyError(f"--due {args.due!r}: not a date and time; write it as ISO, "
                              "e.g. 2026-03-01T23:59 or 2026-03-01T23:59+01:00") from None
        dates = Dates(due, LatePolicy.parse(args.late))
        roster = read_roster(args.roster) if args.roster else None
        summary = grade(args.submissions, args.source, args.out, settings=settings,
                        jobs=args.jobs, force=args.force,
                        log=lambda text: print(text, file=sys.stderr),
                        exercises_due=args.exercises, dates=dates, roster=roster,
                        manual=args.manual, cluster=options_from(args))
    except (NotebookError, PolicyError, ClusterError) as exc:
        print(f"edu-dl grade: {exc}", file=sys.stderr)
        return 2
    print(summary_text(summary))
    print(f"wrote {args.out / 'grades.csv'}, {args.out / 'manual.csv'}, "
          f"{args.out / 'feedback'}/, {args.out / 'feedback_html'}/, "
          f"{args.out / 'nbgrader_grades.csv'}")
    return 0
