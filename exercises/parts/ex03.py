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
how far ahead) is check()'s feedback only.
"""

from __future__ import annotations

import ast
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from edu_dl.grading.source import code_names, definition_node
from edu_dl.grading.spec import CheckFailure, Part, Verdict, tolerance

Case = tuple[Any, ...]
EXACT = tolerance(rtol=1e-9, atol=0.0)
FLOATS = {2: np.float16, 4: np.float32, 8: np.float64}
WAIT_S = 3.0  # a prefetcher that delivers nothing for this long is stuck


def _ratio(got: Any, expected: Any, factor: float) -> bool:
    return bool(np.isclose(float(got), factor * float(expected), rtol=1e-9, atol=0.0))


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


class _Watched:
    """A source of batches that records who reads it, and how far ahead of the consumer."""

    def __init__(self, data: np.ndarray, fail_at: int | None = None,
                 error: BaseException | None = None) -> None:
        self.data, self.fail_at, self.error = data, fail_at, error
        self.produced = self.consumed = self.lead = 0
        self.off_thread = False
        self.consumer: threading.Thread | None = None
        self.lock = threading.Lock()

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(len(self.data)):
            if k == self.fail_at and self.error is not None:
                raise self.error
            time.sleep(0.0005)  # a read takes a little time (and lets the consumer run)
            with self.lock:
                self.produced += 1
                self.lead = max(self.lead, self.produced - self.consumed)
                self.off_thread |= threading.current_thread() is not self.consumer
            yield self.data[k].copy()
        if self.fail_at == len(self.data) and self.error is not None:
            raise self.error


def _consume(fn: Callable[..., Any], source: _Watched, depth: int,
             ) -> tuple[list[np.ndarray], BaseException | None]:
    """Iterate fn(source, depth) in a thread of its own, slowly; give up after WAIT_S idle."""
    received: list[np.ndarray] = []
    box: dict[str, BaseException | None] = {"error": None}
    progress = threading.Event()

    def run() -> None:
        try:
            for batch in fn(iter(source), depth):
                received.append(np.asarray(batch))
                with source.lock:
                    source.consumed += 1
                progress.set()
                time.sleep(0.002)  # a training step: a reader that runs ahead shows it here
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        progress.set()

    consumer = threading.Thread(target=run, name="edu_dl-check-consumer", daemon=True)
    source.consumer = consumer
    consumer.start()
    while consumer.is_alive():
        progress.clear()
        if not progress.wait(WAIT_S) and consumer.is_alive():
            raise CheckFailure(
                f"no batch arrived for {WAIT_S:g} s after {len(received)} batches: the "
                "generator is stuck (does the reader put a marker in the queue when the source "
                "ends, or when it raises? does the consumer wait for it?)")
    consumer.join()
    return received, box["error"]


def _stacked(received: list[np.ndarray], data: np.ndarray) -> np.ndarray:
    return np.stack(received) if received else np.zeros((0, *data.shape[1:]), data.dtype)


def _call_prefetch(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, int]:
    data, depth = args
    source = _Watched(np.asarray(data))
    received, error = _consume(fn, source, int(depth))
    if error is not None:
        raise error
    if len(data) and not source.off_thread:
        raise CheckFailure("every batch was read in the consumer's own thread: start a "
                           "threading.Thread that reads the source and puts the batches in a "
                           "queue.Queue, and have the generator take them from there")
    if source.lead > int(depth) + 2:
        raise CheckFailure(f"the reader ran {source.lead} batches ahead of the consumer with "
                           f"depth={depth}: bound the queue (queue.Queue(maxsize=depth)) so "
                           "at most depth batches wait")
    return _stacked(received, np.asarray(data)), len(received)


THREADS = {"Thread", "ThreadPoolExecutor", "start_new_thread"}
BOUNDS = {"Semaphore", "BoundedSemaphore", "Condition", "ThreadPoolExecutor"}
QUEUES = {"Queue", "LifoQueue", "PriorityQueue"}


def _sized_queue(node: ast.AST) -> bool:
    """A call Queue(n) or Queue(maxsize=n) (queue.Queue, q.Queue, Queue, ...)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in QUEUES and (bool(node.args) or any(k.arg == "maxsize" for k in node.keywords))


def prefetch_source(source: str) -> Verdict:
    """The generator starts a reader thread and bounds how far it reads ahead."""
    names = code_names(source)
    if not names & THREADS:
        return Verdict(False, "the generator starts no thread: start a threading.Thread that "
                              "reads the source and puts the batches in a queue.Queue, and "
                              "have the generator take them from there")
    if not (names & BOUNDS or any(_sized_queue(n) for n in ast.walk(definition_node(source)))):
        return Verdict(False, "nothing bounds how far the reader runs ahead: "
                              "queue.Queue(maxsize=depth) keeps at most depth batches waiting")
    return Verdict(True)


# --------------------------------------------------------------------------- errors


ERRORS: dict[str, type[Exception]] = {"ValueError": ValueError, "OSError": OSError,
                                      "EOFError": EOFError, "KeyError": KeyError}


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


def _message(fail_at: int) -> str:
    return f"cannot read batch {fail_at}"


def _error_expected(data: np.ndarray, depth: int, fail_at: int,
                    name: str) -> tuple[np.ndarray, str, str]:
    data = np.asarray(data)
    return data[:fail_at].copy(), name, str(ERRORS[name](_message(fail_at)))


def _call_error(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, str, str]:
    """(the batches delivered before the error, stacked; the error's type name, its message)."""
    data, depth, fail_at, name = args
    data = np.asarray(data)
    source = _Watched(data, int(fail_at), ERRORS[name](_message(int(fail_at))))
    received, error = _consume(fn, source, int(depth))
    if isinstance(error, NotImplementedError):
        raise error
    for k, batch in enumerate(received[:len(data)]):
        if batch.shape != data[k].shape or not np.array_equal(batch, data[k]):
            raise CheckFailure(f"batch {k} is not the source's batch {k}: keep the order")
    try:
        batches = _stacked(received, data)
    except ValueError:
        raise CheckFailure("the generator yielded more items than the source's batches, of "
                           "other shapes: yield exactly the batches the source yields") from None
    if error is None:
        return batches, "no error", ""
    return batches, type(error).__name__, str(error)


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
    return _flatten_batches(batches)


def _flatten_batches(batches: Any) -> tuple[np.ndarray, np.ndarray]:
    batches = [np.asarray(b, dtype=np.int64).reshape(-1) for b in batches]
    order = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
    return order, np.array([len(b) for b in batches], dtype=np.int64)


def _call_shuffle(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, np.ndarray]:
    batches = fn(*args)
    try:
        arrays = [np.asarray(b) for b in batches]
        for k, a in enumerate(arrays):  # before any cast: 1.7 must not become row 1
            if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise ValueError(f"batch {k} has shape {a.shape} and dtype {a.dtype}")
        return _flatten_batches(arrays)
    except (TypeError, ValueError) as exc:
        raise CheckFailure("return a list of 1-D integer arrays, one per batch "
                           f"({type(exc).__name__}: {exc})") from None


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
    return _flatten_batches([orders[-1][k * size:(k + 1) * size] for k in range(count)])


def _same(got: Any, want: tuple[np.ndarray, np.ndarray]) -> bool:
    return all(np.asarray(g).shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want))


PARTS = [
    Part(
        id="ex03.feed_bytes", points=1, cases=_feed_cases, expected=_feed_expected,
        arg_names=("N", "D", "H", "D_out", "itemsize"),
        output_names=("feed_in", "feed_out", "variables_in", "variables_out"),
        hints=(
            (lambda e, g, a: int(g[0]) * a[4] == e[0] or int(g[2]) * a[4] == e[2],
             "count bytes, not elements: multiply by itemsize"),
            (lambda e, g, a: int(g[1]) == e[1] - a[4] or int(g[3]) == 0,
             "the loss is fetched too: one number of itemsize bytes"),
            (lambda e, g, a: int(g[1]) == a[4],
             "feeding the weights also fetches their gradients every step (to update the "
             "NumPy weights): out = loss + grad_w1 + grad_w2"),
            (lambda e, g, a: int(g[2]) == e[0],
             "with Variables the weights stay in the graph: only x and y are fed"),
        ),
    ),
    Part(
        id="ex03.ideal_epoch", points=1, cases=_ideal_cases, expected=_ideal_expected,
        compare=EXACT, arg_names=("read_s", "compute_s", "n", "readers"),
        hints=(
            (lambda e, g, a: a[3] == 0,
             "readers = 0: the loop reads each batch itself, nothing overlaps: "
             "n * (read + compute)"),
            (lambda e, g, a: np.isclose(float(g), a[2] * max(a[0] / a[3], a[1])),
             "n * max(read / readers, compute) is the steady state: the first read and the last "
             "compute cannot overlap anything (read + compute + (n - 1) * max(...))"),
            (lambda e, g, a: np.isclose(float(g), a[0] + a[1] + (a[2] - 1) * max(a[0], a[1])),
             "readers work in parallel: a new batch arrives every read / readers seconds"),
        ),
    ),
    Part(
        id="ex03.prefetch", points=3, cases=_prefetch_cases, expected=_prefetch_expected,
        call=_call_prefetch, source_check=prefetch_source, arg_names=("batches", "depth"),
        output_names=("batches received", "count"),
        hints=(
            (lambda e, g, a: int(g[1]) < int(e[1]),
             "batches are missing: the generator must deliver every batch the source yields, "
             "the last ones included"),
            (lambda e, g, a: int(g[1]) == int(e[1]) and bool(
                np.array_equal(np.sort(np.asarray(g[0]), axis=0), np.sort(e[0], axis=0))),
             "the right batches in the wrong order: one reader thread and one FIFO queue keep "
             "the order"),
        ),
    ),
    Part(
        id="ex03.prefetch_errors", points=1, cases=_error_cases, expected=_error_expected,
        call=_call_error, arg_names=("batches", "depth", "fail_at", "error"),
        output_names=("batches before the error", "error type", "error message"),
        hints=(
            (lambda e, g, a: g[1] == "no error",
             "the source raised, but your generator ended quietly: catch the exception in the "
             "reader thread, put it in the queue, and raise it in the generator"),
            (lambda e, g, a: g[1] == e[1] and len(np.asarray(g[0])) < len(e[0]),
             "the batches read before the failure must still arrive, in order, before the "
             "error is raised"),
            (lambda e, g, a: g[1] != e[1],
             "re-raise the reader's own exception (raise item), not a new one of another type"),
        ),
    ),
    Part(
        id="ex03.epoch_batches", points=2, cases=_shuffle_cases, expected=_shuffle_expected,
        call=_call_shuffle, arg_names=("n_rows", "batch_size", "seed", "drop_last", "epoch"),
        output_names=("rows in batch order", "batch sizes"),
        hints=(
            (lambda e, g, a: a[4] > 0 and _same(g, _shuffle_variant(a, epoch=0)),
             "that is epoch 0's order: epoch e uses the generator's (e+1)-th permutation, "
             "so draw e permutations first"),
            (lambda e, g, a: _same(g, _shuffle_variant(a, drop_last=not a[3])),
             "drop_last=True drops the last batch only when it is short; drop_last=False keeps "
             "it"),
            (lambda e, g, a: _same(g, _shuffle_variant(a, legacy=True)),
             "use the new generator, np.random.default_rng(seed).permutation(n_rows), not the "
             "legacy np.random.RandomState / np.random.seed"),
            (lambda e, g, a: bool(np.array_equal(np.sort(np.asarray(g[0])), np.sort(e[0]))),
             "the right rows in another order: permute once with "
             "np.random.default_rng(seed).permutation(n_rows), then cut into consecutive "
             "batches"),
        ),
    ),
]
