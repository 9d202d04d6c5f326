"""edu-dl validate: the grader on one notebook, in a temporary batch; says what would fail.

Each run starts a Jupyter kernel (a few seconds), so the kernel runs are marked slow.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edu_dl.cli import main
from edu_dl.grading import nbgrader
from edu_dl.grading import notebooks as nbs
from edu_dl.grading.term.validate import validate

ROOT = Path(__file__).resolve().parents[2]
EX02 = "02_cpu_vs_gpu.ipynb"


@pytest.mark.slow
@pytest.mark.timing  # "all parts pass" includes the speed row, a measured ratio (run in pairs)
def test_solution_passes_and_exit_code_is_zero(capsys):
    assert main(["validate", str(ROOT / "solutions" / EX02)]) == 0
    out = capsys.readouterr().out
    assert "score 8/10 points (2 of the 10 graded by hand later); all parts pass" in out
    assert "✓ ex02.peak_bandwidth" in out and "· " in out  # the written answers: no tick


@pytest.mark.slow
def test_unsolved_exercise_runs_top_to_bottom_and_scores_zero():
    report = validate(ROOT / "exercises" / "08_autograd_from_scratch.ipynb", progress=False)
    assert report.errors == []  # nothing outside the test cells failed: it ran to the end
    # 11 checked parts, the speed task's justification (by hand) and its speed row
    assert len(report.parts) == 13 and report.score == (0.0, 25.0)
    by_id = {p.part_id: p for p in report.parts}
    assert all(p.message == "not implemented yet" for p in report.parts
               if p.part_id not in ("sgd_step_justification", "ex08.faster_sgd_step.speed"))
    assert by_id["ex08.faster_sgd_step.speed"].message.startswith("not measured")
    assert not report.ok


@pytest.mark.slow
def test_wrong_answer_error_cell_and_temp_directory(tmp_path: Path, capsys):
    nb = nbs.read_notebook(ROOT / "exercises" / EX02)
    solutions = {nbgrader.grade_id(c): c for c in nb.cells if nbgrader.is_solution(c)}
    solutions["gflops"].source = "def gflops(n, seconds):\n    return n**3 / seconds / 1e9"
    solutions["peak_bandwidth"].source = ("def peak_bandwidth(m, b, c):\n"
                                          "    open('written.txt', 'w').write('x')\n"
                                          "    return m * b * c")
    nb.cells.append(nbformat_cell("\n# a cell of my own\nundefined_name + 1"))
    path = tmp_path / EX02
    nbs.write_notebook(nb, path)
    shutil.copytree(ROOT / "exercises" / "parts", tmp_path / "parts")  # as the student has them

    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    # validate is the grader, with the release beside the notebook: its visible cases only
    # (the hidden ones never ship)
    assert "✗ ex02.gflops                    0/1  0 of 2 cases passed; failed: 1, 2" in out
    assert "case 1 of 2 (n=1000, seconds=0.05): expected 40, got 20" in out  # visible: values
    assert "hint: half the expected rate" in out
    assert "✓ ex02.peak_bandwidth            1/1" in out
    assert "✗ ex02.softmax_xp                0/2  not implemented yet" in out
    # A cell by what JupyterLab shows of it (its first line), never a count it does not show.
    assert "the cell \"# a cell of my own\" under" in out
    assert "raised NameError: name 'undefined_name' is not defined" in out
    assert "code cell" not in out
    assert "score 1/10 points" in out
    assert not (tmp_path / "written.txt").exists()  # it ran in a temporary directory
    assert not (ROOT / "written.txt").exists()


def nbformat_cell(source: str) -> nbs.Cell:
    import nbformat

    return nbformat.v4.new_code_cell(source)


def test_not_a_notebook(tmp_path: Path, capsys):
    bad = tmp_path / "my.ipynb"
    bad.write_text("{ not json")
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "not a readable Jupyter notebook" in out and "score 0/0" in out


def test_a_missing_part_file_is_named_in_a_students_words(tmp_path: Path, capsys):
    shutil.copy(ROOT / "exercises" / EX02, tmp_path / EX02)  # no parts/ beside it
    assert main(["validate", str(tmp_path / EX02)]) == 1
    out = capsys.readouterr().out
    assert "this notebook's checks are in parts/ex02.npz, which is not beside " \
           f"{EX02}" in out and "copy the exercises/parts/ folder next to it" in out
    assert "is this an exercise notebook" not in out  # the one reason, not a second guess


def test_part_files_of_another_user_are_never_imported(tmp_path: Path, capsys,
                                                       monkeypatch: pytest.MonkeyPatch):
    """A TA runs validate on a student's folder: parts/ there is the student's code, and
    validate judges in the TA's own process, so it refuses (and imports nothing)."""
    shutil.copy(ROOT / "exercises" / EX02, tmp_path / EX02)
    shutil.copytree(ROOT / "exercises" / "parts", tmp_path / "parts")
    marker = tmp_path / "imported.txt"
    with open(tmp_path / "parts" / "ex02.py", "w") as f:  # beside the release: code that would run
        f.write(f"\nopen({str(marker)!r}, 'w').write('ran as the TA')\n")
    import os

    owner = (tmp_path / "parts").stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # the TA is not the owner
    assert main(["validate", str(tmp_path / EX02)]) == 1
    out = capsys.readouterr().out
    assert "belongs to another user" in out and "--source" in out, out
    assert not marker.exists()


def test_own_part_files_are_used_and_said_so(tmp_path: Path):
    shutil.copy(ROOT / "exercises" / EX02, tmp_path / EX02)
    shutil.copytree(ROOT / "exercises" / "parts", tmp_path / "parts")
    from edu_dl.grading.term import validate as V

    nb = nbs.read_notebook(tmp_path / EX02)
    notes: list[str] = []
    assert V._own_parts_problem(tmp_path / EX02, nb, notes) == ""
    # Only this notebook's part file: not the course's sixteen.
    assert notes == ["checks from parts/ex02.npz beside the notebook (yours)"]


def test_a_sandbox_that_cannot_start_shows_its_last_lines(tmp_path: Path, capsys,
                                                          monkeypatch: pytest.MonkeyPatch):
    from edu_dl.grading import sandbox

    shutil.copy(ROOT / "exercises" / EX02, tmp_path / EX02)
    shutil.copytree(ROOT / "exercises" / "parts", tmp_path / "parts")
    log = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'nbclient'\n"
    monkeypatch.setattr(sandbox, "run", lambda *a, **k: sandbox.Result(returncode=1, log=log))
    assert main(["validate", str(tmp_path / EX02)]) == 1
    out = capsys.readouterr().out
    assert "the sandbox could not run the notebook to the end" in out
    assert "    ModuleNotFoundError: No module named 'nbclient'" in out
    assert "PYTHONPATH=" in out


def test_the_sandboxs_python_path_is_the_folder_that_holds_the_package() -> None:
    """Not the package itself: a checkout the editable install does not point at (a second
    worktree) must still import its own edu_dl inside the sandbox."""
    import edu_dl
    from edu_dl.grading.stages.run import sandbox_env

    assert Path(sandbox_env()["PYTHONPATH"]) == Path(edu_dl.__file__).resolve().parents[1]


@pytest.mark.slow
def test_what_the_notebook_raises_never_drives_the_terminal(tmp_path: Path, capsys):
    nb = nbs.read_notebook(ROOT / "exercises" / EX02)
    solution = next(c for c in nb.cells if nbgrader.grade_id(c) == "gflops")
    solution.source = ("def gflops(n, seconds):\n"
                       "    raise ValueError('\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J ALL PASSED')")
    nbs.write_notebook(nb, tmp_path / EX02)
    shutil.copytree(ROOT / "exercises" / "parts", tmp_path / "parts")
    assert main(["validate", str(tmp_path / EX02)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]52;c;cHduZWQ=\\x07" in out


# --------------------------------------------------------------------------- the report's shape


def test_a_part_graded_by_hand_later_gets_neither_a_tick_nor_a_zero() -> None:
    from edu_dl.grading.term.validate import PartResult, ValidationReport

    report = ValidationReport(Path("05_x.ipynb"), seconds=3.04, parts=[
        PartResult("ex08.relu_backward", "ex08.relu_backward", 1, 1, True, "",
                   cell='the cell "def relu_backward(dout, x):" under "1. Gates"'),
        PartResult("why", "why", 0, 2, True, "graded by hand later", by_hand=True,
                   cell='the Markdown cell under "7. Faster"'),
        PartResult("blank", "blank", 0, 2, False, "not answered: 0 points", by_hand=True)])
    lines = str(report).splitlines()
    assert lines[1:] == [
        "  ✓ ex08.relu_backward  1/1",
        '      in the cell "def relu_backward(dout, x):" under "1. Gates"',
        "  · why                 ?/2  graded by hand later",
        '      in the Markdown cell under "7. Faster"',
        "  ✗ blank               0/2  not answered: 0 points",
        "score 1/5 points (2 of the 5 graded by hand later); 1 problem(s) would cost points",
        "took 3.0 s"]


def test_cells_are_named_by_their_first_line_and_the_heading_above() -> None:
    import nbformat

    from edu_dl.grading.stages import cellnames

    v4 = nbformat.v4
    graded = {"grade": True, "solution": False, "grade_id": "f_tests", "points": 1}
    cells = [v4.new_markdown_cell("# Exercise 15\n\nIntro."),
             v4.new_markdown_cell("Some text.\n## 0. Set-up\n\n## 1. The first part ##"),
             v4.new_code_cell("\n\ndef f(x):\n    return x",
                              metadata={"nbgrader": {"solution": True, "grade_id": "f"}}),
             v4.new_code_cell('check("ex15.f", f)', metadata={"nbgrader": graded}),
             v4.new_markdown_cell("YOUR ANSWER HERE", metadata={"nbgrader": {
                 "grade": True, "solution": True, "grade_id": "why", "points": 2}}),
             v4.new_code_cell("x = " + "1 + " * 40 + "1")]
    assert cellnames.describe(cells, 2) == 'the cell "def f(x):" under "1. The first part"'
    found = cellnames.row_cells(cells)
    # a test cell's row points at the solution it checks; a speed row at the same answer
    assert found == {"f": 2, "f_tests": 2, "ex15.f": 2, "ex15.f.speed": 2, "why": 4}
    # a written answer by the heading above it, not by its own text
    assert cellnames.describe(cells, 4) == 'the Markdown cell under "1. The first part"'
    long = cellnames.describe(cells, 5)
    assert long.startswith('the cell "x = 1 + 1 + ') and '..." under' in long
    assert len(cellnames.first_line(cells[5])) == cellnames.MAX_NAME
    assert cellnames.describe([cells[0], v4.new_code_cell("")], 1) == \
        'an empty cell under "Exercise 15"'
    # A hostile line is looked at in bounded time: no regex backtracks over a megabyte.
    huge = v4.new_markdown_cell("# " + " " * 10**6 + "x\n" + "#" * 10**6)
    assert cellnames.sections([huge, cells[2]]) == ["", ""]


# --------------------------------------------------------------------------- golden output

GOLDEN = Path(__file__).resolve().parent / "golden" / "validate_08_partly_solved.txt"
EX08 = "08_autograd_from_scratch.ipynb"
PARTLY_SOLVED = {  # what a student has written so far, by the solution cell's grade_id
    "mul_backward": "def mul_backward(dout, x, y):\n    return dout * y, dout * x",
    "relu_backward": "def relu_backward(dout, x):\n    return dout * (x > 0)",
    # issue 44's mistake: the test-time rule of classic dropout in an inverted dropout
    "dropout_forward": "import numpy as np\n\n"
                       "def dropout_forward(x, p, train, seed):\n"
                       "    if not train:\n        return x * (1 - p)\n"
                       "    keep = np.random.default_rng(seed).random(x.shape) >= p\n"
                       "    return x * keep / (1 - p)",
    "sgd_step_justification": "One matrix product for the whole batch instead of a loop.",
}


def normalised(report: str) -> str:
    """The report without what depends on the machine: the seconds, and whether bwrap works."""
    import re

    report = re.sub(r"^took \d+\.\d s$", "took <seconds> s", report, flags=re.M)
    return re.sub(r"\(graded as edu-dl grade grades it: .*\)$",
                  "(graded as edu-dl grade grades it: <sandbox>)", report, flags=re.M)


@pytest.mark.slow
def test_the_report_on_a_partly_solved_exercise_is_the_golden_one(tmp_path: Path, capsys):
    """Issue 44: only rows about this notebook, each naming a cell a student can find, a part
    graded by hand later without a verdict, the dropout hint that says what was done, a line
    while it runs and the time at the end; nothing about JupyterLab's checkpoints or the
    course's other part files. Set EDU_DL_WRITE_GOLDEN=1 to write the golden file anew."""
    import os

    from fixtures.exercise_helpers import fresh_release

    nb = nbs.read_notebook(ROOT / "exercises" / EX08)
    for cell in nb.cells:
        if nbgrader.grade_id(cell) in PARTLY_SOLVED:
            cell.source = PARTLY_SOLVED[str(nbgrader.grade_id(cell))]
    nb.cells.append(nbformat_cell("# trying something\nundefined_name + 1"))
    nbs.write_notebook(nb, tmp_path / EX08)
    (tmp_path / ".ipynb_checkpoints").mkdir()  # JupyterLab's autosave, beside every notebook
    shutil.copy(tmp_path / EX08, tmp_path / ".ipynb_checkpoints" / EX08)
    fresh_release(tmp_path, "ex08")  # the release as assign makes it from the part file now
    shutil.copytree(ROOT / "exercises" / "mytorch", tmp_path / "mytorch")  # its framework

    assert main(["validate", str(tmp_path / EX08)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("running your notebook ")  # in the sandbox, where it works
    assert ".ipynb_checkpoints" not in captured.out + captured.err
    got = normalised(captured.out)
    if os.environ.get("EDU_DL_WRITE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()
