"""Grading ahead's gate (sandbox.Turns): slots go to tickets strictly in the batch's order,
whichever sandbox reaches the gate first; a ticket given up passes its turn on."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edu_dl.grading.sandbox import Turns


def test_a_later_ticket_waits_for_the_earlier_one_even_with_a_free_slot() -> None:
    turns = Turns(1)
    assert not turns.take(1, timeout=0.05)  # ticket 0 has not had its turn
    assert turns.take(0, timeout=0)
    assert not turns.take(1, timeout=0.05)  # its turn, but the one slot is taken
    turns.give_back()
    assert turns.take(1, timeout=0)


def test_passed_tickets_are_skipped_in_any_order() -> None:
    turns = Turns(2)
    turns.pass_turn(2)  # before its turn: remembered
    turns.pass_turn(0)  # its turn: the next one's now
    assert turns.take(1, timeout=0)
    assert turns.take(3, timeout=0)  # 2 was passed
    turns.pass_turn(1)  # taken already: nothing changes
    assert turns.free == 0
    assert not turns.take(4, timeout=0.05)


def test_slots_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="Turns: slots must be at least 1, not 0"):
        Turns(0)


@settings(max_examples=25, deadline=None)
@given(slots=st.integers(1, 3), tickets=st.integers(1, 8), seed=st.integers(0, 2**16),
       passed=st.sets(st.integers(0, 7)))
def test_threads_arriving_in_any_order_run_in_ticket_order_within_the_slots(
        slots: int, tickets: int, seed: int, passed: set[int]) -> None:
    turns = Turns(slots)
    lock = threading.Lock()
    began: list[int] = []
    running = [0]
    most = [0]

    def submission(ticket: int) -> None:
        if ticket in passed:  # refused before its sandbox started
            turns.pass_turn(ticket)
            return
        while not turns.take(ticket, timeout=0.01):
            pass
        with lock:
            began.append(ticket)
            running[0] += 1
            most[0] = max(most[0], running[0])
        with lock:
            running[0] -= 1
        turns.give_back()

    order = list(range(tickets))
    random.Random(seed).shuffle(order)  # the order the threads reach the gate
    threads = [threading.Thread(target=submission, args=(t,)) for t in order]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a ticket never got its turn"
    assert began == [t for t in range(tickets) if t not in passed]
    assert most[0] <= slots and turns.free == slots
