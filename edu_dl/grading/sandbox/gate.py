"""Grading ahead's gate: sandboxes start (their runner and kernel boot) while others run, and
each waits, nothing of the student's run yet, for one of a batch's ``--jobs`` slots before its
first cell. Slots are given in the batch's order (each submission's ticket is its place in it),
so grading ahead runs the notebooks in the order grading one at a time does: which kernel
happened to boot first decides nothing, and a Ctrl-C stops the same submissions."""

from __future__ import annotations

import threading
from dataclasses import dataclass


class Turns:
    """``slots`` slots, taken by tickets 0, 1, 2, ... strictly in order. A ticket that will never
    take its turn (its submission failed before its sandbox, or was stopped while it waited)
    is passed, so the next one does not wait for it."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"Turns: slots must be at least 1, not {slots}")
        self._changed = threading.Condition()
        self._free = slots
        self._next = 0  # the ticket whose turn it is
        self._passed: set[int] = set()  # later tickets given up before their turn

    @property
    def free(self) -> int:
        with self._changed:
            return self._free

    def take(self, ticket: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``ticket``'s turn and a free slot; True: the slot
        is taken (give it back with ``give_back``)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._free > 0 and self._next == ticket,
                                          timeout):
                return False
            self._free -= 1
            self._advance()
            return True

    def give_back(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()

    def pass_turn(self, ticket: int) -> None:
        """``ticket`` will not take its turn (a no-op once it has taken it)."""
        with self._changed:
            if ticket == self._next:
                self._advance()
            elif ticket > self._next:
                self._passed.add(ticket)

    def _advance(self) -> None:
        self._next += 1
        while self._next in self._passed:
            self._passed.discard(self._next)
            self._next += 1
        self._changed.notify_all()


@dataclass(frozen=True)
class Gate:
    """One submission's place at the gate: its sandbox's first cell waits for ``ticket``'s turn
    at ``turns``. The wait is not the run's: its wall time counts from the gate's opening."""

    turns: Turns
    ticket: int
