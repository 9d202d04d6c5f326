"""What the grader writes for others to read follows the umask, as nbgrader's files do; the
grading secret stays owner-only whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from edu_dl.grading import notebooks as nbs
from edu_dl.grading.stages import secret
from edu_dl.grading.term.assign import assign


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_written_file_gets_the_mode_open_would_give_it(tmp_path: Path, mask: int,
                                                         expected: int) -> None:
    old = os.umask(mask)
    try:
        assert nbs.umask() == mask
        assert nbs.umask() == mask  # reading it did not change it
        nbs.write_atomic(tmp_path / "page.html", b"<p>ok</p>")
        nbs.write_if_changed(tmp_path / "grades.csv", b"a,b\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "page.html") == mode(tmp_path / "grades.csv") == expected
    # and no temporary file is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv", "page.html"]


def test_the_release_is_readable_by_students_under_umask_022(tmp_path: Path,
                                                             umask_022: None) -> None:
    meta = {"grade": False, "grade_id": "square", "locked": False, "schema_version": 3,
            "solution": True, "task": False}
    solution = new_code_cell("def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n"
                             "    ### END SOLUTION", metadata={"nbgrader": meta})
    nbs.write_notebook(new_notebook(cells=[solution]), tmp_path / "source" / "01_squares.ipynb")
    written = assign(tmp_path / "source", tmp_path / "release", run_solutions=False)
    assert written and all(mode(path) == 0o644 for path in written), \
        {p.name: oct(mode(p)) for p in written}


def test_the_grading_secret_stays_owner_only_under_any_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        secret.load_or_create(tmp_path / ".secret")
    finally:
        os.umask(old)
    assert mode(tmp_path / ".secret") == 0o600
