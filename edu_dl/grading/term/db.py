"""The gradebook of record: one database, written in transactions (SQLAlchemy Core).

By default a SQLite file in OUT (``sqlite:///OUT/gradebook.db``, nbgrader's choice); a course
server gives a URL instead (``--db postgresql+psycopg://...``, or the course config's ``db``).
It holds, per (student, exercise), what the grade depended on and the job's facts (table
``submissions``) and its rows, one per part (``rows``: points, status, message ...); each
student's notes from collecting (``collected``); the hand grades (``hand_grades``: points,
comment, the answer they were given to, who gave them and when); and what the last run applied
(``options``). grades.csv, manual.csv, nbgrader_grades.csv, the feedback and the exports are
derived from it on every run.

Each submission is written in one transaction (its old rows deleted and the new ones inserted
together), and each hand grade in one: a crash leaves the last committed state, never half a
submission. SQLite runs in WAL mode with a busy timeout, and every transaction begins
IMMEDIATE, so concurrent writers (two people grading by hand, a regrade) wait for each other
instead of failing or overwriting each other.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    TypeDecorator,
    create_engine,
    event,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from edu_dl.grading.model import Row

FILE_NAME = "gradebook.db"
BUSY_TIMEOUT_S = 60  # how long a writer waits for another one (a transaction is milliseconds)
NAME = 512  # student, exercise and part ids are short; longer ones are refused upstream

metadata = MetaData()
ESCAPED = "json:"  # a text kept as JSON: it holds what a database refuses, or starts with this


class Escaped(TypeDecorator[str]):
    """Text as it is, unless a database would refuse it or change it: a NUL (PostgreSQL refuses
    it), a lone surrogate (a file name's undecodable bytes; not UTF-8), or text that starts with
    ``json:`` is kept as ``json:`` and its JSON string, and read back exactly. Anything else
    read back (bytes, JSON that is no string) comes back as None, which the reader refuses."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if not isinstance(value, str) or not _needs_escape(value):
            return value
        return ESCAPED + json.dumps(value)

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        if not isinstance(value, str):
            return None if value is not None else value
        if not value.startswith(ESCAPED):
            return value
        try:
            text = json.loads(value[len(ESCAPED):])
        except ValueError:
            return None
        return text if isinstance(text, str) else None


def _needs_escape(text: str) -> bool:
    if "\0" in text or text.startswith(ESCAPED):
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _row_columns() -> list[Column[Any]]:
    """A Row's fields as columns (text, or a float for the points)."""
    return [Column(f.name, Float, nullable=False) if f.name in ("points", "max_points")
            else Column(f.name, Escaped(), nullable=False, default="")
            for f in fields(Row) if f.name not in ("student", "exercise")]


submissions = Table(
    "submissions", metadata,
    Column("student", Escaped(NAME), primary_key=True),
    Column("exercise", Escaped(NAME), primary_key=True),
    Column("key", Escaped(64), nullable=False),  # the resume key (batch.job_key)
    Column("basis", Escaped(64), nullable=False, default=""),
    Column("content", Escaped(64), nullable=False, default=""),
    Column("secret", Escaped(64), nullable=False, default=""),  # the secret's fingerprint
    Column("job", Escaped(), nullable=False, default="{}"),  # gradebook.job_facts, as JSON
    Column("grader", Escaped(), nullable=False, default="{}"),  # what grading it cost the grader
)
rows = Table(
    "rows", metadata,
    Column("student", Escaped(NAME), primary_key=True),
    Column("exercise", Escaped(NAME), primary_key=True),
    Column("seq", Integer, primary_key=True),  # the row's place in its submission
    *_row_columns(),
)
collected = Table(
    "collected", metadata,
    Column("student", Escaped(NAME), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("exercise", Escaped(NAME), nullable=False),
    *_row_columns(),
)
hand_grades = Table(
    "hand_grades", metadata,
    # (student, exercise, cell) as manual.csv writes them (manual.written_key)
    Column("student", Escaped(NAME), primary_key=True),
    Column("exercise", Escaped(NAME), primary_key=True),
    Column("cell", Escaped(NAME), primary_key=True),
    Column("points", Float, nullable=False),
    Column("comment", Escaped(), nullable=False, default=""),  # an override's reason
    Column("answer_id", Escaped(64), nullable=False, default=""),
    Column("grader", Escaped(), nullable=False, default=""),  # who: "edu-dl mark (user)", a sheet
    Column("time", Escaped(40), nullable=False, default=""),  # when, ISO 8601 UTC
)
options = Table(
    "options", metadata,
    Column("name", Escaped(64), primary_key=True),
    Column("value", Escaped(), nullable=False),
)


class DatabaseError(ValueError):
    """A gradebook database that cannot be opened or used; the message names its URL."""


def default_url(out: Path) -> str:
    """``sqlite:///OUT/gradebook.db``, OUT made absolute."""
    return f"sqlite:///{(out.resolve() / FILE_NAME).as_posix()}"


_engines: dict[str, Engine] = {}


def engine(url: str) -> Engine:
    """The engine of ``url``, its tables created (once per process). No pool: a connection is
    opened per transaction, so nothing is held between them (nor across a fork)."""
    if url in _engines:
        return _engines[url]
    try:
        parsed = make_url(url)
        made = create_engine(parsed, poolclass=NullPool,
                             **({"connect_args": {"timeout": BUSY_TIMEOUT_S}}
                                if parsed.get_backend_name() == "sqlite" else {}))
    except (ArgumentError, ImportError, ValueError) as exc:
        raise DatabaseError(f"gradebook database {_shown(url)}: {exc}") from None
    if made.dialect.name == "sqlite":
        _sqlite_transactions(made)
    try:
        with made.begin() as conn:
            metadata.create_all(conn)
    except SQLAlchemyError as exc:
        raise DatabaseError(f"gradebook database {_shown(url)} cannot be opened: "
                            f"{exc.__class__.__name__}: {str(exc).splitlines()[0]}") from None
    _engines[url] = made
    return made


def _sqlite_transactions(made: Engine) -> None:
    """WAL (readers never wait for a writer), a busy timeout, and BEGIN IMMEDIATE: a
    transaction takes the write lock at its start, so two writers queue instead of one
    failing on a lock upgrade (SQLAlchemy's recipe for pysqlite)."""

    @event.listens_for(made, "connect")
    def _connect(dbapi: Any, _record: Any) -> None:
        dbapi.isolation_level = None  # pysqlite's own BEGIN off: the one below instead
        cursor = dbapi.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        cursor.close()

    @event.listens_for(made, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _shown(url: str) -> str:
    """The URL with its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "(a URL that cannot be read)"


class Store:
    """One gradebook database: its URL, and transactions on it."""

    def __init__(self, url: str, file: Path | None = None) -> None:
        self.url = url
        self.file = file  # the SQLite file, when it is one

    def exists(self) -> bool:
        """Whether there is a gradebook to read (a server's database always counts; a SQLite
        file is not created by reading)."""
        if self.file is None:
            return True
        return self.file.is_file()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One transaction: committed when the block ends, rolled back when it raises."""
        if self.file is not None and not self.file.exists():  # created owner-only: it holds
            self.file.parent.mkdir(parents=True, exist_ok=True)  # every grade and answer
            os.close(os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        with engine(self.url).begin() as conn:
            yield conn

    def __repr__(self) -> str:
        return f"Store({_shown(self.url)})"


def store(where: Path | Store, url: str | None = None) -> Store:
    """The gradebook of OUT (``where``): ``url`` when given, else OUT's SQLite file; a Store
    is returned as it is."""
    if isinstance(where, Store):
        return where
    if url:
        sqlite_file = _sqlite_file(url)
        return Store(url, sqlite_file)
    return Store(default_url(where), where.resolve() / FILE_NAME)


def _sqlite_file(url: str) -> Path | None:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise DatabaseError(f"--db {url!r}: not a database URL ({exc})") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return Path(str(parsed.database))
    return None


def row_values(row: Row) -> dict[str, Any]:
    """A row as the columns of ``rows`` and ``collected`` hold it (less student, exercise)."""
    values = asdict(row)
    del values["student"], values["exercise"]
    return values


def as_row(student: str, exercise: str, record: Any) -> Row:
    """A Row from a database row (its columns by name), checked: points are finite numbers,
    everything else text (ValueError names the first column that is not)."""
    values = {f.name: getattr(record, f.name) for f in fields(Row)
              if f.name not in ("student", "exercise")}
    for name, value in [("student", student), ("exercise", exercise), *values.items()]:
        if name in ("points", "max_points"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value):
                raise ValueError(f"{name} {value!r} is not a number")
        elif not isinstance(value, str):
            raise ValueError(f"{name} {value!r} is not text")
    return Row(student, exercise, **values)


def as_json(value: Any) -> str:
    """A JSON column's text."""
    return json.dumps(value, sort_keys=True)

