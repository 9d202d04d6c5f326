"""Exercise 20's parts (the KV cache append, the paged cache's block allocator, the continuous
batching scheduler): the solution passes (test_parts_trusted.py runs every part's), each typical
mistake gets its own hint and a correct answer none, the contract's examples hold, and no solution
is lecture 20's (or edu_dl's) code re-typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

from edu_dl.grading.authoring.hints import first_hint_found

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "20_serving.ipynb"
SOLUTION = solution_namespace("20_serving.ipynb")
kv_cache_append = SOLUTION["kv_cache_append"]
allocate_blocks = SOLUTION["allocate_blocks"]
next_batch = SOLUTION["next_batch"]
FUNCTIONS = {"ex20.kv_cache_append": kv_cache_append, "ex20.allocate_blocks": allocate_blocks,
             "ex20.next_batch": next_batch}


def assert_hint(part_id: str, fn: Any, hint: str) -> None:
    ok, out = checked(part_id, fn)
    if not ok and hint not in out:  # a mistake the visible cases miss is the hidden cases' job
        ok, out = checked(part_id, fn, hidden=True)
    assert not ok and hint in out, out


# --------------------------------------------------------------------------- 1. the cache


@pytest.mark.parametrize(("fn", "hint"), [
    (lambda kc, vc, kn, vn: (np.concatenate([kc, kn], 0), np.concatenate([vc, vn], 0)),
     "appended along the batch axis"),
    (lambda kc, vc, kn, vn: (np.concatenate([kc, kn], 1), np.concatenate([vc, vn], 1)),
     "appended along the heads axis"),
    (lambda kc, vc, kn, vn: (np.concatenate([kc, kn], -1), np.concatenate([vc, vn], -1)),
     "appended along head_dim"),
    (lambda kc, vc, kn, vn: (np.concatenate([kn, kc], 2), np.concatenate([vn, vc], 2)),
     "the new positions went first"),
    (lambda kc, vc, kn, vn: kv_cache_append(kc, vc, kn, vn)[::-1], "keys and values swapped"),
    (lambda kc, vc, kn, vn: (np.concatenate([kc, kn], 2), np.concatenate([vc, kn], 2)),
     "the value cache got the new keys"),
    (lambda kc, vc, kn, vn: (kn.copy(), vn.copy()), "only the new step's keys and values"),
])
def test_append_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex20.kv_cache_append", fn, hint)


def test_a_cache_that_drops_its_oldest_positions_gets_its_hint() -> None:
    """Where n == t it equals returning the new step alone (that hint comes first there); on a
    decode step, its own."""
    part = course_part("ex20.kv_cache_append")
    args = part.cases(np.random.default_rng(0), False)[1]
    assert args[0].shape[2] > args[2].shape[2]
    expected = part.expected(*args)
    got = tuple(a[:, :, args[2].shape[2]:] for a in expected)
    found = first_hint_found(part.hints, expected, got, args)
    assert found and "the oldest positions were dropped" in found[1]


def test_the_append_example() -> None:
    rng = np.random.default_rng(0)
    kc, vc, kn, vn = (rng.standard_normal(s) for s in [(1, 2, 5, 4)] * 2 + [(1, 2, 1, 4)] * 2)
    k, v = kv_cache_append(kc, vc, kn, vn)
    assert k.shape == v.shape == (1, 2, 6, 4) and np.array_equal(k[:, :, 5], kn[:, :, 0])


# --------------------------------------------------------------------------- 2. the allocator


def allocator(count: str = "ceil", free: bool = True, reuse: bool = True, clear: bool = True,
              keep: bool = True) -> Any:
    """A student's allocator with one of the usual slips."""
    def fn(events, num_blocks, block_size, max_blocks):
        available, tables, stale, fresh = list(range(num_blocks)), {}, {}, 0
        for seq, length in events.tolist():
            table = tables.setdefault(seq, [])
            if length == 0:
                if free:
                    available = sorted(available + table)
                if not clear:
                    stale[seq] = list(table)
                tables[seq] = []
                continue
            stale.pop(seq, None)
            need = {"ceil": -(-length // block_size), "floor": length // block_size,
                    "plus1": length // block_size + 1}[count]
            if not keep:
                table.clear()
            while len(table) < need:
                block = available.pop(0) if reuse else fresh
                if not reuse:
                    available.remove(fresh)
                    fresh += 1
                table.append(block)
        out = np.full((int(events[:, 0].max()) + 1, max_blocks), -1)
        for seq, table in tables.items():
            row = table or stale.get(seq, [])
            out[seq, :len(row)] = row
        return out, len(available)
    return fn


@pytest.mark.parametrize(("options", "hint"), [
    ({"count": "floor"}, "too few blocks"),
    ({"count": "plus1"}, "one block too many when n is a multiple"),
    ({"free": False}, "were never freed"),
    ({"reuse": False}, "freed blocks must be reused"),
    ({"clear": False}, "row must be all -1"),
    ({"keep": False}, "a sequence keeps the blocks it holds"),
])
def test_allocate_mistakes_get_their_hints(options: dict[str, Any], hint: str) -> None:
    assert_hint("ex20.allocate_blocks", allocator(**options), hint)


def test_the_allocate_example() -> None:
    events = np.array([[0, 3], [1, 5], [0, 4], [0, 5], [1, 0], [0, 9]])
    tables, free = allocate_blocks(events, 8, 4, 3)
    assert tables.tolist() == [[0, 3, 1], [-1, -1, -1]] and free == 5


def test_the_visible_allocate_cases_hold_exact_multiples_and_reuse() -> None:
    cases = course_part("ex20.allocate_blocks").cases(np.random.default_rng(0), False)
    assert any((events[:, 1] % b == 0).any() and (events[:, 1] > 0).any()
               for events, _, b, _ in cases)
    assert all((events[:, 1] == 0).any() for events, _, _, _ in cases[:3])


# --------------------------------------------------------------------------- 3. the scheduler


def scheduler(decode: bool = True, skip: bool = False, strict: bool = False,
              seats_running: bool = True, seats: bool = True, budget: bool = True) -> Any:
    def fn(running, waiting, token_budget, max_seqs):
        left = token_budget - (running if decode else 0)
        room = (max_seqs - (running if seats_running else 0)) if seats else 10**9
        chosen = []
        for i, prompt in enumerate(waiting):
            fits = (prompt < left if strict else prompt <= left) or not budget
            if not fits or room < 1:
                if skip and room >= 1:
                    continue
                break
            chosen.append(i)
            left, room = left - prompt, room - 1
        return np.array(chosen, dtype=np.int64)
    return fn


@pytest.mark.parametrize(("options", "hint"), [
    ({"decode": False}, "the running sequences use the budget too"),
    ({"skip": True}, "first come, first served"),
    ({"strict": True}, "prompt <= left, not <"),
    ({"seats_running": False}, "max_seqs counts the running sequences too"),
    ({"seats": False}, "max_seqs was ignored"),
    ({"budget": False}, "the token budget was ignored"),
])
def test_next_batch_mistakes_get_their_hints(options: dict[str, Any], hint: str) -> None:
    assert_hint("ex20.next_batch", scheduler(**options), hint)


def test_the_next_batch_examples() -> None:
    assert next_batch(3, np.array([5, 8, 2]), 16, 8).tolist() == [0, 1]
    assert next_batch(2, np.array([20, 3]), 16, 8).tolist() == []


# --------------------------------------------------------------------------- every part


@pytest.mark.parametrize("part_id", list(FUNCTIONS))
def test_a_correct_answer_gets_no_hint(part_id: str) -> None:
    assert_no_hint_for(part_id, FUNCTIONS[part_id])


def test_every_hint_is_asked_for_here() -> None:
    """No hint is dead text: a test above asks for a fragment of each one's message."""
    assert_every_hint_asked_for(__file__, FUNCTIONS)


# --------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_code_retyped() -> None:
    """No two consecutive lines of a solution appear together in a lecture (20's own cache,
    block pool and server included) or in edu_dl."""
    assert_nothing_retyped(NOTEBOOK, {"kv_cache_append", "allocate_blocks", "next_batch",
                           "predict_most_empty_slots"},
                           lecture="20_serving")
