"""Predict, then measure: a missing prediction shows nothing of the answer; a made one is
compared with the measurement, whatever its kind. And every exercise question that asks for a
prediction is asked this way: a prediction cell, then a cell that compares before it prints."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from edu_dl.notebook.predict import compare


def test_a_missing_prediction_hides_the_measurement(capsys: pytest.CaptureFixture[str]) -> None:
    assert not compare({"grows with the batch": (None, "activations"),
                        "grows with Adam": ("state", "state")})
    out = capsys.readouterr().out
    assert "prediction in the cell above first (grows with the batch)" in out
    assert "activations" not in out and "state" not in out  # nothing of either answer
    assert not compare({"order matters": (..., False)})


@pytest.mark.parametrize("predicted, measured, agrees", [
    ("Activations", "activations", True),
    ("state", "activations", False),
    (False, False, True),
    (0, False, False),  # a boolean question takes a boolean
    (0.5, 0.5078, False),
    ({"state", "gradients"}, ["gradients", "state"], True),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-12]), True),
    (np.array([1.0, 2.0]), np.array([1.0, 2.5]), False),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0, 3.0]), False),
])
def test_each_kind_of_prediction_is_compared(predicted: object, measured: object, agrees: bool,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert compare({"q": (predicted, measured)}, abs_tol=1e-9)
    out = capsys.readouterr().out
    assert out.startswith("✓" if agrees else "✗"), out
    if not agrees:
        assert "the measurement says" in out


def test_a_tolerance_lets_a_close_number_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare({"limit": (0.5, 0.5078)}, abs_tol=0.02)
    assert capsys.readouterr().out.startswith("✓ limit: you predicted 0.5")


def test_a_prediction_not_written_yet_is_missing() -> None:
    from edu_dl.notebook.predict import made

    def handed_out() -> str:
        raise NotImplementedError()

    assert made(handed_out) is None
    assert made(lambda: "state") == "state"


# ------------------------------------------------------------- every question checks its answer

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
# A markdown cell that asks the reader to predict what the next cells show.
ASKS = re.compile(r"\bbefore\s+(?:you\s+)?run|write your prediction", re.IGNORECASE)


def _prediction_name(cell: nbformat.NotebookNode) -> str | None:
    """The function a prediction cell defines: an ungraded nbgrader solution cell whose code is
    one function of no arguments (the student's answer, handed out raising
    NotImplementedError)."""
    meta = cell.metadata.get("nbgrader", {})
    tree = _parsed(cell)
    if tree is None or not meta.get("solution") or meta.get("grade"):
        return None
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if len(defs) != 1 or defs[0].args.args:
        return None
    return defs[0].name


def _parsed(cell: nbformat.NotebookNode | None) -> ast.Module | None:
    """A code cell's syntax tree; None for markdown, or a cell with IPython syntax (`!pip`)."""
    if cell is None or cell.cell_type != "code":
        return None
    try:
        return ast.parse(cell.source)
    except SyntaxError:
        return None


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == name]


def unchecked_questions(path: Path) -> list[str]:
    """What is wrong with each question of ``path`` that asks for a prediction: it must be followed
    by a prediction cell, and the cell after that must pass that prediction through made() to
    compare() before it prints anything."""
    cells = nbformat.read(path, as_version=4).cells
    problems = []
    for k, cell in enumerate(cells):
        if cell.cell_type != "markdown" or not ASKS.search(cell.source):
            continue
        name = _prediction_name(cells[k + 1]) if k + 1 < len(cells) else None
        if name is None:
            problems.append(f"cell {k} asks for a prediction, but cell {k + 1} is not an "
                            "ungraded solution cell defining one function of no arguments")
            continue
        tree = _parsed(cells[k + 2] if k + 2 < len(cells) else None)
        compares = _calls(tree, "compare") if tree else []
        judged = tree is not None and any(isinstance(arg, ast.Name) and arg.id == name
                                          for call in _calls(tree, "made") for arg in call.args)
        if not judged or not compares:
            problems.append(f"cell {k + 2} does not compare made({name}) with a measurement")
            continue
        # before compare(), only fixed messages ("... is not implemented yet"), no value
        first = min(call.lineno for call in compares)
        early = [call.lineno for call in _calls(tree, "print") if call.lineno < first
                 and not all(isinstance(arg, ast.Constant) for arg in call.args)]
        if early:
            problems.append(f"cell {k + 2} prints a value (line {early[0]}) before compare() "
                            f"judges {name}")
    return problems


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_each_question_is_followed_by_a_prediction_and_its_check(path: Path) -> None:
    """Issue 39: a question a cell answers is asked as a prediction (the student's function)
    which the next cell compares with what it measures before it shows anything."""
    assert not unchecked_questions(path), unchecked_questions(path)


def test_the_questions_are_found() -> None:
    """The check above looks at something: most exercises ask for predictions."""
    asking = [p.stem for p in SOLUTIONS
              if any(c.cell_type == "markdown" and ASKS.search(c.source)
                     for c in nbformat.read(p, as_version=4).cells)]
    assert len(asking) >= 15, asking


def _planted(tmp_path: Path, cells: list[nbformat.NotebookNode]) -> Path:
    path = tmp_path / "planted.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    return path


def test_a_question_answered_by_the_next_cell_fails(tmp_path: Path) -> None:
    """The check can fail: a question followed straight by the cell that prints its answer."""
    path = _planted(tmp_path, [
        nbformat.v4.new_markdown_cell("Before running: how many threads add nothing?"),
        nbformat.v4.new_code_cell('print("threads that add nothing:", 16 - 13)')])
    assert unchecked_questions(path) == ["cell 0 asks for a prediction, but cell 1 is not an "
                                         "ungraded solution cell defining one function of no "
                                         "arguments"]


def test_a_prediction_shown_before_its_check_fails(tmp_path: Path) -> None:
    """A prediction cell is not enough: the measuring cell must compare before it prints, and
    compare the prediction the question asked for."""
    solution = {"grade": False, "grade_id": "predict_idle", "locked": False, "schema_version": 3,
                "solution": True, "task": False}
    predict = nbformat.v4.new_code_cell("def predicted_idle():\n    return 3",
                                        metadata={"nbgrader": solution})
    question = nbformat.v4.new_markdown_cell("Before you run it: how many threads add nothing?")
    early = 'print(16 - 13)\nif compare({"idle": (made(predicted_idle), 16 - 13)}):\n    pass'
    other = 'if compare({"idle": (made(predicted_other), 16 - 13)}):\n    print(16 - 13)'
    right = ('print("a fixed message")\n'
             'if compare({"idle": (made(predicted_idle), 16 - 13)}):\n    print(16 - 13)')
    assert unchecked_questions(_planted(tmp_path, [
        question, predict, nbformat.v4.new_code_cell(early)])) == [
        "cell 2 prints a value (line 1) before compare() judges predicted_idle"]
    assert unchecked_questions(_planted(tmp_path, [
        question, predict, nbformat.v4.new_code_cell(other)])) == [
        "cell 2 does not compare made(predicted_idle) with a measurement"]
    assert unchecked_questions(_planted(tmp_path, [
        question, predict, nbformat.v4.new_code_cell(right)])) == []


def test_a_course_notebook_without_its_prediction_cell_fails(tmp_path: Path) -> None:
    """On a real notebook too: exercise 01 with its prediction cell taken out (the question then
    sits right above the cell that prints both peaks) fails, naming the question's cell."""
    nb = nbformat.read(ROOT / "solutions" / "01_getting_started.ipynb", as_version=4)
    (k,) = [k for k, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == "predict_larger_peak"]
    del nb.cells[k]
    path = tmp_path / "01_getting_started.ipynb"
    nbformat.write(nb, path)
    assert unchecked_questions(path) == [f"cell {k - 1} asks for a prediction, but cell {k} is "
                                         "not an ungraded solution cell defining one function "
                                         "of no arguments"]
