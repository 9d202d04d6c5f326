"""A rubric for a cell graded by hand (``authoring.rubric``): read strictly from the source cell's
metadata, refused with one sentence naming the notebook and the cell, kept out of the student
version, and refused by ``assign`` and ``grade`` alike. Where the person grading sees it (the
sheet and ``edu-dl mark``): tests/grading/test_mark_browser.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from fixtures.nbgrader_course import _code, _md

from edu_dl.grading import nbgrader
from edu_dl.grading.authoring import rubric
from edu_dl.grading.authoring.rubric import Criterion
from edu_dl.grading.model import NothingToGrade
from edu_dl.grading.stages.load import load_source
from edu_dl.grading.term.assign import assign

GOOD = [{"points": 2, "criterion": "names the slowest step"},
        {"points": 1.5, "criterion": "  says what a GPU\nwould change  "}]


def answer(points: float = 3.5, meta: Any = None, **flags: Any) -> nbformat.NotebookNode:
    cell = _md("What did the profile show?\n### BEGIN SOLUTION\nThe matmuls.\n"
               "### END SOLUTION", gid="report", points=points,
               **({"grade": True, "solution": True} | flags))
    if meta is not None:
        cell.metadata["edu_dl"] = {"rubric": meta}
    return cell


def test_a_rubric_is_read_as_criteria_that_add_up_to_the_cells_points() -> None:
    assert rubric.read(answer(meta=GOOD), "nb") == (
        Criterion(2.0, "names the slowest step"), Criterion(1.5, "says what a GPU would change"))
    assert rubric.read(answer(), "nb") == ()  # none
    task = _md("Plot the loss.", gid="task", task=True, points=2)
    task.metadata["edu_dl"] = {"rubric": [{"points": 2, "criterion": "a labelled plot"}]}
    assert rubric.read(task, "nb") == (Criterion(2.0, "a labelled plot"),)
    assert rubric.as_text(rubric.read(answer(meta=GOOD), "nb")) == \
        "2 pts: names the slowest step | 1.5 pts: says what a GPU would change"


@pytest.mark.parametrize(("meta", "says"), [
    ({"points": 3.5, "criterion": "x"}, "is not a list of criteria"),
    ([], "is not a list of criteria"),
    ([{"points": 3.5}], "criterion 1 that is not an object with exactly"),
    ([{"points": 3.5, "criterion": "x", "weight": 1}], "criterion 1 that is not an object"),
    ([{"points": True, "criterion": "x"}], "criterion 1 points=True: a number above 0"),
    ([{"points": "3.5", "criterion": "x"}], "points='3.5'"),
    ([{"points": 3.5, "criterion": "x"}, {"points": 0, "criterion": "y"}], "criterion 2 points=0"),
    ([{"points": float("nan"), "criterion": "x"}], "points=nan"),
    ([{"points": 3.5, "criterion": "  "}], "criterion 1 a text that is not one printable line"),
    ([{"points": 3.5, "criterion": "x" * 501}], "of 1 to 500 characters"),
    ([{"points": 3.5, "criterion": "a\x1b[31m red"}], "not one printable line"),
    ([{"points": 0.25, "criterion": str(i)} for i in range(14)] * 2, "has 28 criteria, over"),
    ([{"points": 2, "criterion": "x"}, {"points": 1, "criterion": "y"}],
     "adds up to 3 points, but the cell is worth 3.5"),
])
def test_a_malformed_rubric_is_refused_naming_where_and_the_fix(meta: Any, says: str) -> None:
    with pytest.raises(rubric.RubricError) as caught:
        rubric.read(answer(meta=meta), "ps1.ipynb: cell 4 (report)")
    message = str(caught.value)
    assert message.startswith("ps1.ipynb: cell 4 (report): its metadata edu_dl.rubric "), message
    assert says in message and rubric.EXAMPLE in message, message


def test_only_a_cell_a_person_grades_may_have_one() -> None:
    tests = _code("assert True", gid="tests", grade=True, points=1)
    plain = nbformat.v4.new_markdown_cell("Read this.")
    autograded = _code("def f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
                       gid="f", solution=True)
    for cell in (tests, plain, autograded):
        cell.metadata["edu_dl"] = {"rubric": [{"points": 1, "criterion": "x"}]}
        with pytest.raises(rubric.RubricError, match="is on a cell no person grades"):
            rubric.read(cell, "nb")


def source(folder: Path, meta: Any) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Report"), answer(meta=meta)]
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "hw1.ipynb")
    return folder


def test_the_rubric_stays_with_the_source_and_reaches_the_grader(tmp_path: Path) -> None:
    src = source(tmp_path / "src", GOOD)
    assign(src, tmp_path / "release")
    released = nbformat.read(tmp_path / "release" / "hw1.ipynb", as_version=4)
    assert all("edu_dl" not in cell.metadata for cell in released.cells)
    assert "names the slowest step" not in (tmp_path / "release" / "hw1.ipynb").read_text()
    exercises = load_source(src)
    assert exercises["hw1"].rubrics == {"report": rubric.read(answer(meta=GOOD), "nb")}
    # The student version of a cell never depended on it: the same bytes without it.
    plain = nbformat.read(src / "hw1.ipynb", as_version=4)
    del plain.cells[1].metadata["edu_dl"]
    assert nbgrader.student_version(plain) == released


def test_assign_and_grade_refuse_a_bad_rubric_naming_the_notebook_and_the_cell(
        tmp_path: Path) -> None:
    src = source(tmp_path / "src", [{"points": 1, "criterion": "too few points"}])
    with pytest.raises(nbgrader.AssignError, match=r"hw1.ipynb: cell 1 \(report\): its metadata "
                       r"edu_dl.rubric adds up to 1 points, but the cell is worth 3.5"):
        assign(src, tmp_path / "release")
    assert not (tmp_path / "release").exists()  # nothing half written
    with pytest.raises(NothingToGrade, match=r"hw1.ipynb: cell 1 \(report\): its metadata "
                       "edu_dl.rubric adds up to 1 points"):
        load_source(src)
