"""The ``edu-dl`` command: one argparse parser, one subcommand per course task.

A subcommand is a function ``add_<name>(subparsers)`` that adds its parser and sets
``handler=`` to a function ``(args) -> int``; add it to ``COMMANDS``. Handlers import their
heavy modules themselves, so ``edu-dl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edu_dl import __version__
from edu_dl.bench.cli import add_bench
from edu_dl.caffe.cli import add_train
from edu_dl.grading.term import config as course_config
from edu_dl.grading.term.cli import add_assign, add_grade, add_replay, add_report, add_validate
from edu_dl.grading.term.config_show import add_config
from edu_dl.grading.term.lms.cli import add_lms
from edu_dl.grading.term.mark.cli import add_mark
from edu_dl.grading.trust.text import say
from edu_dl.machine.doctor import add_doctor

Subparsers = Any  # argparse's _SubParsersAction is private


# --------------------------------------------------------------------------- the parser

# Later commands (doctor, train, assign, grade, validate, ...) go here: each module defines
# `add_<name>(subparsers)` and is listed once. `edu-dl bench <kind>` parsers are listed in
# edu_dl/bench/cli.py.
COMMANDS: list[Callable[[Subparsers], None]] = [add_bench, add_train, add_doctor, add_assign,
                                                 add_validate, add_grade, add_replay,
                                                 add_report, add_mark, add_lms, add_config]


def build_parser() -> argparse.ArgumentParser:
    """The ``edu-dl`` parser, one subcommand per entry of COMMANDS (each sets ``handler``)."""
    parser = argparse.ArgumentParser(
        prog="edu-dl",
        description="The course's command line: computational graphs, autograd and GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"edu-dl {__version__}")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help=f"the course config: defaults for assign, validate, grade, replay, "
                        f"report and lms, a flag wins over it (default: {course_config.FILE_NAME} "
                        "in this folder, when there is one; `edu-dl config` shows it)")
    parser.add_argument("--no-config", action="store_true",
                        help=f"ignore {course_config.FILE_NAME}: every option from the command "
                        "line or its default")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``edu-dl`` console script; returns the exit status."""
    # rfc3987_syntax's grammars are kept out by grading/notebooks.py, before the commands'
    # imports above reach nbformat (tests/install/test_cli.py checks it).
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        config = course_config.prepare(parser, argv)  # its values become the defaults
    except course_config.ConfigError as exc:
        say(f"edu-dl: {exc}", sys.stderr)
        return 2
    args = parser.parse_args(argv)
    course_config.settle(parser, argv, args, config)
    args.argv, args.parser, args.course_config = argv, parser, config
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
