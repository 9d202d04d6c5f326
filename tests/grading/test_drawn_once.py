"""A part's inputs are drawn once per exercise, not once per student (``prepare.drawn_part``): the
same for everyone, so a class pays for one draw, its encoding and its round trip (exercise 24's
were 0.24 s of the grader's CPU for every student after the first). Each student's judgement still
gets a copy of its own: an oracle that writes into its arguments changes nobody else's grade."""

from __future__ import annotations

from pathlib import Path

import nbformat
from fixtures.nbgrader_course import _code

from edu_dl.grading.settings import Settings
from edu_dl.grading.term import batch as G

# cases() appends a line to DRAWS each time it is called; the oracle doubles its argument in place
# (so a shared case would be judged against 4 * x for the second student, 8 * x for the third).
PARTS = '''
import numpy as np
from edu_dl.grading import Part

DRAWS = {draws!r}


def _cases(rng, hidden):
    with open(DRAWS, "a") as f:
        f.write("hidden\\n" if hidden else "visible\\n")
    return [(rng.standard_normal(4),)]


def _doubled_in_place(x):
    x *= 2
    return x


PARTS = [Part(id="dr.double", points=1, cases=_cases, expected=_doubled_in_place)]
'''
ANSWER = "def double(x):\n    return 2 * x"


def test_a_part_is_drawn_once_for_every_student_and_judged_on_each_ones_copy(
        tmp_path: Path) -> None:
    draws = tmp_path / "draws.txt"
    src = tmp_path / "source"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "dr.py").write_text(PARTS.format(draws=str(draws)))
    nb = nbformat.v4.new_notebook()
    nb.cells = [_code("from edu_dl.grading import check", gid="setup", locked=True),
                _code(ANSWER, gid="double", solution=True),
                _code('check("dr.double", double)\n### BEGIN HIDDEN TESTS\n'
                      'check("dr.double", double, hidden=True)\n### END HIDDEN TESTS',
                      gid="double_tests", grade=True, locked=True, points=1)]
    nbformat.write(nb, src / "dr.ipynb")
    for student in ("ann", "bob", "cid"):
        (tmp_path / "subs" / student).mkdir(parents=True)
        nbformat.write(nb, tmp_path / "subs" / student / "dr.ipynb")
    summary = G.grade(tmp_path / "subs", src, tmp_path / "grades", jobs=2, progress=False,
                      settings=Settings(timeout_s=30, memory_mb=2048), log=lambda s: None)
    assert [(r.student, r.status, r.points) for r in summary.rows if r.part == "dr.double"] == [
        ("ann", "passed", 1.0), ("bob", "passed", 1.0), ("cid", "passed", 1.0)]
    assert sorted(draws.read_text().split()) == ["hidden", "visible"]  # once, for all three
