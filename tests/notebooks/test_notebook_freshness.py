"""Stale figures cannot ship: every committed lecture and solution was executed by today's code.

`make notebooks` (edu_dl.notebook.run) writes into each notebook's metadata a digest of every course
file its kernel ran (edu_dl's modules, the notebook's parts/). A notebook whose outputs came from
older code than the code it runs now fails here, naming the files that changed since.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from edu_dl.notebook import run as notebook_run

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted([*ROOT.glob("lectures/*.ipynb"), *ROOT.glob("solutions/*.ipynb")])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_outputs_come_from_todays_code(path: Path) -> None:
    problems = notebook_run.stale(path)
    rel = path.relative_to(ROOT)
    assert not problems, (f"{rel}: its outputs may be stale ({'; '.join(problems)}): "
                          f"re-execute it with `make notebooks NB={rel}`")


def test_every_lecture_records_the_engine_it_ran() -> None:
    """A digest that left out the modules a lecture really used would prove nothing."""
    sources = nbformat.read(ROOT / "lectures/08_autograd_from_scratch.ipynb", as_version=4
                            ).metadata["edu_dl"]["sources"]
    assert "edu_dl/autograd/ops.py" in sources and "edu_dl/notebook/lecture.py" in sources
    solution = nbformat.read(ROOT / "solutions/08_autograd_from_scratch.ipynb", as_version=4)
    assert "solutions/parts/ex08.private.py" in solution.metadata["edu_dl"]["sources"]


def test_a_changed_or_missing_file_makes_a_notebook_stale(tmp_path: Path, monkeypatch) -> None:
    code = tmp_path / "edu_dl" / "ops.py"
    code.parent.mkdir()
    code.write_text("x = 1\n")
    monkeypatch.setattr(notebook_run, "ROOT", tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.metadata["edu_dl"] = {"sources": {"edu_dl/ops.py": notebook_run.digest(code),
                                         "edu_dl/gone.py": "0" * 16}}
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert notebook_run.stale(path) == ["edu_dl/gone.py is gone"]
    code.write_text("x = 2\n")
    assert notebook_run.stale(path) == ["edu_dl/gone.py is gone", "edu_dl/ops.py changed"]
    nbformat.write(nbformat.v4.new_notebook(), path)
    assert notebook_run.stale(path) == ["no record of the course code that produced its outputs"]


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_execute_runs_in_place_and_records_the_course_code(tmp_path: Path) -> None:
    folder = tmp_path / "course"
    (folder / "parts").mkdir(parents=True)
    shutil.copy(ROOT / "solutions/parts/ex08.private.py", folder / "parts/ex08.private.py")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import edu_dl.notebook.lecture\nimport os\nprint(os.getcwd())"),
        nbformat.v4.new_code_cell("from edu_dl.grading import check\n"
                                  "check('ex08.mul_backward', lambda d, x, y: (d * y, d * x))"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    # The author's metadata stays; only the digests are replaced.
    authored = {"budget": {"points": 1, "cpu_s": 60}, "package": "mytorch"}
    nb.metadata["edu_dl"] = {**authored, "sources": {"edu_dl/old.py": "0" * 16}}
    path = folder / "demo.ipynb"
    nbformat.write(nb, path)
    sources = notebook_run.execute(path, timeout_s=120)
    done = nbformat.read(path, as_version=4)
    assert len(done.cells) == 2  # the probe cell is never saved
    assert [c.execution_count for c in done.cells] == [1, 2]
    assert done.cells[0].outputs[0]["text"].strip() == str(folder)
    assert done.cells[1].outputs[0]["text"].startswith("✓ ex08.mul_backward")
    assert "edu_dl/notebook/lecture.py" in sources and "edu_dl/grading/checking.py" in sources
    # the part file lies outside the repository here: recorded by its absolute path
    assert str(folder / "parts/ex08.private.py") in sources
    assert not [name for name in sources if "site-packages" in name or "numpy" in name]
    assert done.metadata["edu_dl"] == {**authored, "sources": sources}
    assert "execution" not in done.cells[0].metadata


def test_a_failing_notebook_is_reported_and_left_unchanged(tmp_path: Path, capsys) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    assert notebook_run.main([str(path), "--timeout", "60"]) == 1
    assert path.read_bytes() == before
    assert "bad.ipynb: FAILED: CellExecutionError" in capsys.readouterr().err
