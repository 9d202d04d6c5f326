"""Grading ahead (issue 41): the next submissions' sandboxes start, their runner and kernel boot,
while --jobs notebooks run; each waits at its gate for a free slot before its first cell. The
grades are those of grading one at a time, and no two notebooks' cells overlap with --jobs 1:
they run in the batch's order."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from fixtures.hostile import corpus

from edu_dl.grading.settings import Settings
from edu_dl.grading.term.batch import grade

STAMP = "import time; print('T', repr(time.time()))"
SETTINGS = Settings(timeout_s=30, memory_mb=2048)


def _class(root: Path, students: int) -> None:
    """The corpus's good student, ``students`` times, each notebook stamped with the time at
    its first and last cells (ungraded cells of their own)."""
    corpus.build(root, root / "escape", ["good"])
    good = root / "submissions" / "good"
    for k in range(students):
        folder = root / "submissions" / f"s{k}"
        shutil.copytree(good, folder)
        path = folder / f"{corpus.EXERCISE}.ipynb"
        nb = nbformat.read(path, as_version=4)
        nb.cells = [nbformat.v4.new_code_cell(STAMP), *nb.cells,
                    nbformat.v4.new_code_cell(STAMP)]
        nbformat.write(nb, path)
    shutil.rmtree(good)


def _spans(out: Path) -> list[tuple[float, float]]:
    """Each graded notebook's (first stamp, last stamp)."""
    spans = []
    for path in sorted((out / "autograded").glob("*/*/*.ipynb")):
        stamps = [float(t) for t in re.findall(r"T (\d+\.\d+)", path.read_text())]
        spans.append((stamps[0], stamps[-1]))
    return spans


def test_ahead_grades_as_one_at_a_time_and_runs_one_notebook_at_a_time(tmp_path: Path) -> None:
    _class(tmp_path, 3)
    got = {}
    for ahead in (0, 1):
        out = tmp_path / f"grades{ahead}"
        summary = grade(tmp_path / "submissions", tmp_path / "source", out, settings=SETTINGS,
                        jobs=1, progress=False, log=lambda s: None, ahead=ahead)
        got[ahead] = sorted((r.student, r.part, r.status, r.points) for r in summary.rows)
        spans = _spans(out)  # in the students' order, the batch's
        assert len(spans) == 3
        for (_, end), (start, _) in itertools.pairwise(spans):
            # one notebook's cells at a time, in the batch's order whichever kernel is ready
            # first (a Ctrl-C then stops the same submissions, ahead or not)
            assert end <= start, spans
    assert got[0] == got[1] and {status for _, _, status, _ in got[1]} == {"passed"}


def test_an_unopened_gate_ends_the_runner_before_any_cell() -> None:
    """The grader closed the gate without opening it (it gave the run up): the runner ends
    there, and nothing after the wait runs."""
    code = ("import os\n"
            "read, write = os.pipe()\n"
            "os.environ['EDU_DL_GATE_FD'] = str(read)\n"
            "os.close(write)\n"
            "from edu_dl.grading import runner\n"
            "runner._wait_at_gate()\n"
            "print('a cell ran')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ})
    assert done.returncode == 0 and "a cell ran" not in done.stdout, (done.stdout, done.stderr)
