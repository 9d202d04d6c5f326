"""Name the usual CUDA-kernel mistake from a result and the NumPy reference.

The three classics and how each shows (sizes not a multiple of the block expose the first):

- missing bounds check: the simulator raises "index ... is out of bounds"; on a GPU the extra
  threads write garbage at the edges (past the end of a row = the start of the next one);
- swapped row and column: the result is the transpose of the right one;
- missing ``cuda.syncthreads()``: threads read shared slots nobody has written yet, which
  ``edu_dl.gpu.simulator`` fills with NaN, so NaN appears in the result.

Pure functions of NumPy arrays, so a grader can call them outside the student's process; the
hints a release carries for them (Rules) are in ``edu_dl.harness.ex03``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

RTOL, ATOL = 1e-5, 1e-5  # float32 sums in a different order than NumPy's

BOUNDS_HINT = ("an index ran past the end of an array: the grid is rounded up to whole blocks, so "
               "the last block has threads with no element; start the kernel with a bounds check "
               "such as `if i < out.shape[0]:` (matrices: `if row < C.shape[0] and col < "
               "C.shape[1]:`)")
EDGE_HINT = ("only entries near the edges are wrong (the size is not a multiple of the block): "
             "launch ceil(n / threads) blocks, not n // threads, and guard with exactly "
             "`if row < C.shape[0] and col < C.shape[1]:` — a missing check lets the extra "
             "threads write garbage, a too strict one leaves edge entries unwritten")
TRANSPOSE_HINT = ("the result is the transpose of the right one: row and column are swapped; "
                  "`col, row = cuda.grid(2)` and C[row, col] = sum over k of A[row, k] * B[k, col]")
MAPPING_HINT = ("only a corner of the result was written: your kernel takes the grid's x for the "
                "row, but the launch puts x along the columns, as CUDA does (`launch_2d` gives "
                "ceil(cols / block) blocks along x), so some rows get no thread; read "
                "`col, row = cuda.grid(2)`: then neighbouring threads also touch neighbouring "
                "addresses of a row (coalesced)")
SYNC_HINT = ("NaN in the result: a thread read a shared-memory slot before the thread owning it "
             "wrote it (shared memory starts as NaN here); call cuda.syncthreads() after loading "
             "the tiles and again after using them (if you use no shared memory: some outputs "
             "were never written)")


@dataclass(frozen=True)
class Diagnosis:
    """ok, the mistake's short name (or None), and a message for the student."""

    ok: bool
    mistake: str | None
    message: str


def out_of_bounds_error(error: str | None) -> bool:
    """True for the simulator's IndexError ("index 10 is out of bounds for axis 0 with size 10")."""
    return error is not None and ("out of bounds" in error or error.startswith("IndexError"))


def edge_mask(shape: tuple[int, ...], block: tuple[int, ...] | int) -> np.ndarray:
    """True where a bounds mistake shows: the last partial block of each axis, and (row-major
    wrap-around on a GPU) the first ``block - n % block`` entries of the last axis."""
    block = (block,) * len(shape) if isinstance(block, int) else tuple(block)
    mask = np.zeros(shape, dtype=bool)
    for axis, (n, b) in enumerate(zip(shape, block)):
        spill = n % b
        if spill == 0:
            continue
        index: list[Any] = [slice(None)] * len(shape)
        index[axis] = slice(n - spill, n)
        mask[tuple(index)] = True
        if axis == len(shape) - 1:
            index[axis] = slice(0, min(n, b - spill))
            mask[tuple(index)] = True
    return mask


def _as_array(got: Any) -> np.ndarray | None:
    try:
        return np.asarray(got, dtype=float)
    except (TypeError, ValueError):
        return None


def looks_transposed(expected: Any, got: Any, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """got equals expected.T (and expected is not symmetric, so the two can be told apart)."""
    e, g = np.asarray(expected, dtype=float), _as_array(got)
    if g is None or e.ndim != 2 or g.shape != e.T.shape:
        return False
    symmetric = e.shape[0] == e.shape[1] and np.allclose(e, e.T, rtol=rtol, atol=atol)
    return bool(np.allclose(g, e.T, rtol=rtol, atol=atol) and not symmetric)


def has_nan(expected: Any, got: Any) -> bool:
    """got holds NaN where expected is a number."""
    e, g = np.asarray(expected, dtype=float), _as_array(got)
    return g is not None and g.shape == e.shape and bool(np.any(np.isnan(g) & np.isfinite(e)))


def swapped_mapping(expected: Any, got: Any, block: tuple[int, ...] | int,
                    rtol: float = RTOL, atol: float = ATOL) -> bool:
    """got is right exactly where a kernel reading ``row, col = cuda.grid(2)`` writes under
    ``launch_2d`` (x along the columns) and unwritten (NaN) elsewhere, and that is not all of it."""
    e, g = np.asarray(expected, dtype=float), _as_array(got)
    if g is None or g.shape != e.shape or e.ndim != 2:
        return False
    bx, by = (block, block) if isinstance(block, int) else (block[0], block[-1])
    rows, cols = e.shape
    # x (the "row" of such a kernel) runs over ceil(cols / bx) * bx values, y over the rows'.
    covered = np.zeros(e.shape, dtype=bool)
    covered[: -(-cols // bx) * bx, : -(-rows // by) * by] = True
    if covered.all():
        return False
    written = ~np.isnan(g)
    return bool(np.array_equal(written, covered)
                and np.allclose(g[covered], e[covered], rtol=rtol, atol=atol))


def wrong_only_at_edges(expected: Any, got: Any, block: tuple[int, ...] | int,
                        rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Some entries are wrong, and all of them lie in ``edge_mask(shape, block)``."""
    e, g = np.asarray(expected, dtype=float), _as_array(got)
    if g is None or g.shape != e.shape:
        return False
    bad = ~np.isclose(g, e, rtol=rtol, atol=atol)
    return bool(bad.any() and not (bad & ~edge_mask(e.shape, block)).any())


def diagnose(expected: Any, got: Any = None, *, error: str | None = None,
             block: tuple[int, ...] | int | None = None,
             rtol: float = RTOL, atol: float = ATOL) -> Diagnosis:
    """Compare a kernel's result (or the error it raised) with the reference; name the mistake."""
    if error is not None:
        if out_of_bounds_error(error):
            return Diagnosis(False, "bounds_check", BOUNDS_HINT)
        return Diagnosis(False, "error", f"the kernel raised {error}")
    e, g = np.asarray(expected, dtype=float), _as_array(got)
    if g is None:
        return Diagnosis(False, "type", f"expected an array, got {type(got).__name__}")
    if g.shape != e.shape:
        if e.ndim == 2 and g.shape == e.shape[::-1]:
            return Diagnosis(False, "swapped_indices", f"the result has shape {g.shape}, expected "
                             f"{e.shape}: " + TRANSPOSE_HINT)
        return Diagnosis(False, "shape", f"the result has shape {g.shape}, expected {e.shape}")
    bad = ~np.isclose(g, e, rtol=rtol, atol=atol)
    if not bad.any():
        return Diagnosis(True, None, "matches the reference")
    if looks_transposed(e, g, rtol, atol):
        return Diagnosis(False, "swapped_indices", TRANSPOSE_HINT)
    if block is not None and swapped_mapping(e, g, block, rtol, atol):
        return Diagnosis(False, "mapping", MAPPING_HINT)
    if block is not None and wrong_only_at_edges(e, g, block, rtol, atol):
        return Diagnosis(False, "edges", EDGE_HINT)
    if has_nan(e, g):
        return Diagnosis(False, "missing_syncthreads", SYNC_HINT)
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return Diagnosis(False, None, f"{int(bad.sum())} of {bad.size} entries differ; first at "
                     f"{first}: expected {e[first]:.6g}, got {g[first]:.6g}")
