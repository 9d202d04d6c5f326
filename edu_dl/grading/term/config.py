"""The course config: ``edu-dl.toml`` holds what every run of a grading command would repeat.

A table per command (``[grade]``, ``[validate]``, ``[assign]``, ``[replay]``, ``[report]``,
``[mark]``, ``[lms.collect]``, ``[lms.export]``) and ``[course]`` for keys every command with that
option shares. ``edu-dl mark`` works on grade's folder: where its own table says nothing, it takes
grade's ``db``, ``source``, ``roster`` and ``manual`` (as its ``sheet``) before ``[course]``'s
(``FOLLOWS``). A key is an option's long flag without its dashes; its value is what one would type
after the flag, converted by the option's own argparse ``type``. A flag on the command line wins
over the command's table, which wins over ``[course]``, which wins over the option's default. The
file is the instructor's, read strictly: an unknown table or key, or a value the option refuses,
stops the command with the file, the table and the key.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edu_dl.grading.trust.bounded import read_named_file

FILE_NAME = "edu-dl.toml"
MAX_CONFIG_BYTES = 1 << 20
COURSE = "course"
# The commands the file reaches, as typed after edu-dl; a table is their words joined by dots.
COMMANDS: tuple[tuple[str, ...], ...] = (("assign",), ("validate",), ("grade",), ("replay",),
                                         ("report",), ("mark",), ("lms", "collect"),
                                         ("lms", "export"))
# One run's actions, never a standing setting: they stay on the command line.
ONCE = {"force": "regrades everything", "rotate-secret": "replaces the grading secret"}
# [course] keys that mean something else to a command: lms collect's --out is the submissions
# folder and lms export's its import file, not the grading folder of [course] out.
# Commands that read the file without a table of their own.
READERS = ("config",)
# A command that works on another's output takes that command's settings of these keys (its
# own key -> the other's) where its own table gives none: `edu-dl mark OUT` grades by hand
# what `edu-dl grade --out OUT` wrote, in the same database, with the same source and roster,
# saving to grade's manual sheet.
FOLLOWS: dict[tuple[str, ...], tuple[tuple[str, ...], dict[str, str]]] = {
    ("mark",): (("grade",), {"db": "db", "source": "source", "roster": "roster",
                             "sheet": "manual"})}
NOT_SHARED: dict[tuple[str, ...], set[str]] = {("lms", "collect"): {"out"},
                                               ("lms", "export"): {"out"}}


class ConfigError(ValueError):
    """A course config that cannot be used; the message names the file, table and key."""


@dataclass(frozen=True)
class Setting:
    """One option's value from the file, and where it was written."""

    value: Any
    table: str
    key: str
    line: int | None

    def where(self, path: Path) -> str:
        """``edu-dl.toml [grade] line 4``: the file, table and line that set it."""
        return f"{path} [{self.table}]" + (f" line {self.line}" if self.line else f" {self.key}")


@dataclass
class CourseConfig:
    """The file as read: its tables, and each command's settings (dest -> Setting)."""

    path: Path
    tables: dict[str, dict[str, Any]]
    lines: dict[tuple[str, str], int]
    settings: dict[tuple[str, ...], dict[str, Setting]] = field(default_factory=dict)
    defaults: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)


def table_name(command: tuple[str, ...]) -> str:
    """The table of a command: ``("lms", "collect")`` -> ``lms.collect``."""
    return ".".join(command)


def subparser(parser: argparse.ArgumentParser,
              command: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser of ``command`` (its words, e.g. ``("lms", "collect")``) under ``parser``."""
    for word in command:
        chosen = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = chosen.choices[word]
    return parser


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The keys of a command's table (long flags without dashes) -> their argparse actions."""
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        for flag in action.option_strings:
            if flag.startswith("--"):
                found[flag[2:]] = action
    return found


def read_config(path: Path) -> tuple[dict[str, Any], str]:
    """The TOML file's tables and its text, read bounded, never through a link, UTF-8 only."""
    import tomllib

    data = read_named_file(path, "the course config", MAX_CONFIG_BYTES, ConfigError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


HEADER = re.compile(r"\s*\[([^\[\]]+)\]\s*(#.*)?")
KEY = re.compile(r"""\s*(["']?)([A-Za-z0-9_-]+)\1\s*=""")


def key_lines(text: str) -> dict[tuple[str, str], int]:
    """(table, key) -> the line that sets it, for the keys written ``key = ...`` under a
    ``[table]`` header (what ``edu-dl config`` shows; others are named by key alone)."""
    lines: dict[tuple[str, str], int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), 1):
        if header := HEADER.fullmatch(line):
            table = re.sub(r"""[\s"']""", "", header.group(1))
        elif key := KEY.match(line):
            lines.setdefault((table, key.group(2).replace("_", "-")), number)
    return lines


def load(parser: argparse.ArgumentParser, path: Path) -> CourseConfig:
    """Read ``path`` and convert every value for every command it reaches; ConfigError names
    the file, table and key of the first one that cannot be used."""
    raw, text = read_config(path)
    tables = _tables(path, raw)
    config = CourseConfig(path, tables, key_lines(text))
    known = {command: options(subparser(parser, command)) for command in COMMANDS}
    shared = {key for command, keys in known.items() for key in keys
              if key not in NOT_SHARED.get(command, set())} - set(ONCE)
    for table, keys in tables.items():
        allowed = shared if table == COURSE else \
            set(known[tuple(table.split("."))]) - set(ONCE)
        for key in keys:
            if key in ONCE:
                raise ConfigError(f"{path} [{table}] {key}: {ONCE[key]}, once; give --{key} on "
                                  "the command line, not in the course config")
            if key not in allowed:
                whose = "any command" if table == COURSE else f"edu-dl {' '.join(table.split('.'))}"
                raise ConfigError(f"{path} [{table}] {key}: not an option of {whose}; the known "
                                  f"keys: {', '.join(sorted(allowed))}")
    for command in COMMANDS:
        config.settings[command] = _settings(config, command, known[command])
        _check_exclusive(config, command, subparser(parser, command))
    for command, (leader, keys) in FOLLOWS.items():
        _follow(config, command, known[command], config.settings[leader], keys)
    return config


def _follow(config: CourseConfig, command: tuple[str, ...], known: dict[str, argparse.Action],
            leader: dict[str, Setting], keys: dict[str, str]) -> None:
    """``command``'s settings of ``keys`` (its key -> the leader's) that its own table leaves
    unset: the leader's, from its table or [course], converted by ``command``'s option."""
    settings = config.settings[command]
    by_key = {s.key: s for s in leader.values()}
    for key, theirs in keys.items():
        action, setting = known.get(key), by_key.get(theirs)
        if action is None or setting is None:
            continue
        if action.dest in settings and settings[action.dest].table != COURSE:
            continue  # its own table wins
        if setting.table == COURSE and action.dest in settings:
            continue  # the same [course] key
        raw = config.tables[setting.table][setting.key]
        where = f"{config.path} [{setting.table}] {setting.key} (for edu-dl {' '.join(command)})"
        value = convert(action, raw, where, config.path.parent)
        settings[action.dest] = Setting(value, setting.table, setting.key, setting.line)


def _tables(path: Path, raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The file's tables by name (``lms.collect``), keys with dashes; unknown ones refused."""
    names = [COURSE, *(table_name(c) for c in COMMANDS)]
    found: dict[str, dict[str, Any]] = {}

    def add(name: str, value: Any) -> None:
        if name not in names:
            raise ConfigError(f"{path}: unknown table [{name}]; the tables: "
                              + ", ".join(f"[{n}]" for n in names))
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {name} = ... must be a table, [{name}]")
        keys: dict[str, Any] = {}
        for key, item in value.items():
            dashed = key.replace("_", "-")
            if dashed in keys:
                raise ConfigError(f"{path} [{name}] {dashed}: given twice (as {key!r} too)")
            keys[dashed] = item
        found[name] = keys

    for name, value in raw.items():
        if name == "lms" and isinstance(value, dict):
            for verb, inner in value.items():
                add(f"lms.{verb}", inner)
        elif isinstance(value, dict) or name in names:
            add(name, value)
        else:
            raise ConfigError(f"{path}: {name} is outside any table; put it in [course] (every "
                              "command) or in a command's table, e.g. [grade]")
    return found


def _settings(config: CourseConfig, command: tuple[str, ...],
              known: dict[str, argparse.Action]) -> dict[str, Setting]:
    """dest -> Setting for ``command``: [course]'s keys it has, then its own table's."""
    settings: dict[str, Setting] = {}
    for table in (COURSE, table_name(command)):
        for key, raw in config.tables.get(table, {}).items():
            action = known.get(key)
            if action is None or (table == COURSE and key in NOT_SHARED.get(command, set())):
                continue
            where = f"{config.path} [{table}] {key}"
            if table == COURSE:
                where += f" (for edu-dl {' '.join(command)})"
            value = convert(action, raw, where, config.path.parent)
            settings[action.dest] = Setting(value, table, key, config.lines.get((table, key)))
    return settings


def convert(action: argparse.Action, raw: Any, where: str, base: Path) -> Any:
    """``raw`` (a TOML value) as the option would hold it had it been typed after its flag;
    relative paths are taken from ``base``, the file's folder."""
    if action.nargs == 0:  # store_true, store_false, store_const: a switch
        if not isinstance(raw, bool):
            raise ConfigError(f"{where}: true or false (the flag takes no value), got {raw!r}")
        return action.const if raw else action.default
    if isinstance(action, argparse._AppendAction):
        return [_one(action, item, where, base) for item in (raw if isinstance(raw, list)
                                                              else [raw])]
    return _one(action, raw, where, base)


def _one(action: argparse.Action, raw: Any, where: str, base: Path) -> Any:
    if isinstance(raw, (bool, list, dict)):
        raise ConfigError(f"{where}: a value as typed after the flag (a string or number), got "
                          f"{raw!r}")
    text = raw.isoformat() if isinstance(raw, (dt.date, dt.time)) else str(raw)
    kind = action.type
    try:
        value = kind(text) if callable(kind) else text
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (TypeError, ValueError):
        name = getattr(kind, "__name__", repr(kind))
        raise ConfigError(f"{where}: invalid {name} value: {text!r}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{where}: invalid choice {value!r} (choose from "
                          f"{', '.join(map(repr, action.choices))})")
    if isinstance(value, Path) and not value.is_absolute():
        value = base / value
    return value


def _check_exclusive(config: CourseConfig, command: tuple[str, ...],
                     parser: argparse.ArgumentParser) -> None:
    for group in parser._mutually_exclusive_groups:
        both = [s for a in group._group_actions if (s := config.settings[command].get(a.dest))]
        if len(both) > 1:
            raise ConfigError(f"{config.path}: {' and '.join(s.key for s in both)} (for edu-dl "
                              f"{' '.join(command)}) cannot be given together")


def apply(parser: argparse.ArgumentParser, config: CourseConfig) -> None:
    """Make the file's values the defaults of each command it reaches, and an option it gives
    no longer required; the defaults it replaces are kept for ``edu-dl config``."""
    for command, settings in config.settings.items():
        sub = subparser(parser, command)
        config.defaults[command] = {a.dest: a.default for a in sub._actions}
        sub.set_defaults(**{dest: s.value for dest, s in settings.items()})
        for action in sub._actions:
            if action.dest in settings:
                action.required = False


def chosen_file(argv: list[str]) -> tuple[Path | None, bool, list[str]]:
    """The config named before the command (``--config FILE``), whether ``--no-config`` was
    given, and the words from the command on."""
    before = argparse.ArgumentParser(prog="edu-dl", add_help=False)
    before.add_argument("--config", type=Path)
    before.add_argument("--no-config", action="store_true")
    before.add_argument("rest", nargs=argparse.REMAINDER)
    known = before.parse_known_args(argv)[0]
    return known.config, known.no_config, known.rest


def prepare(parser: argparse.ArgumentParser, argv: list[str]) -> CourseConfig | None:
    """Read the course config this command line uses (``--config FILE``, else ``edu-dl.toml``
    here, unless ``--no-config``) and apply it to ``parser``; None when there is none or the
    command is one it does not reach (bench, train, doctor)."""
    named, no_config, rest = chosen_file(argv)
    if no_config or not rest or rest[0] not in {c[0] for c in COMMANDS} | set(READERS):
        return None
    path = named if named is not None else Path(FILE_NAME)
    if named is None and not path.is_symlink() and not path.exists():
        return None
    config = load(parser, path)
    apply(parser, config)
    return config


@contextmanager
def _flags_only(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Every option of every parser under ``parser`` without default and not required, so that
    a parse holds exactly what the command line gave."""
    saved: list[tuple[argparse.ArgumentParser, dict[str, Any],
                      list[tuple[argparse.Action, Any, bool]]]] = []
    todo = [parser]
    while todo:
        one = todo.pop()
        saved.append((one, one._defaults, [(a, a.default, a.required) for a in one._actions]))
        one._defaults = {}
        for action in one._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                action.default, action.required = argparse.SUPPRESS, False
    try:
        yield
    finally:
        for one, defaults, actions in saved:
            one._defaults = defaults
            for action, default, required in actions:
                action.default, action.required = default, required


def given(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any]:
    """dest -> value of what ``argv`` gave on the command line, and nothing else."""
    with _flags_only(parser):
        return vars(parser.parse_args(argv))


def settle(parser: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace,
           config: CourseConfig | None) -> None:
    """After the parse: a repeatable flag given on the command line replaces the file's list
    (argparse would add to it), and a flag of a group of exclusive options drops the file's
    value of the others."""
    command = (args.command, args.verb) if args.command == "lms" else (args.command,)
    settings = config.settings.get(command) if config else None
    if not settings or config is None:
        return
    flags = given(parser, argv)
    sub = subparser(parser, command)
    for action in sub._actions:
        if isinstance(action, argparse._AppendAction) and action.dest in flags:
            setattr(args, action.dest, flags[action.dest])
    for group in sub._mutually_exclusive_groups:
        if any(a.dest in flags for a in group._group_actions):
            for action in group._group_actions:
                if action.dest not in flags and action.dest in settings:
                    setattr(args, action.dest, config.defaults[command][action.dest])
