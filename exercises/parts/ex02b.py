"""Exercise 2b, writing a GPU kernel: the global index, a bounds-checked elementwise kernel, and
the naive and tiled matrix products, graded under Numba's CUDA simulator on small sizes.

The student's kernels are ``@cuda.jit`` functions (the tiled one comes from a factory taking the
tile size). Each Part's ``call`` launches the kernel with a configuration from
``edu_dl.cuda.launch`` on the case's arrays and returns the output, so the grader compares plain
arrays. The oracles are NumPy (float64); the hints come from
``edu_dl.cuda.mistakes.diagnose`` (missing bounds check, swapped row and column, edges,
missing ``syncthreads`` shown as NaN through ``fill_shared_with_nan``).

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

from edu_dl.cuda import launch, mistakes
from edu_dl.cuda.simulator import fill_shared_with_nan, simulator_active
from edu_dl.grading.source import all_checks, decorator_names, names_check
from edu_dl.grading.spec import CheckFailure, Part, Verdict, tolerance

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


INDEX_HINTS = (
    (lambda e, g, a: int(e) != int(g) in (a[0] * a[2], a[0] * a[2] + a[2]),
     "multiply the block's index by the block's SIZE (blockDim.x), not by threadIdx.x"),
    (lambda e, g, a: int(g) == a[0] + a[2] != int(e),
     "blockIdx.x counts blocks, not threads: skip blockIdx.x * blockDim.x threads first"),
    (lambda e, g, a: int(g) == a[2] * a[1] + a[0] != int(e),
     "block and thread are swapped: i = blockIdx.x * blockDim.x + threadIdx.x"),
    (lambda e, g, a: int(g) == a[2] != int(e),
     "threadIdx.x is the place within the block only: add the threads of the blocks before"),
)


# --------------------------------------------------------------------------- launching


def _kernel_or_fail(kernel: Any, what: str) -> Any:
    """The student's @cuda.jit function, or NotImplementedError for the unsolved stub."""
    py_func = getattr(kernel, "py_func", None)
    if py_func is None or not hasattr(kernel, "__getitem__"):
        raise CheckFailure(f"{what} must be a kernel: decorate the function with @cuda.jit "
                           f"(got {type(kernel).__name__})")
    if "NotImplementedError" in py_func.__code__.co_names:
        raise NotImplementedError  # the stub: a real GPU would not report the raise
    return kernel


SWAP_NOTE = ("if the kernel has its bounds check, look for swapped indices instead: "
             "C[row, col] needs A[row, k] and B[k, col]")


def _launch(kernel: Any, cfg: launch.LaunchConfig, *args: Any, note: str = "") -> None:
    """kernel[grid, block](*args); the simulator's index error becomes the bounds-check hint."""
    if simulator_active():
        fill_shared_with_nan()  # idempotent: a missing syncthreads reads NaN
    try:
        kernel[cfg.grid, cfg.block](*args)
    except IndexError as exc:
        error = f"{type(exc).__name__}: {exc}"
        hint = mistakes.diagnose(None, error=error).message
        raise CheckFailure(f"{error}\n  hint: {hint}" + (f"; {note}" if note else "")) from None


def _mistake_hint(name: str, message: str) -> tuple[Callable[..., bool], str]:
    """diagnose()'s verdict on this case (the block size is the case's last argument)."""
    def predicate(e: Any, g: Any, a: tuple[Any, ...]) -> bool:
        block = int(a[-1])
        return mistakes.diagnose(e, g, block=(block,) * np.ndim(e)).mistake == name

    return predicate, message


def _last_line_unwritten(e: Any, g: Any, a: tuple[Any, ...]) -> bool:
    """NaN exactly in the last row or the last column: a bounds check one too strict."""
    nan = np.isnan(np.asarray(g, dtype=float))
    if nan.shape != np.shape(e) or not nan.any():
        return False
    return bool(nan[-1].all() and not nan[:-1].any()) or bool(
        nan[:, -1].all() and not nan[:, :-1].any())


KERNEL_HINTS = (
    _mistake_hint("swapped_indices", mistakes.TRANSPOSE_HINT),
    (_last_line_unwritten,
     "the last row (or column) of C was never written: the bounds check is one too strict; "
     "use `row < C.shape[0] and col < C.shape[1]` (not `- 1`, not `<=`)"),
    _mistake_hint("edges", mistakes.EDGE_HINT),
    _mistake_hint("missing_syncthreads", mistakes.SYNC_HINT),
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


def _call_leaky(fn: Any, args: Case) -> Array:
    x, alpha, threads = args
    kernel = _kernel_or_fail(fn, "leaky_relu_kernel")
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.full(x.shape, np.nan, dtype=np.float32)  # a slot no thread writes stays NaN
    _launch(kernel, launch.launch_1d(x.shape[0], int(threads)), x, np.float32(alpha), out)
    return out


LEAKY_HINTS = (
    (lambda e, g, a: mistakes.has_nan(e, g),
     "some outputs were never written (NaN): launch covers every element, so check the bounds "
     "test (`if i < out.shape[0]:`, not `<=` nor `- 1`) and write out[i] in both branches"),
    (lambda e, g, a: bool(np.allclose(g, np.maximum(a[0], 0), atol=1e-6)),
     "that is ReLU: negative inputs become alpha * x[i], not 0"),
    (lambda e, g, a: bool(np.allclose(g, np.where(a[0] > 0, a[1] * a[0], a[0]), atol=1e-6)),
     "the branches are swapped: x[i] where x[i] > 0, alpha * x[i] elsewhere"),
    _mistake_hint("edges", mistakes.EDGE_HINT),
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


def _run_matmul(kernel: Any, A: Array, B: Array, block: int) -> Array:
    A = np.ascontiguousarray(A, dtype=np.float32)
    B = np.ascontiguousarray(B, dtype=np.float32)
    C = np.full((A.shape[0], B.shape[1]), np.nan, dtype=np.float32)
    _launch(kernel, launch.launch_2d(C.shape[0], C.shape[1], (block, block)), A, B, C,
            note=SWAP_NOTE)
    return C


def _call_naive(fn: Any, args: Case) -> Array:
    A, B, block = args
    return _run_matmul(_kernel_or_fail(fn, "matmul_kernel"), A, B, int(block))


def _call_tiled(fn: Any, args: Case) -> Array:
    A, B, tile = args
    if not callable(fn) or hasattr(fn, "py_func"):
        raise CheckFailure("pass the factory make_tiled_kernel (a plain function of the tile "
                           "size that returns the @cuda.jit kernel), not the kernel itself")
    kernel = _kernel_or_fail(fn(int(tile)), f"make_tiled_kernel({int(tile)})")
    return _run_matmul(kernel, A, B, int(tile))


def _jit_check(what: str, nested: bool = False) -> Callable[[str], Verdict]:
    def check(source: str) -> Verdict:
        if any(name.split(".")[-1] == "jit" for name in decorator_names(source, nested)):
            return Verdict(True)
        return Verdict(False, f"{what} is not a kernel: decorate it with @cuda.jit")

    return check


THREAD_INDEX = ((("grid", "threadIdx", "blockIdx"),
                 "the kernel never reads its thread's index (cuda.grid, or cuda.blockIdx.x * "
                 "cuda.blockDim.x + cuda.threadIdx.x): one thread computes one element"),)
KERNEL_SOURCE = all_checks(_jit_check("the function"), names_check(required=THREAD_INDEX))
TILED_SOURCE = all_checks(
    _jit_check("nothing in make_tiled_kernel", nested=True),
    names_check(required=[
        *THREAD_INDEX,
        (("shared",), "the tiled kernel never uses shared memory: stage each tile in "
                      "cuda.shared.array((tile, tile), float32)"),
        (("syncthreads",), "the tiled kernel never calls cuda.syncthreads(): wait until a tile "
                           "is loaded before reading it, and until all are done before the next"),
    ]))


PARTS = [
    Part(
        id="ex02b.global_index", points=1, cases=_index_cases, expected=_global_index,
        compare=EXACT, arg_names=("block_idx", "block_dim", "thread_idx"), hints=INDEX_HINTS,
    ),
    Part(
        id="ex02b.leaky_relu_kernel", points=2, cases=_leaky_cases, expected=_leaky_expected,
        compare=FLOAT32, call=_call_leaky, source_check=KERNEL_SOURCE,
        arg_names=("x", "alpha", "threads_per_block"),
        hints=LEAKY_HINTS, timeout_s=60.0,
    ),
    Part(
        id="ex02b.matmul_naive", points=2, cases=_naive_cases, expected=_matmul_expected,
        compare=FLOAT32, call=_call_naive, source_check=KERNEL_SOURCE,
        arg_names=("A", "B", "block"), hints=KERNEL_HINTS,
        timeout_s=60.0,
    ),
    Part(
        id="ex02b.matmul_tiled", points=3, cases=_tiled_cases, expected=_matmul_expected,
        compare=FLOAT32, call=_call_tiled, source_check=TILED_SOURCE,
        arg_names=("A", "B", "tile"), hints=KERNEL_HINTS,
        timeout_s=60.0,
    ),
]
