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

ROOT = Path(__file__).resolve().parents[2]
EX02 = "02_cpu_vs_gpu.ipynb"


@pytest.mark.slow
def test_solution_passes_and_exit_code_is_zero(capsys):
    assert main(["validate", str(ROOT / "solutions" / EX02)]) == 0
    out = capsys.readouterr().out
    assert "score 8/10 points; all parts pass" in out  # 2 more points are graded by hand


@pytest.mark.slow
def test_unsolved_exercise_runs_top_to_bottom_and_scores_zero():
    report = validate(ROOT / "exercises" / "05_autograd_from_scratch.ipynb", progress=False)
    assert report.errors == []  # nothing outside the test cells failed: it ran to the end
    # 11 checked parts, the speed task's justification (by hand) and its speed row
    assert len(report.parts) == 13 and report.score == (0.0, 25.0)
    by_id = {p.part_id: p for p in report.parts}
    assert all(p.message == "not implemented yet" for p in report.parts
               if p.part_id not in ("sgd_step_justification", "ex05.faster_sgd_step.speed"))
    assert by_id["ex05.faster_sgd_step.speed"].message.startswith("not measured")
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
    # validate is the grader, with the release beside the notebook: its visible cases only
    # (the hidden ones never ship)
    assert "✗ ex02.gflops                    0/1  0 of 2 cases passed; failed: 1, 2" in out
    assert "case 1 of 2 (n=1000, seconds=0.05): expected 40, got 20" in out  # visible: values
    assert "hint: half the expected rate" in out
    assert "✓ ex02.peak_bandwidth            1/1" in out
    assert "✗ ex02.softmax_xp                0/2  not implemented yet" in out
    assert f"code cell {last} raised NameError: name 'undefined_name' is not defined" in out
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
    from edu_dl.grading import validate as V

    nb = nbs.read_notebook(tmp_path / EX02)
    notes: list[str] = []
    assert V._own_parts_problem(tmp_path / EX02, nb, notes) == ""
    assert notes and "parts/ beside the notebook (yours)" in notes[0] and "ex02.npz" in notes[0]


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
