"""edu-dl assign grades each solution against its own tests first, and refuses a failing one."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from fixtures.nbgrader_course import _code
from fixtures.squares import squares_part_file

from edu_dl.cli import main
from edu_dl.grading import sandbox
from edu_dl.grading.term import solution_run

PRIVATE = squares_part_file("hw4.squares")
RIGHT = "    return [i * i for i in range(1, n + 1)]"
WRONG = "    return [1, 4, 9][:n]  # right on the visible case only"


def _course(folder: Path, body: str) -> Path:
    (folder / "parts").mkdir(parents=True, exist_ok=True)
    (folder / "parts" / "hw4.private.py").write_text(PRIVATE)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("from edu_dl.grading import check", gid="setup", locked=True),
        _code(f"def squares(n):\n    ### BEGIN SOLUTION\n{body}\n    ### END SOLUTION",
              gid="squares", solution=True),
        _code('check("hw4.squares", squares)\n### BEGIN HIDDEN TESTS\n'
              'check("hw4.squares", squares, hidden=True)\n### END HIDDEN TESTS',
              gid="squares_tests", grade=True, locked=True, points=2),
    ]
    nbformat.write(nb, folder / "hw4.ipynb")
    return folder


@pytest.fixture(autouse=True)
def _own_cache_and_sandbox_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(solution_run.CACHE_VAR, str(tmp_path / "cache"))
    monkeypatch.setenv(sandbox.GROUP_VAR, f"pytest{os.getpid()}-")


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_assign_refuses_a_solution_that_fails_a_hidden_test(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, release = _course(tmp_path / "source", WRONG), tmp_path / "release"
    assert main(["assign", str(source), str(release)]) == 2
    said = capsys.readouterr().err
    assert "a solution fails its own tests" in said
    assert "hw4.ipynb: part hw4.squares scores 0 of 2: 1 of 2 cases passed" in said, said
    assert not release.exists()  # nothing written
    assert not (tmp_path / "cache" / solution_run.PASSED).exists()  # a failure is not kept
    # the author may release anyway, knowingly
    assert main(["assign", str(source), str(release), "--no-run-solutions"]) == 0
    assert (release / "hw4.ipynb").is_file()


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_assign_runs_a_passing_solution_once_until_something_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    source, release = _course(tmp_path / "source", RIGHT), tmp_path / "release"
    assert main(["assign", str(source), str(release)]) == 0
    assert "hw4.ipynb: the solution passes its tests (hidden ones included)" in \
        capsys.readouterr().err
    assert (release / "hw4.ipynb").is_file()
    ran: list[Path] = []
    monkeypatch.setattr(solution_run, "failures", lambda nb, **_: ran.append(nb) or [])
    assert main(["assign", str(source), str(release)]) == 0
    assert "passed its tests before" in capsys.readouterr().err and not ran
    # a changed part file (here: a comment) is a new key: it runs again
    (source / "parts" / "hw4.private.py").write_text(PRIVATE + "# harder cases soon\n")
    assert main(["assign", str(source), str(release)]) == 0
    assert ran == [source / "hw4.ipynb"]
    # --check compares files only: it never runs a solution
    ran.clear()
    (source / "parts" / "hw4.private.py").write_text(PRIVATE + "# again\n")
    assert main(["assign", str(source), str(release), "--check"]) == 0
    assert not ran
