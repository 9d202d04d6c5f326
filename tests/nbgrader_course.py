"""An nbgrader course as an instructor writes it (schema 3, no edu_dl anywhere), four students'
submissions of it, and nbgrader 0.9 itself to grade it: the test fixture that proves (tests) and
measures (``tests/bench_grading.py --nbgrader``) that edu-dl grades such a course as nbgrader does.

The source has assert-style test cells (one with hidden tests), a solution cell with BEGIN/END
SOLUTION and one without, a partial-credit test cell, a graded code answer, a Markdown answer
and a task. The students: alice solves everything; bob's ``double`` writes to stderr (nbgrader
scores every test cell that shows it 0) and leaves both answers untouched; carol gets
``squares`` wrong (partial credit) and edits its test cell into ``pass``; dave deletes a test
cell and gets ``double`` wrong.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ASSIGNMENT, NOTEBOOK = "ps1", "problem1"
STUDENTS = ("alice", "bob", "carol", "dave")


def _meta(gid: str, *, grade: bool = False, solution: bool = False, locked: bool = False,
          task: bool = False, points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": gid, "locked": locked, "schema_version": 3,
            "solution": solution, "task": task}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _code(source: str, **meta: object) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata=_meta(**meta))  # type: ignore[arg-type]


def _md(source: str, **meta: object) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(source, metadata=_meta(**meta))  # type: ignore[arg-type]


SQUARES = ("def squares(n):\n    \"\"\"The squares of 1..n.\"\"\"\n    ### BEGIN SOLUTION\n"
           "    return [i * i for i in range(1, n + 1)]\n    ### END SOLUTION")
DOUBLE = "def double(x):\n    return 2 * x"  # a solution cell without markers: replaced whole
EXPLAIN = ("def explain():\n    \"\"\"Why is squares O(n)?\"\"\"\n    ### BEGIN SOLUTION\n"
           "    return 'one multiplication per element'\n    ### END SOLUTION")


def source() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Problem 1: squares and doubles"),
        _code(SQUARES, gid="squares", solution=True),
        _code("assert squares(3) == [1, 4, 9]\n### BEGIN HIDDEN TESTS\n"
              "assert squares(1) == [1]\n### END HIDDEN TESTS",
              gid="test_squares", grade=True, locked=True, points=2),
        _code(DOUBLE, gid="double", solution=True),
        _code("assert double(2) == 4", gid="test_double", grade=True, locked=True, points=1),
        _code("assert double(3) == 6\nassert double(-1) == -2", gid="test_double_more",
              grade=True, locked=True, points=1),
        _code("score = 0.0\nscore += 1.5 * (squares(2) == [1, 4])\n"
              "score += 1.5 * (double(0.5) == 1.0)\nscore", gid="test_partial", grade=True,
              locked=True, points=3),
        _code(EXPLAIN, gid="explain", grade=True, solution=True, points=2),
        _md("Squares grow as n²: **one multiplication per element**.", gid="why",
            grade=True, solution=True, points=2),
        _md("Plot the squares of 1..10 and describe the curve.", gid="plot_task", task=True,
            locked=True, points=1),
    ]
    return nb


def released() -> nbformat.NotebookNode:
    """The student version, as `edu-dl assign` (and nbgrader generate_assignment) writes it."""
    from edu_dl.grading.assign import student_version

    return student_version(source())


def _cell(nb: nbformat.NotebookNode, gid: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


def submission(student: str) -> nbformat.NotebookNode:
    nb = released()
    _cell(nb, "squares").source = SQUARES.split("    ### BEGIN")[0] + \
        "    return [i * i for i in range(1, n + 1)]"
    _cell(nb, "double").source = DOUBLE
    _cell(nb, "explain").source = EXPLAIN.replace("### BEGIN SOLUTION\n", "").replace(
        "    ### END SOLUTION", "")
    _cell(nb, "why").source = "One multiplication for each of the n elements."
    if student == "bob":
        _cell(nb, "double").source = ("import sys\n\ndef double(x):\n"
                                      "    print('doubling', x, file=sys.stderr)\n"
                                      "    return 2 * x")
        released_nb = released()
        for gid in ("explain", "why"):
            _cell(nb, gid).source = _cell(released_nb, gid).source
    elif student == "carol":
        _cell(nb, "squares").source = ("def squares(n):\n"
                                       "    return [i * i for i in range(n)]")
        _cell(nb, "test_squares").source = "pass"
    elif student == "dave":
        _cell(nb, "double").source = "def double(x):\n    return x"
        nb.cells = [c for c in nb.cells
                    if c.metadata.get("nbgrader", {}).get("grade_id") != "test_double"]
    return nb


def build(root: Path) -> tuple[Path, Path]:
    """source/<assignment>/<notebook>.ipynb and submitted/<student>/<assignment>/..., as in
    an nbgrader course folder; returns (source folder of the assignment, course root)."""
    src = root / "source" / ASSIGNMENT
    src.mkdir(parents=True)
    nbformat.write(source(), src / f"{NOTEBOOK}.ipynb")
    for student in STUDENTS:
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(submission(student), folder / f"{NOTEBOOK}.ipynb")
    return src, root


# Per cell: the points nbgrader 0.9's determine_grade gives (None: needs a person), as read
# from its code; tests/test_nbgrader_course.py also checks them against nbgrader itself.
EXPECTED: dict[str, dict[str, float | None]] = {
    "alice": {"test_squares": 2, "test_double": 1, "test_double_more": 1, "test_partial": 3,
              "explain": None, "why": None},
    # stderr in every cell that calls double: 0; both answers untouched: 0, no person needed
    "bob": {"test_squares": 2, "test_double": 0, "test_double_more": 0, "test_partial": 0,
            "explain": 0, "why": 0},
    # squares wrong: its test fails (restored despite the edit); partial credit 1.5 of 3
    "carol": {"test_squares": 0, "test_double": 1, "test_double_more": 1, "test_partial": 1.5,
              "explain": None, "why": None},
    # the deleted test cell is restored and fails like the others on double
    "dave": {"test_squares": 2, "test_double": 0, "test_double_more": 0, "test_partial": 1.5,
             "explain": None, "why": None},
}


# --------------------------------------------------------------------------- nbgrader itself

NBGRADER = "nbgrader>=0.9,<0.10"


class NbgraderUnavailable(RuntimeError):
    """nbgrader could not be installed into its own environment (no registry, say)."""


def nbgrader_venv(cache_dir: Path) -> Path:
    """A virtual environment with nbgrader 0.9 (created once, from the package registry: it is
    never installed beside the course), returned as its bin folder."""
    bin_dir = cache_dir.resolve() / "bin"  # absolute: nbgrader runs in the course folder
    if (bin_dir / "nbgrader").exists():
        return bin_dir
    shutil.rmtree(cache_dir, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(cache_dir)], check=True, timeout=300)
    install = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", NBGRADER],
                             capture_output=True, text=True, timeout=900, check=False)
    if install.returncode != 0:
        raise NbgraderUnavailable(f"could not install {NBGRADER}:\n{install.stderr[-3000:]}")
    return bin_dir


def run_nbgrader(bin_dir: Path, root: Path, *argv: str) -> float:
    """``nbgrader ARGV`` in the course folder ``root``; returns its wall time in seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"  # it creates its gradebook with alembic
    start = time.perf_counter()
    done = subprocess.run([str(bin_dir / "nbgrader"), *argv], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"nbgrader {' '.join(argv)} failed:\n{tail}")
    return time.perf_counter() - start


def autograde(bin_dir: Path, root: Path) -> float:
    """nbgrader's generate_assignment, then its autograde of every submission of the course at
    ``root``; returns autograde's seconds. Deleted test cells are restored, as edu-dl does."""
    run_nbgrader(bin_dir, root, "generate_assignment", ASSIGNMENT, "--force")
    return run_nbgrader(bin_dir, root, "autograde", ASSIGNMENT, "--force",
                        "--OverwriteCells.add_missing_cells=True")
