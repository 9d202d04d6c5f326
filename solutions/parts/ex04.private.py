"""Exercise 4, timing the GPU: a timer for asynchronous work (``ex04.stream_timer``).

The oracle is the kernel's own duration. The timer is run by a call wrapper
(``edu_dl.harness.ex04.call_timer``, public like the timer's comparison, its source check and the
hint rules) against ``edu_dl.gpu.timing.SimulatedAsyncDevice``, a device queue on a simulated
clock that the timer is handed as ``clock``, with launches that cost the host a share of a
kernel's time and return without waiting for the kernel, work still running when the timer is
called and a slow first launch (a warm-up cost). Nothing sleeps: every timer reads exactly what
the simulation says, so its verdict and hint do not depend on how busy the machine is. The timer
asked for is the device's time per kernel in a stream of back-to-back launches, where the
lecture's timer synchronizes after every launch and so counts each launch's host cost.

Judged outside the sandbox: the timer's result against the kernel's duration (a correct timer
reads kernel_s (1 + LAUNCH_SHARE / repeats) on the simulated clock, never less); from the
submitted source, that the timer calls its ``synchronize`` and ``clock`` arguments and looks
inside neither. How often it launched, synchronized and read the clock in the sandbox is
check()'s feedback only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.spec import Part
from edu_dl.harness.ex04 import (
    LAUNCH_SHARE,
    MIN_REPEATS,
    BelowFraction,
    ExceedsByArgument,
    NearMultiple,
    call_timer,
    timer_compare,
    timer_source,
)

Case = tuple[Any, ...]


def _timer_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(kernel_s, warmup, repeats, backlog_s, first_extra_s): the backlog is work launched before
    the timer is called and still running; the first launch costs first_extra_s more. At least
    MIN_REPEATS repeats, so one launch's host cost, spread over them, stays inside the window; a
    backlog large enough that counting it, spread over 12 repeats, leaves the window of a 60 ms
    kernel."""
    if not hidden:
        return [(0.04, 1, 10, 0.0, 0.0), (0.03, 1, 8, 0.4, 0.0), (0.05, 2, 8, 0.0, 0.3),
                (0.03, 1, 10, 0.4, 0.2)]
    cases: list[Case] = []
    for backlog, first in ((0.4, 0.0), (0.0, 0.3), (0.4, 0.2)):
        cases.append((round(float(rng.uniform(0.03, 0.06)), 3), int(rng.integers(1, 3)),
                      int(rng.integers(MIN_REPEATS, 13)), backlog, first))
    return cases


def _timer_expected(kernel_s: float, warmup: int, repeats: int, backlog_s: float,
                    first_extra_s: float) -> float:
    return float(kernel_s)


TIMER_HINTS = (
    BelowFraction(
        "the clock stopped while the device was still working: launch() returns once the kernel "
        "is queued, not done; call synchronize() before you read the clock", fraction=0.9),
    NearMultiple(
        "that is a launch plus its kernel: synchronizing after every launch leaves the device "
        "idle while the host launches the next one; launch the repeats back to back and "
        "synchronize once at the end", factor=1 + LAUNCH_SHARE, within=0.2),
    # the total holds one launch's host cost too (LAUNCH_SHARE of a kernel)
    NearMultiple("return the time of ONE kernel (the total divided by repeats), not their total",
                 factor_arg=2, within=1.0),
    ExceedsByArgument(
        "work queued before your clock started was still running, and you counted it (work "
        "launched before the call, or your own warm-up launches): synchronize() before starting "
        "the clock", argument=3, per_arg=2, fraction=0.8, when=lambda e, a: float(a[3]) > 0),
)


PARTS = [
    Part(
        id="ex04.stream_timer", points=3, cases=_timer_cases, expected=_timer_expected,
        compare=timer_compare, call=call_timer, hints=TIMER_HINTS, timeout_s=30.0,
        source_check=timer_source,
        arg_names=("kernel_s", "warmup", "repeats", "backlog_s", "first_extra_s"),
    ),
]
