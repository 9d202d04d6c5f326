"""nbgrader 0.9's own `autograde` scores the course's check() notebooks right (issue 23, item 3).

nbgrader scores a test cell 0 only when its output holds an error or anything on stderr; a
check() that printed its ✗ and returned was full marks (an untouched exercise 08 scored 12/12).
Here nbgrader itself, installed in a venv of its own as in
tests/grading/test_nbgrader_compat.py, grades
three students per exercise: the untouched student version from exercises/ (0 points), the
solution (full marks, its hidden checks included) and the solution with one function wrong (that
part's points lost, no other). As nbgrader does, `autograde` restores the test cells from the
gradebook, hidden tests included, and copies the source folder's files (the instructor's
`parts/`) over the submission, so each `check(..., hidden=True)` finds the hidden cases there.

nbgrader runs the notebooks in the kernel the notebook names (`python3`); a kernelspec of that
name on JUPYTER_PATH starts it with the course's own Python, where edu_dl is installed.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from fixtures import nbgrader_course as course

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "ps"
SCORES = """
import json, sys
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gb:
    print(json.dumps({nb: {s.id: {g.name: g.auto_score for g in gb.find_submission_notebook(
        nb, "ps", s.id).grades} for s in gb.students} for nb in sys.argv[1:]}))
"""
CHECK = re.compile(r'check\("([\w.]+)",\s*(\w+)')


def graded_points(nb: nbformat.NotebookNode, cell_type: str = "code") -> dict[str, float]:
    """The points of the graded cells of ``cell_type``: code, the autograded test cells;
    markdown, the written answers a person grades."""
    return {c.metadata.nbgrader.grade_id: float(c.metadata.nbgrader.points) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == cell_type}


def checked_part(cell: nbformat.NotebookNode) -> tuple[str, str]:
    """(part id, function name) of a test cell's first check() call."""
    found = CHECK.search(cell.source)
    assert found, cell.source
    return found.group(1), found.group(2)


WRONG = "\n\n\ndef {name}(*args, **kwargs):\n    return None  # wrong\n"
IMPORTED = re.compile(r"from mytorch\.(\w+) import (\w+)")


def one_part_wrong(solution: nbformat.NotebookNode
                   ) -> tuple[nbformat.NotebookNode, str, tuple[str, str] | None]:
    """The solution with the last checked function (no later part uses it) redefined to return
    None (a wrong answer, not a stub): at the end of its solution cell, or, where the notebook
    imports it from the student's own package, at the end of that module (the locked cell that
    imports it is restored); returns it, the test cell's id, and (module, name) in that case."""
    nb = copy.deepcopy(solution)
    test_at = max(i for i, c in enumerate(nb.cells)
                  if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code")
    name = checked_part(nb.cells[test_at])[1]
    answer = next(c for c in reversed(nb.cells[:test_at])
                  if c.metadata.get("nbgrader", {}).get("solution")
                  or IMPORTED.match(c.source))
    imported = IMPORTED.match(answer.source)
    if imported and imported.group(2) == name:
        return nb, nb.cells[test_at].metadata.nbgrader.grade_id, (imported.group(1), name)
    answer.source += WRONG.format(name=name)
    return nb, nb.cells[test_at].metadata.nbgrader.grade_id, None


def course_kernel(folder: Path) -> Path:
    """A JUPYTER_PATH folder whose `python3` kernel is the course's Python."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}))
    return folder


EXERCISES = ("07_computational_graphs", "08_autograd_from_scratch")


@pytest.mark.slow
def test_nbgrader_autograde_scores_an_untouched_exercise_0_and_the_solution_full(
        request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both exercises in one assignment: one generate_assignment and one autograde (nbgrader
    starts in 2.5 s of CPU, each command), every assertion made per exercise."""
    bin_dir = course.nbgrader_venv(Path(request.config.cache.mkdir("nbgrader-0.9-venv")))
    monkeypatch.setenv("JUPYTER_PATH", str(course_kernel(tmp_path / "jupyter")))
    root = tmp_path / "course"
    src = root / "source" / ASSIGNMENT
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "solutions" / "parts", src / "parts", ignore=ignore)  # both halves
    solutions, wrong_cells = {}, {}
    wrong_modules: list[tuple[str, str]] = []  # (module, name) redefined in one_wrong's package
    submissions: dict[str, dict[str, nbformat.NotebookNode]] = {
        "untouched": {}, "solved": {}, "one_wrong": {}}
    for exercise in EXERCISES:
        name = f"{exercise}.ipynb"
        shutil.copy(ROOT / "solutions" / name, src / name)
        solutions[exercise] = nbformat.read(ROOT / "solutions" / name, as_version=4)
        wrong, wrong_cells[exercise], in_package = one_part_wrong(solutions[exercise])
        if in_package:
            wrong_modules.append(in_package)
        submissions["untouched"][name] = nbformat.read(ROOT / "exercises" / name, as_version=4)
        submissions["solved"][name] = solutions[exercise]
        submissions["one_wrong"][name] = wrong
    for student, notebooks in submissions.items():
        folder = root / "submitted" / student / ASSIGNMENT
        shutil.copytree(ROOT / "exercises" / "parts", folder / "parts", ignore=ignore)
        # Exercise 08 checks the student's own mytorch/, which autograde finds beside the
        # notebook as it copies the submission: the release's stubs, or the reference.
        package = ROOT / ("exercises" if student == "untouched" else "solutions") / "mytorch"
        shutil.copytree(package, folder / "mytorch", ignore=ignore)
        for module, name in wrong_modules if student == "one_wrong" else []:
            with open(folder / "mytorch" / f"{module}.py", "a") as f:
                f.write(WRONG.format(name=name))
        for name, nb in notebooks.items():
            nbformat.write(nb, folder / name)

    course.run_nbgrader(bin_dir, root, "generate_assignment", ASSIGNMENT, "--force")
    course.run_nbgrader(bin_dir, root, "autograde", ASSIGNMENT, "--force")
    done = subprocess.run([str(bin_dir / "python"), "-c", SCORES, *EXERCISES], cwd=root,
                          capture_output=True, text=True, timeout=120, check=True)
    scores = json.loads(done.stdout)
    for exercise in EXERCISES:
        assert_scored_as_nbgrader_should(root, exercise, scores[exercise], solutions[exercise],
                                         wrong_cells[exercise])


def assert_scored_as_nbgrader_should(root: Path, exercise: str,
                                     scores: dict[str, dict[str, float | None]],
                                     solution: nbformat.NotebookNode, wrong_cell: str) -> None:
    """nbgrader's ``scores`` (student -> grade id -> points): the untouched exercise 0, the
    solution full marks with its hidden checks run and nothing on stderr, one wrong part that
    part's points alone."""
    name = f"{exercise}.ipynb"

    points = graded_points(solution)
    by_hand = set(graded_points(solution, "markdown"))  # a person grades them, not autograde
    assert set(scores["solved"]) == set(points) | by_hand, exercise
    assert all(scores[s][gid] in (None, 0) for s in scores for gid in by_hand), scores
    scores = {s: {gid: v for gid, v in got.items() if gid in points} for s, got in scores.items()}
    assert sum(points.values()) > 0 and set(scores["solved"]) == set(points)
    assert scores["solved"] == points, exercise
    assert scores["untouched"] == dict.fromkeys(points, 0), exercise
    assert scores["one_wrong"] == {**points, wrong_cell: 0}, exercise
    print(f"nbgrader autograde, {exercise}: " + ", ".join(
        f"{s} {sum(v.values()):g}/{sum(points.values()):g}" for s, v in scores.items()))

    # The hidden checks ran, on the instructor's hidden cases, and nothing reached stderr.
    graded = nbformat.read(root / "autograded" / "solved" / ASSIGNMENT / name, as_version=4)
    tests = [c for c in graded.cells
             if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    assert len(tests) == len(points)
    for cell in tests:
        assert "### BEGIN HIDDEN TESTS" in cell.source
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert {(o.output_type, o.get("name")) for o in cell.outputs} == {("stream", "stdout")}
        assert "hidden cases passed" in text and "✗" not in text, (exercise, text)
    # A failure shows the report alone: an error output, its traceback the ✗ line and hint.
    untouched = nbformat.read(root / "autograded" / "untouched" / ASSIGNMENT / name,
                              as_version=4)
    first = next(c for c in untouched.cells if c.metadata.get("nbgrader", {}).get("grade"))
    (error,) = first.outputs
    assert error.output_type == "error" and error.ename == "CheckFailed"
    assert error.traceback == [f"✗ {checked_part(first)[0]}: not implemented yet"]
