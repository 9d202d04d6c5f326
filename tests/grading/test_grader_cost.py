"""What grading a submission costs the grader itself (``grading.cost``): its seconds outside the
sandbox, its thread's CPU seconds and the process's resident memory while it was graded, and the
summary's line about them."""

from __future__ import annotations

import threading
import time

import pytest

from edu_dl.grading import cost
from edu_dl.grading.model import Summary
from edu_dl.grading.term.report import cost_lines, split_lines, summary_text

MB = 1 << 20


def touched(mb: int) -> bytes:
    """``mb`` MB every page of which is resident (a zeroed buffer may not be)."""
    return b"\x01" * (mb * MB)


def held_for_a_while() -> None:
    """Held through several sampler periods, then sampled from this thread: on a loaded
    machine the sampler thread may not run at all meanwhile (CI once saw 40 MB of 80)."""
    time.sleep(20 * cost.PERIOD_S)
    cost.checkpoint()


# `timing`: a sampler thread that a busy machine may starve, and threads that wait for each other
# (issue 43): checked under load with the others.
@pytest.mark.timing
def test_memory_is_the_processes_highest_resident_size_while_the_block_ran() -> None:
    before = touched(8)  # before the block: in its start, not in what it added
    with cost.metered() as spent:
        block = touched(48)
        held_for_a_while()
        del block
    assert 40 <= spent.added_mb < 80, spent
    assert spent.peak_mb >= cost.resident_mb() + 40 > 40, spent  # the 48 MB are gone again
    assert spent.cpu_seconds >= 0 and spent.seconds > 0
    assert cost.process_peak_mb() >= spent.peak_mb - 1
    del before


def test_time_waiting_for_the_sandbox_is_not_the_graders() -> None:
    with cost.metered() as spent:
        cost.waited(1000.0)
    assert spent.seconds == 0.0
    cost.waited(5.0)  # outside any measured block: nothing to count it against


@pytest.mark.timing
def test_jobs_at_once_each_get_the_highest_point_of_their_own_interval() -> None:
    """With --jobs N the process has one resident size: each block gets its highest point
    while it ran, a neighbour's memory meanwhile included (an upper bound), never a
    neighbour's peak from before it started. The sizes leave 40 MB or more between each bound
    and what a missed point would give: the process (1 GB by then in a full run) changes its
    own resident size meanwhile, by 17 MB once beside eight busy processes (issue 43)."""
    steps = [threading.Event() for _ in range(4)]
    costs: dict[str, cost.Cost] = {}

    def first() -> None:
        with cost.metered() as spent:
            big = touched(240)
            held_for_a_while()
            del big  # its peak is over before the second block starts
            steps[0].set()
            steps[1].wait(30)
            held = touched(80)  # while the second block runs
            steps[2].set()
            steps[3].wait(30)
        costs["first"] = spent
        del held

    def second() -> None:
        steps[0].wait(30)
        with cost.metered() as spent:
            steps[1].set()
            steps[2].wait(30)
            mine = touched(80)
            held_for_a_while()
            del mine
        costs["second"] = spent
        steps[3].set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert 200 <= costs["first"].added_mb < 300, costs  # its 240 MB; 160 if it missed them
    assert 120 <= costs["second"].added_mb < 200, costs  # its 80 MB and the neighbour's 80
    assert costs["second"].peak_mb < costs["first"].peak_mb, costs


def test_the_summary_names_the_costliest_submission() -> None:
    costs = {("ann", "02_mini"): (cost.Cost(0.5, 0.4, 220.0, 20.0),
                                  cost.Cost(1.5, 1.4, 260.0, 60.0)),
             ("bob", "02_mini"): (cost.Cost(0.2, 0.2, 290.0, 90.0), None),
             ("cid", "02_mini"): (cost.Cost(0.1, 0.1, 205.0, 5.0), None)}
    summary = Summary([], 3, 0, 10.0, True, costs=costs, peak_mb=321.4)
    assert cost_lines(summary) == [
        "the grader's own work per submission (outside the sandbox, its feedback page "
        "included): median 0.2 s, most 2.0 s (ann, 02_mini); resident memory at most 290 MB "
        "(bob, 02_mini: 90 MB above where it began); the grading process's resident peak: "
        "321 MB"]
    assert cost_lines(Summary([], 0, 3, 1.0, True)) == []  # nothing graded now
    assert cost_lines(summary)[0] in summary_text(summary)
    assert cost.Cost(1.23456, 0.5, 212.345, 12.345).rounded() == {
        "seconds": 1.235, "cpu_seconds": 0.5, "peak_mb": 212.3, "added_mb": 12.3}


def test_where_a_notebooks_time_went_is_split_and_the_runners_word_is_clipped() -> None:
    with cost.metered() as spent:
        cost.ran(2.0, 0.5, 1.0)
        cost.ran(1.0, 5.0, 5.0)  # a runner that claims more than the sandbox took
    assert (spent.sandbox_seconds, spent.kernel_seconds, spent.cells_seconds) == (3.0, 1.5, 1.0)
    assert spent.seconds < 1.0  # the sandbox's three seconds are not the grader's own work
    assert spent.rounded()["kernel_seconds"] == 1.5
    costs = {("ann", "02_mini"): (cost.Cost(1.0, sandbox_seconds=6.0, kernel_seconds=1.0,
                                            cells_seconds=3.0), cost.Cost(0.5)),
             ("bob", "02_mini"): (cost.Cost(0.5), None)}  # refused: no notebook ran
    assert split_lines(costs) == [
        "where the time went (1 notebook runs, seconds summed; the speed tasks apart): "
        "sandbox and runner start and stop 2.0 s (25%), kernel start 1.0 s (12%), cells "
        "3.0 s (38%), reading and judging 1.5 s (19%), feedback pages 0.5 s (6%)"]
    assert split_lines({("bob", "02_mini"): (cost.Cost(0.5), None)}) == []
