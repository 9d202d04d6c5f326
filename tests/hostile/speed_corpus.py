"""A one-task speed exercise (exercise 2's ``standardize``) and submissions of it, honest and
hostile, for the batch's speed rows. Generated like ``corpus``: each case is the solved student
notebook with its function (or another cell) edited."""

from __future__ import annotations

from pathlib import Path

import nbformat

from edu_dl.grading.nbgrader import remove_hidden_tests
from hostile.corpus import _code, _test, write, write_source

EXERCISE = "02_speedy"
PART = "ex02.faster_standardize"
ROW = PART + ".speed"
HERE = Path(__file__).resolve().parents[1] / "speed"

FAST = (HERE / "solution.py").read_text().replace("import numpy as np\n", "").strip()
SLOW = '''def standardize(images):
    """The reference's loops, copied: correct, and no faster."""
    n, h, w, c = images.shape
    out = np.empty((n, c, h, w), dtype=np.float32)
    for channel in range(c):
        values = images[..., channel].astype(np.float64)
        mean, std = values.mean(), values.std()
        for i in range(n):
            for row in range(h):
                for col in range(w):
                    out[i, channel, row, col] = (images[i, row, col, channel] - mean) / std
    return out'''
# Every timer the notebook's process could read says no time passes, and a timing file claims a
# huge ratio; the function itself is the slow one. The grader times the function alone, from
# outside, so none of it is read.
FORGED_TIMER = '''import json
import time

time.perf_counter = time.process_time = time.monotonic = time.time = lambda: 0.0
json.dump({"reference_s": 100.0, "submission_s": 0.001, "ratio": 1e5},
          open("timing.json", "w"))'''
# Right on the check's small inputs, a crash on the timed runs' 32 x 32 images.
CRASHES_WHEN_TIMED = FAST.replace('    x = images', '    if images.shape[1] == 32:\n'
                                  '        raise SystemExit(3)\n    x = images', 1)
# The slow work handed to a worker the function starts: it must import os, which the part's
# source check refuses (so its speed is never measured) and the timed run would refuse too.
DETACHED = (HERE / "detached_worker.py").read_text()


def source() -> nbformat.NotebookNode:
    """The instructor's notebook: the fast solution and the hidden tests."""
    return nbformat.v4.new_notebook(cells=[
        _code("import numpy as np\n\nfrom edu_dl.grading import check", gid="setup",
              locked=True),
        _code(FAST.replace('    x = images', '    ### BEGIN SOLUTION\n    x = images', 1)
              + "\n    ### END SOLUTION", gid="standardize", solution=True),
        _code(_test(PART, "standardize"), gid="standardize_tests", grade=True, locked=True,
              points=1),
    ])


def student(function: str, before: str = "") -> nbformat.NotebookNode:
    """The student's notebook: ``function`` in the answer cell, ``before`` in a cell above."""
    nb = source()
    for cell in nb.cells:
        cell.source = remove_hidden_tests(cell.source, "speed corpus")[0]
    nb.cells[1].source = function
    if before:
        nb.cells.insert(1, nbformat.v4.new_code_cell(before))
    return nb


# name -> (the student's notebook, or None: nothing submitted; the speed row's status)
CASES: dict[str, tuple[nbformat.NotebookNode | None, str]] = {
    "fast": (student(FAST), "passed"),
    "slow": (student(SLOW), "too slow"),
    "forged_timer": (student(SLOW, before=FORGED_TIMER), "too slow"),
    "crashes_when_timed": (student(CRASHES_WHEN_TIMED), "crashed"),
    "detached_worker": (student(DETACHED), "not measured"),
    "nothing": (None, "missing"),
}


def build(root: Path) -> None:
    """The source (root/source) and the submissions (root/submissions/<case>)."""
    write_source(root / "source", source(), EXERCISE)
    for name, (nb, _) in CASES.items():
        folder = root / "submissions" / name
        folder.mkdir(parents=True)
        if nb is not None:
            write(folder, nb, EXERCISE)
