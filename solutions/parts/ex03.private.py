"""Exercise 3, feeding the GPU: bytes per step, the ideal pipeline, a prefetching loader, shuffling.

The oracles: the bytes of real arrays of the shapes fed and fetched (``ndarray.nbytes``, as
``edu_dl.bench.transfer`` counts them), ``bench.loader.finish_rows`` (the benchmark's ideal), and
``edu_dl.data.DataLoader.batch_indices`` (the course's loader). The prefetching generator is run by
a call wrapper that feeds it a source it can watch: which thread reads, how far ahead, in which
order.

Judged outside the sandbox: every value against the oracle; for prefetch, the batches received in
order (the values) and, from the submitted source of the generator, that it starts a thread
(``threading.Thread`` or an executor) and bounds what it reads ahead (a sized ``queue.Queue``, a
semaphore or a condition); for prefetch_errors, the batches received before the error themselves,
the error's type and message. What the watched source observes in the sandbox (which thread read,
how far ahead) is check()'s feedback only. The private half: oracles, hidden cases and mistake
replays; the calls, the source checks and the generic hints are public (``edu_dl.harness.ex03``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.hints import Equals, EqualsArgument, Less, Mistake, Permuted
from edu_dl.grading.spec import Part, tolerance
from edu_dl.harness import ex03 as harness
from edu_dl.harness.ex03 import (
    ERRORS,
    IDEAL_SOURCE,
    SHUFFLE_SOURCE,
    AnyAnswer,
    Differs,
    SameSorted,
    ShorterWhereSame,
    call_error,
    call_prefetch,
    call_shuffle,
    flatten_batches,
    prefetch_source,
)

Case = tuple[Any, ...]
EXACT = tolerance(rtol=1e-9, atol=0.0)
FLOATS = {2: np.float16, 4: np.float32, 8: np.float64}
# The watched source and its helpers, under their old names here (tests replay the call with them).
_Watched, _message, _stacked = harness.Watched, harness.error_message, harness.stacked


# --------------------------------------------------------------------------- bytes per step


def _feed_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (N, D, H, D_out, itemsize): the lecture's network in float32 first
    cases: list[Case] = [(64, 1000, 100, 1000, 4), (32, 784, 128, 10, 8), (8, 3, 5, 2, 2)]
    if hidden:
        cases = [(int(rng.integers(1, 300)), int(rng.integers(1, 3000)), int(rng.integers(1, 500)),
                  int(rng.integers(1, 1000)), int(rng.choice([2, 4, 8]))) for _ in range(4)]
    return cases


def _feed_expected(n: int, d: int, h: int, d_out: int, itemsize: int) -> tuple[int, ...]:
    """Bytes of the arrays themselves: fed x, y, w1, w2 / fetched loss, grad_w1, grad_w2."""
    def arrays(*shapes: tuple[int, ...]) -> list[np.ndarray]:
        return [np.empty(s, dtype=FLOATS[itemsize]) for s in shapes]

    def nbytes(values: list[np.ndarray]) -> int:
        return sum(int(a.nbytes) for a in values)

    x, y, w1, w2 = arrays((n, d), (n, d_out), (d, h), (h, d_out))
    loss, grad_w1, grad_w2 = arrays((), (d, h), (h, d_out))
    return (nbytes([x, y, w1, w2]), nbytes([loss, grad_w1, grad_w2]),
            nbytes([x, y]), nbytes([loss]))


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


def _shuffle_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (n_rows, batch_size, seed, drop_last, epoch)
    cases: list[Case] = [(10, 4, 0, False, 0), (10, 4, 0, True, 0), (12, 4, 7, True, 0),
                         (10, 3, 0, False, 2)]
    if hidden:
        cases = [(int(rng.integers(1, 60)), int(rng.integers(1, 9)), int(rng.integers(0, 10**6)),
                  bool(rng.integers(0, 2)), int(rng.integers(0, 4))) for _ in range(4)]
        cases += [(3, 5, 1, True, 1), (3, 5, 1, False, 0)]  # batch larger than the data
    return cases


def _shuffle_expected(n_rows: int, batch_size: int, seed: int, drop_last: bool,
                      epoch: int) -> tuple[np.ndarray, np.ndarray]:
    from edu_dl.data import ArrayDataset, DataLoader

    loader = DataLoader(ArrayDataset(np.arange(n_rows)), batch_size, shuffle=True, seed=seed,
                        drop_last=drop_last, prefetch=0)
    for _ in range(epoch + 1):
        batches = loader.batch_indices()
    return flatten_batches(batches)


def _shuffle_variant(a: Case, *, epoch: int | None = None, drop_last: bool | None = None,
                     legacy: bool = False) -> tuple[np.ndarray, np.ndarray]:
    n, size, seed, drop, e = a
    e = e if epoch is None else epoch
    drop = drop if drop_last is None else drop_last
    if legacy:
        np_rng = np.random.RandomState(seed)
        orders = [np_rng.permutation(n) for _ in range(e + 1)]
    else:
        rng = np.random.default_rng(seed)
        orders = [rng.permutation(n) for _ in range(e + 1)]
    count = n // size if drop else -(-n // size)
    return flatten_batches([orders[-1][k * size:(k + 1) * size] for k in range(count)])


def _exact(replay: Callable[[Any, Case], Any], message: str, output: int) -> Mistake:
    """The mistake's output ``output``, exactly (byte counts are integers)."""
    return Mistake(replay, message, output=output, rtol=0.0, atol=0.0)


ELEMENTS = "count bytes, not elements: multiply by itemsize"
NO_LOSS = "the loss is fetched too: one number of itemsize bytes"


PARTS = [
    Part(
        id="ex03.feed_bytes", points=1, cases=_feed_cases, expected=_feed_expected,
        arg_names=("N", "D", "H", "D_out", "itemsize"),
        output_names=("feed_in", "feed_out", "variables_in", "variables_out"),
        hints=(
            _exact(lambda e, a: e[0] // a[4], ELEMENTS, output=0),
            _exact(lambda e, a: e[2] // a[4], ELEMENTS, output=2),
            _exact(lambda e, a: e[1] - a[4], NO_LOSS, output=1),
            Equals(NO_LOSS, output=3, value=0),
            EqualsArgument("feeding the weights also fetches their gradients every step (to "
                           "update the NumPy weights): out = loss + grad_w1 + grad_w2",
                           output=1, argument=4),
            _exact(lambda e, a: e[0], "with Variables the weights stay in the graph: only x and "
                                      "y are fed", output=2),
        ),
    ),
    Part(
        id="ex03.ideal_epoch", points=1, cases=_ideal_cases, expected=_ideal_expected,
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
        id="ex03.prefetch", points=3, cases=_prefetch_cases, expected=_prefetch_expected,
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
        id="ex03.prefetch_errors", points=1, cases=_error_cases, expected=_error_expected,
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
        id="ex03.epoch_batches", points=2, cases=_shuffle_cases, expected=_shuffle_expected,
        call=call_shuffle, source_check=SHUFFLE_SOURCE,
        arg_names=("n_rows", "batch_size", "seed", "drop_last", "epoch"),
        output_names=("rows in batch order", "batch sizes"),
        hints=(
            Mistake(lambda e, a: _shuffle_variant(a, epoch=0) if a[4] > 0 else None,
                    "that is epoch 0's order: epoch e uses the generator's (e+1)-th permutation, "
                    "so draw e permutations first", rtol=0.0, atol=0.0),
            Mistake(lambda e, a: _shuffle_variant(a, drop_last=not a[3]),
                    "drop_last=True drops the last batch only when it is short; drop_last=False "
                    "keeps it", rtol=0.0, atol=0.0),
            Mistake(lambda e, a: _shuffle_variant(a, legacy=True),
                    "use the new generator, np.random.default_rng(seed).permutation(n_rows), not "
                    "the legacy np.random.RandomState / np.random.seed", rtol=0.0, atol=0.0),
            SameSorted("the right rows in another order: permute once with "
                       "np.random.default_rng(seed).permutation(n_rows), then cut into "
                       "consecutive batches", output=0),
        ),
    ),
]
