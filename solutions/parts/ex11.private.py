"""Exercise 11 (part ids ex11.*), convolutions one step past lecture 11: dilated im2col, a
convolution layer in TensorFlow's NHWC layout (forward and backward, through the student's own
im2col), and average pooling that leaves the padding out of each window's count (forward and
backward).

Lecture 11 prints im2col, col2im, an NCHW convolution and max pooling; none of these parts is one
of them. The oracles are independent of the student's task and of edu_dl's ops: a direct loop
over the output positions and kernel taps for im2col (cross-checked against torch's unfold in
the tests), and torch.nn.functional's conv2d / avg_pool2d with torch.autograd in float64 for the
layers. Inputs are drawn at grading time (the grader's secret seed). Hints replay typical
mistakes (a forgotten padding, stride or dilation, a reshape where a transpose is needed, db from
one image, col2im assigning instead of adding, the padding counted in an average) with small
NumPy and torch variants, on the trusted side. The layers' parts refuse, from the submitted
source, a function that calls the oracle. Public: the call adapter that explains the errors a
forgotten padding raises, the generic hint rules and the source checks, in
``edu_dl.harness.ex11``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, Permuted, Transposed
from edu_dl.grading.authoring.source import all_checks, names_check, speed_rules
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex11 import (
    NO_LIBRARY_CONV,
    NO_LIBRARY_CONV_BACKWARD,
    NO_LIBRARY_IM2COL,
    NO_LIBRARY_POOL,
    NO_LIBRARY_POOL_BACKWARD,
    ColumnsReordered,
    ExplainErrors,
    OtherShape,
    shape_of,
)
from edu_dl.harness.mytorch import call_conv2d
from edu_dl.speed.tasks import CALLS_THE_REFERENCE, TASKS

Array = np.ndarray
Case = tuple[Any, ...]
# float64 against float64: matmul and loop orders differ by ~1e-15.
COMPARE = tolerance(rtol=1e-9, atol=1e-10)
TOL: dict[str, Any] = {"rtol": 1e-9, "atol": 1e-10}  # the hints' closeness, the same
EXACT: dict[str, Any] = {"rtol": 0.0, "atol": 0.0}  # for shapes


def out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _quiet(fn: Any, *args: Any) -> Any:
    """fn(*args), or None where it raises (a replay that cannot run here does not apply: e.g. no
    window fits the image without its padding)."""
    try:
        return fn(*args)
    except Exception:
        return None


def _close(a: Any, b: Any) -> bool:
    try:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-9, atol=1e-10))


def _unless_right(wrong: Any, expected: Any) -> Any:
    """A replay's value, or None where the mistake gives the right answer on this case."""
    return None if wrong is None or _close(wrong, expected) else wrong


def _other_shape(shape: tuple[int, ...] | None, expected: Any) -> tuple[int, ...] | None:
    """A mistake's shape, or None where it is the right shape on this case (e.g. one window
    fits with and without the stride)."""
    return None if shape is None or shape == shape_of(expected) else shape


# --------------------------------------------------------------------------- cases

# N, C, H, W, O, kh, kw, stride, pad, dilation: case 1 pads, case 2 strides, case 3 dilates
VISIBLE_GEOMETRY = [
    (2, 3, 5, 4, 4, 3, 3, 1, 1, 1),
    (1, 2, 7, 8, 3, 3, 2, 2, 0, 1),
    (2, 2, 6, 6, 2, 2, 3, 1, 1, 2),
]


def _geometry(rng: np.random.Generator) -> tuple[int, ...]:
    """(N, C, H, W, O, kh, kw, stride, pad, dilation), drawn so that at least one window fits."""
    kh, kw = (int(k) for k in rng.integers(1, 4, size=2))
    stride, pad, dilation = (int(v) for v in (rng.integers(1, 3), rng.integers(0, 3),
                                              rng.integers(1, 3)))
    h = int(rng.integers(max(1, dilation * (kh - 1) + 1 - 2 * pad), 9))
    w = int(rng.integers(max(1, dilation * (kw - 1) + 1 - 2 * pad), 9))
    n, c, o = (int(v) for v in rng.integers(1, 4, size=3))
    return n, c, h, w, o, kh, kw, stride, pad, dilation


def _geometries(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    if not hidden:
        return list(VISIBLE_GEOMETRY)
    # one case with padding, stride and dilation together always
    return [(2, 2, 6, 5, 3, 3, 3, 2, 2, 2), *(_geometry(rng) for _ in range(3))]


def _im2col_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal((n, c, h, w)), kh, kw, stride, pad, dilation)
            for n, c, h, w, _, kh, kw, stride, pad, dilation in _geometries(rng, hidden)]


def _forward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal((n, h, w, c)), rng.standard_normal((kh, kw, c, o)),
             rng.standard_normal(o), stride, pad, dilation)
            for n, c, h, w, o, kh, kw, stride, pad, dilation in _geometries(rng, hidden)]


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    cases: list[Case] = []
    for n, c, h, w, o, kh, kw, stride, pad, dilation in _geometries(rng, hidden):
        x, weight = rng.standard_normal((n, h, w, c)), rng.standard_normal((kh, kw, c, o))
        dout = rng.standard_normal((n, out_size(h, kh, stride, pad, dilation),
                                    out_size(w, kw, stride, pad, dilation), o))
        cases.append((dout, x, weight, stride, pad, dilation))
    return cases


# N, C, H, W, k, stride, pad: padding and stride; no padding; overlapping windows and padding
POOL_VISIBLE = [(2, 3, 5, 5, 3, 2, 1), (1, 2, 6, 7, 2, 2, 0), (2, 1, 5, 4, 3, 1, 1)]


def _pool_geometries(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    if not hidden:
        return list(POOL_VISIBLE)
    found: list[tuple[int, ...]] = [(1, 1, 4, 4, 2, 2, 1)]
    for _ in range(3):
        k = int(rng.integers(2, 4))
        stride, pad = int(rng.integers(1, k + 1)), int(rng.integers(0, k // 2 + 1))
        n, c = (int(v) for v in rng.integers(1, 4, size=2))
        h, w = (int(v) for v in rng.integers(k, 8, size=2))
        found.append((n, c, h, w, k, stride, pad))
    return found


def _pool_forward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal((n, c, h, w)), k, s, p)
            for n, c, h, w, k, s, p in _pool_geometries(rng, hidden)]


def _pool_backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    cases: list[Case] = []
    for n, c, h, w, k, s, p in _pool_geometries(rng, hidden):
        x = rng.standard_normal((n, c, h, w))
        dout = rng.standard_normal((n, c, out_size(h, k, s, p), out_size(w, k, s, p)))
        cases.append((dout, x, k, s, p))
    return cases


# --------------------------------------------------------------------------- oracles


def im2col_loops(x: Array, kh: int, kw: int, stride: int, pad: int, dilation: int = 1,
                 tap_step: int | None = None) -> Array:
    """Column (n, i, j) holds the window at output position (i, j) of image n, its taps in
    (c, p, q) order, tap (p, q) read at (i*stride + p*dilation, j*stride + q*dilation): a loop
    over output positions and taps, nothing shared with a vectorized answer. ``tap_step``
    (default: ``dilation``) replays taps read at another step."""
    step = dilation if tap_step is None else tap_step
    n, c, h, w = x.shape
    oh, ow = out_size(h, kh, stride, pad, dilation), out_size(w, kw, stride, pad, dilation)
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((c * kh * kw, n * oh * ow))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                rows = [i * stride + p * step for p in range(kh)]
                columns = [j * stride + q * step for q in range(kw)]
                window = x_pad[b][:, rows][:, :, columns]  # (C, kh, kw)
                cols[:, (b * oh + i) * ow + j] = window.ravel()
    return cols


def _torch_conv_nhwc(x: Array, w: Array, b: Array | None, stride: int, pad: int,
                     dilation: int) -> Array:
    """torch's NCHW conv2d, in NHWC with an HWIO weight."""
    import torch
    import torch.nn.functional as F

    bias = None if b is None else torch.tensor(b, dtype=torch.float64)
    out = F.conv2d(torch.tensor(x, dtype=torch.float64).permute(0, 3, 1, 2),
                   torch.tensor(w, dtype=torch.float64).permute(3, 2, 0, 1), bias,
                   stride=stride, padding=pad, dilation=dilation)
    return out.permute(0, 2, 3, 1).numpy()


def _forward_expected(x: Array, w: Array, b: Array, stride: int, pad: int,
                      dilation: int) -> Array:
    return _torch_conv_nhwc(x, w, b, stride, pad, dilation)


def _backward_expected(dout: Array, x: Array, w: Array, stride: int, pad: int, dilation: int
                       ) -> tuple[Array, Array, Array]:
    import torch
    import torch.nn.functional as F

    xt, wt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    bt = torch.zeros(w.shape[3], dtype=torch.float64, requires_grad=True)
    # contiguous NCHW copies: torch's slow (CPU, float64) conv2d wants contiguous gradients
    out = F.conv2d(xt.permute(0, 3, 1, 2).contiguous(), wt.permute(3, 2, 0, 1).contiguous(), bt,
                   stride=stride, padding=pad, dilation=dilation)
    out.backward(torch.tensor(dout, dtype=torch.float64).permute(0, 3, 1, 2).contiguous())
    assert xt.grad is not None and wt.grad is not None and bt.grad is not None
    return xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def _torch_avg_pool(x: Array, k: int, stride: int, pad: int, count_pad: bool = False) -> Array:
    import torch
    import torch.nn.functional as F

    return F.avg_pool2d(torch.tensor(x, dtype=torch.float64), k, stride, pad,
                        count_include_pad=count_pad).numpy()


def _pool_forward_expected(x: Array, k: int, stride: int, pad: int) -> Array:
    return _torch_avg_pool(x, k, stride, pad)


def _pool_backward_expected(dout: Array, x: Array, k: int, stride: int, pad: int,
                            count_pad: bool = False) -> Array:
    import torch
    import torch.nn.functional as F

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    F.avg_pool2d(xt, k, stride, pad, count_include_pad=count_pad).backward(
        torch.tensor(dout, dtype=torch.float64))
    assert xt.grad is not None
    return xt.grad.numpy()


# --------------------------------------------------------------------------- typical mistakes


def _im2col_shape(x: Array, kh: int, kw: int, stride: int, pad: int, dilation: int
                  ) -> tuple[int, ...]:
    n, c, h, w = x.shape
    return (c * kh * kw, n * out_size(h, kh, stride, pad, dilation)
            * out_size(w, kw, stride, pad, dilation))


def _im2col_reshaped(x: Array, kh: int, kw: int, stride: int, pad: int, dilation: int) -> Array:
    """The mistake: the (N, C, OH, OW, kh, kw) windows reshaped to X_col's shape, no transpose."""
    n, c, h, w = x.shape
    oh, ow = out_size(h, kh, stride, pad, dilation), out_size(w, kw, stride, pad, dilation)
    cols = im2col_loops(x, kh, kw, stride, pad, dilation).reshape(c, kh, kw, n, oh, ow)
    return cols.transpose(3, 0, 4, 5, 1, 2).reshape(c * kh * kw, n * oh * ow)


IM2COL_HINTS = (
    Transposed(
        "your matrix is transposed: X_col has one COLUMN per output position and one row per "
        "(channel, kernel row, kernel column) tap: shape (C*kh*kw, N*OH*OW)"),
    Mistake(lambda e, a: _quiet(im2col_loops, a[0], a[1], a[2], a[3], 0, a[5])
            if a[4] > 0 else None,
            "you forgot the padding: take the windows from the image padded with `pad` zeros "
            "on each side of H and W", **TOL),
    Mistake(lambda e, a: _other_shape(_quiet(_im2col_shape, a[0], a[1], a[2], a[3], 0, a[5]), e)
            if a[4] > 0 else None,
            "your X_col has as many columns as the image WITHOUT its padding has windows: "
            "count the window positions in the padded image, H + 2*pad rows and W + 2*pad "
            "columns", view=shape_of, **EXACT),
    Mistake(lambda e, a: _other_shape(_quiet(_im2col_shape, a[0], a[1], a[2], 1, a[4], a[5]), e)
            if a[3] > 1 else None,
            "you ignored the stride: window (i, j) starts at row i*stride and column "
            "j*stride, so there are fewer windows than with stride 1", view=shape_of, **EXACT),
    Mistake(lambda e, a: _other_shape(_quiet(_im2col_shape, a[0], a[1], a[2], a[3], a[4], 1), e)
            if a[5] > 1 else None,
            "your number of windows is the undilated kernel's: with dilation d a kernel of "
            "kh taps spans d*(kh - 1) + 1 rows of the padded image (and kw taps d*(kw - 1) + 1 "
            "columns), so fewer windows fit", view=shape_of, **EXACT),
    Mistake(lambda e, a: _unless_right(_quiet(im2col_loops, *a, 1), e),
            "your windows have the right positions but their taps are next to each other: "
            "tap (p, q) is read `dilation` pixels after tap (p - 1, q), at row i*stride + "
            "p*dilation", **TOL),
    ColumnsReordered(
        "your columns are the right windows in another order: column (n * OH + i) * OW + j "
        "holds image n's window at output position (i, j)"),
    ColumnsReordered(
        "each window's taps are in another order: row (c * kh + p) * kw + q holds tap (c, p, "
        "q), the order of w[o].ravel() for an NCHW weight (O, C, kh, kw)", rows=True),
    Mistake(lambda e, a: _unless_right(_quiet(_im2col_reshaped, *a), e),
            "the right numbers in a scrambled order: reshape keeps the order of the axes, so an "
            "array of windows (N, C, OH, OW, kh, kw) reshaped straight to (C*kh*kw, N*OH*OW) "
            "mixes images and taps; move its axes into (C, kh, kw, N, OH, OW) order with a "
            "transpose first, then reshape", **TOL),
    Permuted("the right numbers in another order: check which axes you reshape and which you "
             "transpose (rows are (c, p, q), columns (n, i, j))"),
)


def _conv_nhwc_loops(x_nchw: Array, w_rows: Array, b: Array | None, kh: int, kw: int,
                     stride: int, pad: int, dilation: int, out_shape: tuple[int, ...]) -> Array:
    """The mistakes' convolution: X_col.T @ W with the given NCHW images and (C*kh*kw, O)
    weight matrix, the product (N*OH*OW, O) reshaped to ``out_shape``."""
    z = im2col_loops(x_nchw, kh, kw, stride, pad, dilation).T @ w_rows
    if b is not None:
        z = z + b
    return z.reshape(out_shape)


def _forward_variant(a: Case, input_reshaped: bool = False, weight_reshaped: bool = False,
                     output_reshaped: bool = False) -> Array:
    x, w, b, stride, pad, dilation = a
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    x_nchw = x.reshape(n, c, h, wd) if input_reshaped else x.transpose(0, 3, 1, 2)
    w_rows = (w.reshape(c * kh * kw, o) if weight_reshaped
              else w.transpose(2, 0, 1, 3).reshape(c * kh * kw, o))
    oh, ow = out_size(h, kh, stride, pad, dilation), out_size(wd, kw, stride, pad, dilation)
    z = _conv_nhwc_loops(x_nchw, w_rows, b, kh, kw, stride, pad, dilation, (n * oh * ow, o))
    # the layout mistake: Z as (O, N*OH*OW) read straight into (N, OH, OW, O)
    return z.T.reshape(n, oh, ow, o) if output_reshaped else z.reshape(n, oh, ow, o)


def _conv_shape(a: Case, stride: int, pad: int, dilation: int) -> tuple[int, ...]:
    x, w = a[0], a[1]
    return (x.shape[0], out_size(x.shape[1], w.shape[0], stride, pad, dilation),
            out_size(x.shape[2], w.shape[1], stride, pad, dilation), w.shape[3])


def _reshape_mistake(e: Any, a: Case, **mistake: bool) -> Any:
    return _unless_right(_quiet(lambda: _forward_variant(a, **mistake)), e)


FORWARD_HINTS = (
    Mistake(lambda e, a: _other_shape(_quiet(_conv_shape, a, a[3], 0, a[5]), e)
            if a[4] > 0 else None,
            "your output has the size of a convolution without padding: take the windows from "
            "x padded with `pad` zeros on each side of H and W", view=shape_of, **EXACT),
    Mistake(lambda e, a: _other_shape(_quiet(_conv_shape, a, 1, a[4], a[5]), e)
            if a[3] > 1 else None,
            "your output has the size of a convolution with stride 1: pass the stride on to "
            "your im2col_dilated", view=shape_of, **EXACT),
    Mistake(lambda e, a: _other_shape(_quiet(_conv_shape, a, a[3], a[4], 1), e)
            if a[5] > 1 else None,
            "your output has the size of an undilated convolution: pass the dilation on to "
            "your im2col_dilated", view=shape_of, **EXACT),
    Mistake(lambda e, a: (e.shape[0], e.shape[3], e.shape[1], e.shape[2])
            if e.shape[3] != e.shape[1] or e.shape[1] != e.shape[2] else None,
            "your output is NCHW (N, O, OH, OW): this layer works in NHWC, the output is "
            "(N, OH, OW, O) like its input", view=shape_of, **EXACT),
    Mistake(lambda e, a: _reshape_mistake(e, a, input_reshaped=True),
            "the input is reshaped where a transpose is needed: x.reshape(N, C, H, W) keeps "
            "NHWC's order of the numbers and only relabels the axes; moving the channels to "
            "axis 1 is a transpose", **TOL),
    Mistake(lambda e, a: _reshape_mistake(e, a, weight_reshaped=True),
            "the weight is reshaped where a transpose is needed: an HWIO weight (kh, kw, C, O) "
            "reshaped straight to (kh*kw*C, O) has its rows in (p, q, c) order, and X_col's "
            "rows are in (c, p, q) order: move C in front first", **TOL),
    Mistake(lambda e, a: _reshape_mistake(e, a, output_reshaped=True),
            "the output is reshaped where a transpose is needed: a product laid out (O, "
            "N*OH*OW) reshaped straight to (N, OH, OW, O) mixes filters and positions; "
            "transpose it to (N*OH*OW, O) first (or compute X_col.T @ W, which is already in "
            "that layout)", **TOL),
    Mistake(lambda e, a: _quiet(_torch_conv_nhwc, a[0], a[1], None, a[3], a[4], a[5]),
            "add the bias: b[o] goes to every output position of filter o", **TOL),
    Mistake(lambda e, a: _unless_right(_quiet(_torch_conv_nhwc, a[0], a[1][::-1, ::-1].copy(),
                                               a[2], a[3], a[4], a[5]), e),
            "you flipped the kernel (a mathematician's convolution): deep-learning frameworks "
            "compute the cross-correlation, tap (p, q) against the pixel p*dilation rows and "
            "q*dilation columns past the window's corner", **TOL),
)


def col2im_assign(d_taps: Array, x_shape: tuple[int, ...], kh: int, kw: int, stride: int,
                  pad: int, dilation: int, by_tap: bool) -> Array:
    """The mistake: d_taps (N, OH, OW, C, kh, kw) ASSIGNED back to the pixels they were read
    from, NHWC, so overlapping windows overwrite each other: one strided slice per tap (the
    loop of lecture 11's col2im), or one pixel per window and tap."""
    n, h, w, c = x_shape
    oh, ow = d_taps.shape[1:3]
    dx_pad = np.zeros((n, h + 2 * pad, w + 2 * pad, c))
    if by_tap:
        for p in range(kh):
            for q in range(kw):
                dx_pad[:, p * dilation : p * dilation + stride * oh : stride,
                       q * dilation : q * dilation + stride * ow : stride] = d_taps[..., p, q]
        return dx_pad[:, pad : pad + h, pad : pad + w]
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for p in range(kh):
                    for q in range(kw):
                        at = (b, i * stride + p * dilation, j * stride + q * dilation)
                        dx_pad[at] = d_taps[b, i, j, :, p, q]
    return dx_pad[:, pad : pad + h, pad : pad + w]


def _dx_assigned(e: Any, a: Case, by_tap: bool) -> Array | None:
    """dx computed by an assigning col2im (None where it is the right dx: no window overlaps)."""
    dout, x, w, stride, pad, dilation = a
    kh, kw, c, o = w.shape
    d_taps = dout.reshape(-1, o) @ w.transpose(2, 0, 1, 3).reshape(c * kh * kw, o).T
    dx = col2im_assign(d_taps.reshape(*dout.shape[:3], c, kh, kw), x.shape, kh, kw, stride,
                       pad, dilation, by_tap)
    return _unless_right(dx, e[0])


def _dw_reshaped(e: Any, a: Case) -> Array | None:
    """The mistake: dW as (C*kh*kw, O) reshaped straight to (kh, kw, C, O)."""
    dw = e[1]
    kh, kw, c, o = dw.shape
    return _unless_right(dw.transpose(2, 0, 1, 3).reshape(kh, kw, c, o), dw)


def _db_one_image(e: Any, a: Case) -> Array | None:
    return _unless_right(a[0][0].sum(axis=(0, 1)), e[2]) if a[0].shape[0] > 1 else None


def _dx_padded_shape(a: Case) -> tuple[int, ...] | None:
    n, h, w, c = a[1].shape
    return (n, h + 2 * a[4], w + 2 * a[4], c) if a[4] > 0 else None


COL2IM_ASSIGNS = ("windows overlap: col2im must ADD each tap's gradient to the pixel it was "
                  "read from (+=), not assign it (=), so a pixel read by several windows gets "
                  "every contribution")

BACKWARD_HINTS = (
    Mistake(lambda e, a: _dx_padded_shape(a),
            "your dx has the padded image's shape: x's gradient has x's shape, so crop the "
            "`pad` rows and columns off each side of your padded gradient", output=0,
            view=shape_of, **EXACT),
    # either assigning col2im: one slice per tap (the lecture's loop), one pixel at a time
    Mistake(lambda e, a: _dx_assigned(e, a, True), COL2IM_ASSIGNS, output=0, **TOL),
    Mistake(lambda e, a: _dx_assigned(e, a, False), COL2IM_ASSIGNS, output=0, **TOL),
    Mistake(_db_one_image,
            "your db is the sum over ONE image: b[o] is added at every output position of "
            "every image in the batch, so its gradient sums dout over the batch too", output=2,
            **TOL),
    OtherShape(
        "db has b's shape (O,): one number per filter, dout summed over every other axis",
        output=2),
    Mistake(_dw_reshaped,
            "dw is reshaped where a transpose is needed: the product against X_col has its rows "
            "in (c, p, q) order, so it is (C, kh, kw, O) once reshaped; the HWIO weight "
            "(kh, kw, C, O) needs its axes moved, not relabelled", output=1, **TOL),
    OtherShape("dw has w's shape (kh, kw, C, O)", output=1),
)


def _pool_shape(a: Case, stride: int, pad: int) -> tuple[int, ...]:
    x, k = a[0], a[1]
    return (*x.shape[:2], out_size(x.shape[2], k, stride, pad),
            out_size(x.shape[3], k, stride, pad))


def _max_pool(x: Array, k: int, stride: int, pad: int) -> Array:
    import torch
    import torch.nn.functional as F

    return F.max_pool2d(torch.tensor(x, dtype=torch.float64), k, stride, pad).numpy()


POOL_FORWARD_HINTS = (
    Mistake(lambda e, a: _quiet(_torch_avg_pool, *a, True) if a[3] > 0 else None,
            "a window that overlaps the padding has fewer than k*k real pixels: divide each "
            "window's sum by the number of REAL pixels in it, not by k*k (the padding is not "
            "part of the image)", **TOL),
    Mistake(lambda e, a: _other_shape(_quiet(_pool_shape, a, a[2], 0), e) if a[3] > 0 else None,
            "your output has the size without padding: the windows slide over the image padded "
            "with `pad` on each side", view=shape_of, **EXACT),
    Mistake(lambda e, a: _other_shape(_quiet(_pool_shape, a, 1, a[3]), e) if a[2] > 1 else None,
            "use the stride: window (i, j) starts at (i*stride, j*stride) of the padded image",
            view=shape_of, **EXACT),
    Mistake(lambda e, a: _quiet(_max_pool, *a),
            "that is max pooling: take the AVERAGE of each window's real pixels", **TOL),
)


def _pool_sum_backward(dout: Array, x: Array, k: int, stride: int, pad: int) -> Array:
    """The mistake: every pixel of a window gets the window's whole gradient (a sum pool)."""
    return _pool_backward_expected(dout, x, k, stride, pad, count_pad=True) * k * k


def _pool_assigned(dout: Array, x: Array, k: int, stride: int, pad: int) -> Array | None:
    """The mistake: each window's share ASSIGNED to its pixels, so overlaps keep the last."""
    n, c, h, w = x.shape
    ones = np.pad(np.ones((h, w)), pad)
    dx_pad = np.zeros((n, c, h + 2 * pad, w + 2 * pad))
    for i in range(dout.shape[2]):
        for j in range(dout.shape[3]):
            rows, cols = slice(i * stride, i * stride + k), slice(j * stride, j * stride + k)
            dx_pad[:, :, rows, cols] = dout[:, :, i, j][:, :, None, None] / ones[rows, cols].sum()
    dx = dx_pad[:, :, pad : pad + h, pad : pad + w]
    return None if _close(dx, _pool_backward_expected(dout, x, k, stride, pad)) else dx


POOL_BACKWARD_HINTS = (
    Mistake(lambda e, a: (a[1].shape[0], a[1].shape[1], a[1].shape[2] + 2 * a[4],
                          a[1].shape[3] + 2 * a[4]) if a[4] > 0 else None,
            "your dx has the padded image's shape: x's gradient has x's shape, so crop the "
            "padding off", view=shape_of, **EXACT),
    Mistake(lambda e, a: _quiet(_pool_backward_expected, *a, True) if a[4] > 0 else None,
            "you divided by k*k everywhere: a window that overlaps the padding averaged fewer "
            "real pixels, so each of them gets dout / (that window's count of real pixels)",
            **TOL),
    Mistake(lambda e, a: _quiet(_pool_sum_backward, *a),
            "each pixel got the window's whole gradient (a SUM pool's backward): an average "
            "shares dout among the window's real pixels, dout / count each", **TOL),
    Mistake(lambda e, a: _quiet(_pool_assigned, *a),
            "with stride < k the windows overlap, and a pixel in two windows gets a share of "
            "both: add (+=) the shares, do not assign (=)", **TOL),
)


# --------------------------------------------------------------------------- going further

# The answers only: the speed itself is measured by the grader, from outside, in separate
# sandboxed runs (edu_dl.grading.stages.speed, a gradebook row of its own); the written
# justification is graded by hand.
FASTER = TASKS["ex11.faster_max_pool"]


def _max_pool_cases(rng: np.random.Generator, hidden: bool) -> list[tuple[Any, ...]]:
    sizes = [2, 4, 6] if not hidden else [2 * int(s) for s in rng.integers(1, 7, size=4)]
    return [FASTER.inputs(rng, size) for size in sizes]


# --------------------------------------------------------------------------- your framework's layer
# Conv2d on the student's own tape (edu_dl.harness.mytorch drives it): one op whose vjp is their
# conv_backward_nhwc; torch in float64 is the oracle, which their package may not call.
# N, C, H, W, O, k, stride, pad, dilation: padding; stride and dilation; one image, one filter
LAYER_VISIBLE = [(2, 3, 6, 5, 4, 3, 1, 1, 1), (1, 2, 7, 7, 3, 3, 2, 1, 2),
                 (1, 1, 4, 4, 1, 2, 1, 0, 1)]


def _layer_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x (N, H, W, C), weight (k, k, C, O), bias (O,), dout (N, OH, OW, O), stride, pad,
    dilation)."""
    geometries = LAYER_VISIBLE if not hidden else [
        (*(int(v) for v in rng.integers(1, 4, size=2)), int(rng.integers(5, 9)),
         int(rng.integers(5, 9)), int(rng.integers(1, 4)), int(rng.integers(1, 4)),
         int(rng.integers(1, 3)), int(rng.integers(0, 2)), int(rng.integers(1, 3)))
        for _ in range(4)]
    cases: list[Case] = []
    for n, c, h, w, o, k, stride, pad, dilation in geometries:
        b_k = 1 / np.sqrt(c * k * k)
        dout = rng.standard_normal((n, out_size(h, k, stride, pad, dilation),
                                    out_size(w, k, stride, pad, dilation), o))
        cases.append((rng.standard_normal((n, h, w, c)), rng.uniform(-b_k, b_k, (k, k, c, o)),
                      rng.uniform(-b_k, b_k, o), dout, stride, pad, dilation))
    return cases


def _layer_expected(x: Array, w: Array, b: Array, dout: Array, stride: int, pad: int,
                    dilation: int) -> tuple[Array, ...]:
    dx, dw, db = _backward_expected(dout, x, w, stride, pad, dilation)
    return _torch_conv_nhwc(x, w, b, stride, pad, dilation), dx, dw, db


OWN_ENGINE = names_check(forbidden=[(
    ("torch", "edu_dl", "autograd", "tensorflow", "jax", "conv2d"),
    "your framework runs on your own engine: record your conv_forward_nhwc on the tape with "
    "conv_backward_nhwc as its vjp (no torch, edu_dl, TensorFlow or JAX)")])


PARTS = [
    Part(
        id="ex11.im2col_dilated", points=2, cases=_im2col_cases, expected=im2col_loops,
        compare=COMPARE, arg_names=("x", "kh", "kw", "stride", "pad", "dilation"),
        hints=IM2COL_HINTS, call=ExplainErrors(image=0, pad=4),
        source_check=NO_LIBRARY_IM2COL,
    ),
    Part(
        id="ex11.conv_forward_nhwc", points=2, cases=_forward_cases,
        expected=_forward_expected, compare=COMPARE,
        arg_names=("x", "w", "b", "stride", "pad", "dilation"), hints=FORWARD_HINTS,
        call=ExplainErrors(image=0, pad=4, spatial=(1, 2), helper="im2col_dilated"),
        timeout_s=20.0, source_check=NO_LIBRARY_CONV, uses=("ex11.im2col_dilated",),
    ),
    Part(
        id="ex11.conv_backward_nhwc", points=3, cases=_backward_cases,
        expected=_backward_expected, compare=COMPARE,
        arg_names=("dout", "x", "w", "stride", "pad", "dilation"),
        output_names=("dx", "dw", "db"), hints=BACKWARD_HINTS,
        call=ExplainErrors(image=1, pad=4, spatial=(1, 2), helper="im2col_dilated"),
        timeout_s=20.0, source_check=NO_LIBRARY_CONV_BACKWARD, uses=("ex11.im2col_dilated",),
    ),
    Part(
        id="ex11.avg_pool_forward", points=1, cases=_pool_forward_cases,
        expected=_pool_forward_expected, compare=COMPARE,
        arg_names=("x", "k", "stride", "pad"), hints=POOL_FORWARD_HINTS,
        call=ExplainErrors(image=0, pad=3), source_check=NO_LIBRARY_POOL,
    ),
    Part(
        id="ex11.avg_pool_backward", points=2, cases=_pool_backward_cases,
        expected=_pool_backward_expected, compare=COMPARE,
        arg_names=("dout", "x", "k", "stride", "pad"), hints=POOL_BACKWARD_HINTS,
        call=ExplainErrors(image=1, pad=4), source_check=NO_LIBRARY_POOL_BACKWARD,
    ),
    Part(
        id=FASTER.part_id, points=1, cases=_max_pool_cases, expected=FASTER.reference,
        compare=tolerance(rtol=FASTER.rtol, atol=FASTER.atol), arg_names=("x",),
        source_check=all_checks(names_check(forbidden=[((FASTER.reference.__name__,),
                                                         CALLS_THE_REFERENCE)]), speed_rules),
    ),
    Part(
        id="ex11.my_conv2d", points=2, cases=_layer_cases, expected=_layer_expected,
        compare=COMPARE, call=call_conv2d, source_check=OWN_ENGINE, timeout_s=20.0,
        arg_names=("x", "weight", "bias", "dout", "stride", "pad", "dilation"),
        output_names=("value", "dx", "dweight", "dbias"),
        uses=("ex11.conv_forward_nhwc", "ex11.conv_backward_nhwc"),
    ),
]
