"""An instructor's own course outside the repository: files beside the source notebooks reach the
sandbox read-only, and nothing else of the source folder does (no part spec, no notebook)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest
from fixtures import graded_course as batches
from fixtures.nbgrader_course import _code
from fixtures.squares import squares_part_file

from edu_dl.grading import model, nbgrader, sandbox
from edu_dl.grading import notebooks as nbs
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import load
from edu_dl.grading.term import batch as G
from edu_dl.grading.term.validate import validate

FAST = Settings(timeout_s=30, memory_mb=2048)

# The student's code lists everything it can see under /tmp and reads every file there: the
# test then asserts which names reached the sandbox. The software shown read-only (a CI clone
# under /tmp holds the venv: thousands of files, past the output cap) is left out of the walk.
LISTING = """
import json, os
seen = {}
SOFTWARE = SOFTWARE_PATHS
for top in ("/tmp",):
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in SOFTWARE]
        for name in files:
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    seen[path] = f.read(64).decode("latin-1")
            except OSError as exc:
                seen[path] = f"unreadable: {exc}"
print("LISTING " + json.dumps(seen))
""".replace("SOFTWARE_PATHS", repr([str(p) for p in sandbox.software()]))


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, f"pytest{os.getpid()}-")


def _source(folder: Path) -> None:
    """source/hw1/: one notebook, its data, a second notebook, part specs, ignored files."""
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("def mean(path):\n    ### BEGIN SOLUTION\n    import csv\n"
              "    rows = list(csv.reader(open(path)))\n"
              "    return sum(float(r[0]) for r in rows) / len(rows)\n    ### END SOLUTION",
              gid="mean", solution=True),
        _code("assert mean('data/values.csv') == 2.0\n"
              "assert open('notes.txt').read() == 'beside the notebook\\n'",
              gid="test_mean", grade=True, locked=True, points=1),
        _code("with open('notes.txt', 'a') as f:\n    f.write('student was here')",
              gid="write_attempt", grade=True, locked=True, points=1),
    ]
    nbformat.write(nb, folder / "hw1.ipynb")
    other = nbformat.v4.new_notebook()
    other.cells = [nbformat.v4.new_code_cell("SECRET_OTHER_NOTEBOOK = 1")]
    nbformat.write(other, folder / "answers_key.ipynb")
    (folder / "data").mkdir()
    (folder / "data" / "values.csv").write_text("1\n2\n3\n")
    (folder / "notes.txt").write_text("beside the notebook\n")
    (folder / "parts").mkdir()
    (folder / "parts" / "hw1.py").write_text("PARTS = []  # PUBLIC_PART_FILE\n")
    (folder / "parts" / "hw1.private.py").write_text("PARTS = []  # PRIVATE_PART_FILE\n")
    for ignored in (".ipynb_checkpoints/hw1-checkpoint.ipynb", "__pycache__/x.cpython-311.pyc",
                    "feedback/old.html", "stale.pyc"):
        (folder / ignored).parent.mkdir(exist_ok=True)
        (folder / ignored).write_text("IGNORED_FILE")
    os.symlink("/etc/hostname", folder / "link.txt")


def _listing(out: Path, student: str, name: str = "hw1") -> dict[str, str]:
    nb = nbs.read_notebook(out / "autograded" / student / name / f"{name}.ipynb")
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = str(output.get("text", ""))
            if text.startswith("LISTING "):
                return dict(json.loads(text[len("LISTING "):]))
    raise AssertionError("the student's listing did not run")


def test_read_beside_skips_notebooks_parts_ignored_and_links(tmp_path: Path) -> None:
    _source(tmp_path / "hw1")
    assert sorted(load.read_beside(tmp_path / "hw1")) == ["data/values.csv", "notes.txt"]


def test_dotted_names_left_out_are_listed_but_not_jupyters_own(tmp_path: Path) -> None:
    """Issue 44: the line about dotted names never names a folder Jupyter or Colab made (no
    one put data there); a dotted name someone did make is still listed."""
    _source(tmp_path / "hw1")
    for made in (".virtual_documents/hw1.ipynb.py", ".config/x", ".data/table.csv", ".env"):
        (tmp_path / "hw1" / made).parent.mkdir(exist_ok=True)
        (tmp_path / "hw1" / made).write_text("x")
    dotted: list[str] = []
    assert sorted(load.read_beside(tmp_path / "hw1", dotted=dotted)) == ["data/values.csv",
                                                                        "notes.txt"]
    assert sorted(dotted) == [".data/", ".env"]


def test_read_beside_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edu_dl.cli import main

    _source(tmp_path / "hw1")
    with pytest.raises(model.NothingToGrade, match="over 1 files beside"):
        load.read_beside(tmp_path / "hw1", max_files=1)
    with pytest.raises(model.NothingToGrade, match="files beside the source notebooks"):
        load.read_beside(tmp_path / "hw1", max_files=10, max_mb=1e-5)  # about 10 bytes
    assert len(load.read_beside(tmp_path / "hw1", max_files=2)) == 2
    # The instructor sets both bounds on the command line.
    (tmp_path / "subs").mkdir()
    argv = ["grade", str(tmp_path / "subs"), "--source", str(tmp_path / "hw1"), "--out",
            str(tmp_path / "out")]
    assert main([*argv, "--max-beside-files", "1"]) == 2
    assert "over 1 files beside" in capsys.readouterr().err
    assert main([*argv, "--max-beside-mb", "0.00001"]) == 2
    assert "--max-beside-mb" in capsys.readouterr().err


def test_files_beside_the_notebook_reach_the_sandbox_read_only_and_nothing_else(
        tmp_path: Path) -> None:
    src = tmp_path / "course" / "source" / "hw1"
    _source(src)
    student = tmp_path / "course" / "submitted" / "ann" / "hw1"
    student.mkdir(parents=True)
    nb = nbs.read_notebook(src / "hw1.ipynb")
    nb.cells.append(nbformat.v4.new_code_cell(LISTING))
    nbformat.write(nb, student / "hw1.ipynb")
    out = tmp_path / "grades"
    G.grade(tmp_path / "course", src, out, settings=FAST, progress=False, log=lambda s: None)
    with open(out / "grades.csv", newline="") as f:
        got = {r["part"]: r for r in csv.DictReader(f)}
    assert got["test_mean"]["status"] == "passed", got["test_mean"]["message"]
    seen = _listing(out, "ann")
    names = {Path(p).name for p in seen}
    assert {"values.csv", "notes.txt", "notebook.ipynb"} <= names
    if not sandbox.bwrap_problem():  # in the sandbox: at /tmp/work, read-only
        assert got["write_attempt"]["status"] == "failed"
        assert "Errno" in got["write_attempt"]["message"]
        assert seen["/tmp/work/notes.txt"] == "beside the notebook\n"
        assert seen["/tmp/work/data/values.csv"] == "1\n2\n3\n"
    text = json.dumps(seen)
    for never in ("hw1.py", "hw1.private.py", "answers_key.ipynb", "hw1-checkpoint.ipynb",
                  "stale.pyc", "old.html", "link.txt"):
        assert never not in names, never
    for marker in ("PUBLIC_PART_FILE", "PRIVATE_PART_FILE", "SECRET_OTHER_NOTEBOOK",
                   "IGNORED_FILE"):
        assert marker not in text, marker


# --------------------------------------------------------------------------- private exercises

PUBLIC_PARTS = '''
import numpy as np
from edu_dl.grading import Part

# The public half of an older part file: its visible case ships as data (parts/hw2.npz).
PARTS = [Part(id="hw2.squares", points=2, cases=lambda rng, hidden: [(3,)],
              expected=lambda n: np.arange(1, n + 1) ** 2)]
'''
PRIVATE_PARTS = squares_part_file(
    "hw2.squares", "# PRIVATE_PART_FILE: hidden cases and the real oracle; never leaves the "
    "instructor's folder.")
HONEST = "def squares(n):\n    return [i * i for i in range(1, n + 1)]"
CHEAT = "def squares(n):\n    return [1, 4, 9]  # what the public case wants"


def _squares_notebook(exercise: str, arg: str, n: str, points: int) -> nbformat.NotebookNode:
    """A source notebook whose one graded part, <exercise>.squares, is checked by check():
    ``squares(arg)`` returns the squares of 1..n (``n``: how the function reads n from arg)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("from edu_dl.grading import check", gid="setup", locked=True),
        _code(f"def squares({arg}):\n    ### BEGIN SOLUTION\n"
              f"    return [i * i for i in range(1, {n} + 1)]\n    ### END SOLUTION",
              gid="squares", solution=True),
        _code(f'check("{exercise}.squares", squares)\n### BEGIN HIDDEN TESTS\n'
              f'check("{exercise}.squares", squares, hidden=True)\n### END HIDDEN TESTS',
              gid="squares_tests", grade=True, locked=True, points=points),
    ]
    return nb


def _private_course(root: Path) -> Path:
    src = root / "source" / "hw2"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "hw2.py").write_text(PUBLIC_PARTS)
    (src / "parts" / "hw2.private.py").write_text(PRIVATE_PARTS)
    (src / "img").mkdir()
    (src / "img" / "figure.png").write_bytes(b"\x89PNG figure")
    nb = _squares_notebook("hw2", "n", "n", points=2)
    nbformat.write(nb, src / "hw2.ipynb")
    return src


@pytest.mark.slow
def test_a_private_exercise_is_graded_from_a_source_outside_the_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    from edu_dl.cli import main
    from edu_dl.grading import checking

    src = _private_course(tmp_path / "course")
    release = tmp_path / "release" / "hw2"
    monkeypatch.setenv("EDU_DL_CACHE", str(tmp_path / "cache"))  # the solution's run, kept
    assert main(["assign", str(src), str(release)]) == 0
    # The release is data: the public half names no code check() needs, so it stays too.
    assert sorted(p.name for p in (release / "parts").iterdir()) == ["hw2.npz"]
    assert (release / "img" / "figure.png").read_bytes() == b"\x89PNG figure"  # as nbgrader
    # The student's check(): the public half, found beside the notebook, answers at once; it
    # cannot tell the hard-coded answer from the real one.
    monkeypatch.chdir(release)
    namespace: dict[str, object] = {}
    exec(CHEAT, namespace)
    assert checking.check("hw2.squares", namespace["squares"])
    assert "✓ hw2.squares" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    for student, code in (("honest", HONEST), ("cheat", CHEAT)):
        nb = nbs.read_notebook(release / "hw2.ipynb")
        next(c for c in nb.cells if nbgrader.grade_id(c) == "squares").source = code
        nb.cells.append(nbformat.v4.new_code_cell(LISTING))
        folder = tmp_path / "course" / "submitted" / student / "hw2"
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "hw2.ipynb")
    out = tmp_path / "grades"
    summary = G.grade(tmp_path / "course", src, out, settings=FAST, jobs=2, progress=False,
                      log=lambda s: None)
    got = {(r.student, r.part): r for r in summary.rows}
    assert (got[("honest", "hw2.squares")].status, got[("honest", "hw2.squares")].points) == \
        ("passed", 2.0), got
    assert (got[("cheat", "hw2.squares")].status, got[("cheat", "hw2.squares")].points) == \
        ("failed", 0.0), got
    for student in ("honest", "cheat"):  # no part file, public or private, reached a sandbox
        seen = _listing(out, student, "hw2")
        assert not {"hw2.py", "hw2.private.py"} & {Path(p).name for p in seen}
        assert "PRIVATE_PART_FILE" not in json.dumps(seen)
    # validate is the grader: against the source, the cheat fails as in the gradebook.
    from edu_dl.grading.term.validate import validate

    cheat = tmp_path / "course" / "submitted" / "cheat" / "hw2" / "hw2.ipynb"
    report = validate(cheat, timeout=30, progress=False, source=src, log=lambda s: None)
    assert [(p.part_id, p.points, p.ok) for p in report.parts] == [("hw2.squares", 0.0, False)]
    # The private half is in the resume key: changing it regrades everyone.
    assert G.grade(tmp_path / "course", src, out, settings=FAST, progress=False,
                   log=lambda s: None).graded == 0
    (src / "parts" / "hw2.private.py").write_text(PRIVATE_PARTS + "\n# harder\n")
    assert G.grade(tmp_path / "course", src, out, settings=FAST, progress=False,
                   log=lambda s: None).graded == 2


def test_a_part_file_with_a_foreign_id_or_no_parts_stops_the_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _private_course(tmp_path / "course")
    (src / "parts" / "hw2.private.py").write_text(PRIVATE_PARTS.replace('"hw2.', '"ex08.'))
    (tmp_path / "course" / "submitted" / "ann" / "hw2").mkdir(parents=True)
    with pytest.raises(model.NothingToGrade, match=r"must read 'hw2\.<name>'"):
        G.grade(tmp_path / "course", src, tmp_path / "out", settings=FAST, progress=False)
    (src / "parts" / "hw2.private.py").unlink()
    (src / "parts" / "hw2.py").unlink()
    # The grader never takes parts from its working folder (a student folder named "parts"
    # there would otherwise run on the trusted side).
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "hw2.py").write_text("raise SystemExit('student code ran')")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(model.NothingToGrade, match="no exercise 'hw2'"):
        G.grade(tmp_path / "course", src, tmp_path / "out", settings=FAST, progress=False)


# --------------------------------------------------------------------------- grading by hand


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_manual_sheet_merges_into_both_gradebooks_and_html_feedback_is_escaped(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    from fixtures import nbgrader_course as course

    from edu_dl.cli import main

    src, root = course.build(tmp_path / "course")
    for student in ("bob", "carol"):
        shutil.rmtree(root / "submitted" / student)
    dave = root / "submitted" / "dave" / course.ASSIGNMENT / f"{course.NOTEBOOK}.ipynb"
    nb = nbs.read_notebook(dave)
    next(c for c in nb.cells if nbgrader.grade_id(c) == "why").source = \
        "=HYPERLINK(1) <script>alert('why')</script>"
    nb.cells.append(nbformat.v4.new_code_cell("print('<img src=x onerror=alert(1)>')"))
    nbformat.write(nb, dave)
    out = tmp_path / "grades"
    args = ["grade", str(root), "--source", str(src), "--out", str(out), "--timeout", "30",
            "--memory", "2048", "--jobs", "2"]
    assert main(args) == 0
    sheet = _csv(out / "manual.csv")
    assert {(r["student"], r["cell"]) for r in sheet} == {
        (s, c) for s in ("alice", "dave") for c in ("explain", "why", "plot_task")}
    why = {r["student"]: r for r in sheet if r["cell"] == "why"}
    assert why["alice"]["answer"] == "One multiplication for each of the n elements."
    assert why["dave"]["answer"].startswith("'=HYPERLINK")  # spreadsheet_safe
    assert why["alice"]["max_points"] == "2" and why["alice"]["points"] == ""
    # The notebook's page: scores per graded cell, every bit of the student's text escaped,
    # and the manual sheet's link leads to the answer's banner on it.
    assert why["dave"]["page"] == \
        f"feedback/dave/{course.ASSIGNMENT}/{course.NOTEBOOK}.html#grade-why"
    page = (out / why["dave"]["page"].split("#")[0]).read_text()
    assert "<script" not in page and "<img" not in page and 'id="grade-why"' in page
    assert "&lt;script&gt;alert('why')&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page  # the executed output, escaped
    alice = out / "feedback" / "alice" / course.ASSIGNMENT / f"{course.NOTEBOOK}.html"
    assert "<b>test_squares: 2 / 2</b> (passed)" in alice.read_text()
    assert f"alice/{course.ASSIGNMENT}/{course.NOTEBOOK}.html" in \
        (out / "feedback_html" / "alice.html").read_text()  # the index links it

    def fill(lines: dict[tuple[str, str], tuple[str, str]]) -> Path:
        path = tmp_path / f"filled{len(list(tmp_path.glob('filled*.csv')))}.csv"
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(sheet[0]))
            writer.writeheader()
            for r in sheet:
                points, comment = lines.get((r["student"], r["cell"]), ("", ""))
                writer.writerow({**r, "points": points, "comment": comment})
            for (student, cell), (points, comment) in lines.items():
                if (student, cell) not in {(r["student"], r["cell"]) for r in sheet}:
                    writer.writerow({"student": student, "exercise": course.NOTEBOOK,
                                     "cell": cell, "points": points, "comment": comment})
        return path

    good = fill({("alice", "why"): ("2", "exactly"), ("alice", "explain"): ("1.5", ""),
                 ("alice", "plot_task"): ("1", "nice plot")})
    capsys.readouterr()
    assert main([*args, "--manual", str(good)]) == 0
    grades = {(r["student"], r["part"]): r for r in _csv(out / "grades.csv")}
    assert (grades[("alice", "why")]["points"], grades[("alice", "why")]["status"],
            grades[("alice", "why")]["message"]) == ("2.0", "graded by hand", "exactly")
    assert grades[("dave", "why")]["status"] == "needs manual grading"
    export = {r["student_id"]: r for r in _csv(out / "nbgrader_grades.csv")}
    assert (export["alice"]["score"], export["alice"]["max_score"]) == ("11.5", "12")
    kept = {(r["student"], r["cell"]): r for r in _csv(out / "manual.csv")}
    assert (kept[("alice", "why")]["points"], kept[("alice", "why")]["comment"]) == \
        ("2", "exactly")  # the next sheet keeps what was graded
    for lines, error in (({("alice", "why"): ("3", "")}, "outside 0..2"),
                         ({("bob", "why"): ("1", "")}, "name no row of the gradebook"),
                         ({("alice", "why"): ("two", "")}, "is not a number")):
        assert main([*args, "--manual", str(fill(lines))]) == 2
        assert error in capsys.readouterr().err
    # Alice resubmits another answer: the points given to the old one are not merged.
    assert why["alice"]["answer_id"].startswith("id-")
    alice = root / "submitted" / "alice" / course.ASSIGNMENT / f"{course.NOTEBOOK}.ipynb"
    nb = nbs.read_notebook(alice)
    next(c for c in nb.cells if nbgrader.grade_id(c) == "why").source = "Because GPUs."
    nbformat.write(nb, alice)
    assert main([*args, "--manual", str(good)]) == 0
    grades = {(r["student"], r["part"]): r for r in _csv(out / "grades.csv")}
    changed = grades[("alice", "why")]
    assert (changed["points"], changed["status"]) == ("0.0", "needs manual grading"), changed
    assert "the answer changed since it was graded by hand" in changed["message"]
    assert grades[("alice", "explain")]["status"] == "graded by hand"  # unchanged answers keep
    again = {(r["student"], r["cell"]): r for r in _csv(out / "manual.csv")}
    assert (again[("alice", "why")]["answer"], again[("alice", "why")]["points"]) == \
        ("Because GPUs.", "")
    assert again[("alice", "why")]["answer_id"] != why["alice"]["answer_id"]


# --------------------------------------------------------------------------- validate is the grader


@pytest.mark.slow
def test_validate_agrees_with_grade_on_the_nbgrader_course(
        tmp_path: Path, graded_nbgrader_course: batches.Graded) -> None:
    """The batch is conftest.py's, graded once per session (the same limits as FAST); each
    notebook validate reads is copied here first, so nothing is run in the shared folders."""
    import shutil

    from fixtures import nbgrader_course as course

    from edu_dl.grading.term.validate import validate

    src, root = graded_nbgrader_course.source, graded_nbgrader_course.submissions
    graded = {(r.student, r.part): (r.points, r.status) for r in graded_nbgrader_course.rows}
    assert {s for s, _ in graded} == set(course.STUDENTS)
    for student in course.STUDENTS:
        notebook = tmp_path / student / f"{course.NOTEBOOK}.ipynb"
        notebook.parent.mkdir()
        shutil.copy(root / "submitted" / student / course.ASSIGNMENT / notebook.name, notebook)
        report = validate(notebook, timeout=30, progress=False, source=src, log=lambda s: None)
        got = {p.part_id: (p.points, p.ok) for p in report.parts}
        want = {part: (points, status in ("passed", "needs manual grading"))
                for (s, part), (points, status) in graded.items() if s == student}
        assert got == want, student
        assert report.sandbox == ("bwrap" if not sandbox.bwrap_problem() else
                                  f"NOT isolated: {sandbox.bwrap_problem()}")
    # The instructor's own source passes (nbgrader validate says so too); people grade the rest.
    shutil.copytree(src, tmp_path / "source")
    report = validate(tmp_path / "source" / f"{course.NOTEBOOK}.ipynb", timeout=30,
                      progress=False, log=lambda s: None)
    assert report.ok and report.errors == [], str(report)
    assert report.score == (7.0, 12.0)
    assert sum(p.message == "graded by hand later" for p in report.parts) == 3


def test_stderr_dropped_by_the_output_cap_still_scores_zero_as_nbgrader(tmp_path: Path) -> None:
    src = tmp_path / "source" / "hw3"
    src.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("print('x' * 5000)  # over the output cap: later output is dropped", gid="noise",
              locked=True),
        _code("assert 1 + 1 == 2", gid="test_quiet", grade=True, locked=True, points=1),
        _code("import sys\nprint('careful', file=sys.stderr)\nassert 1 + 1 == 2",
              gid="test_warns", grade=True, locked=True, points=1),
    ]
    nbformat.write(nb, src / "hw3.ipynb")
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "subs" / "ann" / "hw3.ipynb")
    summary = G.grade(tmp_path / "subs", src, tmp_path / "out", progress=False,
                      settings=Settings(timeout_s=30, memory_mb=2048, output_cap=1000),
                      log=lambda s: None)
    got = {r.part: (r.points, r.status) for r in summary.rows}
    assert got == {"test_quiet": (1.0, "passed"), "test_warns": (0.0, "failed")}
    executed = nbs.read_notebook(tmp_path / "out" / "autograded" / "ann" / "hw3" / "hw3.ipynb")
    warns = next(c for c in executed.cells if nbgrader.grade_id(c) == "test_warns")
    assert warns.outputs == []  # the stderr output itself was cut


@pytest.mark.slow
def test_submissions_and_grades_inside_the_source_folder_never_reach_a_sandbox(
        tmp_path: Path) -> None:
    src = tmp_path / "hw1"
    _source(src)
    for student in ("ann", "bob"):
        (src / "subs" / student).mkdir(parents=True)
        nb = nbs.read_notebook(src / "hw1.ipynb")
        nb.cells.append(nbformat.v4.new_code_cell(LISTING))
        nbformat.write(nb, src / "subs" / student / "hw1.ipynb")
    (src / "subs" / "bob" / "bobs_secret.txt").write_text("BOB ONLY")
    for _ in range(2):  # the second run finds the first one's grades.csv in the source folder
        G.grade(src / "subs", src, src / "grades", settings=FAST, progress=False, force=True,
                log=lambda s: None)
    seen = _listing(src / "grades", "ann")
    names = {Path(p).name for p in seen}
    assert "notes.txt" in names
    assert not names & {"bobs_secret.txt", "grades.csv", "manual.csv", "run.json"}, names


CALL_PARTS = '''
import numpy as np

from edu_dl.grading import Part


def _as_record(n):  # a helper of the part file: it travels by value with the call
    return {"n": int(n), "unit": "squares"}


PARTS = [Part(id="hw4.squares", points=1,
              cases=lambda rng, hidden: [(3,)] if not hidden else [(int(rng.integers(4, 9)),)],
              expected=lambda n: np.arange(1, n + 1) ** 2,
              call=lambda fn, args: fn(_as_record(*args)))]
'''


def test_a_parts_own_call_runs_in_the_sandbox_without_its_file(tmp_path: Path) -> None:
    """An instructor's call= (here: the student's function takes a record, not n) is how the
    sandbox calls the function too: a plain fn(*args) would fail every case. The part file
    stays outside; the call and its helper go in pickled."""
    src = tmp_path / "source" / "hw4"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "hw4.py").write_text(CALL_PARTS)
    nb = _squares_notebook("hw4", "record", "record['n']", points=1)
    nb.cells.append(_code(LISTING, gid="listing", locked=True))
    nbformat.write(nb, src / "hw4.ipynb")
    student = tmp_path / "submitted" / "ann" / "hw4"
    student.mkdir(parents=True)
    nbformat.write(nb, student / "hw4.ipynb")
    summary = G.grade(tmp_path / "submitted", src, tmp_path / "grades", settings=FAST,
                      progress=False, log=lambda s: None)
    (row,) = [r for r in summary.rows if r.part == "hw4.squares"]
    assert (row.status, row.points) == ("passed", 1.0), row
    assert row.sandbox == "bwrap", row
    executed = nbs.read_notebook(tmp_path / "grades" / "autograded" / "ann" / "hw4" / "hw4.ipynb")
    listing = next(o.get("text", "") for c in executed.cells if nbgrader.grade_id(c) == "listing"
                   for o in c.get("outputs", []) if "LISTING" in o.get("text", ""))
    seen = json.loads(listing.split("LISTING ", 1)[1])
    assert not [p for p in seen if p.endswith("hw4.py") or "/parts/" in p], seen
    assert any(p.endswith("hw4.squares.call.pkl") for p in seen), seen  # the call alone


WITHHELD_PARTS = '''
import numpy as np

from edu_dl.grading import Part, Withheld


def _cases(rng, hidden):  # a held-out set: its signals go to the function, its labels do not
    x = rng.standard_normal(9 if hidden else 6)
    return [(x, Withheld((x > 0).astype(np.int64)))]


PARTS = [Part(id="hw5.signs", points=2, cases=_cases, expected=lambda x, labels: labels,
              arg_names=("x",))]
'''
# A locked cell: what the sandbox's inputs hold for the part, case by case (the number of values).
SEEN = """
import os
import numpy as np
from edu_dl.grading import protocol
with np.load(protocol.inputs_path(os.environ[protocol.GRADING_ENV], "hw5.signs")) as arrays:
    print("SEEN", [len(case) for case in protocol.decode_cases(arrays)])
"""


def test_withheld_labels_judge_a_hidden_case_and_never_reach_the_sandbox(tmp_path: Path) -> None:
    """A part judged against labels the student's code must not see (edu_dl.grading.Withheld):
    the right function passes the hidden case too, which only its labels can decide, and one
    right on the visible case alone fails it; the sandbox's inputs held the signals alone."""
    src = tmp_path / "source" / "hw5"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "hw5.py").write_text(WITHHELD_PARTS)
    answer = "def signs(x):\n    ### BEGIN SOLUTION\n    return (x > 0).astype(int)\n" \
             "    ### END SOLUTION"
    nb = nbformat.v4.new_notebook()
    nb.cells = [_code("from edu_dl.grading import check", gid="setup", locked=True),
                _code(answer, gid="signs", solution=True),
                _code('check("hw5.signs", signs)\n### BEGIN HIDDEN TESTS\n'
                      'check("hw5.signs", signs, hidden=True)\n### END HIDDEN TESTS',
                      gid="signs_tests", grade=True, locked=True, points=2),
                _code(SEEN, gid="seen", locked=True)]
    nbformat.write(nb, src / "hw5.ipynb")
    # bob answers the visible case (6 signals) and guesses on the hidden one (9)
    bob = "return (x > 0).astype(int) if len(x) == 6 else np.zeros(len(x), int)"
    for student, body in (("ann", "return (x > 0).astype(int)"), ("bob", bob)):
        folder = tmp_path / "submitted" / student / "hw5"
        folder.mkdir(parents=True)
        mine = nbformat.from_dict(nb)
        mine.cells[1].source = f"import numpy as np\n\ndef signs(x):\n    {body}"
        nbformat.write(mine, folder / "hw5.ipynb")
    summary = G.grade(tmp_path / "submitted", src, tmp_path / "grades", settings=FAST,
                      progress=False, log=lambda s: None)
    rows = {r.student: r for r in summary.rows if r.part == "hw5.signs"}
    assert (rows["ann"].status, rows["ann"].points) == ("passed", 2.0), rows["ann"]
    assert (rows["bob"].status, rows["bob"].points) == ("failed", 0.0), rows["bob"]
    assert "1 of 2 cases passed" in rows["bob"].message and "hidden" in rows["bob"].message, \
        rows["bob"]
    executed = nbs.read_notebook(tmp_path / "grades" / "autograded" / "ann" / "hw5" / "hw5.ipynb")
    printed = "".join(o.get("text", "") for o in executed.cells[3].get("outputs", []))
    assert "SEEN [1, 1]" in printed, printed  # the visible case and the hidden one: x alone


@pytest.mark.timing  # the verdicts rest on CPU time, measured outside the sandbox
def test_a_notebooks_budget_is_judged_from_what_the_sandbox_measured(tmp_path: Path) -> None:
    """The source's metadata edu_dl.budget gives its notebook 4 CPU seconds: a whole run that
    starts a kernel and checks one part measured 0.6 (2026-12-04), so ann is within it and
    earns its point, while bob, who also spins for 6 CPU seconds (6.7 in all), is over it by
    more than the band. Both answer the part right: only the cost tells them apart."""
    src = tmp_path / "source" / "hw6"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "hw6.py").write_text(PRIVATE_PARTS.replace("hw2", "hw6"))
    nb = _squares_notebook("hw6", "n", "n", points=2)
    nb.metadata["edu_dl"] = {"budget": {"points": 1, "cpu_s": 4}}
    nbformat.write(nb, src / "hw6.ipynb")
    spin = "import time\n_end = time.process_time() + 6\nwhile time.process_time() < _end:\n" \
           "    pass\n"
    for student, before in (("ann", ""), ("bob", spin)):
        folder = tmp_path / "submitted" / student / "hw6"
        folder.mkdir(parents=True)
        mine = nbformat.from_dict(nb)
        mine.cells[1].source = before + HONEST
        nbformat.write(mine, folder / "hw6.ipynb")
    summary = G.grade(tmp_path / "submitted", src, tmp_path / "grades", settings=FAST, jobs=2,
                      progress=False, log=lambda s: None)
    rows = {(r.student, r.part): r for r in summary.rows}
    assert rows["ann", "hw6.squares"].status == rows["bob", "hw6.squares"].status == "passed"
    ann, bob = rows["ann", "hw6.budget"], rows["bob", "hw6.budget"]
    assert (ann.status, ann.points, ann.max_points) == ("passed", 1.0, 1.0), ann
    assert (bob.status, bob.points) == ("over budget", 0.0), bob
    assert bob.message.startswith("CPU time ") and "of its 4 s (the whole notebook" in bob.message
    with open(tmp_path / "grades" / "grades.csv", newline="") as f:
        assert {row["part"] for row in csv.DictReader(f) if row["student"] == "ann"} == \
            {"hw6.squares", "hw6.budget"}
    # validate tells a student what the run cost, within the budget too
    shown = str(validate(src / "hw6.ipynb", progress=False))
    line = next(line for line in shown.splitlines() if "hw6.budget" in line)
    assert line.lstrip().startswith("✓ hw6.budget") and "CPU time " in line and "of its 4 s" in line


CAPSTONE_PARTS = '''
import numpy as np

from edu_dl.datasets import mnist1d
from edu_dl.grading import Accuracy, Part, Withheld


def _cases(rng, hidden):
    """The student's data to train on, and signals to label whose labels stay here: the
    visible case's are the public test set's, the hidden case's a new sample drawn from the
    grading secret's seed."""
    train, test = mnist1d.make(num_samples=1000)
    if hidden:
        test, _ = mnist1d.make(seed=int(rng.integers(2**31)), num_samples=600, train_split=0.5)
    return [(train.x, train.y, test.x, Withheld(test.y))]


PARTS = [Part(id="cap.classify", points=3, cases=_cases, compare=Accuracy(0.2),
              expected=lambda x_train, y_train, x_eval, y_eval: y_eval,
              arg_names=("x_train", "y_train", "x_eval"), timeout_s=60)]
'''
LOGISTIC = """from sklearn.linear_model import LogisticRegression


def fit_predict(x_train, y_train, x_eval):
    return LogisticRegression(max_iter=500).fit(x_train, y_train).predict(x_eval)"""
MAJORITY = """import numpy as np


def fit_predict(x_train, y_train, x_eval):
    return np.full(len(x_eval), np.bincount(y_train).argmax())"""


@pytest.mark.timing  # the budget row rests on CPU time (with room: the run measured 1.8 s of 60)
def test_a_capstone_is_graded_on_held_out_mnist1d_within_its_budget(tmp_path: Path) -> None:
    """The capstone's pieces together: MNIST-1D made on the grader's side, the hidden case's
    signals from the grading secret and their labels withheld, judged by Accuracy, the notebook
    within its budget. Logistic regression (about a third right, as the paper says) passes the
    0.2 line on the public test set and the hidden sample (on hidden samples of 25 seeds it got
    0.25 to 0.35: a line at 0.25 failed it on one); a model that answers the commonest
    training digit (15 of the 200 public test signals) fails, and earns no budget point for its
    cheap run."""
    src = tmp_path / "source" / "cap"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "cap.py").write_text(CAPSTONE_PARTS)
    nb = nbformat.v4.new_notebook()
    nb.metadata["edu_dl"] = {"budget": {"points": 1, "cpu_s": 60}}
    nb.cells = [_code("from edu_dl.grading import check", gid="setup", locked=True),
                _code(LOGISTIC.replace("    return", "    ### BEGIN SOLUTION\n    return")
                      + "\n    ### END SOLUTION", gid="fit_predict", solution=True),
                _code('check("cap.classify", fit_predict)\n### BEGIN HIDDEN TESTS\n'
                      'check("cap.classify", fit_predict, hidden=True)\n### END HIDDEN TESTS',
                      gid="classify_tests", grade=True, locked=True, points=3)]
    nbformat.write(nb, src / "cap.ipynb")
    for student, answer in (("ann", LOGISTIC), ("bob", MAJORITY)):
        folder = tmp_path / "submitted" / student / "cap"
        folder.mkdir(parents=True)
        mine = nbformat.from_dict(nb)
        mine.cells[1].source = answer
        nbformat.write(mine, folder / "cap.ipynb")
    summary = G.grade(tmp_path / "submitted", src, tmp_path / "grades", settings=FAST, jobs=2,
                      progress=False, log=lambda s: None)
    rows = {(r.student, r.part): r for r in summary.rows}
    ann, bob = rows["ann", "cap.classify"], rows["bob", "cap.classify"]
    assert (ann.status, ann.points) == ("passed", 3.0), ann
    assert (bob.status, bob.points) == ("failed", 0.0), bob
    assert "case 1 of 2 (x_train (800, 40), y_train (800,), x_eval (200, 40)): accuracy 0.075 " \
        "(15 of 200 right), under the 0.2 this part asks for (40 right)" in bob.message, bob
    assert rows["ann", "cap.budget"].status == "passed", rows["ann", "cap.budget"]
    assert rows["bob", "cap.budget"].status == "not measured", rows["bob", "cap.budget"]
