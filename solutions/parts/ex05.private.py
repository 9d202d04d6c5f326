"""Exercise 5, the GPU memory system: the 32-byte segments a whole 2-D launch touches (warps
formed from blocks of any shape), and a fused one-pass layer normalization compiled by Numba.

Judged outside the sandbox: every value against its oracle; for the layer norm also the submitted
source (decorated with ``@njit``, no NumPy reductions), read with ``compile()``. The private half:
oracles, hidden cases and mistake replays; the call and the source check are public
(``edu_dl.harness.ex05``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex05 import FUSED_SOURCE, call_compiled

Case = tuple[Any, ...]
Array = np.ndarray
EXACT = tolerance(rtol=0.0, atol=0.0)
SEGMENT, WARP = 32, 32

# --------------------------------------------------------------------------- launch segments


def _segment_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # Blocks whose warps are one row of threads, several rows (bx < 32), part of a row
    # (bx > 32) and a partial warp (30 threads); coalesced, strided, overlapping, misaligned.
    if not hidden:
        # In this order each mistake the hints know first fails on a case where its own hint
        # is the first that matches (a report shows the first failing case's hint).
        return [((32, 8), (2, 2), (1, 64, 0), 4), ((10, 3), (3, 2), (1, 30, 0), 4),
                ((32, 8), (2, 2), (64, 1, 0), 4), ((16, 4), (2, 2), (1, 8, 0), 4),
                ((64, 2), (2, 1), (2, 256, 3), 4), ((8, 8), (2, 2), (2, 16, 1), 8)]
    blocks = [(32, 8), (16, 16), (8, 4), (64, 2), (12, 5), (96, 1), (4, 32)]
    cases: list[Case] = []
    for _ in range(5):
        bx, by = blocks[int(rng.integers(len(blocks)))]
        grid = (int(rng.integers(1, 4)), int(rng.integers(1, 3)))
        a = int(rng.choice([0, 1, 1, 2, 3, 8, 33]))
        b = int(rng.choice([0, 1, 4, bx * grid[0], 2 * bx * grid[0] + 1]))
        cases.append(((bx, by), grid, (a, b, int(rng.integers(0, 8))),
                      int(rng.choice([2, 4, 8]))))
    return cases


Warps = Callable[[int, int], Iterator[list[tuple[int, int]]]]  # (bx, by) -> lists of (tx, ty)


def _warps_x_first(bx: int, by: int) -> Iterator[list[tuple[int, int]]]:
    """A block's warps: 32 consecutive thread numbers tid = ty * bx + tx (x varies fastest)."""
    threads = [(tid % bx, tid // bx) for tid in range(bx * by)]
    for start in range(0, len(threads), WARP):
        yield threads[start:start + WARP]


def _count(block: tuple[int, int], grid: tuple[int, int], coefficients: tuple[int, int, int],
           itemsize: int, warps: Warps = _warps_x_first,
           per_warp: Callable[[list[int], int], int] | None = None) -> int:
    """Sum over the launch's warps of the segments each touches (or of ``per_warp``)."""
    (bx, by), (gx, gy) = block, grid
    a, b, c = coefficients
    total = 0
    for block_y in range(gy):
        for block_x in range(gx):
            for warp in warps(bx, by):
                indices = [a * (block_x * bx + tx) + b * (block_y * by + ty) + c
                           for tx, ty in warp]
                total += (per_warp(indices, itemsize) if per_warp else
                          len({i * itemsize // SEGMENT for i in indices}))
    return total


def _launch_segments(block: tuple[int, int], grid: tuple[int, int],
                     coefficients: tuple[int, int, int], itemsize: int) -> int:
    return _count(block, grid, coefficients, itemsize)


def _replay(count: Callable[..., int], message: str) -> Mistake:
    """The count a mistaken model gives, where it differs from the right one."""
    def replay(expected: Any, args: Case) -> int | None:
        got = int(count(*args))
        return None if got == int(expected) else got

    return Mistake(replay, message, rtol=0.0, atol=0.0)


def _warps_per_row(bx: int, by: int) -> Iterator[list[tuple[int, int]]]:
    for ty in range(by):
        row = [(tx, ty) for tx in range(bx)]
        for start in range(0, bx, WARP):
            yield row[start:start + WARP]


def _warps_y_first(bx: int, by: int) -> Iterator[list[tuple[int, int]]]:
    threads = [(tid // by, tid % by) for tid in range(bx * by)]
    for start in range(0, len(threads), WARP):
        yield threads[start:start + WARP]


def _across_blocks(block: tuple[int, int], grid: tuple[int, int],
                   coefficients: tuple[int, int, int], itemsize: int) -> int:
    """Warps cut from the whole grid's threads in row-major order, ignoring blocks."""
    (bx, by), (gx, gy) = block, grid
    a, b, c = coefficients
    width = bx * gx
    indices = [a * (t % width) + b * (t // width) + c for t in range(width * by * gy)]
    return sum(len({i * itemsize // SEGMENT for i in indices[s:s + WARP]})
               for s in range(0, len(indices), WARP))


def _model(warps: Warps = _warps_x_first,
           per_warp: Callable[[list[int], int], int] | None = None) -> Callable[..., int]:
    """A whole launch counted by a (mistaken) model of warps or of segments per warp."""
    def count(block: tuple[int, int], grid: tuple[int, int],
              coefficients: tuple[int, int, int], itemsize: int) -> int:
        return _count(block, grid, coefficients, itemsize, warps, per_warp)

    return count


def _one_per_thread(indices: list[int], itemsize: int) -> int:
    return len(indices)


def _ideal(indices: list[int], itemsize: int) -> int:
    return -(-len(indices) * itemsize // SEGMENT)


def _from_first_address(indices: list[int], itemsize: int) -> int:
    first = min(indices) * itemsize
    return len({(i * itemsize - first) // SEGMENT for i in indices})


SEGMENT_HINTS = (
    _replay(_model(warps=_warps_per_row),
            "a warp is 32 consecutive threads of the block numbered x first (tid = threadIdx.y * "
            "blockDim.x + threadIdx.x): when blockDim.x is not 32 a warp spans several rows of "
            "threads, or a row holds several warps"),
    _replay(_model(warps=_warps_y_first),
            "your warps take consecutive threadIdx.y first: threads are numbered x first "
            "(tid = threadIdx.y * blockDim.x + threadIdx.x)"),
    _replay(_across_blocks, "a warp never spans two blocks: form the warps inside each block, "
                            "then add up over the grid's blocks"),
    _replay(_model(per_warp=_one_per_thread),
            "your count is one transaction per thread: threads of a warp whose addresses fall in "
            "the same 32-byte segment share one transaction"),
    _replay(_model(per_warp=_ideal),
            "your count assumes every warp is perfectly coalesced (its bytes / 32): count the "
            "distinct segments the addresses really fall in"),
    _replay(_model(per_warp=_from_first_address),
            "segments are aligned: byte address p lies in segment p // 32, counted from the "
            "array's start, not from the warp's first address"),
)

# --------------------------------------------------------------------------- fused layer norm

LAYER_NORM = tolerance(rtol=1e-4, atol=1e-4)  # float32 results; large row means included


def _layer_norm_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # A row mean of 1000 with unit spread: float32 sums of squares lose the variance there.
    specs = [(4, 8, 0.0, 1e-5), (3, 5, 0.0, 0.5), (2, 64, 1000.0, 1e-5), (1, 1, 0.0, 1e-3)]
    if hidden:
        specs = [(int(rng.integers(1, 6)), int(rng.integers(1, 80)),
                  float(rng.choice([0.0, 5.0, -300.0, 1000.0])),
                  float(rng.choice([1e-5, 1e-3, 0.1]))) for _ in range(4)]
    cases: list[Case] = []
    for rows, width, offset, eps in specs:
        x = (offset + rng.standard_normal((rows, width))).astype(np.float32)
        gamma = rng.uniform(0.5, 2.0, width).astype(np.float32)
        beta = rng.standard_normal(width).astype(np.float32)
        cases.append((x, gamma, beta, eps))
    return cases


def _normalized(x: Array, eps: float, ddof: int = 0, axis: int = 1,
                eps_on_std: bool = False) -> Array:
    x64 = x.astype(np.float64)
    centred = x64 - x64.mean(axis=axis, keepdims=True)
    width = x64.shape[axis]
    if width - ddof <= 0:
        return np.full_like(x64, np.nan)
    var = (centred**2).sum(axis=axis, keepdims=True) / (width - ddof)
    with np.errstate(divide="ignore", invalid="ignore"):  # a one-wide row without eps: 0 / 0
        return centred / (np.sqrt(var) + eps if eps_on_std else np.sqrt(var + eps))


def _layer_norm(x: Array, gamma: Array, beta: Array, eps: float) -> Array:
    return gamma.astype(np.float64) * _normalized(x, eps) + beta.astype(np.float64)


def _norm_mistake(replay: Callable[[Case], Array], message: str) -> Mistake:
    return Mistake(lambda e, a: replay(a), message, rtol=1e-4, atol=1e-4)


LAYER_NORM_HINTS = (
    _norm_mistake(lambda a: a[1] * _normalized(a[0], a[3], ddof=1) + a[2],
                  "your variance divides by D - 1: layer norm uses the row's variance dividing "
                  "by D (the population variance), as torch.nn.functional.layer_norm does"),
    _norm_mistake(lambda a: a[1] * _normalized(a[0], a[3], eps_on_std=True) + a[2],
                  "eps belongs under the square root: divide by sqrt(variance + eps), not by "
                  "sqrt(variance) + eps"),
    _norm_mistake(lambda a: a[1] * _normalized(a[0], 0.0) + a[2],
                  "eps is missing: divide by sqrt(variance + eps)"),
    _norm_mistake(lambda a: a[1] * _normalized(a[0], a[3], axis=0) + a[2],
                  "you normalized each column (over the batch, as batch norm does): layer norm "
                  "normalizes each row"),
    _norm_mistake(lambda a: a[2] * _normalized(a[0], a[3]) + a[1],
                  "gamma and beta are swapped: gamma scales, beta shifts"),
    _norm_mistake(lambda a: _normalized(a[0], a[3]),
                  "the scale gamma and the shift beta are missing"),
)


PARTS = [
    Part(
        id="ex05.launch_segments", points=3, cases=_segment_cases, expected=_launch_segments,
        compare=EXACT, arg_names=("block", "grid", "coefficients", "itemsize"),
        hints=SEGMENT_HINTS,
    ),
    Part(
        id="ex05.fused_layer_norm", points=3, cases=_layer_norm_cases, expected=_layer_norm,
        compare=LAYER_NORM, call=call_compiled, source_check=FUSED_SOURCE,
        arg_names=("x", "gamma", "beta", "eps"), hints=LAYER_NORM_HINTS, timeout_s=60.0,
    ),
]
