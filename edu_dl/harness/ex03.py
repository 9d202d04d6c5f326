"""Exercise 3 (writing a GPU kernel), public half: how its parts launch a student's kernel, the
source checks, and a generic hint about unwritten edges. Nothing here computes an answer.

Each ``call_*`` launches the student's ``@cuda.jit`` kernel with a configuration from
``edu_dl.gpu.launch`` on the case's arrays (outputs start as NaN, so a slot no thread writes
shows) and returns the output: the grader compares plain arrays with the private NumPy oracle.
An ``IndexError`` in the simulator becomes ``edu_dl.gpu.mistakes``' bounds-check hint. That the
kernel really ran is check()'s feedback only; the grader judges the source: a ``@cuda.jit``
function (:class:`JitCheck`) that reads its thread's index, and for the row-sum kernel (inside
its factory) shared memory and ``cuda.syncthreads()``.

This module never imports ``numba.cuda``: the notebook's first cell decides, before that import,
whether the simulator runs, and the grader imports this module outside any notebook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.gpu import launch, mistakes
from edu_dl.gpu.simulator import fill_shared_with_nan, simulator_active
from edu_dl.grading.authoring.hints import Rule
from edu_dl.grading.authoring.source import AllChecks, all_checks, decorator_names, names_check
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

Array = np.ndarray
Case = tuple[Any, ...]

SWAP_NOTE = ("if the kernel has its bounds check, look for swapped indices instead: "
             "out[row, col] needs X[row, k] and W[k, col]")


# --------------------------------------------------------------------------- launching


def kernel_or_fail(kernel: Any, what: str) -> Any:
    """The student's @cuda.jit function, or NotImplementedError for the unsolved stub."""
    py_func = getattr(kernel, "py_func", None)
    if py_func is None or not hasattr(kernel, "__getitem__"):
        raise CheckFailure(f"{what} must be a kernel: decorate the function with @cuda.jit "
                           f"(got {type(kernel).__name__})")
    if "NotImplementedError" in py_func.__code__.co_names:
        raise NotImplementedError  # the stub: a real GPU would not report the raise
    return kernel


def launch_kernel(kernel: Any, cfg: launch.LaunchConfig, *args: Any, note: str = "") -> None:
    """kernel[grid, block](*args); the simulator's index error becomes the bounds-check hint."""
    if simulator_active():
        fill_shared_with_nan()  # idempotent: a missing syncthreads reads NaN
    try:
        kernel[cfg.grid, cfg.block](*args)
    except IndexError as exc:
        error = f"{type(exc).__name__}: {exc}"
        hint = mistakes.diagnose(None, error=error).message
        raise CheckFailure(f"{error}\n  hint: {hint}" + (f"; {note}" if note else "")) from None


def call_leaky(fn: Any, args: Case) -> Array:
    """leaky_relu_kernel[blocks, threads](x, alpha, out) on float32 copies; returns out."""
    x, alpha, threads = args
    kernel = kernel_or_fail(fn, "leaky_relu_kernel")
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.full(x.shape, np.nan, dtype=np.float32)  # a slot no thread writes stays NaN
    launch_kernel(kernel, launch.launch_1d(x.shape[0], int(threads)), x, np.float32(alpha), out)
    return out


def call_linear_relu(fn: Any, args: Case) -> Array:
    """kernel[grid, (block, block)](X, W, b, out) with grid = launch_2d(m, n, (block, block)),
    on float32 copies, out NaN at first; returns out."""
    X, W, b, block = args
    kernel = kernel_or_fail(fn, "linear_relu_kernel")
    X = np.ascontiguousarray(X, dtype=np.float32)
    W = np.ascontiguousarray(W, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    out = np.full((X.shape[0], W.shape[1]), np.nan, dtype=np.float32)
    cfg = launch.launch_2d(out.shape[0], out.shape[1], (int(block), int(block)))
    launch_kernel(kernel, cfg, X, W, b, out, note=SWAP_NOTE)
    return out


def call_row_sums(fn: Any, args: Case) -> Array:
    """The kernel make_row_sum_kernel(threads) returns, one block of ``threads`` threads per row
    of X: ``kernel[(m,), (threads,)](X, out)``; returns out (NaN at first)."""
    X, threads = args
    if not callable(fn) or hasattr(fn, "py_func"):
        raise CheckFailure("pass the factory make_row_sum_kernel (a plain function of the block "
                           "size that returns the @cuda.jit kernel), not the kernel itself")
    kernel = kernel_or_fail(fn(int(threads)), f"make_row_sum_kernel({int(threads)})")
    X = np.ascontiguousarray(X, dtype=np.float32)
    out = np.full(X.shape[0], np.nan, dtype=np.float32)
    launch_kernel(kernel, launch.LaunchConfig((X.shape[0],), (int(threads),)), X, out)
    return out


# --------------------------------------------------------------------------- source checks


@dataclass(frozen=True)
class JitCheck:
    """A source check: the definition (with ``nested``, any def inside it) is decorated with a
    ``jit`` (``@cuda.jit``, ``@numba.cuda.jit(...)``, ...). Data only."""

    what: str = "the function"
    nested: bool = False

    def __call__(self, source: str) -> Verdict:
        if any(name.split(".")[-1] == "jit" for name in decorator_names(source, self.nested)):
            return Verdict(True)
        return Verdict(False, f"{self.what} is not a kernel: decorate it with @cuda.jit")


THREAD_INDEX = ((("grid", "threadIdx", "blockIdx"),
                 "the kernel never reads its thread's index (cuda.grid, or cuda.blockIdx.x * "
                 "cuda.blockDim.x + cuda.threadIdx.x): one thread computes one element"),)
KERNEL_SOURCE: AllChecks = all_checks(JitCheck("the function"),
                                      names_check(required=THREAD_INDEX))
ROW_SUM_SOURCE: AllChecks = all_checks(
    JitCheck("nothing in make_row_sum_kernel", nested=True),
    names_check(required=[
        *THREAD_INDEX,
        (("shared",), "the kernel never uses shared memory: the block's threads combine their "
                      "partial sums through a cuda.shared.array of one slot per thread"),
        (("syncthreads",), "the kernel never calls cuda.syncthreads(): a thread may read a "
                           "partial sum only after the thread that owns it has written it"),
    ]))


# --------------------------------------------------------------------------- hints


@dataclass(frozen=True)
class LastLineUnwritten(Rule):
    """NaN exactly in the last row or the last column: a bounds check one too strict."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        nan = np.isnan(np.asarray(got, dtype=float))
        if nan.shape != np.shape(expected) or not nan.any():
            return False
        return bool(nan[-1].all() and not nan[:-1].any()) or bool(
            nan[:, -1].all() and not nan[:, :-1].any())


# --------------------------------------------------------------------------- the mistakes as hints


Block = tuple[int, ...] | int | None


@dataclass(frozen=True)
class CudaTransposed(Rule):
    """The result is the expected one transposed (``mistakes.looks_transposed``): row and column
    swapped."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return mistakes.looks_transposed(expected, got)


@dataclass(frozen=True)
class CudaWrongAtEdges(Rule):
    """Only entries in the last partial blocks are wrong (``mistakes.wrong_only_at_edges``) for the
    launch's ``block`` (or, with ``block_arg``, the block size the case's argument
    ``block_arg`` holds, on every axis)."""

    block: Block = None
    block_arg: int | None = None

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        block = _block(expected, args, self.block, self.block_arg)
        return block is not None and mistakes.wrong_only_at_edges(expected, got, block)


@dataclass(frozen=True)
class CudaNaN(Rule):
    """NaN in the result where the expected value is a number (``mistakes.has_nan``)."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return mistakes.has_nan(expected, got)


@dataclass(frozen=True)
class CudaDiagnosed(Rule):
    """``mistakes.diagnose`` names this ``mistake`` ('swapped_indices', 'edges',
    'missing_syncthreads', ...), with the block size ``block`` or the one the case's argument
    ``block_arg`` holds (on every axis of the result)."""

    mistake: str = ""
    block: Block = None
    block_arg: int | None = None

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        block = _block(expected, args, self.block, self.block_arg)
        return mistakes.diagnose(expected, got, block=block).mistake == self.mistake


def _block(expected: Any, args: tuple[Any, ...], block: Block, block_arg: int | None) -> Block:
    """The fixed ``block``, else the case's argument ``block_arg`` on every axis of the result."""
    if block_arg is None:
        return block
    return (int(args[block_arg]),) * np.ndim(expected)


def hints(block: Block = None) -> tuple[Rule, ...]:
    """The mistakes above as hints for a Part (Rules: generic, so a release can carry them)."""
    out: list[Rule] = [CudaTransposed(mistakes.TRANSPOSE_HINT)]
    if block is not None:
        out.append(CudaWrongAtEdges(mistakes.EDGE_HINT, block=block))
    out.append(CudaNaN(mistakes.SYNC_HINT))
    return tuple(out)
