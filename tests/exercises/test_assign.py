"""edu-dl assign: exercises/ is what solutions/ generates, byte for byte; mistakes are caught."""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat
import pytest
from fixtures.exercise_helpers import all_course_parts
from nbformat.v4 import new_code_cell, new_notebook

from edu_dl.cli import main
from edu_dl.grading import nbgrader
from edu_dl.grading import notebooks as nbs
from edu_dl.grading.authoring import release
from edu_dl.grading.nbgrader import AssignError, student_version
from edu_dl.grading.term.assign import assign, lint

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
COURSE = {p.id: p for p in all_course_parts()}  # the course's parts, as lint gets them


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_exercises_are_exactly_what_assign_generates(tmp_path: Path):
    written = assign(SOLUTIONS, tmp_path)
    expected = {p.relative_to(tmp_path).as_posix(): p.read_bytes() for p in written}
    committed = {p.relative_to(EXERCISES).as_posix(): p.read_bytes()
                 for p in EXERCISES.rglob("*") if p.is_file()
                 and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts}
    # the notebooks, one release per exercise with parts (data only, no Python), and the
    # students' own package, its solution regions stubbed
    exercises = sorted({p.name.split(".")[0] for p in SOLUTIONS.glob("parts/*.py")})
    assert sorted(committed) == sorted(
        [p.name for p in SOLUTIONS.glob("*.ipynb")]
        + [f"parts/{name}.npz" for name in exercises]
        + [f"mytorch/{p.name}" for p in SOLUTIONS.glob("mytorch/*.py")]) == sorted(expected)
    stale = [name for name in expected if committed[name] != expected[name]
             and not (name.endswith(".npz") and release.same(committed[name], expected[name]))]
    assert not stale, f"out of date: {stale}; run: edu-dl assign solutions/ exercises/"


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_cli_check_mode(tmp_path: Path, capsys):
    assert main(["assign", str(SOLUTIONS), str(EXERCISES), "--check"]) == 0
    assert main(["assign", str(SOLUTIONS), str(tmp_path), "--check"]) == 1  # nothing there yet
    assert not list(tmp_path.iterdir())  # --check writes nothing
    # (the solutions' own run against their tests: tests/exercises/test_solution_run.py)
    assert main(["assign", str(SOLUTIONS), str(tmp_path), "--no-run-solutions"]) == 0
    assert main(["assign", str(SOLUTIONS), str(tmp_path), "--no-run-solutions"]) == 0
    assert "is up to date" in capsys.readouterr().out


def solution_nb() -> nbformat.NotebookNode:
    meta = {"grade": False, "grade_id": "relu_backward", "locked": False, "schema_version": 3,
            "solution": True, "task": False}
    test_meta = {"grade": True, "grade_id": "relu_backward_tests", "locked": True, "points": 1,
                 "schema_version": 3, "solution": False, "task": False}
    solution = new_code_cell(
        "def relu_backward(dout, x):\n    y = 1\n    ### BEGIN SOLUTION\n"
        "    return dout * (x > 0)\n    ### END SOLUTION", metadata={"nbgrader": meta},
        execution_count=3, outputs=[nbformat.v4.new_output("stream", text="x")])
    test = new_code_cell(
        'check("ex08.relu_backward", relu_backward);\n### BEGIN HIDDEN TESTS\n'
        'check("ex08.relu_backward", relu_backward, hidden=True);\n### END HIDDEN TESTS',
        metadata={"nbgrader": test_meta, "execution": {"iopub.status.idle": "2026"}})
    return new_notebook(cells=[new_code_cell("from edu_dl.grading import check"), solution, test])


def test_student_version_cell_by_cell():
    nb = solution_nb()
    before = copy.deepcopy(nb)
    student = student_version(nb)
    assert nb == before  # the source is untouched
    code, solution, test = student.cells
    assert solution.source == ("def relu_backward(dout, x):\n    y = 1\n    # YOUR CODE HERE\n"
                               "    raise NotImplementedError()")
    assert solution.outputs == [] and solution.execution_count is None
    assert test.source == 'check("ex08.relu_backward", relu_backward);'
    assert "execution" not in test.metadata
    assert test.metadata.deletable is False and test.metadata.editable is False
    assert solution.metadata.deletable is False and "editable" not in solution.metadata
    assert "editable" not in code.metadata and "nbgrader" not in code.metadata
    # nbgrader's metadata is kept, with its checksum of the student version added
    assert test.metadata.nbgrader.points == 1 and test.metadata.nbgrader.cell_type == "code"
    assert test.metadata.nbgrader.checksum == nbgrader.checksum(test)
    assert lint(nb, "notebook", COURSE) == []


@pytest.mark.parametrize(("edit", "message"), [
    (lambda nb: setattr(nb.cells[1], "source", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION"),
     "top level of the cell"),
    (lambda nb: setattr(nb.cells[1], "source", "def f():\n    return 1"),
     "without a '### BEGIN SOLUTION' region"),
    (lambda nb: nb.cells[2].metadata.nbgrader.update(points=3),
     "worth 3 points but part ex08.relu_backward has points=1"),
    (lambda nb: setattr(nb.cells[2], "source", 'check("ex08.relu_backwards", f)'),
     "no part 'ex08.relu_backwards'"),
    (lambda nb: setattr(nb.cells[2], "source", "assert True"),
     "exactly one part"),
    (lambda nb: nb.cells[2].metadata.nbgrader.update(grade_id="relu_backward"),
     "grade_id used by 2 cells"),
    (lambda nb: nb.cells[2].metadata.nbgrader.update(schema_version=1),
     "schema_version must be 3"),
])
def test_lint_catches_authoring_mistakes(edit, message):
    nb = solution_nb()
    edit(nb)
    problems = lint(nb, "demo.ipynb", COURSE)
    assert any(message in p for p in problems), problems


def test_the_student_version_keeps_the_budget_and_drops_the_digests():
    """The course code's digests stay with the solution; a budget ships, so that a student's
    validate judges the notebook's cost as the grader does."""
    nb = solution_nb()
    nb.metadata["edu_dl"] = {"sources": {"edu_dl/ops.py": "0" * 16},
                             "budget": {"points": 1, "cpu_s": 30}}
    assert student_version(nb).metadata["edu_dl"] == {"budget": {"points": 1, "cpu_s": 30}}
    del nb.metadata["edu_dl"]["budget"]
    assert "edu_dl" not in student_version(nb).metadata


@pytest.mark.parametrize(("cell", "message"), [
    (new_code_cell("x = 1\n### BEGIN HIDDEN TESTS\nassert x\n### END HIDDEN TESTS"),
     "hidden tests in a cell that is not a graded test cell"),
    (new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
     "not marked as a solution cell"),
    (new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1"), "no matching"),
])
def test_student_version_refuses_misplaced_markers(cell, message):
    with pytest.raises(nbs.NotebookError, match=message):
        student_version(new_notebook(cells=[cell]))


def test_assign_writes_nothing_when_any_notebook_is_broken(tmp_path: Path):
    src, out = tmp_path / "solutions", tmp_path / "exercises"
    good, bad = solution_nb(), solution_nb()
    bad.cells[2].metadata.nbgrader["points"] = 5
    nbs.write_notebook(good, src / "01_good.ipynb")
    nbs.write_notebook(bad, src / "02_bad.ipynb")
    with pytest.raises(AssignError, match=r"02_bad\.ipynb: cell 2"):
        assign(src, out)
    assert not out.exists()
    (src / "02_bad.ipynb").write_text("not json")
    assert main(["assign", str(src), str(out)]) == 2


def test_every_part_is_used_by_a_solutions_notebook():
    used = {part for path in SOLUTIONS.glob("*.ipynb")
            for cell in nbs.read_notebook(path).cells if nbgrader.is_grade(cell)
            for part in nbgrader.check_calls(cell.source)}
    assert {p.id for p in all_course_parts()} == used


def test_the_exercise_drops_the_solutions_execution_digest() -> None:
    """metadata.edu_dl records the code that executed the solution (make notebooks); an exercise
    is never executed, so it carries none, and re-running a solution leaves it unchanged."""
    from edu_dl.grading.nbgrader import student_version

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Exercise 1. x")])
    nb.metadata["edu_dl"] = {"sources": {"edu_dl/notebook/lecture.py": "0" * 16}}
    nb.metadata["kernelspec"] = {"name": "python3"}
    out = student_version(nb)
    assert "edu_dl" not in out.metadata and out.metadata["kernelspec"] == {"name": "python3"}
    assert "edu_dl" in nb.metadata  # the solution itself is untouched


def _with_package(folder: Path, modules: dict[str, str]) -> Path:
    """A source folder: one notebook whose students write the package ``kit``, and the
    instructor's ``kit/`` beside it."""
    folder.mkdir()
    answer = {"grade": False, "grade_id": "use", "locked": False, "schema_version": 3,
              "solution": True, "task": False}
    test = {"grade": True, "grade_id": "use_test", "locked": True, "points": 1,
            "schema_version": 3, "solution": False, "task": False}
    nb = new_notebook(cells=[
        new_code_cell("def quadruple(x):\n    ### BEGIN SOLUTION\n    from kit.ops import double"
                      "\n\n    return double(double(x))\n    ### END SOLUTION",
                      metadata={"nbgrader": answer}),
        new_code_cell("assert quadruple(1) == 4", metadata={"nbgrader": test})])
    nb.metadata["edu_dl"] = {"package": "kit"}
    nbformat.write(nb, folder / "hw.ipynb")
    (folder / "kit").mkdir()
    for name, text in modules.items():
        (folder / "kit" / name).write_text(text)
    return folder


def test_a_students_package_that_marks_its_answers_is_released_stubbed(tmp_path: Path):
    source = _with_package(tmp_path / "source", {
        "__init__.py": '"""The kit."""\n',
        "ops.py": ("def double(x):\n    \"\"\"2 x.\"\"\"\n    ### BEGIN SOLUTION\n"
                   "    return 2 * x\n    ### END SOLUTION\n")})
    warnings: list[str] = []
    assign(source, tmp_path / "release", warnings=warnings)
    assert warnings == []
    assert (tmp_path / "release" / "kit" / "__init__.py").read_text() == '"""The kit."""\n'
    assert (tmp_path / "release" / "kit" / "ops.py").read_text() == (
        "def double(x):\n    \"\"\"2 x.\"\"\"\n    # YOUR CODE HERE\n"
        "    raise NotImplementedError('double in kit/ops.py is not written yet')\n")


def test_a_students_package_without_a_marked_answer_stays_out(tmp_path: Path):
    """No region anywhere: the package is the instructor's answer, never released."""
    source = _with_package(tmp_path / "source", {"ops.py": "def double(x):\n    return 2 * x\n"})
    warnings: list[str] = []
    assign(source, tmp_path / "release", warnings=warnings)
    assert not (tmp_path / "release" / "kit").exists()
    assert [w.split(":")[0] for w in warnings] == ["kit/ beside the source is not released"]


def test_a_package_region_left_open_refuses_naming_the_file(tmp_path: Path):
    source = _with_package(tmp_path / "source", {
        "ops.py": "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n"})
    with pytest.raises(AssignError, match=r"kit/ops\.py"):
        assign(source, tmp_path / "release")
    assert not (tmp_path / "release").exists()
