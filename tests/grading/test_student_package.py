"""A student's own package (issue 39, item 1): an exercise whose source notebook's metadata says
``{"edu_dl": {"package": "mini"}}`` imports the student's ``mini/`` from beside the submitted
notebook. The grader reads it with the notebook, as hostile bytes (only ``.py`` files, bounded,
never through a link), hands it to that student's sandbox alone, and keys the grade on it; the
instructor's own ``mini/`` beside the source (a reference answer) reaches no sandbox and no
release."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from fixtures.nbgrader_course import _code
from fixtures.squares import squares_part_file

from edu_dl.grading.model import NothingToGrade, Refused
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import load
from edu_dl.grading.term import batch as G
from edu_dl.grading.term.assign import assign
from edu_dl.grading.term.validate import validate
from edu_dl.grading.trust.files import read_package

FAST = Settings(timeout_s=30, memory_mb=2048)
PARTS = squares_part_file("pk.squares")
RIGHT = "def squares(n):\n    return [i * i for i in range(1, n + 1)]\n"
WRONG = "def squares(n):\n    return [i + i for i in range(1, n + 1)]\n"
ANSWER = ("def squares(n):\n    ### BEGIN SOLUTION\n    from mini.ops import squares as mine\n\n"
          "    return mine(n)\n    ### END SOLUTION")
WHOSE = ("import mini.ops\n\n"
         "print('reference' if hasattr(mini.ops, 'INSTRUCTORS_REFERENCE') else 'own')")
# What the instructor's reference holds: no submission may ever see it.
REFERENCE = "INSTRUCTORS_REFERENCE = True\n" + RIGHT


def source(folder: Path) -> Path:
    """source/pk: one part, checked on a function the notebook imports from the student's
    package; the instructor's reference package beside it."""
    (folder / "parts").mkdir(parents=True)
    (folder / "parts" / "pk.py").write_text(PARTS)
    nb = nbformat.v4.new_notebook()
    nb.metadata["edu_dl"] = {"package": "mini"}
    nb.cells = [
        _code("from edu_dl.grading import check", gid="setup", locked=True),
        _code(ANSWER, gid="squares", solution=True),
        nbformat.v4.new_code_cell(WHOSE),  # which mini/ this sandbox imports
        _code('check("pk.squares", squares)\n### BEGIN HIDDEN TESTS\n'
              'check("pk.squares", squares, hidden=True)\n### END HIDDEN TESTS',
              gid="squares_tests", grade=True, locked=True, points=2),
    ]
    nbformat.write(nb, folder / "pk.ipynb")
    package(folder / "mini", REFERENCE)
    return folder


def package(folder: Path, ops: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")
    (folder / "ops.py").write_text(ops)


def submit(subs: Path, student: str, src: Path, ops: str | None) -> Path:
    """The source's notebook as the student hands it in, with their ``mini/`` (or none)."""
    folder = subs / student
    folder.mkdir(parents=True)
    nb = nbformat.read(src / "pk.ipynb", as_version=4)
    nb.cells[1].source = "def squares(n):\n    from mini.ops import squares as mine\n\n" \
        "    return mine(n)"
    nbformat.write(nb, folder / "pk.ipynb")
    if ops is not None:
        package(folder / "mini", ops)
    return folder


# --------------------------------------------------------------------------- reading it


def test_the_package_is_its_python_files_read_bounded(tmp_path: Path) -> None:
    mine = tmp_path / "mini"
    package(mine, RIGHT)
    (mine / "nn").mkdir()
    (mine / "nn" / "__init__.py").write_text("")
    (mine / "nn" / "layers.py").write_text("LAYERS = 1\n")
    (mine / "__pycache__").mkdir()
    (mine / "__pycache__" / "ops.cpython-311.pyc").write_bytes(b"\0" * 10)
    (mine / "notes.txt").write_text("not Python")
    (mine / "not-a-module.py").write_text("no import reaches me")
    (mine / ".hidden").mkdir()
    (mine / ".hidden" / "x.py").write_text("")
    assert read_package(mine) == {"__init__.py": b"", "nn/__init__.py": b"",
                                  "nn/layers.py": b"LAYERS = 1\n", "ops.py": RIGHT.encode()}
    assert read_package(tmp_path / "absent") == {}


@pytest.mark.parametrize("plant", ["file link", "folder link", "package link", "fifo",
                                   "too many", "too big", "a file", "too many entries"])
def test_a_package_that_cannot_be_read_safely_is_refused_naming_the_path(
        tmp_path: Path, plant: str) -> None:
    mine = tmp_path / "mini"
    package(mine, RIGHT)
    secret = tmp_path / "secret.py"
    secret.write_text("ANSWER = 42\n")
    if plant == "file link":
        (mine / "leak.py").symlink_to(secret)
        said = "mini/leak.py is a symbolic link"
    elif plant == "folder link":
        (mine / "sub").symlink_to(tmp_path)
        said = "mini/sub is a symbolic link"
    elif plant == "package link":
        os.rename(mine, tmp_path / "real")
        mine.symlink_to(tmp_path / "real")
        said = "mini is a symbolic link"
    elif plant == "fifo":
        os.mkfifo(mine / "pipe.py")  # reading it would block the grader
        said = "mini/pipe.py is not a regular file"
    elif plant == "too many":
        for i in range(5):
            (mine / f"m{i}.py").write_text("")
        said = "mini/ holds over 4 Python files"
    elif plant == "too big":
        (mine / "big.py").write_bytes(b"#" * 3000)
        said = "mini/big.py is 3000 bytes, over the limit of"
    elif plant == "too many entries":  # files no import reads still cost a walk
        for i in range(20):
            (mine / f"data{i}.txt").write_text("")
        said = "mini/ holds over 16 entries"
    else:
        (mine / "ops.py").unlink()
        (mine / "__init__.py").unlink()
        mine.rmdir()
        mine.write_text("a file named like the package")
        said = "mini is not a folder"
    with pytest.raises(Refused) as caught:
        read_package(mine, max_files=4, max_bytes=2000, max_walk=16)
    assert str(caught.value).startswith(said), caught.value


@pytest.mark.parametrize("name", [3, "", "my-torch", "../x", "parts", "edu_dl", "a" * 65])
def test_a_package_name_that_is_no_package_stops_the_source(tmp_path: Path, name: object) -> None:
    src = source(tmp_path / "source" / "pk")
    nb = nbformat.read(src / "pk.ipynb", as_version=4)
    nb.metadata["edu_dl"]["package"] = name
    nbformat.write(nb, src / "pk.ipynb")
    with pytest.raises(NothingToGrade, match=r"pk\.ipynb: its metadata edu_dl\.package is"):
        load.load_source(src, log=lambda s: None)


def test_the_instructors_package_reaches_no_sandbox_and_no_release(tmp_path: Path) -> None:
    src = source(tmp_path / "source" / "pk")
    (src / "data.csv").write_text("1,2\n")  # an ordinary file beside the source: still handed in
    said: list[str] = []
    (exercise,) = load.load_source(src, log=said.append).values()
    assert exercise.package == "mini"
    assert sorted(exercise.files) == ["data.csv"]
    assert said == ["not copied into the sandboxes (each student's own comes from their "
                    "submission): mini/"]
    warnings: list[str] = []
    assign(src, tmp_path / "release" / "pk", warnings=warnings)
    released = sorted(p.relative_to(tmp_path / "release" / "pk").as_posix()
                      for p in (tmp_path / "release" / "pk").rglob("*") if p.is_file())
    assert not any(name.startswith("mini/") for name in released), released
    assert "data.csv" in released and "pk.ipynb" in released
    assert any(w.startswith("mini/ beside the source is not released") for w in warnings)
    student = nbformat.read(tmp_path / "release" / "pk" / "pk.ipynb", as_version=4)
    assert student.metadata["edu_dl"]["package"] == "mini"  # validate reads it there


# --------------------------------------------------------------------------- graded


def test_each_student_is_graded_on_their_own_package(tmp_path: Path) -> None:
    src = source(tmp_path / "source" / "pk")
    subs, out = tmp_path / "submissions", tmp_path / "grades"
    submit(subs, "right", src, RIGHT)
    submit(subs, "wrong", src, WRONG)
    submit(subs, "none", src, None)
    linked = submit(subs, "linked", src, RIGHT)
    (linked / "mini" / "answer.py").symlink_to(src / "mini" / "ops.py")
    summary = G.grade(subs, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    rows = {r.student: r for r in summary.rows}
    assert (rows["right"].status, rows["right"].points) == ("passed", 2.0), rows["right"]
    assert (rows["wrong"].status, rows["wrong"].points) == ("failed", 0.0), rows["wrong"]
    assert rows["none"].points == 0.0 and rows["none"].status != "passed", rows["none"]
    assert "mini" in rows["none"].message, rows["none"]  # No module named 'mini'
    assert rows["linked"].status == "refused", rows["linked"]
    assert "mini/answer.py is a symbolic link" in rows["linked"].message, rows["linked"]
    # Each ran its own: never the instructor's reference, which reached no sandbox.
    for student in ("right", "wrong"):
        executed = nbformat.read(out / "autograded" / student / "pk" / "pk.ipynb", as_version=4)
        printed = "".join(o.get("text", "") for o in executed.cells[2].outputs)
        assert printed == "own\n", (student, printed)

    # The package is part of what is graded: changing it alone grades that student again.
    package(subs / "wrong" / "mini", RIGHT)
    again = G.grade(subs, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    assert again.graded == 1, again
    assert {r.student: r.points for r in again.rows}["wrong"] == 2.0


def test_validate_hands_the_package_in_as_grade_does(tmp_path: Path) -> None:
    src = source(tmp_path / "source" / "pk")
    mine = submit(tmp_path / "home", "me", src, RIGHT)
    report = validate(mine / "pk.ipynb", source=src / "pk.ipynb", progress=False)
    assert report.ok, str(report)
    (mine / "mini" / "leak.py").symlink_to(src / "mini" / "ops.py")
    report = validate(mine / "pk.ipynb", source=src / "pk.ipynb", progress=False)
    assert not report.ok
    assert "mini/leak.py is a symbolic link" in str(report), str(report)
