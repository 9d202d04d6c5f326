"""What the exercise tests share: a solution notebook's functions, and check()'s verdict (the ✓ line
it prints, or the ✗ report of the CheckFailed it raises)."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import numpy as np
import pytest

from edu_dl.grading import check, checking, parts, protocol, spec

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
# A child process's first lines: the CUDA simulator switched on before numba.cuda is imported, then
# the set-up and solution cells of the notebook named by sys.argv[1] executed into ``ns``.
SIMULATED_SOLUTIONS = r'''
import os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import nbformat

ns = {}
for cell in nbformat.read(sys.argv[1], as_version=4).cells:
    meta = cell.metadata.get("nbgrader", {})
    if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "setup"):
        exec(compile(cell.source, "<" + meta["grade_id"] + ">", "exec"), ns)
'''


def course_module(exercise: str) -> ModuleType:
    """The course's part file ``solutions/parts/<exercise>.private.py`` (its oracles, hints,
    PARTS: private, it stays beside the source)."""
    folder = SOLUTIONS / parts.FOLDER
    return parts.module(folder, exercise, private=not (folder / f"{exercise}.py").exists())


@functools.cache
def _course() -> dict[str, spec.Part]:
    return parts.course_parts(SOLUTIONS)


def course_part(part_id: str) -> spec.Part:
    """The course's part with this id, as the grader loads it from beside ``solutions/``."""
    return parts.get(part_id, _course())


def all_course_parts() -> list[spec.Part]:
    """Every part of the course, in exercise order."""
    return list(_course().values())


@functools.cache
def solution_namespace(notebook: str, also: str = "") -> dict[str, Any]:
    """The set-up and solution cells of ``solutions/<notebook>``, executed: the reference answers.

    ``also`` names text that marks further given cells to run (helpers the exercise provides).
    """
    namespace: dict[str, Any] = {}
    for cell in nbformat.read(SOLUTIONS / notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        given = bool(also) and also in cell.source
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == "setup"
                                         or given):
            exec(compile(cell.source, f"<{meta.get('grade_id', 'cell')}>", "exec"), namespace)
    return namespace


def checked(part_id: str, fn: Any, hidden: bool = False) -> tuple[checking.Outcome, str]:
    """check()'s verdict as (outcome, line): a pass returns a true Outcome; a failure raises
    CheckFailed, given back here as a false Outcome with the exception's report."""
    try:
        return check(part_id, fn, hidden=hidden), ""
    except checking.CheckFailed as failed:  # wrapped lines joined again, for searching
        return checking.Outcome(False, failed.report), checking.unwrapped(failed.report) + "\n"


def run_check(capsys: pytest.CaptureFixture[str], part_id: str, fn: Any,
              hidden: bool = False) -> tuple[checking.Outcome, str]:
    """check()'s result and what a notebook shows under it: the ✓ line it printed, or the report
    of the CheckFailed it raised (then it printed nothing); never a traceback."""
    with contextlib.chdir(SOLUTIONS):  # check() finds parts/ beside the notebook, as a student's
        ok, report = checked(part_id, fn, hidden)
    out = capsys.readouterr().out
    if not ok:
        assert out == "", "a failing check() prints nothing: its exception carries the report"
        out = report
    assert "Traceback" not in out
    return ok, out


def assert_solution_passes(part: spec.Part, fn: Any, hidden: bool,
                           rng: np.random.Generator) -> int:
    """Judge ``fn`` on every case ``part`` draws, as the grader does; returns how many cases."""
    cases = protocol.roundtrip(part.cases(rng, hidden))
    for i, args in enumerate(cases):
        verdict = spec.judge_case(part, i, len(cases), args, part.expected(*args),
                                      part.call(fn, args))
        assert verdict.ok, verdict.message
    return len(cases)
