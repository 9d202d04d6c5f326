"""Exercise 2b, writing a GPU kernel: the global index, a bounds-checked elementwise kernel, and
the naive and tiled matrix products, graded under Numba's CUDA simulator on small sizes.

The student's kernels are ``@cuda.jit`` functions (the tiled one comes from a factory taking the
tile size). Each Part's ``call`` (``edu_dl.harness.ex02b``, public) launches the kernel with a
configuration from ``edu_dl.cuda.launch`` on the case's arrays and returns the output, so the
grader compares plain arrays. The oracles are NumPy (float64); the hints come from
``edu_dl.cuda.mistakes`` (swapped row and column, edges, missing ``syncthreads`` shown as NaN
through ``fill_shared_with_nan``; a missing bounds check fails the call itself), plus replays of
typical mistakes, private like the oracles and the hidden cases.

Judged outside the sandbox: every output against the NumPy oracle, and the submitted source: each
kernel is a ``@cuda.jit`` function that takes its element from the thread's index, and the tiled
one (inside its factory) stages tiles in ``cuda.shared.array`` with ``cuda.syncthreads()``. That
the kernel really ran on the simulator is check()'s feedback only (the call runs in the sandbox).

This module never imports ``numba.cuda``: the notebook's first cell decides, before that import,
whether the simulator runs, and the grader imports this module outside any notebook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.cuda import mistakes
from edu_dl.cuda.mistakes import CudaDiagnosed, CudaNaN
from edu_dl.grading.hints import EqualsArgument, Mistake
from edu_dl.grading.spec import Part, tolerance
from edu_dl.harness.ex02b import (
    KERNEL_SOURCE,
    TILED_SOURCE,
    LastLineUnwritten,
    call_leaky,
    call_naive,
    call_tiled,
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


def _naive_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # Sizes that are not multiples of the block show a missing or wrong bounds check; a square
    # output shows swapped indices. The simulator runs a Python thread per CUDA thread: small.
    dims = [(8, 5, 8, 4), (20, 13, 17, 8), (5, 3, 7, 4)] if not hidden else [(6, 4, 6, 4)] + [
        (int(rng.integers(1, 21)), int(rng.integers(1, 11)), int(rng.integers(1, 21)),
         int(rng.choice([4, 8]))) for _ in range(3)]
    return [(*_matrices(rng, m, k, n), block) for m, k, n, block in dims]


def _tiled_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    dims = [(8, 8, 8, 4), (10, 7, 9, 4), (12, 13, 11, 8)] if not hidden else [(4, 9, 4, 4),
        (int(rng.integers(3, 13)), int(rng.integers(1, 13)), int(rng.integers(3, 13)), 4),
        (int(rng.integers(3, 17)), int(rng.integers(1, 19)), int(rng.integers(3, 17)), 8)]
    return [(*_matrices(rng, m, k, n), tile) for m, k, n, tile in dims]


def _matmul_expected(A: Array, B: Array, block: int) -> Array:
    return A.astype(np.float64) @ B.astype(np.float64)


PARTS = [
    Part(
        id="ex02b.global_index", points=1, cases=_index_cases, expected=_global_index,
        compare=EXACT, arg_names=("block_idx", "block_dim", "thread_idx"), hints=INDEX_HINTS,
    ),
    Part(
        id="ex02b.leaky_relu_kernel", points=2, cases=_leaky_cases, expected=_leaky_expected,
        compare=FLOAT32, call=call_leaky, source_check=KERNEL_SOURCE,
        arg_names=("x", "alpha", "threads_per_block"),
        hints=LEAKY_HINTS, timeout_s=60.0,
    ),
    Part(
        id="ex02b.matmul_naive", points=2, cases=_naive_cases, expected=_matmul_expected,
        compare=FLOAT32, call=call_naive, source_check=KERNEL_SOURCE,
        arg_names=("A", "B", "block"), hints=KERNEL_HINTS,
        timeout_s=60.0,
    ),
    Part(
        id="ex02b.matmul_tiled", points=3, cases=_tiled_cases, expected=_matmul_expected,
        compare=FLOAT32, call=call_tiled, source_check=TILED_SOURCE,
        arg_names=("A", "B", "tile"), hints=KERNEL_HINTS,
        timeout_s=60.0,
    ),
]
