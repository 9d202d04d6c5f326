"""Issue 24 (1b): a timeout skips the rest of its notebook and can be retried alone; a student
version is refused as --source; Ctrl-C stops a batch in one line and resumes; the cell whose
error broke a part is named as the cause."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from fixtures.hostile import corpus

from edu_dl.cli import main
from edu_dl.grading import sandbox
from edu_dl.grading.model import AFTER_TIMEOUT
from edu_dl.grading.settings import Settings
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import gradebook
from edu_dl.grading.term.cli import command_again
from edu_dl.grading.term.validate import validate
from edu_dl.grading.trust.errors import CellError, cause_of, defines, parse_error

ROOT = Path(__file__).resolve().parents[2]
# A cell that never ends (the corpus's "asleep") costs 6 s, not 60; the honest cells (at most
# the import of edu_dl.grading, 0.7 s on a busy 2-core machine) keep a margin of 8x under a
# loaded CI (issue 43).
SHORT = Settings(timeout_s=6, memory_mb=2048)
LONGER = Settings(timeout_s=8, memory_mb=2048)  # --retry-timeouts under a longer --timeout
GROUP = f"pytest{os.getpid()}-"


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


def rows_of(summary: G.Summary, student: str) -> dict[str, G.Row]:
    return {r.part: r for r in summary.rows if r.student == student}


def state(out: Path, student: str) -> str | None:
    """The student's submission as the gradebook keeps it, as text (None: none kept)."""
    kept = gradebook.kept_entry(out, student, corpus.EXERCISE)
    return None if kept is None else json.dumps(dataclasses.asdict(kept), default=str)


def run_json(out: Path, student: str) -> Path:
    return out / ".work" / student / corpus.EXERCISE / "run.json"


# --------------------------------------------------------------------------- timeouts


@pytest.mark.waits
@pytest.mark.timing
def test_a_timeout_skips_the_rest_and_only_timeouts_are_retried(tmp_path: Path) -> None:
    corpus.build(tmp_path, tmp_path / "escape", ["good", "asleep"])
    subs, source, out = tmp_path / "submissions", tmp_path / "source", tmp_path / "grades"
    start = time.monotonic()
    first = G.grade(subs, source, out, settings=SHORT, progress=False)
    asleep = rows_of(first, "asleep")
    assert asleep["ex02.gflops"].status == "timeout"
    skipped = asleep["ex02.peak_bandwidth"]
    assert skipped.status == "not run" and skipped.points == 0
    # cell 4 of the notebook (counted from 1, Markdown included) is gflops' test cell
    assert skipped.message.startswith(f"{AFTER_TIMEOUT}: cell 4 (the test of ex02.gflops) "
                                      "ran over 6 s"), skipped.message
    assert {r.status for r in rows_of(first, "good").values()} == {"passed"}
    assert first.graded == 2 and time.monotonic() - start < 120

    # --retry-timeouts under a longer --timeout: the timeout is graded again, the good
    # notebook keeps its grade, run and state untouched (a new --timeout alone regrades all).
    kept = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (run_json(out, "good"),)}
    kept_good, retried = state(out, "good"), state(out, "asleep")
    again = G.grade(subs, source, out, settings=LONGER,
                    progress=False, retry_timeouts=True)
    assert (again.graded, again.reused) == (1, 1)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in kept} == kept
    assert state(out, "good") == kept_good
    assert state(out, "asleep") != retried
    assert "ran over 8 s" in rows_of(again, "asleep")["ex02.peak_bandwidth"].message
    assert {r.status for r in rows_of(again, "good").values()} == {"passed"}
    # A plain run keeps what --retry-timeouts graded under these limits.
    same = G.grade(subs, source, out, settings=LONGER, progress=False)
    assert same.graded == 1  # the good one, graded under 6 s so far
    assert not corpus.sandbox_processes(GROUP)


@pytest.mark.waits
@pytest.mark.timing
def test_no_skip_after_timeout_runs_the_later_cells(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus.build(tmp_path, tmp_path / "escape", ["asleep"])
    out = tmp_path / "grades"
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(tmp_path / "source"),
            "--out", str(out), "--timeout", "6", "--memory", "2048", "--no-skip-after-timeout"]
    assert main(argv) == 0
    got = {r["part"]: r for r in _csv(out)}
    assert got["ex02.gflops"]["status"] == "timeout"
    assert got["ex02.peak_bandwidth"]["status"] == "passed"
    said = capsys.readouterr().out
    assert f"1 submission(s) timed out; to grade only them again (say with a longer " \
        f"--timeout), run: {shlex.join(['edu-dl', *argv, '--retry-timeouts'])}" in said


def test_the_command_to_run_again() -> None:
    argv = ["grade", "subs dir", "--forc", "--out", "o", "--rotate-secret", "--retry-timeouts"]
    assert command_again(argv) == "edu-dl grade 'subs dir' --out o --retry-timeouts"
    assert command_again(argv[:4], "--retry-timeouts") == \
        "edu-dl grade 'subs dir' --out --retry-timeouts"


def _csv(out: Path) -> list[dict[str, str]]:
    import csv

    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- the source


def test_a_student_version_as_source_is_refused_in_one_sentence(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus.build(tmp_path, tmp_path / "escape", ["good"])
    released = tmp_path / "released"
    corpus.write_source(released, corpus.student(solved=False))  # what assign writes
    argv = ["grade", str(tmp_path / "submissions"), "--out", str(tmp_path / "grades")]
    assert main([*argv, "--source", str(released)]) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1, said
    assert "02_mini.ipynb is a student version" in said and "--source solutions/" in said
    assert not (tmp_path / "grades").exists()  # refused before anything was graded
    # The course's own exercises/, whose solution cells hold the stub inside their functions.
    subs = tmp_path / "course"
    name = "08_autograd_from_scratch.ipynb"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / name).write_bytes((ROOT / "exercises" / name).read_bytes())
    assert main(["grade", str(subs), "--out", str(tmp_path / "grades"),
                 "--source", str(ROOT / "exercises")]) == 2
    assert f"{name} is a student version" in capsys.readouterr().err


# --------------------------------------------------------------------------- causes


def test_a_broken_cell_is_named_as_the_cause(tmp_path: Path) -> None:
    """A SyntaxError in one solution and a top-level error in another: each part names the
    cell, in the gradebook's rows and in edu-dl validate's report (the same rows)."""
    corpus.write_source(tmp_path / "source", corpus.source())
    nb = corpus.student()
    corpus._replace("gflops", "return 2.0 * n**3", "return 2.0 * n**3 +")(nb)
    corpus._prepend("peak_bandwidth", "1 / 0")(nb)
    path = corpus.write(tmp_path / "alice", nb)
    report = validate(path, timeout=10, progress=False, source=tmp_path / "source")
    got = {p.part_id: p.message for p in report.parts}
    assert got["ex02.gflops"].startswith(
        "not graded: cell 3 (the solution of `gflops`) raised SyntaxError: invalid syntax "
        "(line 4); so test cell 'gflops_tests' failed: NameError: name 'gflops' is not "
        "defined"), got
    assert got["ex02.peak_bandwidth"].startswith(
        "not graded: cell 5 (the solution of `peak_bandwidth`) raised ZeroDivisionError: "
        "division by zero; so"), got
    assert "not graded: cell 3" in str(report)


def test_cell_errors_are_read_strictly() -> None:
    syntax = parse_error("SyntaxError: invalid syntax (497993260.py, line 3)")
    assert syntax == CellError("SyntaxError", "invalid syntax", 3)
    assert str(syntax) == "SyntaxError: invalid syntax (line 3)"
    assert parse_error("NameError: name 'relu' is not defined").undefined == "relu"  # type: ignore[union-attr]
    assert parse_error("ValueError: name 'relu' is not defined").undefined is None  # type: ignore[union-attr]
    assert parse_error("not an error\x1b[2J") is None and parse_error("") is None
    huge = parse_error("E: " + "x" * 10**6 + "\nsecond line")
    assert huge is not None and len(huge.value) < 300 and "second" not in huge.value
    # a forged location is kept as text unless it has the form IPython writes
    assert parse_error("SyntaxError: bad (line 99999999)") == \
        CellError("SyntaxError", "bad (line 99999999)")
    assert defines("import numpy as np\ndef relu(x):\n    return x +", "relu")
    assert defines("from m import relu", "relu") and defines("relu = lambda x: x", "relu")
    assert not defines("y = relu(x)", "relu") and not defines("relu == 1", "relu")
    assert not defines("    def relu(x): pass", "relu")  # not at the top level
    assert not defines("def relu(): pass\n" + "#" * 200_000, "relu")  # over the bound
    name_error = parse_error("NameError: name 'relu' is not defined")
    bad = parse_error("SyntaxError: invalid syntax (1.py, line 2)")
    assert bad is not None
    errors = [(2, bad, "def relu(x):\n    return x +"), (7, bad, "def relu(x):\n    return")]
    assert cause_of(5, name_error, errors) == (2, bad)  # earlier cells only, the last one
    assert cause_of(9, name_error, errors) == (7, bad)
    assert cause_of(5, bad, errors) is None  # not a NameError: nothing to explain


# --------------------------------------------------------------------------- Ctrl-C


def _submissions(root: Path) -> list[str]:
    """a_good, b_sleepy (one cell sleeps over the 8 s timeout) and c_good."""
    corpus.build(root, root / "escape", ["good"])
    subs = root / "submissions"
    good = (subs / "good" / f"{corpus.EXERCISE}.ipynb").read_bytes()
    for name in ("a_good", "c_good"):
        (subs / name).mkdir()
        (subs / name / f"{corpus.EXERCISE}.ipynb").write_bytes(good)
    sleepy = corpus.student()
    sleepy.cells.insert(2, nbformat.v4.new_code_cell("import time\ntime.sleep(30)"))
    corpus.write(subs / "b_sleepy", sleepy)
    (subs / "good" / f"{corpus.EXERCISE}.ipynb").unlink()
    (subs / "good").rmdir()
    return ["a_good", "b_sleepy", "c_good"]


def _signals(pid: int) -> str:
    """What the process does with SIGINT now, from /proc (its main thread's SigBlk, and the
    process's SigIgn and SigCgt masks)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError as exc:
        return f"pid {pid} unreadable ({exc})"
    masks = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    bit = 1 << (signal.SIGINT - 1)
    return (f"pid {pid} {masks.get('State', '?').strip()}: SIGINT blocked "
            f"{bool(int(masks.get('SigBlk', '0'), 16) & bit)}, ignored "
            f"{bool(int(masks.get('SigIgn', '0'), 16) & bit)}, caught "
            f"{bool(int(masks.get('SigCgt', '0'), 16) & bit)}")


def _as_a_terminal_starts_it() -> None:
    """In the child, before exec: SIGINT unblocked and at its default action, as a shell
    starts a command. A blocked signal and an ignored one survive exec, and a Python started
    with SIGINT blocked never sees Ctrl-C: it runs to its end and exits 0, the failure the
    Dask variant showed in CI now and then. Whatever the test process holds, the grader must
    not inherit it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(argv: list[str], out: Path, first: list[str]) -> tuple[int, str, str]:
    """Start ``edu-dl grade`` in its own process group, press Ctrl-C (SIGINT to the whole
    group, as a terminal does) once one of ``first`` is saved and another submission's sandbox
    runs; (exit status, stderr, the grader's SIGINT disposition when it was sent).

    The Dask variant failed in CI now and then (about one fresh-clone run in three on
    2026-12-03): SIGINT was sent once the moment came, and the grader still ran to its end
    and exited 0. A grader that inherits SIGINT blocked or ignored does exactly that (shown:
    with SIGINT blocked in the test process, the test failed so, with "SIGINT blocked True"),
    so the grader now starts as a terminal starts it (``_as_a_terminal_starts_it``). Whether
    that was CI's cause is not proven: in the whole unit suite run as CI runs it (two xdist
    workers), no test left SIGINT blocked or its handler changed. The disposition recorded
    here, the blocked mask included, is for the message of any failure still to come."""
    env = {**os.environ, sandbox.GROUP_VAR: GROUP, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "edu_dl.cli", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_as_a_terminal_starts_it)
    # Waits for conditions; the bounds only stop a hang (a Dask cluster's start and close are
    # slow beside eight busy processes, issue 43): the verdict is what the grader says.
    # The moment is chosen from what runs, not from a clock: one of ``first`` saved and a
    # sandbox of this test's group alive (the next submission's, 8 s from its timeout).
    deadline = time.monotonic() + 900
    seen = {"saved": False, "sandbox": False}  # ever, for the message if the moment never came
    while proc.poll() is None:
        saved = any(state(out, s) is not None for s in first)
        running = bool(corpus.sandbox_processes(GROUP))
        seen["saved"] |= saved
        seen["sandbox"] |= running
        if saved and running:
            break
        assert time.monotonic() < deadline, f"no moment to interrupt in 900 s: {seen}"
        time.sleep(0.2)
    assert proc.poll() is None, f"the batch ended before one of {first} was saved while " \
        f"another submission's sandbox ran (seen: {seen}): " + proc.communicate()[1]
    time.sleep(0.5)  # its runner is past its start
    disposition = _signals(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err, disposition


def _resume(err: str, cwd: Path) -> tuple[int, str]:
    command = shlex.split(err.split("run: ", 1)[1].strip())
    assert command[0] == "edu-dl" and "--force" not in command
    # A bound on a hang only: with --local-cluster the resumed batch starts a Dask cluster and
    # grades two notebooks: beside eight busy processes that took about 270 s (issue 43).
    done = subprocess.run([sys.executable, "-m", "edu_dl.cli", *command[1:]], cwd=cwd,
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, sandbox.GROUP_VAR: GROUP, "OMP_NUM_THREADS": "1"})
    return done.returncode, done.stdout + done.stderr


@pytest.mark.timing
@pytest.mark.parametrize("where", ["here", pytest.param("dask", marks=pytest.mark.slow)])
def test_ctrl_c_says_one_line_and_the_batch_resumes(tmp_path: Path, where: str) -> None:
    students = _submissions(tmp_path)
    out = tmp_path / "grades"
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(tmp_path / "source"),
            "--out", str(out), "--timeout", "8", "--memory", "2048", "--force"]
    if where == "dask":
        argv += ["--local-cluster", "1"]
    status, err, disposition = _interrupt(argv, out, ["a_good", "c_good"])
    assert status == 130, f"SIGINT sent to {disposition}\n{err}"
    for noise in ("Traceback", "KeyboardInterrupt", "CancelledError", "ERROR"):
        assert noise not in err, err
    said = [line for line in err.splitlines() if "interrupted" in line]
    assert len(said) == 1, err
    saved = [s for s in students if state(out, s) is not None]
    assert f"interrupted; {len(saved)} of 3 submissions graded and saved" in said[0]
    assert "b_sleepy" not in saved  # cut short in its sandbox: no grade kept
    assert not (out / "grades.csv").exists()
    deadline = time.monotonic() + 20  # the interrupted sandbox is gone
    while corpus.sandbox_processes(GROUP) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not corpus.sandbox_processes(GROUP)

    status, said_again = _resume(said[0], tmp_path)
    assert status == 0, said_again
    assert f"graded {3 - len(saved)} submissions ({len(saved)} unchanged" in said_again
    got = {(r["student"], r["part"]): r["status"] for r in _csv(out)}
    assert got[("b_sleepy", "ex02.gflops")] == "not run"  # its cell 3 timed out
    assert {got[(s, p)] for s in ("a_good", "c_good") for p in corpus.PARTS} == {"passed"}
