"""Exercise 11, convolutions from scratch: im2col, conv2d forward and backward, max pooling.

The oracles are independent of the student's task and of edu_dl's ops: a direct loop over the
output positions for im2col, and torch.nn.functional's conv2d / max_pool2d with torch.autograd
in float64 for the layers. Inputs are drawn at grading time (the grader's secret seed); the
pooling inputs are continuous random numbers, so no window holds two equal maxima and where a
gradient goes is never a convention. Hints replay typical mistakes (a forgotten padding, a
transposed or flipped kernel, col2im assigning instead of adding, the pooling gradient sent to
every element of a window) with small NumPy and torch variants, on the trusted side. The layers'
parts refuse, from the submitted source, a function that calls the oracle (torch's or edu_dl's
conv2d / max_pool2d). Private: the generic hint rules and those source checks live in
``edu_dl.harness.ex11``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.hints import Mistake, Transposed
from edu_dl.grading.spec import Part, tolerance
from edu_dl.harness.ex11 import (
    NO_LIBRARY_CONV,
    NO_LIBRARY_CONV_BACKWARD,
    NO_LIBRARY_POOL,
    NO_LIBRARY_POOL_BACKWARD,
    ColumnsReordered,
    LastAxesSwapped,
    LeadingAxesSwapped,
    OtherShape,
    shape_of,
)

Array = np.ndarray
Case = tuple[Any, ...]
# float64 against float64: matmul and loop orders differ by ~1e-15.
COMPARE = tolerance(rtol=1e-9, atol=1e-10)
TOL: dict[str, Any] = {"rtol": 1e-9, "atol": 1e-10}  # the hints' closeness, the same
EXACT: dict[str, Any] = {"rtol": 0.0, "atol": 0.0}  # for shapes


def out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


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


# --------------------------------------------------------------------------- cases


def _geometry(rng: np.random.Generator) -> tuple[int, ...]:
    """(N, C, H, W, O, kh, kw, stride, pad), drawn so that at least one window fits."""
    kh, kw = (int(k) for k in rng.integers(1, 4, size=2))
    stride, pad = int(rng.integers(1, 3)), int(rng.integers(0, 3))
    h = int(rng.integers(max(1, kh - 2 * pad), 8))
    w = int(rng.integers(max(1, kw - 2 * pad), 8))
    n, c, o = (int(v) for v in rng.integers(1, 4, size=3))
    return n, c, h, w, o, kh, kw, stride, pad


VISIBLE_GEOMETRY = [  # N, C, H, W, O, kh, kw, stride, pad
    (2, 3, 5, 4, 4, 3, 3, 1, 1),
    (1, 2, 6, 7, 3, 3, 2, 2, 0),
    (3, 1, 4, 4, 2, 2, 3, 1, 2),
]


def _geometries(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    if not hidden:
        return list(VISIBLE_GEOMETRY)
    # one case with padding and a square 3x3 kernel always: the lecture's layer
    return [(2, 2, 5, 5, 3, 3, 3, 1, 1), *(_geometry(rng) for _ in range(3))]


def _im2col_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal((n, c, h, w)), kh, kw, stride, pad)
            for n, c, h, w, _, kh, kw, stride, pad in _geometries(rng, hidden)]


def _forward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c, kh, kw)),
             rng.standard_normal(o), stride, pad)
            for n, c, h, w, o, kh, kw, stride, pad in _geometries(rng, hidden)]


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    cases: list[Case] = []
    for n, c, h, w, o, kh, kw, stride, pad in _geometries(rng, hidden):
        x, weight = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c, kh, kw))
        dout = rng.standard_normal((n, o, out_size(h, kh, stride, pad),
                                    out_size(w, kw, stride, pad)))
        cases.append((dout, x, weight, stride, pad))
    return cases


POOL_VISIBLE = [(2, 3, 4, 4, 2, 2), (1, 2, 6, 5, 3, 2), (2, 1, 5, 5, 2, 1)]  # N, C, H, W, k, s


def _pool_geometries(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    if not hidden:
        return list(POOL_VISIBLE)
    found: list[tuple[int, ...]] = [(1, 1, 4, 4, 2, 2)]
    for _ in range(3):
        k = int(rng.integers(2, 4))
        stride = int(rng.integers(1, k + 1))
        n, c = (int(v) for v in rng.integers(1, 4, size=2))
        h, w = (int(v) for v in rng.integers(k, 8, size=2))
        found.append((n, c, h, w, k, stride))
    return found


def _pool_forward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal((n, c, h, w)), k, s)
            for n, c, h, w, k, s in _pool_geometries(rng, hidden)]


def _pool_backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    cases: list[Case] = []
    for n, c, h, w, k, s in _pool_geometries(rng, hidden):
        x = rng.standard_normal((n, c, h, w))
        dout = rng.standard_normal((n, c, out_size(h, k, s, 0), out_size(w, k, s, 0)))
        cases.append((dout, x, k, s))
    return cases


# --------------------------------------------------------------------------- oracles


def im2col_loops(x: Array, kh: int, kw: int, stride: int, pad: int) -> Array:
    """Column (n, i, j) holds the window at output position (i, j) of image n, flattened in
    (c, p, q) order: a loop over output positions, nothing shared with a vectorized answer."""
    n, c, h, w = x.shape
    oh, ow = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((c * kh * kw, n * oh * ow))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                window = x_pad[b, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
                cols[:, (b * oh + i) * ow + j] = window.ravel()
    return cols


def _torch_conv(x: Array, w: Array, b: Array | None, stride: int, pad: int) -> Array:
    import torch
    import torch.nn.functional as F

    bias = None if b is None else torch.tensor(b, dtype=torch.float64)
    out = F.conv2d(torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64),
                   bias, stride=stride, padding=pad)
    return out.numpy()


def _forward_expected(x: Array, w: Array, b: Array, stride: int, pad: int) -> Array:
    return _torch_conv(x, w, b, stride, pad)


def _backward_expected(dout: Array, x: Array, w: Array, stride: int, pad: int
                       ) -> tuple[Array, Array, Array]:
    import torch
    import torch.nn.functional as F

    xt, wt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    bt = torch.zeros(w.shape[0], dtype=torch.float64, requires_grad=True)
    F.conv2d(xt, wt, bt, stride=stride, padding=pad).backward(
        torch.tensor(dout, dtype=torch.float64))
    assert xt.grad is not None and wt.grad is not None and bt.grad is not None
    return xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def _pool_forward_expected(x: Array, k: int, stride: int) -> Array:
    import torch
    import torch.nn.functional as F

    return F.max_pool2d(torch.tensor(x, dtype=torch.float64), k, stride).numpy()


def _pool_backward_expected(dout: Array, x: Array, k: int, stride: int) -> Array:
    import torch
    import torch.nn.functional as F

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    F.max_pool2d(xt, k, stride).backward(torch.tensor(dout, dtype=torch.float64))
    assert xt.grad is not None
    return xt.grad.numpy()


# --------------------------------------------------------------------------- typical mistakes


def col2im_assign(d_cols: Array, x_shape: tuple[int, ...], kh: int, kw: int, stride: int,
                  pad: int, by_offset: bool = True) -> Array:
    """The mistake: slices ASSIGNED instead of added, so overlapping windows overwrite: one
    slice per kernel offset (the loop of the lecture's col2im), or one per window."""
    n, c, h, w = x_shape
    oh, ow = out_size(h, kh, stride, pad), out_size(w, kw, stride, pad)
    d = d_cols.reshape(c, kh, kw, n, oh, ow)
    dx_pad = np.zeros((n, c, h + 2 * pad, w + 2 * pad))
    if by_offset:
        for p in range(kh):
            for q in range(kw):
                dx_pad[:, :, p : p + stride * oh : stride, q : q + stride * ow : stride] = (
                    d[:, p, q].transpose(1, 0, 2, 3))
    else:
        for b in range(n):
            for i in range(oh):
                for j in range(ow):
                    dx_pad[b, :, i * stride : i * stride + kh, j * stride : j * stride + kw] = (
                        d[:, :, :, b, i, j])
    return dx_pad[:, :, pad : pad + h, pad : pad + w]


def _dx_assigned(e: Any, a: Case, by_offset: bool) -> Array | None:
    """dx computed by an assigning col2im (None where it is the right dx: no window overlaps)."""
    dout, x, w, stride, pad = a
    o, _, kh, kw = w.shape
    d_cols = w.reshape(o, -1).T @ dout.transpose(1, 0, 2, 3).reshape(o, -1)
    dx = col2im_assign(d_cols, x.shape, kh, kw, stride, pad, by_offset)
    return None if _close(dx, e[0]) else dx


def _pool_spread(dout: Array, x: Array, k: int, stride: int, scale: float = 1.0) -> Array:
    """The mistake: every element of a window gets the window's gradient (times ``scale``)."""
    dx = np.zeros_like(x)
    for i in range(dout.shape[2]):
        for j in range(dout.shape[3]):
            dx[:, :, i * stride : i * stride + k, j * stride : j * stride + k] += (
                scale * dout[:, :, i, j][:, :, None, None])
    return dx


def _pool_assigned(dout: Array, x: Array, k: int, stride: int) -> Array:
    """The mistake: the gradient ASSIGNED at each window's maximum, so a maximum shared by two
    overlapping windows keeps only the last one's."""
    dx = np.zeros_like(x)
    n, c = x.shape[:2]
    for i in range(dout.shape[2]):
        for j in range(dout.shape[3]):
            window = x[:, :, i * stride : i * stride + k, j * stride : j * stride + k]
            p, q = np.divmod(window.reshape(n, c, -1).argmax(axis=-1), k)
            for b in range(n):
                for ch in range(c):
                    dx[b, ch, i * stride + p[b, ch], j * stride + q[b, ch]] = dout[b, ch, i, j]
    return dx


def _pool_loops(x: Array, k: int, stride: int, reduce: Any) -> Array:
    oh, ow = out_size(x.shape[2], k, stride, 0), out_size(x.shape[3], k, stride, 0)
    out = np.empty((*x.shape[:2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(x[:, :, i * stride : i * stride + k,
                                       j * stride : j * stride + k], axis=(2, 3))
    return out


def _shape_of(fn: Any, *args: Any) -> tuple[int, ...]:
    """The shape of fn(*args): what a mistake's result looks like, by its geometry."""
    return shape_of(fn(*args))


IM2COL_HINTS = (
    Transposed(
        "your matrix is transposed: im2col has one COLUMN per output position and one row per "
        "(channel, kernel row, kernel column): shape (C*kh*kw, N*OH*OW)"),
    Mistake(lambda e, a: _quiet(im2col_loops, a[0], a[1], a[2], a[3], 0) if a[4] > 0 else None,
            "you forgot the padding: pad the image with `pad` zeros on every side of H and W "
            "first (np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))))", **TOL),
    Mistake(lambda e, a: _quiet(_shape_of, im2col_loops, a[0], a[1], a[2], a[3], 0)
            if a[4] > 0 else None,
            "the number of columns is the one without padding: OH = (H + 2*pad - kh) // stride "
            "+ 1, and the windows are taken from the padded image", view=shape_of, **EXACT),
    Mistake(lambda e, a: _quiet(_shape_of, im2col_loops, a[0], a[1], a[2], 1, a[4])
            if a[3] > 1 else None,
            "you ignored the stride: window (i, j) starts at row i*stride and column j*stride, "
            "so OH = (H + 2*pad - kh) // stride + 1", view=shape_of, **EXACT),
    ColumnsReordered(
        "your columns are the right windows in another order: column (n * OH + i) * OW + j "
        "holds image n's window at output position (i, j)"),
    ColumnsReordered(
        "each window is flattened in another order: row (c * kh + p) * kw + q holds x_pad[n, c, "
        "i*stride + p, j*stride + q], the order of w[o].ravel()", rows=True),
)

FORWARD_HINTS = (
    Mistake(lambda e, a: _quiet(_torch_conv, a[0], a[1], a[2], a[3], 0) if a[4] > 0 else None,
            "you forgot the padding: pad x with `pad` zeros on every side before taking the "
            "windows", **TOL),
    Mistake(lambda e, a: _quiet(_shape_of, _torch_conv, a[0], a[1], a[2], a[3], 0)
            if a[4] > 0 else None,
            "your output has the size without padding: OH = (H + 2*pad - kh) // stride + 1",
            view=shape_of, **EXACT),
    Mistake(lambda e, a: _quiet(_torch_conv, a[0], a[1].transpose(0, 1, 3, 2), a[2], a[3], a[4])
            if a[1].shape[2] == a[1].shape[3] else None,
            "your kernel is transposed: w[o, c, p, q] multiplies x_pad[n, c, i*stride + p, "
            "j*stride + q] (p runs down the rows, q along a row); flatten w[o] in (c, p, q) "
            "order, as im2col's rows", **TOL),
    Mistake(lambda e, a: _quiet(_torch_conv, a[0], a[1][:, :, ::-1, ::-1].copy(), a[2], a[3],
                                 a[4]),
            "you flipped the kernel (a mathematician's convolution): deep-learning frameworks "
            "compute the cross-correlation, w[o, c, p, q] against x_pad[n, c, i*stride + p, "
            "j*stride + q]", **TOL),
    Mistake(lambda e, a: _quiet(_torch_conv, a[0], a[1], None, a[3], a[4]),
            "add the bias: b[o] goes to every output position of filter o", **TOL),
    LeadingAxesSwapped("W_row @ X_col reshapes to (O, N, OH, OW): transpose it to (N, O, OH, OW)"),
)


def _dx_padded_shape(a: Case) -> tuple[int, ...] | None:
    n, c, h, w = a[1].shape
    return (n, c, h + 2 * a[4], w + 2 * a[4]) if a[4] > 0 else None


COL2IM_ASSIGNS = ("windows overlap: col2im must ADD each column's gradient back where the window "
                  "was read (+=), not assign it (=), so a pixel in nine windows gets nine "
                  "contributions")

BACKWARD_HINTS = (
    Mistake(lambda e, a: _dx_padded_shape(a),
            "dx has the padded image's shape: crop the padding, dx_pad[:, :, pad:pad+H, "
            "pad:pad+W]", output=0, view=shape_of, **EXACT),
    # either assigning col2im: one slice per kernel offset (the lecture's loop), one per window
    Mistake(lambda e, a: _quiet(_dx_assigned, e, a, True), COL2IM_ASSIGNS, output=0, **TOL),
    Mistake(lambda e, a: _quiet(_dx_assigned, e, a, False), COL2IM_ASSIGNS, output=0, **TOL),
    OtherShape(
        "db sums dout over the batch and every output position: db = dout.sum(axis=(0, 2, 3)), "
        "shape (O,)", output=2),
    LastAxesSwapped(
        "dw is transposed in its kernel axes: dW_row = G @ X_col.T reshapes to (O, C, kh, kw) "
        "in the same (c, p, q) order as im2col's rows", output=1),
    OtherShape(
        "dw has the weight's shape (O, C, kh, kw): (G @ X_col.T).reshape(w.shape), with G = "
        "dout as an (O, N*OH*OW) matrix (dout.transpose(1, 0, 2, 3).reshape(O, -1))", output=1),
)

POOL_FORWARD_HINTS = (
    Mistake(lambda e, a: _quiet(_pool_loops, a[0], a[1], a[2], np.mean),
            "that is average pooling: take the MAXIMUM of each window", **TOL),
    Mistake(lambda e, a: _quiet(_shape_of, _pool_loops, a[0], a[1], a[1], np.max) if a[2] != a[1]
            else None,
            "use the stride: window (i, j) starts at (i*stride, j*stride), and OH = (H - k) // "
            "stride + 1 (here the stride is not the kernel size)", view=shape_of, **EXACT),
)

POOL_BACKWARD_HINTS = (
    Mistake(lambda e, a: _quiet(_pool_spread, *a),
            "you sent each window's gradient to every element of the window (that is the "
            "backward of a SUM): max pooling's output IS one input, so the gradient goes to the "
            "window's maximum only, and every other element gets 0", **TOL),
    Mistake(lambda e, a: _quiet(_pool_spread, a[0], a[1], a[2], a[3], 1.0 / a[2] ** 2),
            "that is average pooling's backward (dout / k² everywhere): max pooling sends dout "
            "to the window's maximum only", **TOL),
    Mistake(lambda e, a: _quiet(_pool_assigned, *a),
            "with stride < kernel the windows overlap, and one element can be the maximum of "
            "two windows: add (+=) their gradients, do not assign (=)", **TOL),
)

PARTS = [
    Part(
        id="ex11.im2col", points=2, cases=_im2col_cases, expected=im2col_loops,
        compare=COMPARE, arg_names=("x", "kh", "kw", "stride", "pad"), hints=IM2COL_HINTS,
    ),
    Part(
        id="ex11.conv_forward", points=2, cases=_forward_cases, expected=_forward_expected,
        compare=COMPARE, arg_names=("x", "w", "b", "stride", "pad"), hints=FORWARD_HINTS,
        timeout_s=20.0, source_check=NO_LIBRARY_CONV,
    ),
    Part(
        id="ex11.conv_backward", points=3, cases=_backward_cases, expected=_backward_expected,
        compare=COMPARE, arg_names=("dout", "x", "w", "stride", "pad"),
        output_names=("dx", "dw", "db"), hints=BACKWARD_HINTS, timeout_s=20.0,
        source_check=NO_LIBRARY_CONV_BACKWARD,
    ),
    Part(
        id="ex11.max_pool_forward", points=1, cases=_pool_forward_cases,
        expected=_pool_forward_expected, compare=COMPARE, arg_names=("x", "k", "stride"),
        hints=POOL_FORWARD_HINTS, source_check=NO_LIBRARY_POOL,
    ),
    Part(
        id="ex11.max_pool_backward", points=2, cases=_pool_backward_cases,
        expected=_pool_backward_expected, compare=COMPARE, arg_names=("dout", "x", "k", "stride"),
        hints=POOL_BACKWARD_HINTS, source_check=NO_LIBRARY_POOL_BACKWARD,
    ),
]
