"""Exercise 23, Triton: a masked elementwise kernel (leaky ReLU, one program per block of
elements) and a row layer norm (one program per row, a block wider than the row).

The harness (``edu_dl.harness.ex23``) launches the student's ``@triton.jit`` kernel with the
case's block size on views into guarded buffers, and returns the output with the number of
elements stored outside it. The cases are sized so that the last block runs past the data: a
length that is no multiple of the block, one shorter than a block, a block wider than a row,
rows further apart (``stride``) than they are long. The oracles: NumPy in float64 on the float32
inputs; layer norm as ``torch.nn.functional.layer_norm`` without weight and bias (the biased
variance, eps inside the square root). The mistake replays: the usual slips of each kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Greater, Mistake, NonFinite
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex23 import KERNEL_SOURCE, TailUnwritten, call_layer_norm, call_leaky

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-4, atol=1e-5)  # float32 arithmetic against a float64 oracle

OUTSIDE = Greater("stored outside the output: the lanes past the data wrote into the memory "
                  "after it; mask tl.store (and tl.load) with the lanes inside the data, "
                  "offsets < n or cols < n_cols", output=1)


def _mistake(replay: Any, message: str) -> Mistake:
    """A replayed mistake of output 0, where it differs from the right answer."""
    def run(e: Any, a: Case) -> Any:
        with np.errstate(all="ignore"):
            value = replay(e, a)
        if value is None or np.allclose(value, e[0], rtol=1e-4, atol=1e-5):
            return None
        return value
    return Mistake(run, message, output=0, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- leaky ReLU


def _floats(rng: np.random.Generator, shape: Any) -> Array:
    return (rng.standard_normal(shape) * 2).astype(np.float32)


def _leaky_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x, slope, block): no multiple of the block first, then shorter than one block, exactly
    four blocks, a single element."""
    specs = [(1000, 0.1, 128), (5, 0.2, 16), (256, 0.01, 64), (1, 0.5, 32)]
    if hidden:
        specs = [(int(rng.integers(2, 3000)), float(rng.uniform(0.01, 0.5)), b)
                 for b in (64, 256, 1024)] + [(int(rng.integers(2, 16)), 0.3, 16), (512, 0.05, 128)]
    return [(_floats(rng, n), slope, block) for n, slope, block in specs]


def _leaky(x: Array, slope: float, block: int) -> tuple[Array, int]:
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 0, x, slope * x), 0


LEAKY_HINTS = (
    TailUnwritten("the last elements were never stored: program pid handles the offsets "
                  "pid * BLOCK + tl.arange(0, BLOCK), so that the cdiv(n, BLOCK) programs cover "
                  "all n elements", output=0),
    NonFinite("NaN: a lane past the end loaded what lies after x; load with mask=offsets < n",
              output=0),
    _mistake(lambda e, a: np.where(a[0] > 0, a[1] * a[0].astype(np.float64), a[0]),
             "the slope scales the negative inputs: out = x where x > 0, else slope * x"),
    _mistake(lambda e, a: np.maximum(a[0].astype(np.float64), 0.0),
             "that is a plain ReLU: the negative inputs become slope * x, not 0"),
    OUTSIDE,
)


# --------------------------------------------------------------------------- layer norm


def _norm_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x, eps, block, stride): rows shorter than the block and further apart than their length
    (stride > n_cols), with a large mean (padded lanes that count then show); one contiguous
    case; a row that exactly fills its block; a row of one column (variance 0: eps alone)."""
    specs = [(4, 100, 0.01, 128, 131), (3, 7, 1e-5, 8, 7), (2, 64, 1e-5, 64, 70),
             (3, 1, 0.01, 2, 5)]
    if hidden:
        specs = [(int(rng.integers(1, 8)), n, 1e-3, 1 << int(np.ceil(np.log2(n))), n + pad)
                 for n, pad in ((int(rng.integers(3, 300)), 3), (int(rng.integers(3, 300)), 0))]
        specs += [(5, 33, 0.01, 64, 40), (2, 128, 1e-5, 128, 128), (3, 10, 0.1, 32, 12)]
    cases = []
    for m, n, eps, block, stride in specs:
        x = _floats(rng, (m, n)) + rng.uniform(-3.0, 3.0, (m, 1)).astype(np.float32)
        cases.append((x, eps, block, stride))
    return cases


def _norm(x: Array, eps: float, block: int, stride: int) -> tuple[Array, int]:
    x = np.asarray(x, dtype=np.float64)
    centred = x - x.mean(axis=1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + eps), 0


def _norm_with(a: Case, padded: bool = False, divisor: str = "n", eps_inside: bool = True
               ) -> Array:
    x, eps, block = np.asarray(a[0], dtype=np.float64), float(a[1]), int(a[2])
    n = x.shape[1]
    count = {"n": n, "block": block, "n-1": max(n - 1, 1)}[divisor]
    mean = x.sum(axis=1, keepdims=True) / (block if divisor == "block" else n)
    centred = x - mean
    squares = (centred ** 2).sum(axis=1, keepdims=True)
    if padded:  # the masked lanes loaded 0, and 0 - mean counted in the variance
        squares = squares + (block - n) * mean ** 2
    var = squares / count
    return centred / (np.sqrt(var) + eps) if not eps_inside else centred / np.sqrt(var + eps)


NORM_HINTS = (
    NonFinite("NaN: a lane outside the row loaded what lies after it: load with mask=cols < "
              "n_cols and other=0.0; and row r starts at x_ptr + r * stride (rows are stride "
              "elements apart, not n_cols)", output=0),
    _mistake(lambda e, a: _norm_with(a, padded=True),
             "the masked lanes count in the variance: they loaded 0.0, so there x - mean is "
             "-mean; zero them before squaring, tl.where(mask, x - mean, 0.0)"),
    _mistake(lambda e, a: _norm_with(a, divisor="block"),
             "divided by BLOCK: the block is wider than the row; the mean and the variance "
             "divide by n_cols"),
    _mistake(lambda e, a: _norm_with(a, divisor="n-1"),
             "layer norm's variance is the biased one, divided by n_cols (as "
             "torch.nn.functional.layer_norm does), not n_cols - 1"),
    _mistake(lambda e, a: _norm_with(a, eps_inside=False),
             "eps goes inside the square root: (x - mean) / sqrt(var + eps)"),
    _mistake(lambda e, a: np.asarray(a[0], np.float64) - np.asarray(a[0], np.float64).mean(
             axis=1, keepdims=True), "the centred row still needs dividing by sqrt(var + eps)"),
    OUTSIDE,
)


PARTS = [
    Part(
        id="ex23.leaky_relu_kernel", points=3, cases=_leaky_cases, expected=_leaky,
        compare=CLOSE, call=call_leaky, hints=LEAKY_HINTS, source_check=KERNEL_SOURCE,
        timeout_s=60.0,
        arg_names=("x", "slope", "block"), output_names=("out", "written_outside"),
    ),
    Part(
        id="ex23.layer_norm_kernel", points=5, cases=_norm_cases, expected=_norm,
        compare=CLOSE, call=call_layer_norm, hints=NORM_HINTS, source_check=KERNEL_SOURCE,
        timeout_s=60.0,
        arg_names=("x", "eps", "block", "stride"), output_names=("out", "written_outside"),
    ),
]
