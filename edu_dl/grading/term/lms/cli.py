"""``edu-dl lms collect`` and ``edu-dl lms export``: argparse wiring only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edu_dl.grading.trust.text import say

KINDS = ("canvas", "moodle")


def add_lms(subparsers: Any) -> None:
    """Register ``edu-dl lms collect KIND DOWNLOAD... --roster R --out SUBMISSIONS`` and
    ``edu-dl lms export KIND GRADES --roster R --out FILE``."""
    lms = subparsers.add_parser(
        "lms", help="Canvas and Moodle: collect their submission downloads, export grades",
        description="Round trip with a learning-management system: `collect` turns its "
        "submissions download into the folder `edu-dl grade` reads; `export` turns grades.csv "
        "into its gradebook import.")
    verbs = lms.add_subparsers(dest="verb", required=True, metavar="VERB")

    collect = verbs.add_parser(
        "collect", help="a submissions download (zip or folder) into OUT/submitted/",
        description="Read Canvas's or Moodle's submissions download(s) as hostile archives "
        "(bounded, no links, no '..'), map each file's LMS id to the roster's student, keep "
        "each student's latest resubmission per exercise, and write "
        "OUT/submitted/<student>/<exercise>/<exercise>.ipynb, with timestamp.txt from "
        "--metadata only. Then: edu-dl grade OUT --source ... --out grades/. Exit status 1 "
        "when nothing was collected, 2 when an option or the roster cannot be used. Canvas: "
        "the ids learned of each student go to OUT/canvas_ids.csv, for export --collected.")
    collect.add_argument("kind", choices=KINDS)
    collect.add_argument("downloads", type=Path, nargs="+", metavar="DOWNLOAD",
                         help="the LMS's zip, or the folder it was unpacked to")
    collect.add_argument("--roster", type=Path, required=True, metavar="CSV",
                         help="students: id (the folder name), and the LMS ids canvas_id, "
                         "sis_user_id, sis_login_id, email, id_number, moodle_participant_id")
    collect.add_argument("--out", type=Path, required=True, metavar="SUBMISSIONS",
                         help="a new (or nbgrader course) folder; edu-dl grade reads it")
    collect.add_argument("--metadata", type=Path, metavar="FILE",
                         help="submission times (and ids) from the LMS: Canvas's submissions "
                         "(API JSON or CSV: user_id, submitted_at, attempt), Moodle's grading "
                         "worksheet CSV; without it no timestamp.txt is written")
    collect.add_argument("--timezone", default="UTC", metavar="TZ",
                         help="the time zone of Moodle's worksheet dates (e.g. Europe/Berlin; "
                         "default UTC)")
    collect.add_argument("--pattern", metavar="REGEX",
                         help="how a file's path names its student: a regex anchored at the "
                         "path's start (^) with the named groups user and file (optionally "
                         "submission), user before file; default: the LMS's. A file whose "
                         "uploaded name itself matches is refused")
    collect.add_argument("--match-by", metavar="COLUMN", dest="key",
                         help="the roster column the pattern's user group is looked up in "
                         "(default canvas_id / moodle_participant_id)")
    collect.add_argument("--source", type=Path, metavar="SOURCE",
                         help="the assignment's source notebooks (as edu-dl grade --source): "
                         "a notebook whose name matches none of its exercises is not "
                         "collected (a copy such as 05_x-Copy1 or '05_x (1)' never is)")
    collect.add_argument("--as", dest="exercise", metavar="NAME",
                         help="every notebook of the download answers exercise NAME (default: "
                         "the uploaded name, without a -1, -2 resubmission suffix)")
    collect.add_argument("--max-notebook-mb", type=int, default=16, metavar="N",
                         help="a larger member is refused unread (default 16)")
    collect.add_argument("--report", type=Path, metavar="CSV",
                         help="also write the report, one line per file, as CSV")
    collect.set_defaults(handler=run_collect)

    export = verbs.add_parser(
        "export", help="grades.csv as the LMS's gradebook import CSV",
        description="Sum each student's points per exercise in GRADES/grades.csv and write "
        "Canvas's gradebook import (Student, ID, SIS User ID, SIS Login ID, Section, one "
        "column per assignment, Points Possible) or Moodle's grade import (identifier, one "
        "column per grade item, optional feedback).")
    export.add_argument("kind", choices=KINDS)
    export.add_argument("grades", type=Path, metavar="GRADES",
                        help="the folder edu-dl grade wrote (or its grades.csv)")
    export.add_argument("--roster", type=Path, required=True, metavar="CSV")
    export.add_argument("--out", type=Path, required=True, metavar="FILE")
    export.add_argument("--collected", type=Path, metavar="SUBMISSIONS",
                        help="canvas: the folder lms collect wrote; the Canvas ids it learned "
                        "(its canvas_ids.csv) fill ID, SIS User ID and SIS Login ID before "
                        "the roster's")
    export.add_argument("--column", action="append", default=[], metavar="EXERCISE=NAME",
                        help="the LMS's name of an exercise's column, e.g. "
                        "'08_autograd_from_scratch=Autograd from scratch (1234)'; repeatable")
    export.add_argument("--identifier", choices=("email", "id_number"), default="email",
                        help="moodle: the identifier column (default email)")
    export.add_argument("--feedback", action="store_true",
                        help="moodle: add a feedback column per item (parts, points, status)")
    export.set_defaults(handler=run_export)


def run_collect(args: argparse.Namespace) -> int:
    """``edu-dl lms collect``: unpack the LMS downloads into OUT/submitted and print what was
    collected (with --report, also the CSV); 2 for a refused option, roster, pattern or download,
    1 when no notebook was written, else 0."""
    from edu_dl.grading.term.lms.collect import CollectError, collect_downloads
    from edu_dl.grading.term.lms.formats import PLAIN_STEM, PatternError, compile_pattern
    from edu_dl.grading.term.lms.metadata import read_canvas, read_moodle, timezone
    from edu_dl.grading.term.lms.report import report_csv, report_text
    from edu_dl.grading.term.lms.roster import KEYS, read_lms_roster
    from edu_dl.grading.term.policy import PolicyError
    from edu_dl.grading.trust.archive import MB, ArchiveLimits

    try:
        if args.key is not None and args.key not in KEYS:
            raise PolicyError(f"--match-by {args.key}: one of {', '.join(KEYS)}")
        if args.exercise is not None and not PLAIN_STEM.fullmatch(args.exercise):
            raise PolicyError(f"--as {args.exercise!r}: an exercise's name (the source "
                              "notebook's, without .ipynb: letters, digits, _.+-)")
        pattern = compile_pattern(args.kind, args.pattern)
        roster = read_lms_roster(args.roster)
        exercises = _source_exercises(args.source) if args.source else None
        metadata = None
        if args.metadata:
            metadata = read_canvas(args.metadata) if args.kind == "canvas" else \
                read_moodle(args.metadata, timezone(args.timezone))
        limits = ArchiveLimits(max_member_bytes=max(1, args.max_notebook_mb) * MB)
        found = collect_downloads(args.kind, args.downloads, roster, args.out,
                                  pattern=pattern, metadata=metadata, exercise=args.exercise,
                                  key=args.key, exercises=exercises, limits=limits)
    except (PolicyError, PatternError, CollectError) as exc:
        say(f"edu-dl lms collect: {exc}", sys.stderr)
        return 2
    for problem in metadata.problems if metadata else []:
        say(problem, sys.stderr)
    if args.report:
        from edu_dl.grading.notebooks import write_atomic
        write_atomic(args.report, report_csv(found))
    say(report_text(found, args.out))
    return 0 if found.written else 1


def _source_exercises(source: Path) -> list[str]:
    """The names of the source's exercises, as ``edu-dl grade --source`` reads them."""
    from edu_dl.grading.model import NothingToGrade
    from edu_dl.grading.notebooks import NotebookError
    from edu_dl.grading.stages.load import load_source
    from edu_dl.grading.term.policy import PolicyError

    try:
        return list(load_source(source, log=lambda _: None))
    except (NothingToGrade, NotebookError) as exc:
        raise PolicyError(f"--source: {exc}") from None


def run_export(args: argparse.Namespace) -> int:
    """``edu-dl lms export``: write the gradebook as a Canvas or Moodle import CSV and warn of
    what it could not export; 2 when the options, roster or gradebook are refused, else 0."""
    from edu_dl.grading.notebooks import write_atomic
    from edu_dl.grading.term.lms.export import (
        canvas_csv,
        empty_ids,
        moodle_csv,
        read_grades,
        unexported,
    )
    from edu_dl.grading.term.lms.roster import (
        IDS_FILE,
        read_ids,
        read_lms_roster,
        with_learned,
    )
    from edu_dl.grading.term.policy import PolicyError

    notes: list[str] = []
    try:
        columns = dict(_pair(text) for text in args.column)
        book = read_grades(args.grades)
        roster = read_lms_roster(args.roster)
        if args.collected is not None and args.kind != "canvas":
            raise PolicyError("--collected: for canvas only (Moodle's participant ids differ "
                              "between assignments; its export matches by the roster's ids)")
        if args.collected is not None:
            path = args.collected / IDS_FILE if args.collected.is_dir() else args.collected
            roster, notes = with_learned(roster, read_ids(path))
        if args.kind == "canvas":
            data = canvas_csv(book, roster, columns)
            key = "canvas_id|sis_user_id|sis_login_id"
            notes += empty_ids(roster, args.collected is not None)
        else:
            data = moodle_csv(book, roster, columns, args.identifier, args.feedback)
            key = args.identifier
    except PolicyError as exc:
        say(f"edu-dl lms export: {exc}", sys.stderr)
        return 2
    write_atomic(args.out, data)
    for problem in [*unexported(book, roster, key), *notes]:
        say(f"warning: {problem}", sys.stderr)
    say(f"wrote {args.out}: {len(roster.students)} students, {len(book.exercises)} "
        f"{args.kind} column(s)")
    return 0


def _pair(text: str) -> tuple[str, str]:
    from edu_dl.grading.term.policy import PolicyError

    exercise, sep, name = text.partition("=")
    if not sep or not exercise.strip() or not name.strip():
        raise PolicyError(f"--column {text!r}: write it as EXERCISE=NAME")
    return exercise.strip(), name.strip()
