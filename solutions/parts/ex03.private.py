"""Exercise 3, writing a GPU kernel: the global index, a bounds-checked elementwise kernel, a
fused linear layer relu(X @ W + b) (CUDA's mapping: x along the columns) and a block reduction in
shared memory (row sums), graded under Numba's CUDA simulator on small sizes.

The student's kernels are ``@cuda.jit`` functions (the row-sum one comes from a factory taking the
block size). Each Part's ``call`` (``edu_dl.harness.ex03``, public) launches the kernel with a
configuration from ``edu_dl.gpu.launch`` on the case's arrays and returns the output, so the
grader compares plain arrays. The oracles are NumPy (float64); the hints come from
``edu_dl.gpu.mistakes`` (swapped row and column, edges, missing ``syncthreads`` shown as NaN
through ``fill_shared_with_nan``; a missing bounds check fails the call itself), plus replays of
typical mistakes, private like the oracles and the hidden cases.

Judged outside the sandbox: every output against the NumPy oracle, and the submitted source: each
kernel is a ``@cuda.jit`` function that takes its element from the thread's index, and the
row-sum one (inside its factory) combines partial sums in ``cuda.shared.array`` with
``cuda.syncthreads()``. That
the kernel really ran on the simulator is check()'s feedback only (the call runs in the sandbox).

This module never imports ``numba.cuda``: the notebook's first cell decides, before that import,
whether the simulator runs, and the grader imports this module outside any notebook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.gpu import mistakes
from edu_dl.grading.authoring.hints import EqualsArgument, Mistake
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex03 import (
    KERNEL_SOURCE,
    ROW_SUM_SOURCE,
    CudaDiagnosed,
    CudaNaN,
    LastLineUnwritten,
    call_leaky,
    call_linear_relu,
    call_row_sums,
)

Array = np.ndarray
Case = tuple[Any, ...]
FLOAT32 = tolerance(rtol=mistakes.RTOL, atol=mistakes.ATOL)  # float32 sums, another order
EXACT = tolerance(rtol=0.0, atol=0.0)


# --------------------------------------------------------------------------- global index


def _index_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [(0, 128, 5), (2, 128, 5), (3, 32, 31), (1, 8, 0)]
    return [(int(rng.integers(0, 1000)), int(rng.choice([32, 64, 128, 256, 1024])),
             int(rng.integers(0, 32))) for _ in range(4)]


def _global_index(block_idx: int, block_dim: int, thread_idx: int) -> int:
    """Threads of blocks 0 .. block_idx - 1 come first: block_idx * block_dim of them."""
    return block_idx * block_dim + thread_idx


def _wrong_index(index: Callable[[Case], int], message: str) -> Mistake:
    """The index ``index(args)`` gives, exactly, where that is not the right one."""
    def replay(e: Any, a: Case) -> int | None:
        got = int(index(a))
        return None if got == int(e) else got

    return Mistake(replay, message, rtol=0.0, atol=0.0)


BLOCK_SIZE = "multiply the block's index by the block's SIZE (blockDim.x), not by threadIdx.x"
INDEX_HINTS = (
    _wrong_index(lambda a: a[0] * a[2], BLOCK_SIZE),
    _wrong_index(lambda a: a[0] * a[2] + a[2], BLOCK_SIZE),
    _wrong_index(lambda a: a[0] + a[2],
                 "blockIdx.x counts blocks, not threads: skip blockIdx.x * blockDim.x threads "
                 "first"),
    _wrong_index(lambda a: a[2] * a[1] + a[0],
                 "block and thread are swapped: i = blockIdx.x * blockDim.x + threadIdx.x"),
    EqualsArgument("threadIdx.x is the place within the block only: add the threads of the "
                   "blocks before", argument=2),
)


# --------------------------------------------------------------------------- kernel hints


def _diagnosed(name: str, message: str) -> CudaDiagnosed:
    """diagnose()'s verdict on this case (the block size is the case's last argument)."""
    return CudaDiagnosed(message, mistake=name, block_arg=-1)


KERNEL_HINTS = (
    _diagnosed("mapping", mistakes.MAPPING_HINT),
    _diagnosed("swapped_indices", mistakes.TRANSPOSE_HINT),
    LastLineUnwritten(
        "the last row (or column) of C was never written: the bounds check is one too strict; "
        "use `row < C.shape[0] and col < C.shape[1]` (not `- 1`, not `<=`)"),
    _diagnosed("edges", mistakes.EDGE_HINT),
    _diagnosed("missing_syncthreads", mistakes.SYNC_HINT),
)


# --------------------------------------------------------------------------- leaky ReLU


def _leaky_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    sizes = [(20, 8), (5, 4), (32, 32), (1, 4)] if not hidden else [
        (int(rng.integers(1, 70)), int(rng.choice([4, 8, 16, 32]))) for _ in range(3)]
    cases: list[Case] = []
    for n, threads in sizes:
        alpha = 0.1 if not hidden else float(rng.uniform(0.01, 0.5))
        cases.append((rng.standard_normal(n).astype(np.float32), alpha, threads))
    return cases


def _leaky_expected(x: Array, alpha: float, threads_per_block: int) -> Array:
    x64 = x.astype(np.float64)
    return np.where(x64 > 0, x64, alpha * x64)


LEAKY_HINTS = (
    CudaNaN("some outputs were never written (NaN): launch covers every element, so check the "
            "bounds test (`if i < out.shape[0]:`, not `<=` nor `- 1`) and write out[i] in both "
            "branches"),
    Mistake(lambda e, a: np.maximum(a[0], 0),
            "that is ReLU: negative inputs become alpha * x[i], not 0", rtol=1e-5, atol=1e-6),
    Mistake(lambda e, a: np.where(a[0] > 0, a[1] * a[0], a[0]),
            "the branches are swapped: x[i] where x[i] > 0, alpha * x[i] elsewhere",
            rtol=1e-5, atol=1e-6),
    _diagnosed("edges", mistakes.EDGE_HINT),
)


# --------------------------------------------------------------------------- matmul


def _matrices(rng: np.random.Generator, m: int, k: int, n: int) -> tuple[Array, Array]:
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def _linear_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # Sizes that are not multiples of the block show a missing or wrong bounds check; a square
    # output shows swapped indices; a tall and a wide one show a kernel that takes x for the row
    # (launch_2d puts x along the columns). The simulator runs a Python thread per CUDA thread.
    dims = [(8, 5, 8, 4), (20, 13, 17, 8), (20, 5, 3, 4)] if not hidden else [
        (6, 4, 6, 4),
        (int(rng.integers(13, 21)), int(rng.integers(1, 11)), int(rng.integers(1, 5)), 4),
        (int(rng.integers(1, 5)), int(rng.integers(1, 11)), int(rng.integers(13, 21)), 4),
        (int(rng.integers(1, 21)), int(rng.integers(1, 11)), int(rng.integers(1, 21)),
         int(rng.choice([4, 8])))]
    return [(*_matrices(rng, m, k, n), rng.standard_normal(n).astype(np.float32), block)
            for m, k, n, block in dims]


def _linear_relu(X: Array, W: Array, b: Array, block: int) -> Array:
    return np.maximum(_affine(X, W, b), 0.0)


def _affine(X: Array, W: Array, b: Array) -> Array:
    return X.astype(np.float64) @ W.astype(np.float64) + b.astype(np.float64)


LINEAR_HINTS = (
    *KERNEL_HINTS,
    Mistake(lambda e, a: _affine(a[0], a[1], a[2]),
            "negative entries survive: the layer's ReLU is missing (out = max(0, ...))",
            rtol=1e-5, atol=1e-5),
    Mistake(lambda e, a: np.maximum(_affine(a[0], a[1], 0 * a[2]), 0.0),
            "the bias b is missing: each out[row, col] gets b[col] added before the ReLU",
            rtol=1e-5, atol=1e-5),
    Mistake(lambda e, a: np.maximum(_affine(a[0], a[1], 0 * a[2]), 0.0) + a[2],
            "your bias is added after the ReLU: relu(X @ W + b) adds it before",
            rtol=1e-5, atol=1e-5),
)


# --------------------------------------------------------------------------- row sums


def _row_sum_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # Rows shorter than the block (threads with nothing to add), about as long, and several
    # blocks long; the block size is a power of two, as a halving tree needs.
    dims = [(3, 5, 8), (4, 37, 8), (2, 64, 16)] if not hidden else [
        (int(rng.integers(1, 5)), int(rng.integers(1, 8)), 8),
        (int(rng.integers(1, 5)), int(rng.integers(17, 70)), 16),
        (int(rng.integers(1, 5)), int(rng.integers(9, 40)), 4)]
    return [(rng.standard_normal((m, n)).astype(np.float32), threads) for m, n, threads in dims]


def _row_sums(X: Array, threads: int) -> Array:
    return X.astype(np.float64).sum(axis=1)


def _partials(X: Array, threads: int) -> Array:
    """Thread t's sum of its row's elements t, t + threads, ... (shape (m, threads))."""
    x = X.astype(np.float64)
    return np.stack([x[:, t::threads].sum(axis=1) for t in range(threads)], axis=1)


def _tree_without_last_step(e: Any, a: Case) -> Array:
    """The halving loop stops before step 1: slot 0 holds the even threads' partials only."""
    return _partials(a[0], int(a[1]))[:, 0::2].sum(axis=1)


ROW_SUM_HINTS = (
    Mistake(lambda e, a: _partials(a[0], int(a[1]))[:, 0],
            "your out[row] is thread 0's own partial sum only: the other threads' partial sums "
            "of the row are never added to it", rtol=1e-5, atol=1e-5),
    Mistake(lambda e, a: a[0].astype(np.float64)[:, : int(a[1])].sum(axis=1),
            "only the first `threads` elements of each row were added: a row longer than the "
            "block needs each thread to add several of its elements", rtol=1e-5, atol=1e-5),
    Mistake(_tree_without_last_step,
            "your slot 0 misses the odd threads' partial sums: the halving loop stops one step "
            "too early (the last step adds slot 1 into slot 0)", rtol=1e-5, atol=1e-5),
    Mistake(lambda e, a: np.asarray(e) * int(a[1]),
            "every sum is `threads` times too large: each thread added the whole row, or every "
            "thread added its total into out[row]", rtol=1e-5, atol=1e-5),
    CudaNaN("NaN: a thread read a shared slot before its owner wrote it (shared memory starts "
            "as NaN here), or out[row] was never written: call cuda.syncthreads() after "
            "writing the partial sums and after every halving step, and have one thread write "
            "out[row]"),
)


PARTS = [
    Part(
        id="ex03.global_index", points=1, cases=_index_cases, expected=_global_index,
        compare=EXACT, arg_names=("block_idx", "block_dim", "thread_idx"), hints=INDEX_HINTS,
    ),
    Part(
        id="ex03.leaky_relu_kernel", points=2, cases=_leaky_cases, expected=_leaky_expected,
        compare=FLOAT32, call=call_leaky, source_check=KERNEL_SOURCE,
        arg_names=("x", "alpha", "threads_per_block"),
        hints=LEAKY_HINTS, timeout_s=60.0,
    ),
    Part(
        id="ex03.linear_relu", points=2, cases=_linear_cases, expected=_linear_relu,
        compare=FLOAT32, call=call_linear_relu, source_check=KERNEL_SOURCE,
        arg_names=("X", "W", "b", "block"), hints=LINEAR_HINTS,
        timeout_s=60.0,
    ),
    Part(
        id="ex03.row_sums", points=3, cases=_row_sum_cases, expected=_row_sums,
        compare=FLOAT32, call=call_row_sums, source_check=ROW_SUM_SOURCE,
        arg_names=("X", "threads"), hints=ROW_SUM_HINTS, timeout_s=60.0,
    ),
]
