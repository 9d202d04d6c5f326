"""``edu-dl config [COMMAND ...]``: the settings a command would run with, and where each came
from (a flag, the course config's table and line, or the option's default)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edu_dl.grading.term.config import (
    COMMANDS,
    COURSE,
    FILE_NAME,
    NOT_SHARED,
    CourseConfig,
    given,
    options,
    subparser,
)
from edu_dl.grading.trust.text import say

Subparsers = Any  # argparse's _SubParsersAction is private


def add_config(subparsers: Subparsers) -> None:
    """Register ``edu-dl config [COMMAND [FLAGS...]]``."""
    parser = subparsers.add_parser(
        "config", help=f"show the course config ({FILE_NAME}) and what each command would use",
        description=f"Without COMMAND: the tables and keys of the course config ({FILE_NAME} "
        "here, or edu-dl --config FILE) and the commands each reaches. With one (e.g. "
        "`edu-dl config grade`, `edu-dl config lms collect --roster r.csv`): every option of "
        "that command, its value, and where it came from: a flag given after COMMAND, the "
        "file's table and line, or the default.")
    parser.add_argument("words", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                        help="a command, then any flags to try")
    parser.set_defaults(handler=run_config)


def run_config(args: argparse.Namespace) -> int:
    """``edu-dl config``: print the file's keys, or a command's merged settings; 2 for a command
    the course config does not reach."""
    config: CourseConfig | None = args.course_config
    words: list[str] = list(args.words)
    if not words:
        say(overview(config))
        return 0
    command = tuple(words[:2]) if words[0] == "lms" else tuple(words[:1])
    if command not in COMMANDS:
        say(f"edu-dl config: {' '.join(command)}: the course config reaches "
            + ", ".join(" ".join(c) for c in COMMANDS), sys.stderr)
        return 2
    say(merged(args.parser, config, command, given(args.parser, words)))
    return 0


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ", ".join(map(_shown, value)) or "(none)"
    return str(value)


def merged(parser: argparse.ArgumentParser, config: CourseConfig | None,
           command: tuple[str, ...], flags: dict[str, Any]) -> str:
    """One line per option of ``command``: flag, value, origin (flag > table > [course] >
    default); arguments given on the command line first."""
    sub = subparser(parser, command)
    settings = config.settings.get(command, {}) if config else {}
    defaults = config.defaults.get(command, {}) if config else {}
    head = f"edu-dl {' '.join(command)}: " + (f"settings from {config.path}" if config else
                                              "no course config; every value is a default")
    lines = [head]
    for action in sub._actions:
        if not action.option_strings and action.dest in flags:
            lines.append(f"  {action.metavar or action.dest:<24} "
                         f"{_shown(flags[action.dest]):<28} argument")
    for key, action in options(sub).items():
        if action.dest in flags:
            value, origin = flags[action.dest], "flag"
        elif action.dest in settings:
            setting = settings[action.dest]
            value, origin = setting.value, setting.where(config.path if config else Path())
        else:
            value, origin = defaults.get(action.dest, action.default), "default"
        lines.append(f"  --{key:<22} {_shown(value):<28} {origin}")
    return "\n".join(lines)


def overview(config: CourseConfig | None) -> str:
    """The file's tables and keys, each with its line and the commands it reaches."""
    if config is None:
        return (f"no course config: no {FILE_NAME} here (or --no-config); every option comes "
                "from the command line or its default")
    lines = [f"{config.path}:"]
    for table, keys in config.tables.items():
        lines.append(f"  [{table}]")
        for key, value in keys.items():
            # Its table's own command, [course]'s, or one that follows another (mark: grade)
            reach = [" ".join(c) for c in COMMANDS
                     if any(s.key == key and s.table == table
                            for s in config.settings.get(c, {}).values())
                     and key not in (NOT_SHARED.get(c, set()) if table == COURSE else set())]
            line = config.lines.get((table, key))
            lines.append(f"    {key} = {value!r}" + (f"  (line {line})" if line else "")
                         + (f"  -> edu-dl {', '.join(reach)}" if reach else
                            "  -> overridden by every command's own table"))
    return "\n".join(lines)
