"""Lecture 23 without Triton: every cell runs, none raises, and it says in one sentence what it
skips (Triton is an extra of its own; a hosted notebook or a bare install may lack it). The same
hidden-package trick as test_lectures_without_tensorflow.py: a sitecustomize.py makes `triton`
look uninstalled to the kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.hidden_packages import hide, run_lecture

LECTURE = Path(__file__).resolve().parents[2] / "lectures" / "23_triton.ipynb"


@pytest.mark.slow
def test_lecture_23_runs_without_triton(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = hide(tmp_path, ("triton",), dict(os.environ, TQDM_DISABLE="1", MPLBACKEND="Agg"))
    printed = run_lecture(LECTURE, env, monkeypatch, "Triton")
    assert "Traceback" not in printed
    assert "Triton is not installed here, so every kernel cell below is skipped" in printed
    assert "triton is missing here, so this cell is skipped" in printed
