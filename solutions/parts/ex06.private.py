"""Exercise 6, feeding the GPU: the ideal pipeline, a prefetching loader, and the epoch of a
bounded pipeline whose reads are uneven (what the prefetch depth is for).

The oracles: ``bench.loader.finish_rows`` (the benchmark's ideal), and an event-by-event replay
of one reader thread and a bounded queue (the pipeline's epoch). The
prefetching generator is run by a call wrapper that feeds it a source it can watch: which thread
reads, how far ahead, in which order.

Judged outside the sandbox: every value against the oracle; for prefetch, the batches received in
order (the values) and, from the submitted source of the generator, that it starts a thread
(``threading.Thread`` or an executor) and bounds what it reads ahead (a sized ``queue.Queue``, a
semaphore or a condition); for prefetch_errors, the batches received before the error themselves,
the error's type and message. What the watched source observes in the sandbox (which thread read,
how far ahead) is check()'s feedback only. The private half: oracles, hidden cases and mistake
replays; the calls, the source checks and the generic hints are public (``edu_dl.harness.ex06``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Equals, Less, Mistake, Permuted
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness import ex06 as harness
from edu_dl.harness.ex06 import (
    ERRORS,
    IDEAL_SOURCE,
    AnyAnswer,
    Differs,
    ShorterWhereSame,
    call_error,
    call_prefetch,
    prefetch_source,
)

Case = tuple[Any, ...]
EXACT = tolerance(rtol=1e-9, atol=0.0)
# The watched source and its helpers, under their old names here (tests replay the call with them).
_Watched, _message, _stacked = harness.Watched, harness.error_message, harness.stacked


# --------------------------------------------------------------------------- the ideal epoch


def _ideal_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (read_s, compute_s, n, readers) per batch; readers = 0: the loop reads, nothing overlaps
    cases: list[Case] = [(0.015, 0.010, 20, 0), (0.015, 0.010, 20, 1), (0.015, 0.010, 20, 2),
                         (0.005, 0.010, 10, 1)]
    if hidden:
        cases = [(float(rng.uniform(1e-3, 0.05)), float(rng.uniform(1e-3, 0.05)),
                  int(rng.integers(1, 200)), int(rng.integers(0, 9))) for _ in range(5)]
        cases.append((0.02, 0.01, 1, 4))  # one batch: nothing to overlap
    return cases


def _ideal_expected(read_s: float, compute_s: float, n: int, readers: int) -> float:
    from edu_dl.bench.loader import LoaderConfig, LoaderResult, LoaderRow, finish_rows

    row = LoaderRow("exercise", "ideal", readers, "", epoch_s=0.0)
    result = LoaderResult(LoaderConfig("", batches=n), read_s=n * read_s,
                          compute_s=n * compute_s, rows=[row])
    finish_rows(result)
    return row.ideal_s


# --------------------------------------------------------------------------- prefetch


def _prefetch_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(batches stacked on axis 0, depth): batch k is data[k]."""
    sizes = [(8, 1), (8, 2), (6, 4), (1, 3)]
    if hidden:
        sizes = [(int(rng.integers(2, 12)), int(rng.integers(1, 6))) for _ in range(3)]
        sizes += [(0, 2), (5, 1)]  # no batches at all; the smallest queue
    return [(np.arange(n * 3, dtype=np.float64).reshape(n, 3) + rng.integers(0, 100), depth)
            for n, depth in sizes]


def _prefetch_expected(data: np.ndarray, depth: int) -> tuple[np.ndarray, int]:
    return np.array(data, copy=True), len(data)


# --------------------------------------------------------------------------- errors


def _error_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(data, depth, fail_at, error type name): the source raises when asked for batch fail_at."""
    cases: list[Case] = [(np.arange(12.0).reshape(6, 2), 2, 3, "ValueError"),
                         (np.arange(8.0).reshape(4, 2), 1, 0, "OSError")]
    if hidden:
        cases = []
        for name in ("EOFError", "KeyError", "ValueError"):
            n = int(rng.integers(1, 9))
            cases.append((rng.standard_normal((n, 2)), int(rng.integers(1, 4)),
                          int(rng.integers(0, n + 1)), name))
    return cases


def _error_expected(data: np.ndarray, depth: int, fail_at: int,
                    name: str) -> tuple[np.ndarray, str, str]:
    data = np.asarray(data)
    return data[:fail_at].copy(), name, str(ERRORS[name](harness.error_message(fail_at)))


# --------------------------------------------------------------------------- shuffled batches


# --------------------------------------------------------------------------- a bounded pipeline


def _pipeline_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (read_s per batch, compute_s, depth): steady reads, then one slow read the queue must cover
    def reads(n: int, read: float, slow_at: int | None = None, slow: float = 0.0) -> np.ndarray:
        out = np.full(n, read)
        if slow_at is not None:
            out[slow_at] = slow
        return out

    if not hidden:
        # The 10-batch case first: there every mistake below gives its own epoch.
        return [(reads(6, 0.010), 0.020, 1), (reads(6, 0.030), 0.020, 2),
                (reads(10, 0.005, 7, 0.100), 0.020, 2), (reads(8, 0.005, 5, 0.060), 0.020, 1),
                (reads(8, 0.005, 5, 0.060), 0.020, 3)]
    cases: list[Case] = []
    for _ in range(4):
        n = int(rng.integers(3, 30))
        read = rng.uniform(0.001, 0.03, n)
        read[int(rng.integers(1, n))] = float(rng.uniform(0.05, 0.2))  # a slow disk moment
        cases.append((read, float(rng.uniform(0.005, 0.03)), int(rng.integers(1, 6))))
    cases.append((reads(1, 0.02), 0.01, 3))  # one batch: nothing to overlap
    return cases


def _pipeline_epoch(read_s: np.ndarray, compute_s: float, depth: int, *,
                    slots: int | None = None, serial: bool = False) -> float:
    """When the last step ends: one reader thread puts batch k into a queue of ``depth`` slots
    once batch k - depth has been taken out; the loop takes each batch in turn, as soon as it is
    there and the previous step is over. ``slots`` replays a queue of another size (None:
    ``depth``; 0: unbounded), ``serial`` the loop that reads for itself."""
    reads = np.asarray(read_s, dtype=float).reshape(-1)
    if serial:
        return float(reads.sum() + len(reads) * compute_s)
    size = depth if slots is None else slots
    taken: list[float] = []
    put = step_end = 0.0
    for k, read in enumerate(reads):
        read_end = put + read  # the reader starts a read when its last put went through
        put = max(read_end, taken[k - size]) if size and k >= size else read_end
        taken.append(max(put, step_end))
        step_end = taken[-1] + compute_s
    return float(step_end)


def _pipeline_mistake(message: str, *, delta: int = 0, **variant: Any) -> Mistake:
    """The epoch with the mistake ``variant``, or a queue of depth + ``delta`` slots."""
    def replay(e: Any, a: Case) -> float | None:
        if delta and a[2] + delta < 1:
            return None
        slots = {"slots": a[2] + delta} if delta else {}
        wrong = _pipeline_epoch(a[0], a[1], a[2], **variant, **slots)
        return None if abs(wrong - float(e)) <= 1e-9 * max(abs(float(e)), 1e-12) else wrong

    return Mistake(replay, message, rtol=1e-9, atol=1e-12)


PIPELINE_HINTS = (
    _pipeline_mistake("your queue never fills: the reader must wait (put blocks) while `depth` "
                      "batches are already waiting, so a slow read catches up with the loop",
                      slots=0),
    _pipeline_mistake("one slot too many: the reader may put batch k only once batch "
                      "k - depth has been taken out", delta=1),
    _pipeline_mistake("one slot too few: with depth slots, batch k waits for batch k - depth "
                      "(not k - depth + 1) to be taken out", delta=-1),
    _pipeline_mistake("nothing overlaps in your epoch: the reader thread reads while the loop "
                      "computes", serial=True),
)


PARTS = [
    Part(
        id="ex06.ideal_epoch", points=1, cases=_ideal_cases, expected=_ideal_expected,
        compare=EXACT, arg_names=("read_s", "compute_s", "n", "readers"),
        source_check=IDEAL_SOURCE,
        hints=(
            AnyAnswer("readers = 0: the loop reads each batch itself, nothing overlaps: "
                      "n * (read + compute)", when=lambda e, a: a[3] == 0),
            Mistake(lambda e, a: a[2] * max(a[0] / a[3], a[1]) if a[3] != 0 else None,
                    "n * max(read / readers, compute) is the steady state: the first read and "
                    "the last compute cannot overlap anything (read + compute + (n - 1) * "
                    "max(...))", rtol=1e-5, atol=1e-8),
            Mistake(lambda e, a: a[0] + a[1] + (a[2] - 1) * max(a[0], a[1]),
                    "readers work in parallel: a new batch arrives every read / readers seconds",
                    rtol=1e-5, atol=1e-8),
        ),
    ),
    Part(
        id="ex06.prefetch", points=3, cases=_prefetch_cases, expected=_prefetch_expected,
        call=call_prefetch, source_check=prefetch_source, arg_names=("batches", "depth"),
        output_names=("batches received", "count"),
        hints=(
            Less("batches are missing: the generator must deliver every batch the source "
                 "yields, the last ones included", output=1),
            Permuted("the right batches in the wrong order: one reader thread and one FIFO "
                     "queue keep the order", output=0, axis=0),
        ),
    ),
    Part(
        id="ex06.prefetch_errors", points=1, cases=_error_cases, expected=_error_expected,
        call=call_error, arg_names=("batches", "depth", "fail_at", "error"),
        output_names=("batches before the error", "error type", "error message"),
        hints=(
            Equals("the source raised, but your generator ended quietly: catch the exception in "
                   "the reader thread, put it in the queue, and raise it in the generator",
                   output=1, value="no error"),
            ShorterWhereSame("the batches read before the failure must still arrive, in order, "
                             "before the error is raised", output=0, same=1),
            Differs("re-raise the reader's own exception (raise item), not a new one of another "
                    "type", output=1),
        ),
    ),
    Part(
        id="ex06.pipeline_epoch", points=2, cases=_pipeline_cases, expected=_pipeline_epoch,
        compare=EXACT, arg_names=("read_s", "compute_s", "depth"), hints=PIPELINE_HINTS,
    ),
]
