"""The gradebook of record in a database: people grading by hand and a regrade writing at the
same time lose nothing, a crash leaves the last committed state, and the same holds on a real
PostgreSQL server (started here, as an unprivileged user, in a temporary folder)."""

from __future__ import annotations

import multiprocessing
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from sqlalchemy import insert

from edu_dl.grading.model import BY_HAND, NEEDS, Exercise, Job, Row
from edu_dl.grading.term import db, gradebook
from edu_dl.grading.term.manual import GRADED
from edu_dl.grading.term.mark.store import Desk

EX = "hw1"
HW1 = Exercise(EX, nbformat.v4.new_notebook(), "")
GRADERS, SAVES, STUDENTS = 2, 12, 6


def _rows(student: str, points: float = 1.0) -> list[Row]:
    return [Row(student, EX, "why", 0, 2, NEEDS, "", judged=BY_HAND, answer=f"of {student}"),
            Row(student, EX, "test_sum", points, 1, "passed", "test cell passed")]


def _graded(out: Path, url: str | None, students: list[str]) -> None:
    for student in students:
        gradebook.write_entry(db.store(out, url), Job(student, HW1, None, "ps1"),
                              _rows(student), "k", "b", "s")


def _students(prefix: str) -> list[str]:
    return [f"{prefix}{i}" for i in range(STUDENTS)]


def _mark(out: Path, url: str | None, sheet: Path, grader: int) -> None:
    """One person at ``edu-dl mark``: their own half of the first students' rows, each saved
    SAVES times. The half is chosen by student, not by place in the list: the regrade may
    already have added new students when this desk reads the gradebook."""
    desk = Desk(out, sheet, db_url=url, grader=f"grader {grader}")
    first = _students("s")
    mine = [i for i, item in enumerate(desk.items) if item.row.student in first
            and first.index(item.row.student) % GRADERS == grader]
    assert len(mine) == STUDENTS // GRADERS, mine
    for k in range(SAVES):
        for index in mine:
            desk.save(index, str(k % 3), f"grader {grader}, save {k}")


def _regrade(out: Path, url: str | None) -> None:
    """A regrade: every graded submission written again, and new ones, one transaction each."""
    for k in range(SAVES):
        _graded(out, url, _students("s"))
        _graded(out, url, [f"new{k}"])


def _at_once(out: Path, url: str | None, sheet: Path) -> None:
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_mark, args=(out, url, sheet, g)) for g in range(GRADERS)]
    workers.append(context.Process(target=_regrade, args=(out, url)))
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
        assert w.exitcode == 0, w


def check_nothing_lost(out: Path, url: str | None, sheet: Path) -> None:
    """Two hand graders (two processes) and a regrade write at once; then every last hand
    grade, every submission and the sheet derived from them are there."""
    _graded(out, url, _students("s"))
    _at_once(out, url, sheet)
    kept = gradebook.hand_grades(db.store(out, url))
    last = (SAVES - 1) % 3
    assert len(kept) == STUDENTS and {grade[:2] for grade in kept.values()} == {
        (last, f"grader {g}, save {SAVES - 1}") for g in range(GRADERS)}, kept
    entries = gradebook.read_entries(db.store(out, url), print)
    assert set(entries) == {(s, EX) for s in [*_students("s"), *(f"new{k}" for k in
                                                                 range(SAVES))]}
    assert all(e.rows == _rows(e.student) for e in entries.values())
    desk = Desk(out, sheet, db_url=url)
    assert [(r["points"], r["status"]) for r in desk.listing()
            if r["student"].startswith("s")] == [(last, GRADED)] * STUDENTS
    with db.store(out, url).transaction() as conn:
        graders = {r.grader for r in conn.execute(db.hand_grades.select())}
    assert graders == {f"edu-dl mark (grader {g})" for g in range(GRADERS)}


CRASH = """
import os, signal, sys
from pathlib import Path
from sqlalchemy import insert
sys.path.insert(0, {tests!r})
from grading.test_gradebook_db import HW1, _rows
from edu_dl.grading.model import Job
from edu_dl.grading.term import db, gradebook
out, url = Path(sys.argv[1]), sys.argv[2] or None
store = db.store(out, url)
gradebook.write_entry(store, Job("s0", HW1, None, "ps1"), _rows("s0", 0.5), "k2", "b", "s")
with store.transaction() as conn:  # the next submission, killed half-way through its write
    conn.execute(db.rows.delete().where(db.rows.c.student == "s1"))
    conn.execute(insert(db.rows).values(student="s1", exercise="hw1", seq=9, part="x",
                                        points=0, max_points=1, status="?", message=""))
    os.kill(os.getpid(), signal.SIGKILL)
"""


def check_a_crash_keeps_the_last_commit(out: Path, url: str | None) -> None:
    """A process killed inside a transaction, after one submission was committed: that one is
    kept, the one it was writing is as it was before; an exception inside a transaction rolls
    it back too."""
    _graded(out, url, ["s0", "s1"])
    crash = CRASH.format(tests=str(Path(__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", crash, str(out), url or ""],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    entries = gradebook.read_entries(db.store(out, url), print)
    assert entries[("s0", EX)].rows == _rows("s0", 0.5) and entries[("s0", EX)].key == "k2"
    assert entries[("s1", EX)].rows == _rows("s1") and entries[("s1", EX)].key == "k"
    broken = [*_rows("s1", 0.0), Row("s1", EX, "p", None, 1, "passed", "")]  # type: ignore[arg-type]
    with pytest.raises(db.DatabaseError, match="gradebook database"):
        gradebook.write_entry(db.store(out, url), Job("s1", HW1, None, "ps1"), broken, "k3",
                              "b", "s")
    again = gradebook.read_entries(db.store(out, url), print)[("s1", EX)]
    assert (again.rows, again.key) == (_rows("s1"), "k")


ODD = ("a\x00b", "\udcff\udcfe", "json:[1]", "json:\"x\"", "plain", "caf\u00e9 \u200b")


def check_odd_text_round_trips(out: Path, url: str | None) -> None:
    """Text a database refuses or changes (a NUL, a file name's undecodable bytes) and text
    that looks escaped are read back exactly, in names and in rows."""
    for i, text in enumerate(ODD):
        student = f"s{i}{text}"
        rows = [Row(student, EX, text, 1, 1, "passed", text, answer=text)]
        gradebook.write_entry(db.store(out, url), Job(student, HW1, None, "ps1"), rows, "k",
                              "b", "s")
        gradebook.write_collected(db.store(out, url), student, rows)
        gradebook.save_hand_grades(db.store(out, url), {(student, EX, text): (1.0, text, "")},
                                   text)
    entries = gradebook.read_entries(db.store(out, url), print)
    assert {key: e.rows for key, e in entries.items()} == {
        (f"s{i}{t}", EX): [Row(f"s{i}{t}", EX, t, 1, 1, "passed", t, answer=t)]
        for i, t in enumerate(ODD)}
    assert set(gradebook.read_collected(db.store(out, url))) == {f"s{i}{t}"
                                                                for i, t in enumerate(ODD)}
    assert gradebook.hand_grades(db.store(out, url)) == {
        (f"s{i}{t}", EX, t): (1.0, t, "") for i, t in enumerate(ODD)}
    gradebook.forget(db.store(out, url), f"s0{ODD[0]}", EX)  # found by its name, escaped
    assert (f"s0{ODD[0]}", EX) not in gradebook.read_entries(db.store(out, url), print)


# --------------------------------------------------------------------------- SQLite in OUT


def test_odd_text_round_trips(tmp_path: Path) -> None:
    check_odd_text_round_trips(tmp_path / "out", None)


@pytest.mark.slow
def test_hand_graders_and_a_regrade_at_once_lose_nothing(tmp_path: Path) -> None:
    check_nothing_lost(tmp_path / "out", None, tmp_path / "filled.csv")
    assert (tmp_path / "out" / db.FILE_NAME).is_file()


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_a_crash_mid_run_leaves_the_last_committed_state(tmp_path: Path) -> None:
    check_a_crash_keeps_the_last_commit(tmp_path / "out", None)


def test_sqlite_waits_for_a_writer_and_a_bad_url_is_said(tmp_path: Path) -> None:
    store = db.store(tmp_path)
    with store.transaction() as conn:
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        timeout = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
    assert (mode, timeout) == ("wal", db.BUSY_TIMEOUT_S * 1000)
    assert (tmp_path / db.FILE_NAME).stat().st_mode & 0o777 == 0o600  # grades and answers
    with pytest.raises(db.DatabaseError, match="--db 'not a url': not a database URL"):
        db.store(tmp_path, "not a url")
    with pytest.raises(db.DatabaseError, match="gradebook database nosuch://"):
        gradebook.read_entries(db.store(tmp_path, "nosuch://host/db"), print)


def test_a_hand_grade_saved_in_mark_reaches_grades_without_a_sheet(tmp_path: Path) -> None:
    """edu-dl mark saves to the gradebook; the rows merged on the next run come from it."""
    from edu_dl.grading.term.manual import applicable, merge

    out = tmp_path / "out"
    _graded(out, None, ["s0"])
    Desk(out, tmp_path / "filled.csv", overrides=True).save(1, "0", "copied")
    rows = gradebook.read_entries(out, print)[("s0", EX)].rows
    kept = gradebook.hand_grades(out)
    assert merge(rows, applicable(rows, kept, "db"), "db") == 1
    assert (rows[1].points, rows[1].status, rows[1].reason) == (0, "overridden", "copied")
    # A grade of a row the gradebook no longer has is kept, unused, and stops nothing.
    gradebook.save_hand_grades(out, {("gone", EX, "why"): (1.0, "", "")}, "test")
    assert set(applicable(rows, gradebook.hand_grades(out), "db")) == {("s0", EX, "test_sum")}


# --------------------------------------------------------------------------- PostgreSQL


def _postgres_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL server: initdb into a temporary folder, its socket there, no TCP,
    run as an unprivileged user (PostgreSQL refuses root: as root, the user ``nobody``);
    stopped and removed at the end. Its URL."""
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install "
                        "'psycopg[binary]'): the PostgreSQL gradebook cannot be tested")
    bin_dir = _postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (make system-deps installs "
                    "postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="edu-dl-pg-"))
    user: dict[str, object] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(folder, nobody.pw_uid, nobody.pw_gid)
        user = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    data, log = folder / "data", folder / "server.log"
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "HOME": str(folder)}

    def pg(*argv: str) -> None:
        done = subprocess.run([str(bin_dir / argv[0]), *argv[1:]], env=env, cwd=folder,
                              capture_output=True, text=True, timeout=120, **user)  # type: ignore[call-overload]
        assert done.returncode == 0, (argv, done.stdout, done.stderr,
                                      log.read_text() if log.exists() else "")

    try:
        pg("initdb", "-D", str(data), "-U", "grader", "--auth=trust", "-E", "UTF8",
           "--no-sync", "--no-instructions")
        pg("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-o",
           f"-k {folder} -c listen_addresses='' -p 5432 -F", "start")
        yield f"postgresql+psycopg://grader@/postgres?host={folder}&port=5432"
    finally:
        if (data / "postmaster.pid").exists():
            pg("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def clean(postgres: str) -> str:
    """The server's gradebook, empty."""
    with db.engine(postgres).begin() as conn:
        for table in reversed(db.metadata.sorted_tables):
            conn.execute(table.delete())
    return postgres


@pytest.mark.slow
def test_on_postgresql_hand_graders_and_a_regrade_at_once_lose_nothing(
        tmp_path: Path, clean: str) -> None:
    check_nothing_lost(tmp_path / "out", clean, tmp_path / "filled.csv")
    assert not (tmp_path / "out" / db.FILE_NAME).exists()  # nothing went to SQLite


@pytest.mark.slow
def test_on_postgresql_a_crash_leaves_the_last_committed_state(
        tmp_path: Path, clean: str) -> None:
    check_a_crash_keeps_the_last_commit(tmp_path / "out", clean)
    with db.engine(clean).begin() as conn:  # the killed session's transaction is gone too
        conn.execute(insert(db.options).values(name="alive", value="yes"))


def test_on_postgresql_odd_text_round_trips(tmp_path: Path, clean: str) -> None:
    check_odd_text_round_trips(tmp_path / "out", clean)
