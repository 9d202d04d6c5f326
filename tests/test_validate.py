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
from edu_dl.grading.validate import validate

ROOT = Path(__file__).resolve().parents[1]
EX02 = "02_cpu_vs_gpu.ipynb"


@pytest.mark.slow
def test_solution_passes_and_exit_code_is_zero(capsys):
    assert main(["validate", str(ROOT / "solutions" / EX02)]) == 0
    out = capsys.readouterr().out
    assert "score 5/5 points; all parts pass" in out


@pytest.mark.slow
def test_unsolved_exercise_runs_top_to_bottom_and_scores_zero():
    report = validate(ROOT / "exercises" / "05_autograd_from_scratch.ipynb", progress=False)
    assert report.errors == []  # nothing outside the test cells failed: it ran to the end
    assert len(report.parts) == 9 and report.score == (0.0, 12.0)
    assert all(p.message == "not implemented yet" for p in report.parts)
    assert not report.ok


@pytest.mark.slow
def test_wrong_answer_error_cell_and_temp_directory(tmp_path: Path, capsys):
    nb = nbs.read_notebook(ROOT / "exercises" / EX02)
    solutions = {nbgrader.grade_id(c): c for c in nb.cells if nbgrader.is_solution(c)}
    solutions["gflops"].source = "def gflops(n, seconds):\n    return n**3 / seconds / 1e9"
    solutions["peak_bandwidth"].source = ("def peak_bandwidth(m, b, c):\n"
                                          "    open('written.txt', 'w').write('x')\n"
                                          "    return m * b * c")
    nb.cells.append(nbformat_cell("undefined_name + 1"))
    last = sum(c.cell_type == "code" for c in nb.cells)  # validate counts code cells from 1
    path = tmp_path / EX02
    nbs.write_notebook(nb, path)
    shutil.copytree(ROOT / "exercises" / "parts", tmp_path / "parts")  # as the student has them

    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    # validate is the grader: the visible and the hidden cases are drawn (6 in all)
    assert "✗ ex02.gflops            0/1  case 1 of 6 (n=1000, seconds=0.05): expected 40, got 20" \
        in out
    assert "hint: half the expected rate" in out
    assert "✓ ex02.peak_bandwidth    1/1" in out
    assert "✗ ex02.softmax_xp        0/2  not implemented yet" in out
    assert f"code cell {last} raised NameError: name 'undefined_name' is not defined" in out
    assert "score 1/5 points" in out
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
