"""The grader's own budget per submission (issue 35, item 5): the four notebooks that once cost
it minutes and a gigabyte, at a few MB each, beside the honest ``alice``.

Values and depth are counted before any JSON is parsed, cells before nbformat sees them, and the
feedback page shows what it cut; every submission graded records what it cost the grader (the
gradebook, run.json, the summary). The full-size cases are measured by
``tests/bench_grader_cost.py``; no wall time is asserted here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fixtures.hostile import corpus, costly

from edu_dl.grading import sandbox
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import feedback
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import gradebook
from edu_dl.grading.term.report import summary_text

FAST = Settings(timeout_s=20, budget_s=60, memory_mb=2048)
STUDENTS = {"nested []": "nested", "0,": "zeros", "10,000 Markdown cells": "markdown",
            "10,000 pass cells": "passes"}

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, f"budget{os.getpid()}-")


def values(folder: Path) -> int:
    """The JSON values of the student's notebook, counted on the parsed JSON."""
    todo, count = [json.loads((folder / f"{corpus.EXERCISE}.ipynb").read_bytes())], 0
    while todo:
        value = todo.pop()
        count += 1
        if isinstance(value, dict | list):
            todo.extend(value.values() if isinstance(value, dict) else value)
    return count


def test_costly_notebooks_are_refused_or_cut_and_every_cost_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The page's time budget has a test of its own (test_feedback.py); on a loaded machine it
    # could cut this page too.
    monkeypatch.setattr(feedback, "PAGE_SECONDS", 600.0)
    subs, source, out = tmp_path / "submissions", tmp_path / "source", tmp_path / "grades"
    corpus.write_source(source, corpus.source())
    corpus.write(subs / "alice", corpus.student())
    for case, student in STUDENTS.items():
        data = costly.SMALL[case]()
        assert 100_000 < len(data) < 4 << 20, (case, len(data))
        (subs / student).mkdir(parents=True)
        (subs / student / f"{corpus.EXERCISE}.ipynb").write_bytes(data)
    summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False,
                      log=lambda line: None)
    rows = {(r.student, r.part): r for r in summary.rows}
    assert sum(r.points for r in summary.rows if r.student == "alice") == 2.0

    for student in ("nested", "zeros"):
        row, count = rows[(student, "ex02.gflops")], values(subs / student)
        assert row.status == "refused" and count > 1_000_000, (row, count)
        assert f"holds {count:,} JSON values, over the grader's limit of 500,000 for one " \
            "file; not parsed" in row.message, row
    row = rows[("passes", "ex02.gflops")]
    assert row.status == "refused" and "has 1,005 code cells, over the limit of 200 for " \
        "02_mini (5 times its source's 5, at least 200): the sandbox runs every code cell; " \
        "not run" in row.message, row
    # 600 Markdown cells are graded as any notebook; the page shows the first 200 and the
    # graded ones, and says so.
    assert [rows[("markdown", p)].status for p in corpus.PARTS] == ["passed", "passed"]
    page = (out / "feedback" / "markdown" / corpus.EXERCISE / f"{corpus.EXERCISE}.html")
    html = page.read_text("utf-8")
    assert "This page shows 202 of 606 cells: every graded cell and the first 200 others." \
        in html and "[... 404 cells not shown here]" in html
    assert html.count("edu-grade passed") == 2 and len(html) < 2 << 20

    # What each submission cost the grader: in the summary, the gradebook and run.json.
    assert set(summary.costs) == {(s, corpus.EXERCISE) for s in [*STUDENTS.values(), "alice"]}
    for (student, _), (spent, page_cost) in summary.costs.items():
        assert 0 < spent.seconds < 600 and 0 < spent.cpu_seconds < 600, (student, spent)
        assert 0 < spent.peak_mb and 0 <= spent.added_mb < 300, (student, spent)
        kept = gradebook.kept_entry(out, student, corpus.EXERCISE)
        assert kept is not None and kept.grader == spent.rounded(), student
        run = out / ".work" / student / corpus.EXERCISE / "run.json"
        ran = student in ("alice", "markdown")
        assert run.exists() == ran, student
        if ran:
            assert json.loads(run.read_text())["grader"] == spent.rounded(), student
            # where its time went: the sandbox's, of it the kernel's start and the cells'
            assert spent.sandbox_seconds > spent.kernel_seconds > 0, (student, spent)
            assert spent.sandbox_seconds >= spent.kernel_seconds + spent.cells_seconds
            assert page_cost is not None and 0 <= page_cost.added_mb < 300, student
    text = summary_text(summary)
    assert "the grader's own work per submission (outside the sandbox, its feedback page " \
        "included): median" in text and "the grading process's resident peak" in text
    assert "where the time went (2 notebook runs, seconds summed; the speed tasks apart): " \
        "sandbox and runner start and stop " in text
    assert 0 < summary.peak_mb < 4096
