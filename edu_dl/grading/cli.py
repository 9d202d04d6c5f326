"""``edu-dl assign`` and ``edu-dl validate``: the authoring and the student commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

Subparsers = Any  # argparse's _SubParsersAction is private


def add_assign(subparsers: Subparsers) -> None:
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
    parser.set_defaults(handler=run_assign)


def run_assign(args: argparse.Namespace) -> int:
    from .assign import assign
    from .notebooks import NotebookError

    try:
        changed = assign(args.source, args.dest, write=not args.check)
    except NotebookError as exc:
        print(f"edu-dl assign: {exc}", file=sys.stderr)
        return 2
    if args.check:
        for path in changed:
            print(f"out of date: {path} (run: edu-dl assign {args.source} {args.dest})")
        return 1 if changed else 0
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print(f"{args.dest} is up to date")
    return 0


def add_validate(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="run an exercise notebook as the grader will and say what would fail",
        description="Grade the notebook exactly as `edu-dl grade` does (restored from the "
        "source, run in the sandbox on fresh inputs, judged outside) and report each graded "
        "row. Exit status 1 if anything would fail.",
    )
    parser.add_argument("notebook", type=Path, nargs="+", metavar="NOTEBOOK.ipynb")
    parser.add_argument("--source", type=Path, default=None, metavar="PATH",
                        help="the instructor's source notebook or folder to restore and judge "
                        "against (default: the notebook itself)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="seconds per cell before it counts as hanging (default: 120)")
    parser.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    from .validate import validate

    status = 0
    for path in args.notebook:
        report = validate(path, timeout=args.timeout, source=args.source)
        print(report)
        status = status or (0 if report.ok else 1)
    return status
