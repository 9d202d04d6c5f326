"""Exercise 11 (convolutions): generic hints and source checks for its parts.

Public code, shipped with the package: a view for hints on a result's shape, rules that judge a
result against the expected one only (the right columns or rows of a matrix in another order,
axes swapped, another shape), and the source checks that keep a solution from calling a library's
convolution or pooling (the parts' oracles). Nothing here computes an answer: the oracles, the
hidden cases and the mistake replays (im2col by loops, a col2im that assigns, ...) stay in the
private part file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.hints import Rule, close
from edu_dl.grading.protocol import as_array
from edu_dl.grading.source import names_check

Case = tuple[Any, ...]
RTOL, ATOL = 1e-9, 1e-10  # float64 against float64: matmul and loop orders differ by ~1e-15


def shape_of(value: Any) -> tuple[int, ...]:
    """A result's shape: what a hint about a wrong geometry compares."""
    return tuple(np.shape(value))


def same_columns_other_order(expected: Any, got: Any, rtol: float = RTOL,
                             atol: float = ATOL) -> bool:
    """The same set of columns (windows) in another order."""
    e, g = (as_array(v).astype(np.float64) for v in (expected, got))
    if e.shape != g.shape or e.ndim != 2 or close(e, g, rtol, atol):
        return False
    return close(e[:, np.lexsort(e[::-1])], g[:, np.lexsort(g[::-1])], rtol, atol)


@dataclass(frozen=True)
class ColumnsReordered(Rule):
    """A matrix with the expected columns (``rows``: rows) in another order."""

    rows: bool = False
    rtol: float = RTOL
    atol: float = ATOL

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        if self.rows:
            expected, got = as_array(expected).T, as_array(got).T
        return same_columns_other_order(expected, got, self.rtol, self.atol)


@dataclass(frozen=True)
class LeadingAxesSwapped(Rule):
    """The expected shape with its first two axes swapped (and that is another shape)."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        e = shape_of(expected)
        return shape_of(got) == (e[1], e[0], *e[2:]) != e


@dataclass(frozen=True)
class LastAxesSwapped(Rule):
    """The expected values with the last two axes swapped (and they are other values)."""

    rtol: float = RTOL
    atol: float = ATOL

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        e = as_array(expected)
        return close(got, np.swapaxes(e, -1, -2), self.rtol, self.atol) and not close(
            got, e, self.rtol, self.atol)


@dataclass(frozen=True)
class OtherShape(Rule):
    """The result's shape is not the expected one."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return shape_of(got) != shape_of(expected)


# The parts' oracles are torch's conv2d and max_pool2d: a solution that calls them (or edu_dl's
# own, or the benchmark's NumPy convolution) writes nothing itself. Names as code_names sees
# them: F.conv2d, torch.conv2d, torch.nn.functional.conv2d all look up "conv2d".
CONV_NAMES = ("conv2d", "Conv2d", "conv_transpose2d", "ConvTranspose2d", "convolution",
              "_convolution", "conv2d_input", "conv2d_weight", "numpy_forward", "numpy_backward")
POOL_NAMES = ("max_pool2d", "MaxPool2d", "max_pool2d_with_indices",
              "max_pool2d_with_indices_backward", "_max_pool2d")

NO_LIBRARY_CONV = names_check(forbidden=[(
    CONV_NAMES, "this part asks you to write it yourself: the convolution as im2col and one "
                "matrix product (do not call F.conv2d, edu_dl's conv2d or another library's "
                "convolution)")])
NO_LIBRARY_CONV_BACKWARD = names_check(forbidden=[(
    CONV_NAMES, "this part asks you to write it yourself: dw, db and dx from im2col, one matrix "
                "product each and col2im (do not call F.conv2d and autograd, edu_dl's conv2d or "
                "another library's convolution)")])
NO_LIBRARY_POOL = names_check(forbidden=[(
    POOL_NAMES, "this part asks you to write it yourself: the maximum of each window (do not "
                "call F.max_pool2d or edu_dl's max_pool2d)")])
NO_LIBRARY_POOL_BACKWARD = names_check(forbidden=[(
    POOL_NAMES, "this part asks you to write it yourself: dout sent to each window's maximum "
                "(do not call F.max_pool2d and autograd, or edu_dl's max_pool2d)")])
