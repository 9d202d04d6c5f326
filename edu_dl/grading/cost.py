"""The grader's own cost per submission: its seconds, its thread's CPU seconds, its memory.

The sandbox's limits bound what a student's code costs; this measures what the grader itself
spends reading, parsing, restoring, judging and rendering a submission (issue 35: one notebook
once cost the grader 142 s and 909 MB, outside every budget).

- seconds: wall time of the submission's grading, less the time spent waiting for its
  sandbox (:func:`waited`) and measuring its speed tasks (:func:`speed_measured`);
- speed seconds: wall time its speed tasks' measurements took (sandboxed runs of the student's
  function and of the reference), reported apart: a second per run, seconds per speed part;
- CPU seconds: ``time.thread_time`` of the thread that graded it: its own, even with
  ``--jobs N`` threads at once;
- memory: the grading process's resident size, sampled every :data:`PERIOD_S` while the
  submission was graded: ``peak_mb`` its highest (an upper bound on what the submission
  needed: the process's own baseline, and with ``--jobs N`` its neighbours', are in it) and
  ``added_mb`` how far that is above where it began. Not tracemalloc: tracing every allocation
  made a feedback page four times slower to render, the measurement costing more than what it
  measured. Not the kernel's high-water mark either: resetting it (``clear_refs``) would take
  the process's real peak from whoever reads it later. A spike shorter than a period can be
  missed, and so can one the sampler thread was not scheduled for on a loaded machine: the
  grader therefore also samples at its own stage boundaries (:func:`checkpoint`), where it
  holds the most. The process's own peak (:func:`process_peak_mb`) is never missed.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

MB = 1 << 20
PERIOD_S = 0.01
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mb() -> float:
    """The process's resident size now (Linux: /proc/self/statm); else its peak so far."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE / MB
    except (OSError, ValueError, IndexError):
        return process_peak_mb()


def process_peak_mb() -> float:
    """The most resident memory this process has held (Linux: ru_maxrss is in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Cost:
    """What the grader spent on one submission (or one of its feedback pages)."""

    seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_mb: float = 0.0
    added_mb: float = 0.0
    speed_seconds: float = 0.0  # measuring speed tasks: not in ``seconds``
    # The notebook's run (not in ``seconds``): the sandbox's wall time, and of it what the
    # runner says went to starting the kernel and to the cells (clipped to the sandbox's time).
    sandbox_seconds: float = 0.0
    kernel_seconds: float = 0.0
    cells_seconds: float = 0.0

    def plus(self, other: Cost) -> Cost:
        """Two stages of one submission: times add up, the memory is the larger."""
        return Cost(self.seconds + other.seconds, self.cpu_seconds + other.cpu_seconds,
                    max(self.peak_mb, other.peak_mb), max(self.added_mb, other.added_mb),
                    self.speed_seconds + other.speed_seconds,
                    self.sandbox_seconds + other.sandbox_seconds,
                    self.kernel_seconds + other.kernel_seconds,
                    self.cells_seconds + other.cells_seconds)

    def rounded(self) -> dict[str, float]:
        """The cost as a gradebook state file keeps it: the times that are not zero."""
        spent = {"seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                 "peak_mb": round(self.peak_mb, 1), "added_mb": round(self.added_mb, 1)}
        for name in ("speed_seconds", "sandbox_seconds", "kernel_seconds", "cells_seconds"):
            if getattr(self, name):
                spent[name] = round(getattr(self, name), 3)
        return spent


class _Meter:
    def __init__(self, start_mb: float) -> None:
        self.start_mb = self.highest_mb = start_mb
        self.waited = 0.0
        self.speed = 0.0
        self.sandbox = self.kernel = self.cells = 0.0


_LOCK = threading.Lock()
_ACTIVE: list[_Meter] = []
_SAMPLING = [False]  # whether a sampler thread runs (one for all meters)
_CURRENT: ContextVar[_Meter | None] = ContextVar("grader_cost_meter", default=None)


def _sample() -> float:
    """The resident size now, folded into every running meter (with _LOCK held)."""
    now = resident_mb()
    for meter in _ACTIVE:
        meter.highest_mb = max(meter.highest_mb, now)
    return now


def _sampler() -> None:
    """Samples while any meter runs; the last meter to end lets it stop."""
    while True:
        with _LOCK:
            if not _ACTIVE:
                _SAMPLING[0] = False
                return
            _sample()
        time.sleep(PERIOD_S)


@contextmanager
def metered() -> Iterator[Cost]:
    """Measure the block: the Cost it yields is filled in when the block ends."""
    cost = Cost()
    with _LOCK:
        meter = _Meter(resident_mb())
        _ACTIVE.append(meter)
        if not _SAMPLING[0]:
            _SAMPLING[0] = True
            threading.Thread(target=_sampler, name="grader-cost", daemon=True).start()
    token = _CURRENT.set(meter)
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield cost
    finally:
        cost.cpu_seconds = time.thread_time() - cpu
        cost.seconds = max(0.0, time.perf_counter() - wall - meter.waited)
        cost.speed_seconds = meter.speed
        cost.sandbox_seconds, cost.kernel_seconds = meter.sandbox, meter.kernel
        cost.cells_seconds = meter.cells
        _CURRENT.reset(token)
        with _LOCK:
            _sample()
            _ACTIVE.remove(meter)
        cost.peak_mb = meter.highest_mb
        cost.added_mb = meter.highest_mb - meter.start_mb


def checkpoint() -> None:
    """Sample now, from the calling thread: what is held at this point counts for every
    running meter, whether or not the sampler thread got the CPU meanwhile."""
    with _LOCK:
        _sample()


def waited(seconds: float) -> None:
    """The block being measured waited ``seconds`` for a sandbox: not the grader's own time."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.waited += seconds


def ran(sandbox_s: float, kernel_s: float, cells_s: float) -> None:
    """The block being measured ran its notebook: ``sandbox_s`` of wall time (measured here,
    and not the grader's own), of which the runner says ``kernel_s`` went to starting the kernel
    and ``cells_s`` to the cells. The runner's word is clipped to what was measured here."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.waited += sandbox_s
        meter.sandbox += sandbox_s
        meter.kernel += min(kernel_s, sandbox_s)
        meter.cells += min(cells_s, max(0.0, sandbox_s - min(kernel_s, sandbox_s)))


def speed_measured(seconds: float) -> None:
    """The block being measured spent ``seconds`` measuring a speed task (sandboxed runs):
    reported apart (``Cost.speed_seconds``), not as the grader's own time."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.waited += seconds
        meter.speed += seconds
