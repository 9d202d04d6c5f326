"""Grading fails closed: where bubblewrap cannot be used, `grade` and `assign`'s self-test refuse
(exit 2, one sentence, nothing written); with --no-sandbox a student's code still never runs as
root; `validate` on one's own notebook keeps its labelled fallback.

As root, the issue's reproduction itself: bwrap hidden in a private mount namespace
(fixtures/hostile/no_bwrap.py) and the real command line run there. As an ordinary user (who
cannot make one), the same check answers "no" through the module's own question
(``sandbox.bwrap_problem``), and the run takes the ordinary user's path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from fixtures.hostile import corpus, no_bwrap

from edu_dl.grading import sandbox
from edu_dl.grading.settings import NO_SANDBOX, NoSandbox, Settings
from edu_dl.grading.term import batch as G
from edu_dl.grading.term.report import summary_text

EDU_DL = str(Path(sys.executable).parent / "edu-dl")
FAST = ["--timeout", "20", "--budget", "60", "--memory", "2048"]
GROUP = f"closed{os.getpid()}-"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


def intruder(targets: list[Path]) -> str:
    """A student's cell: says which uid runs it, and tries to write each target."""
    return (f"import os, pathlib\nprint('UID', os.getuid(), flush=True)\n"
            f"for target in {[str(t) for t in targets]!r}:\n"
            "    try:\n"
            "        pathlib.Path(target).write_text('x')\n"
            "        print('WROTE', target, flush=True)\n"
            "    except OSError as exc:\n"
            "        print('DENIED', target, exc.errno, flush=True)\n")


def course(tmp_path: Path, targets: list[Path]) -> tuple[Path, Path]:
    """(submissions, source): an honest control and an intruder."""
    subs, source = tmp_path / "submissions", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    corpus.write(subs / "alice", corpus.student())
    nb = corpus.student()
    corpus._prepend("gflops", intruder(targets))(nb)
    corpus.write(subs / "mallory", nb)
    return subs, source


def tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under root with its mode, size and modification time."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size,
                                       p.lstat().st_mtime_ns) for p in root.rglob("*")}


def printed(out: Path, student: str) -> str:
    """What the student's code printed, from the executed notebook the grader kept."""
    nb = nbformat.read(out / "autograded" / student / corpus.EXERCISE
                       / f"{corpus.EXERCISE}.ipynb", as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))


def unboxed_folders() -> set[str]:
    return {p.name for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("edu-dl-unboxed-*")}


@pytest.fixture
def own_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A TMPDIR of this test's own (for it and the commands it starts), so that the unboxed
    folders it counts are its runs' alone: in /tmp, another worker's fallback run was counted.
    Searchable by all (0711, as /tmp is): the leased uid reaches its private folder in it."""
    folder = Path(tempfile.mkdtemp(prefix="edu-dl-test-tmp-"))
    folder.chmod(0o711)
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run(argv: list[str], tmp_path: Path, reachable: bool = False) -> subprocess.CompletedProcess:
    """An edu-dl command line where bwrap is hidden (root: the real mount namespace)."""
    env = {**os.environ, "TQDM_DISABLE": "1", "EDU_DL_CACHE": str(tmp_path / "cache")}
    return subprocess.run(no_bwrap.hide_bwrap([EDU_DL, *argv], tmp_path / "stash", reachable),
                          capture_output=True, text=True, env=env, timeout=600)


def one_sentence(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert lines[0].count(". ") == 0 and lines[0].endswith("."), text
    return lines[0]


# --------------------------------------------------------------------------- as root


@pytest.mark.root_only
def test_grade_and_assign_refuse_where_bwrap_is_hidden(tmp_path: Path) -> None:
    """The issue's reproduction: bwrap covered by /dev/null in a private mount namespace."""
    if no_bwrap.available():
        pytest.fail(no_bwrap.available())  # root_only: root has unshare here (make system-deps)
    (tmp_path / "stash").mkdir()
    marker, source_marker = tmp_path / "marker", tmp_path / "source" / "marker"
    subs, source = course(tmp_path, [Path("/root/x"), marker, source_marker])
    out, exercises = tmp_path / "grades", tmp_path / "exercises"
    before = tree(tmp_path)
    for extra in ([], ["--rotate-secret"], ["--local-cluster", "1"]):
        done = run(["grade", str(subs), "--source", str(source), "--out", str(out), *FAST,
                    *extra], tmp_path)
        assert done.returncode == 2, done
        said = one_sentence(done.stderr)
        assert said.startswith("edu-dl grade: refusing to run notebooks without the sandbox")
        assert "apt-get install bubblewrap" in said and NO_SANDBOX in said, said
        assert done.stdout == ""
    done = run(["assign", str(source), str(exercises)], tmp_path)
    assert done.returncode == 2, done
    said = one_sentence(done.stderr)
    assert "apt-get install bubblewrap" in said and NO_SANDBOX in said, said
    # Nothing written: no gradebook, no secret, no release, no marker, not a byte changed.
    assert tree(tmp_path) == before
    assert not out.exists() and not exercises.exists() and not (tmp_path / "cache").exists()
    assert not marker.exists() and not source_marker.exists() and not Path("/root/x").exists()


@pytest.mark.root_only
def test_no_sandbox_as_root_runs_students_as_an_unprivileged_uid(tmp_path: Path,
                                                                 own_tmpdir: Path) -> None:
    """With the opt-in the batch runs, labelled, and the student's code runs as a leased uid:
    it cannot write root's files, the grading folder or anything above its private folder."""
    if no_bwrap.available():
        pytest.fail(no_bwrap.available())
    (tmp_path / "stash").mkdir()
    out = tmp_path / "grades"
    out.mkdir()
    targets = [Path("/root/x"), tmp_path / "marker", out / "grades.csv", Path("/etc/x")]
    subs, source = course(tmp_path, targets)
    before = unboxed_folders()
    done = run(["grade", str(subs), "--source", str(source), "--out", str(out), *FAST,
                NO_SANDBOX], tmp_path, reachable=True)
    assert done.returncode == 0, done
    assert "sandbox: NONE" in done.stdout and "none (--no-sandbox)" in done.stdout, done.stdout
    assert "as an unprivileged uid of their own" in done.stdout
    rows = (out / "grades.csv").read_text().splitlines()[1:]
    assert rows and all(",none (--no-sandbox)," in row for row in rows), rows
    assert sum(row.startswith("alice,") and ",1.0,1.0,passed," in row for row in rows) == 2
    said = printed(out, "mallory")
    uid = int(said.split("UID ", 1)[1].split()[0])
    assert sandbox.UID_BASE <= uid < sandbox.UID_BASE + sandbox.UID_SPAN, said
    assert "WROTE" not in said and said.count("DENIED") == len(targets), said
    assert not (tmp_path / "marker").exists() and not Path("/etc/x").exists()
    assert unboxed_folders() == before  # its private folder was removed
    assert corpus.sandbox_processes(GROUP) == []


@pytest.mark.root_only
def test_validate_where_bwrap_is_hidden(tmp_path: Path) -> None:
    """A student validating their own notebook is not refused: the fallback runs, says so, and
    (as root) as an unprivileged uid. Against an instructor's --source the notebook is someone
    else's: refused as grade refuses, unless --no-sandbox."""
    from fixtures import nbgrader_course

    if no_bwrap.available():
        pytest.fail(no_bwrap.available())
    (tmp_path / "stash").mkdir()
    subs, source = course(tmp_path, [tmp_path / "marker"])
    mallory = [str(subs / "mallory" / f"{corpus.EXERCISE}.ipynb"),
               "--source", str(source / f"{corpus.EXERCISE}.ipynb"), "--timeout", "20"]
    done = run(["validate", *mallory], tmp_path, reachable=True)
    assert done.returncode == 2, done
    said = one_sentence(done.stderr)
    assert said.startswith("edu-dl validate: refusing to run notebooks without the sandbox")
    assert NO_SANDBOX in said and done.stdout == "", done
    assert not (tmp_path / "marker").exists()

    done = run(["validate", *mallory, NO_SANDBOX], tmp_path, reachable=True)
    assert "NOT isolated: bubblewrap (bwrap) is not installed" in done.stdout.splitlines()[0], done
    assert done.returncode == 0, done  # the solved notebook passes, fallback or not
    assert not (tmp_path / "marker").exists()  # a leased uid, not root

    src, _ = nbgrader_course.build(tmp_path / "nbgrader")
    own = src / f"{nbgrader_course.NOTEBOOK}.ipynb"
    done = run(["validate", str(own), "--timeout", "20"], tmp_path, reachable=True)
    assert "NOT isolated: bubblewrap (bwrap) is not installed" in done.stdout.splitlines()[0], done
    assert done.returncode == 0, done


# --------------------------------------------------------------------------- as a user


def ordinary_user() -> None:
    if os.geteuid() == 0:
        pytest.skip("root's path is the mount-namespace tests above; make test-unprivileged "
                    "runs this one as an ordinary user")


def test_an_ordinary_user_is_refused_too_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bubblewrap (bwrap) is not "
                        "installed (Debian/Ubuntu: apt-get install bubblewrap)")
    subs, source = course(tmp_path, [tmp_path / "marker"])
    before = tree(tmp_path)
    with pytest.raises(NoSandbox) as refused:
        G.grade(subs, source, tmp_path / "grades", settings=Settings(), progress=False)
    one_sentence(str(refused.value))
    assert NO_SANDBOX in str(refused.value) and "apt-get install" in str(refused.value)
    assert tree(tmp_path) == before and not (tmp_path / "grades").exists()


def test_no_sandbox_as_an_ordinary_user_runs_as_that_user_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ordinary_user()
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    subs, source = course(tmp_path, [tmp_path / "marker"])
    out = tmp_path / "grades"
    messages: list[str] = []
    summary = G.grade(subs, source, out, settings=Settings(
        timeout_s=20, budget_s=60, memory_mb=2048, without_sandbox=NO_SANDBOX),
        progress=False, log=messages.append, jobs=2)
    label = f"none ({NO_SANDBOX}, as uid {os.getuid()})"
    assert {r.sandbox for r in summary.rows} == {label}
    assert any("WITHOUT a sandbox" in m and f"as you (uid {os.getuid()})" in m
               for m in summary.notes), summary.notes
    warned = [m for m in messages if "can read the grading secret" in m]
    assert len(warned) == 1, messages  # once per batch, not per submission
    assert "can read the grading secret" in summary_text(summary)
    said = printed(out, "mallory")
    assert f"UID {os.getuid()}" in said
    assert (tmp_path / "marker").exists()  # as the user: exactly what the opt-in gives up
    assert corpus.sandbox_processes(GROUP) == []


def test_validate_without_bwrap_runs_the_labelled_fallback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Where bwrap does not work (macOS), validate grades one's own notebook all the same and
    says it is unisolated; against an instructor's source it refuses without the opt-in (root's
    path: test_validate_where_bwrap_is_hidden)."""
    ordinary_user()
    from fixtures import nbgrader_course as course

    from edu_dl.grading.term.validate import validate

    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    src, root = course.build(tmp_path / "course")
    carol = root / "submitted" / "carol" / course.ASSIGNMENT / f"{course.NOTEBOOK}.ipynb"
    before = tree(tmp_path)
    with pytest.raises(NoSandbox) as refused:
        validate(carol, timeout=30, progress=False, source=src)
    assert NO_SANDBOX in one_sentence(str(refused.value))
    assert tree(tmp_path) == before

    messages: list[str] = []
    report = validate(carol, timeout=30, progress=True, source=src, log=messages.append,
                      without_sandbox=NO_SANDBOX)
    assert capsys.readouterr().err.startswith("running your notebook WITHOUT the sandbox")
    assert report.sandbox == "NOT isolated: bwrap is not installed"
    assert "WITHOUT a sandbox" in messages[0]
    assert "NOT isolated" in str(report).splitlines()[0]
    assert {p.part_id: p.points for p in report.parts if not p.later} == {
        k: v for k, v in course.EXPECTED["carol"].items() if v is not None}

    own = validate(src / f"{course.NOTEBOOK}.ipynb", timeout=30, progress=False)
    assert own.sandbox == "NOT isolated: bwrap is not installed" and own.ok, str(own)


def test_speed_measurements_fail_closed_and_fall_back_as_the_user(
        monkeypatch: pytest.MonkeyPatch, own_tmpdir: Path) -> None:
    """A speed task runs the student's function too (in sandboxes of its own, on this machine
    even with a cluster): refused without the sandbox, and with the opt-in run as the user in
    a private folder per run, the same measurement."""
    from edu_dl.grading.stages import speed

    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    solution = (Path(__file__).resolve().parents[2] / "fixtures" / "speed"
                / "solution.py").read_text()
    with pytest.raises(NoSandbox):
        speed.measure("ex02.faster_standardize", solution, seed=11, rounds=1, calls=30)
    ordinary_user()
    before = unboxed_folders()
    found = speed.measure("ex02.faster_standardize", solution, seed=11, rounds=1, calls=30,
                          settings=Settings(without_sandbox=NO_SANDBOX))
    assert found.correct and len(found.submission_s) == 1, found
    assert unboxed_folders() == before
