"""The grading tests' shared, expensive set-up: batches graded once per test session, under a
file lock, for both xdist workers (tests/fixtures/graded_course.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures import graded_course as batches

from edu_dl.grading.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
NBGRADER_COURSE_SETTINGS = Settings(timeout_s=30, memory_mb=2048)  # FAST of the tests using it


@pytest.fixture(scope="session")
def _graded_course_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graded = batches.shared(batches.session_folder(tmp_path_factory), "course",
                            [ROOT / "solutions", ROOT / "exercises"], batches.course,
                            batches.COURSE_SETTINGS, deny_uncounted=True)
    return graded.out.parent


@pytest.fixture
def graded_course(_graded_course_folder: Path) -> batches.Graded:
    """The course's solutions (student "solved") and its untouched exercises ("unsolved"),
    graded against solutions/ with the memory accounting as found and the watchdog's filter in
    every sandbox (SysV shm and memfds refused, as where no cgroup counts memory). Its rows are
    this test's own copy; its folders are read-only (copy what you change into tmp_path)."""
    return batches.load(_graded_course_folder)


@pytest.fixture(scope="session")
def _graded_nbgrader_course_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graded = batches.shared(batches.session_folder(tmp_path_factory), "nbgrader-course",
                            [FIXTURES / "nbgrader_course.py"], batches.nbgrader_course,
                            NBGRADER_COURSE_SETTINGS)
    return graded.out.parent


@pytest.fixture
def graded_nbgrader_course(_graded_nbgrader_course_folder: Path) -> batches.Graded:
    """tests/fixtures/nbgrader_course.py's four students graded against its source (timeout
    30 s, 2048 MB): ``submissions`` is the course folder, ``source`` its source/ps1. Rows of
    this test's own; read-only folders."""
    return batches.load(_graded_nbgrader_course_folder)
