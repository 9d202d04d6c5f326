"""The same answer gets the same speed grade on a quiet grader and on a busy one: the course's
own solution of a speed part, measured as graded (its notebook's function, the task's calls,
speed.ROUNDS rounds), once as the machine is and once beside two CPU-bound processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edu_dl.grading.stages import speed
from edu_dl.grading.stages.secret import VALIDATION_SECRET

ROOT = Path(__file__).resolve().parents[2]
PART = "ex02.faster_standardize"
SOLVED = ROOT / "solutions" / "02_cpu_vs_gpu.ipynb"
HOGS = 2  # as many as the CI machine has cores


def graded() -> speed.Measurement:
    return speed.measure_notebook(SOLVED, PART, speed.seed_for(VALIDATION_SECRET, PART))


@pytest.mark.timing
@pytest.mark.slow
def test_the_solution_gets_the_same_points_quiet_and_busy() -> None:
    quiet = graded()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    try:
        busy = graded()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    shown = f"quiet: {quiet.message}; busy: {busy.message}"
    assert quiet.correct and busy.correct, shown
    assert quiet.status == busy.status == "passed", shown
