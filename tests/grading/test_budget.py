"""A notebook's budget (stages/budget.py): its metadata read strictly, and its row judged from
what the sandbox measured (CPU seconds of the whole tree, peak memory), with a band where a busy
machine could have made the difference. The sandboxed batch: test_instructor_course.py."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from edu_dl.grading import sandbox
from edu_dl.grading.model import (
    BY_HAND,
    NEEDS,
    OUTSIDE,
    Budget,
    Exercise,
    Job,
    NothingToGrade,
    Row,
    budget_row,
)
from edu_dl.grading.stages.budget import BAND, budget_rows
from edu_dl.grading.stages.load import read_budget
from edu_dl.grading.stages.receive import Ran
from edu_dl.grading.trust.result import RunResult


def notebook(budget: object) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["edu_dl"] = {"budget": budget, "sources": {}}
    return nb


def test_a_budget_is_read_from_the_notebooks_metadata() -> None:
    path = Path("24_capstone.ipynb")
    assert read_budget(notebook({"points": 2, "cpu_s": 60, "memory_mb": 1024}), path) == \
        Budget(2.0, 60.0, 1024.0)
    assert read_budget(notebook({"points": 0, "cpu_s": 1.5}), path) == Budget(0.0, 1.5, None)
    assert read_budget(nbformat.v4.new_notebook(), path) is None


@pytest.mark.parametrize(("budget", "says"), [
    ([60], "is a list, not an object"),
    ({"points": 1, "cpu": 60}, "unknown fields 'cpu'"),
    ({"points": 1, "cpu_s": 0}, "cpu_s=0: a number, above 0"),
    ({"points": 1, "cpu_s": True}, "cpu_s=True: a number"),
    ({"points": 1, "memory_mb": float("inf")}, "memory_mb=inf"),
    ({"points": -1, "cpu_s": 60}, "points=-1: a number, 0 or more"),
    ({"cpu_s": 60}, "has no points"),
    ({"points": 1}, "neither cpu_s nor memory_mb"),
])
def test_a_malformed_budget_stops_the_batch_naming_the_notebook(budget: object,
                                                                 says: str) -> None:
    with pytest.raises(NothingToGrade) as refused:
        read_budget(notebook(budget), Path("24_capstone.ipynb"))
    message = str(refused.value)
    assert message.startswith("24_capstone.ipynb: its metadata edu_dl.budget ") and says in message
    assert '"cpu_s": 60' in message  # and how to write it


EXERCISE = Exercise("24_capstone", nbformat.v4.new_notebook(), "0" * 64,
                    budget=Budget(2.0, cpu_s=10.0, memory_mb=500.0))
PASSED = [Row("ann", "24_capstone", "ex24.accuracy", 3.0, 3.0, "passed", "", judged=OUTSIDE),
          Row("ann", "24_capstone", "report", 0.0, 4.0, NEEDS, "", judged=BY_HAND)]


def judged(cpu_s: float, memory_mb: float = 100.0, killed: str = "",
           rows: list[Row] = PASSED) -> Row:
    done = sandbox.Result(0, killed=killed, cpu_s=cpu_s, peak_memory_mb=memory_mb)
    (row,) = budget_rows(Job("ann", EXERCISE, None, "24_capstone"),
                         Ran(done, RunResult(), "bwrap"), rows)
    assert row.part == budget_row("24_capstone") == "24_capstone.budget"
    assert row.max_points == 2.0
    return row


def test_within_the_budget_earns_its_points_and_says_what_it_cost() -> None:
    row = judged(9.5)
    assert (row.status, row.points) == ("passed", 2.0), row
    assert row.message == ("CPU time 9.5 s of its 10 s; peak memory 100.0 MB of its 500 MB "
                           "(the whole notebook's run, measured outside the sandbox)")


def test_over_by_the_band_or_less_goes_to_a_person_and_over_that_is_over() -> None:
    close = judged(10.0 * (1 + BAND))
    assert (close.status, close.points, close.judged) == (NEEDS, 0.0, BY_HAND), close
    assert "CPU time 12.5 s of its 10 s" in close.answer and "a person grades it" in close.message
    assert "a busy machine adds CPU time" in close.message
    close_memory = judged(1.0, memory_mb=600.0)  # memory is not what a busy machine adds
    assert close_memory.status == NEEDS and "busy" not in close_memory.message, close_memory
    over = judged(10.0 * (1 + BAND) + 0.1)
    assert (over.status, over.points) == ("over budget", 0.0), over
    memory = judged(1.0, memory_mb=900.0)
    assert memory.status == "over budget" and "peak memory 900.0 MB of its 500 MB" in \
        memory.message


def test_a_cut_run_or_a_failed_part_is_not_measured() -> None:
    killed = judged(1.0, killed="timeout")
    assert (killed.status, killed.points) == ("not measured", 0.0)
    assert "the sandbox stopped it (timeout)" in killed.message
    failing = [Row("ann", "24_capstone", "ex24.accuracy", 0.0, 3.0, "failed", "")]
    cheap = judged(0.5, rows=failing)  # little work, little cost: nothing earned for it
    assert (cheap.status, cheap.points) == ("not measured", 0.0)
    assert "not every part passed (ex24.accuracy)" in cheap.message


def test_an_exercise_with_a_budget_has_a_row_for_it() -> None:
    assert ("24_capstone.budget", 2.0, OUTSIDE) in EXERCISE.items()
    assert not [name for name, _, _ in Exercise("x", nbformat.v4.new_notebook(), "").items()]
