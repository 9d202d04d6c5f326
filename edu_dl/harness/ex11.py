"""Exercise 11 (convolutions; part ids ex11.*): call adapters, generic hints and source
checks for its parts.

Public code, shipped with the package: a view for hints on a result's shape, rules that judge a
result against the expected one only (the right columns or rows of a matrix in another order,
axes swapped, another shape), the call adapter that explains an error a forgotten padding raises
(``ExplainErrors``), and the source checks that keep a solution from calling a library's
convolution or pooling (the parts' oracles). Nothing here computes an answer: the oracles, the
hidden cases and the mistake replays (im2col by loops, a col2im that assigns, ...) stay in the
private part file.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule, close
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import CheckFailure
from edu_dl.grading.checking import student_error
from edu_dl.grading.protocol import as_array

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
class OtherShape(Rule):
    """The result's shape is not the expected one."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return shape_of(got) != shape_of(expected)


# --------------------------------------------------------------------------- errors explained

PADDING_FORGOTTEN = (
    "your function raises only when pad > 0 (on the same image padded beforehand, with pad=0, "
    "it runs): the padding is missing. Without it (x_pad = x, or a gradient array of x's "
    "shape) the windows of the last output rows and columns run past the array, so their "
    "slices come out smaller than what is written into them: pad with `pad` zeros on each side "
    "of H and W first (np.pad) and, for a gradient, crop the padding off at the end")


def frame_names(exc: BaseException) -> list[str]:
    """The names of the functions an exception passed through, innermost last."""
    return [frame.name for frame in traceback.extract_tb(exc.__traceback__)]


@dataclass(frozen=True)
class ExplainErrors:
    """Calls fn(*args); where the student's function raises, says what probably caused it.

    Feedback only (it runs beside the student's code and changes no result): an error raised
    inside ``helper`` (another graded function of the student's that this one calls) says so
    first; an error that goes away when the image is padded beforehand and ``pad`` set to 0 is
    a forgotten padding (NumPy's bare "could not broadcast" otherwise)."""

    image: int  # the argument that holds the images
    pad: int  # the argument that holds the padding
    spatial: tuple[int, int] = (2, 3)  # the images' H and W axes (NCHW; NHWC: (1, 2))
    helper: str = ""

    def __call__(self, fn: Callable[..., Any], args: Case) -> Any:
        try:
            return fn(*args)
        except (ValueError, IndexError) as exc:
            hints = self._hints(fn, args, exc)
            if not hints:
                raise
            raise CheckFailure(student_error(exc) + "".join(
                f"\n  hint: {h}" for h in hints)) from None

    def _hints(self, fn: Callable[..., Any], args: Case, exc: BaseException) -> list[str]:
        hints = []
        if self.helper and self.helper in frame_names(exc):
            hints.append(f"the error is raised inside your {self.helper}, which this function "
                         f"calls: make check(\"ex11.{self.helper}\", {self.helper}) pass first")
        if self._runs_padded_beforehand(fn, args):
            hints.append(PADDING_FORGOTTEN)
        return hints

    def _runs_padded_beforehand(self, fn: Callable[..., Any], args: Case) -> bool:
        pad = int(args[self.pad])
        if pad <= 0:
            return False
        x = np.asarray(args[self.image])
        widths = [(0, 0)] * x.ndim
        for axis in self.spatial:
            widths[axis] = (pad, pad)
        retry = list(args)
        retry[self.image], retry[self.pad] = np.pad(x, widths), 0
        try:
            fn(*retry)
        except Exception:
            return False
        return True


# The parts' oracles are torch's conv2d, unfold and avg_pool2d: a solution that calls them (or
# edu_dl's own, or the benchmark's NumPy convolution) writes nothing itself. Names as code_names
# sees them: F.conv2d, torch.conv2d, torch.nn.functional.conv2d all look up "conv2d".
CONV_NAMES = ("conv2d", "Conv2d", "conv_transpose2d", "ConvTranspose2d", "convolution",
              "_convolution", "conv2d_input", "conv2d_weight", "numpy_forward", "numpy_backward",
              "unfold", "Unfold", "fold", "Fold")
POOL_NAMES = ("avg_pool2d", "AvgPool2d", "adaptive_avg_pool2d", "AdaptiveAvgPool2d",
              "avg_pool2d_backward", "max_pool2d", "MaxPool2d", "lp_pool2d")
YOURSELF = "this part asks you to write it yourself: "

NO_LIBRARY_IM2COL = names_check(forbidden=[(
    CONV_NAMES, YOURSELF + "the windows copied into columns (do not call F.unfold or a "
                "library's convolution)")])
NO_LIBRARY_CONV = names_check(forbidden=[(
    CONV_NAMES, YOURSELF + "the convolution as your im2col_dilated and one matrix product (do "
                "not call F.conv2d, edu_dl's conv2d or another library's convolution)")])
NO_LIBRARY_CONV_BACKWARD = names_check(forbidden=[(
    CONV_NAMES, YOURSELF + "dw, db and dx from your im2col_dilated, one matrix product each "
                "and your own col2im (do not call F.conv2d and autograd, edu_dl's conv2d or "
                "another library's convolution)")])
NO_LIBRARY_POOL = names_check(forbidden=[(
    POOL_NAMES, YOURSELF + "the average of each window's real pixels (do not call "
                "F.avg_pool2d or another library's pooling)")])
NO_LIBRARY_POOL_BACKWARD = names_check(forbidden=[(
    POOL_NAMES, YOURSELF + "each window's gradient shared among its real pixels (do not call "
                "F.avg_pool2d and autograd, or another library's pooling)")])
