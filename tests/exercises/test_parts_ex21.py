"""Exercise 21's parts (GPipe and 1F1B orders, a pipeline's timeline, the micro-batches a stage
holds, FSDP's dim-0 shards): the solution passes (test_parts_trusted.py runs every part's), each
typical mistake gets its own hint and a correct answer none, the contract's examples hold, the
oracles agree with what lecture 21's real two-process run printed and with torch.chunk, and no
solution is lecture 21's (or edu_dl's) code re-typed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_every_hint_asked_for,
    assert_no_hint_for,
    assert_nothing_retyped,
    checked,
    course_part,
    solution_namespace,
)

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "21_pipeline_and_fsdp.ipynb"
LECTURE = ROOT / "lectures" / "21_pipeline_and_fsdp.ipynb"
SOLUTION = solution_namespace("21_pipeline_and_fsdp.ipynb")
gpipe_schedule = SOLUTION["gpipe_schedule"]
one_f_one_b_schedule = SOLUTION["one_f_one_b_schedule"]
pipeline_timeline = SOLUTION["pipeline_timeline"]
peak_in_flight = SOLUTION["peak_in_flight"]
fsdp_shard = SOLUTION["fsdp_shard"]
FUNCTIONS = {"ex21.gpipe_schedule": gpipe_schedule,
             "ex21.one_f_one_b_schedule": one_f_one_b_schedule,
             "ex21.pipeline_timeline": pipeline_timeline,
             "ex21.peak_in_flight": peak_in_flight, "ex21.fsdp_shard": fsdp_shard}


def assert_hint(part_id: str, fn: Any, hint: str) -> None:
    ok, out = checked(part_id, fn)
    if not ok and hint not in out:  # a mistake the visible cases miss is the hidden cases' job
        ok, out = checked(part_id, fn, hidden=True)
    assert not ok and hint in out, out


# --------------------------------------------------------------------------- 1. the schedules


def zero_based(fn: Any) -> Any:
    return lambda p, m: np.sign(fn(p, m)) * (np.abs(fn(p, m)) - 1)


def one_f_one_b(warmup: Any, backward_first: bool = False) -> Any:
    def fn(p: int, m: int) -> np.ndarray:
        rows = []
        for s in range(p):
            warm = min(m, warmup(s, p))
            row, f, b = list(range(1, warm + 1)), warm, 0
            while f < m:
                f, b = f + 1, b + 1
                row += [-b, f] if backward_first else [f, -b]
            rows.append(row + [-i for i in range(b + 1, m + 1)])
        return np.array(rows)
    return fn


@pytest.mark.parametrize(("fn", "hint"), [
    (lambda p, m: np.array([list(range(1, m + 1)) + list(range(-m, 0))] * p),
     "GPipe's backwards run in micro-batch order"),
    (lambda p, m: one_f_one_b_schedule(p, m), "that is 1F1B's order"),
    (zero_based(gpipe_schedule), "micro-batches are numbered 1..m"),
])
def test_gpipe_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex21.gpipe_schedule", fn, hint)


@pytest.mark.parametrize(("fn", "hint"), [
    (lambda p, m: gpipe_schedule(p, m), "that is GPipe's order"),
    (one_f_one_b(lambda s, p: p - s), "one forward too many in the warm-up"),
    (one_f_one_b(lambda s, p: p - 1), "every stage warmed up as long as the first"),
    (one_f_one_b(lambda s, p: s), "the warm-up runs the wrong way"),
    (one_f_one_b(lambda s, p: p - s - 1, backward_first=True),
     "each pair is a forward THEN a backward"),
    (zero_based(one_f_one_b_schedule), "micro-batches are numbered 1..m"),
])
def test_one_f_one_b_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex21.one_f_one_b_schedule", fn, hint)


def test_the_schedule_examples() -> None:
    assert gpipe_schedule(2, 3).tolist() == [[1, 2, 3, -1, -2, -3]] * 2
    assert one_f_one_b_schedule(3, 4).tolist() == [
        [1, 2, 3, -1, 4, -2, -3, -4], [1, 2, -1, 3, -2, 4, -3, -4], [1, -1, 2, -2, 3, -3, 4, -4]]


def lecture_printed() -> str:
    nb = nbformat.read(LECTURE, as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))


def test_the_oracles_give_the_orders_lecture_21_ran() -> None:
    """The lecture printed each stage's order as torch.distributed.pipelining ran it on two
    processes with 8 micro-batches: the oracles must give the same."""
    text = lecture_printed()
    for name, part_id in (("GPipe", "ex21.gpipe_schedule"),
                          ("1F1B", "ex21.one_f_one_b_schedule")):
        rows = re.findall(rf"^{name}\s+stage (\d): ((?:[FB]\d+ ?)+)$", text, re.MULTILINE)
        assert [int(s) for s, _ in rows] == [0, 1], text
        ran = [[int(step[1:]) * (1 if step[0] == "F" else -1) for step in row.split()]
               for _, row in rows]
        assert course_part(part_id).expected(2, 8).tolist() == ran


def test_the_oracle_counts_the_micro_batches_lecture_21_measured() -> None:
    text = lecture_printed()
    measured = {(name, int(s)): float(n) for name, s, n in re.findall(
        r"^(GPipe|1F1B)\s+stage (\d): peak .* = ([\d.]+) micro-batches", text, re.MULTILINE)}
    assert len(measured) == 4, text
    part = course_part("ex21.peak_in_flight")
    for name, maker in (("GPipe", "ex21.gpipe_schedule"), ("1F1B", "ex21.one_f_one_b_schedule")):
        counts = part.expected(course_part(maker).expected(2, 8))
        assert [measured[(name, s)] for s in (0, 1)] == counts.tolist()


# --------------------------------------------------------------------------- 2. the timeline


def timeline(wait_forward: bool = True, wait_backward: bool = True, backward_from: int = 1,
             busy: bool = True, ends: bool = False, swap: bool = False) -> Any:
    def fn(order, t_forward, t_backward):
        if swap:
            t_forward, t_backward = t_backward, t_forward
        p, n = order.shape
        done: dict[tuple[int, int], float] = {}
        start, pos, free = np.zeros((p, n)), [0] * p, [0.0] * p
        for _ in range(p * n):
            for s in range(p):
                while pos[s] < n:
                    op = int(order[s, pos[s]])
                    dep = None
                    if op > 0 and s > 0 and wait_forward:
                        dep = (s - 1, op)
                    elif op < 0 and 0 <= s + backward_from < p and wait_backward:
                        dep = (s + backward_from, op)
                    if dep is not None and dep not in done:
                        break
                    ready = done[dep] if dep is not None else 0.0
                    begin = max(free[s], ready) if busy else ready
                    free[s] = done[(s, op)] = begin + (t_forward if op > 0 else t_backward)
                    start[s, pos[s]] = free[s] if ends else begin
                    pos[s] += 1
        return start
    return fn


@pytest.mark.parametrize(("options", "hint"), [
    ({"wait_forward": False, "wait_backward": False}, "a stage waits for its neighbours"),
    ({"wait_backward": False}, "a backward waits for its gradient"),
    ({"backward_from": -1}, "gradients flow from the last stage to the first"),
    ({"busy": False}, "a stage runs one step at a time"),
    ({"swap": True}, "forward and backward times swapped"),
    ({"ends": True}, "those are the times the steps END"),
])
def test_timeline_mistakes_get_their_hints(options: dict[str, Any], hint: str) -> None:
    assert_hint("ex21.pipeline_timeline", timeline(**options), hint)


def test_the_timeline_example_and_the_bubble_formula() -> None:
    order = np.array([[1, 2, -1, -2], [1, 2, -1, -2]])
    assert pipeline_timeline(order, 1.0, 2.0).tolist() == [[0, 1, 5, 7], [1, 2, 3, 5]]
    for p, m in [(2, 8), (4, 8), (3, 5)]:
        for order in (gpipe_schedule(p, m), one_f_one_b_schedule(p, m)):
            start = pipeline_timeline(order, 1.0, 2.0)
            end = (start + np.where(order > 0, 1.0, 2.0)).max()
            assert end == pytest.approx((m + p - 1) * 3.0)


# --------------------------------------------------------------------------- 3. in flight


@pytest.mark.parametrize(("fn", "hint"), [
    (lambda order: (order > 0).sum(axis=1), "every forward counted"),
    (lambda order: np.array([list(row).index(next(o for o in row if o < 0)) for row in order]),
     "only the forwards before the first backward"),
    (lambda order: np.zeros(len(order), dtype=np.int64), "the count at the end is always 0"),
    (lambda order: np.full(len(order), peak_in_flight(order).max()), "one answer per stage"),
])
def test_in_flight_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex21.peak_in_flight", fn, hint)


def test_the_in_flight_example() -> None:
    order = np.array([[1, 2, -1, 3, -2, -3], [1, -1, 2, -2, 3, -3]])
    assert peak_in_flight(order).tolist() == [2, 1]


# --------------------------------------------------------------------------- 4. the shards


def shard_by(split: str) -> Any:
    def fn(param, world_size):
        c = -(-param.shape[0] // world_size)
        if split == "flat":
            flat = np.zeros(-(-param.size // world_size) * world_size)
            flat[:param.size] = param.ravel()
            return flat.reshape(world_size, -1)
        pieces = (np.array_split(param, world_size) if split == "array_split" else
                  [param[r::world_size] for r in range(world_size)])
        out = np.zeros((world_size, c, *param.shape[1:]))
        for r, piece in enumerate(pieces):
            out[r, :len(piece)] = piece
        return out
    return fn


@pytest.mark.parametrize(("split", "hint"), [
    ("array_split", "np.array_split spreads the remainder"),
    ("interleaved", "each rank holds one contiguous block of rows"),
    ("flat", "FSDP2 shards each parameter along dim 0"),
])
def test_shard_mistakes_get_their_hints(split: str, hint: str) -> None:
    assert_hint("ex21.fsdp_shard", shard_by(split), hint)


def test_the_shard_example_and_torch_chunk() -> None:
    torch = pytest.importorskip("torch")
    assert fsdp_shard(np.arange(5.0), 2).tolist() == [[0, 1, 2], [3, 4, 0]]
    expected = course_part("ex21.fsdp_shard").expected
    for rows, ranks in [(10, 4), (5, 2), (3, 4), (8, 2), (7, 3)]:
        param = np.arange(rows * 2.0).reshape(rows, 2)
        chunks = torch.chunk(torch.tensor(param), ranks)  # FSDP2's split: fewer chunks if short
        shards = expected(param, ranks)
        for r in range(ranks):
            real = chunks[r].numpy() if r < len(chunks) else np.zeros((0, 2))
            assert np.array_equal(shards[r, :len(real)], real)
            assert not shards[r, len(real):].any()


# --------------------------------------------------------------------------- every part


@pytest.mark.parametrize("part_id", list(FUNCTIONS))
def test_a_correct_answer_gets_no_hint(part_id: str) -> None:
    assert_no_hint_for(part_id, FUNCTIONS[part_id])


def test_every_hint_is_asked_for_here() -> None:
    """No hint is dead text: a test above asks for a fragment of each one's message."""
    assert_every_hint_asked_for(__file__, FUNCTIONS)


# --------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_code_retyped() -> None:
    """No two consecutive lines of a solution appear together in a lecture (21's own timeline
    and measurements included) or in edu_dl."""
    assert_nothing_retyped(NOTEBOOK, {"gpipe_schedule", "one_f_one_b_schedule", "pipeline_timeline",
                           "predict_bubbles", "peak_in_flight", "fsdp_shard"},
                           lecture="21_pipeline_and_fsdp")
