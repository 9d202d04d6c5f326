"""Exercise 19, quantization: the scales and zero points of asymmetric int8 per output channel,
quantizing and dequantizing a weight matrix with them, and an int8 matrix product that
accumulates in int32 and rescales to floats.

The cases are weight matrices shaped like a layer's (rows: output channels of very different
ranges), with the channels that break a careless formula: a channel of positive weights only
(zero must stay representable), a dead channel of zeros (a range of 0), ranges calibrated
narrower than the weights (values to clip), and products whose sums overflow int8, int16 and
float32's 24-bit significand. The oracles follow the conventions of PyTorch's observers
(``torch.ao.quantization.observer``: the range extended to include 0, ``zero_point = qmin -
round(min / scale)``, round half to even); the mistake replays: the usual slips of each step.

Judged outside the sandbox: every output against the oracle, then the dtypes the contract names
(``edu_dl.harness.ex19``'s result checks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, NonFinite, close
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex19 import (
    call_matmul,
    call_params,
    call_quantize,
    matmul_result_check,
    params_result_check,
    quantize_result_check,
)

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-9, atol=1e-12)  # the integers exact; the floats to rounding
QMIN, QMAX = -128, 127


def _mistake(output: int | None, replay: Any, message: str) -> Mistake:
    """A replayed mistake (on ``output``, or the whole result), where it differs from the right
    answer: a slip that gives the right value on a case gets no hint there."""
    def run(e: Any, a: Case) -> Any:
        with np.errstate(all="ignore"):
            value = replay(e, a)
        if value is None:
            return None
        right = e if output is None else e[output]
        if isinstance(value, tuple) and isinstance(right, tuple):
            same = len(value) == len(right) and all(
                np.shape(v) == np.shape(r) and close(v, r, 1e-9, 1e-12)
                for v, r in zip(value, right))
        else:
            same = np.shape(value) == np.shape(right) and close(value, right, 1e-9, 1e-12)
        return None if same else value
    return Mistake(run, message, output=output, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- cases


def _layer(rng: np.random.Generator, out: int, inp: int) -> Array:
    """Weights whose output channels differ in range by up to 30x, as a trained layer's do."""
    return rng.standard_normal((out, inp)) * np.exp(rng.uniform(-2.0, 1.4, (out, 1)))


def _params_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """One weight matrix per case: a dead channel (all zeros) first, where a division by the
    range fails; plain; with a positive-only and a negative-only channel; square (a reduction over
    the wrong axis keeps the shape)."""
    # (out, in, dead channel, one-signed channels)
    specs = [(5, 3, True, False), (3, 5, False, False), (4, 6, False, True), (4, 4, False, False)]
    if hidden:
        specs = [(int(rng.integers(2, 12)), int(rng.integers(1, 40)), dead, signed)
                 for dead, signed in ((False, False), (True, False), (False, True))]
        specs += [(6, 6, False, True), (8, 5, True, True)]
    cases = []
    for out, inp, dead, signed in specs:
        w = _layer(rng, out, inp)
        if signed:
            w[0] = np.abs(w[0]) + 0.05
            w[-1] = -np.abs(w[-1]) - 0.05
        if dead:
            w[1] = 0.0
        cases.append((w,))
    return cases


def _range(w: Array) -> tuple[Array, Array]:
    """Each channel's range, extended to include 0."""
    return np.minimum(w.min(axis=1), 0.0), np.maximum(w.max(axis=1), 0.0)


def _params(w: Array) -> tuple[Array, Array]:
    lo, hi = _range(w)
    scale = (hi - lo) / (QMAX - QMIN)
    scale = np.where(scale > 0, scale, 1.0)
    zero_point = np.clip(QMIN - np.round(lo / scale), QMIN, QMAX).astype(np.int32)
    return scale, zero_point


def _params_with(w: Array, lo: Array, hi: Array, levels: int = 255, offset: int = QMIN,
                 rounded: bool = True) -> tuple[Array, Array]:
    scale = (hi - lo) / levels
    scale = np.where(scale > 0, scale, 1.0)
    zero = offset - lo / scale
    return scale, (np.round(zero) if rounded else zero)


def _dead(e: Any, a: Case) -> bool:
    return bool((np.abs(a[0]).max(axis=1) == 0).any())


def _zero_scale(e: Any, a: Case) -> Any:
    if not _dead(e, a):
        return None
    lo, hi = _range(a[0])
    return (hi - lo) / 255


def _per_tensor(e: Any, a: Case) -> Any:
    w = a[0]
    lo, hi = min(w.min(), 0.0), max(w.max(), 0.0)
    rows = w.shape[0]
    return _params_with(w, np.full(rows, lo), np.full(rows, hi))


def _per_column(e: Any, a: Case) -> Any:
    w = a[0].T
    return _params_with(w, np.minimum(w.min(axis=1), 0.0), np.maximum(w.max(axis=1), 0.0))


def _symmetric(e: Any, a: Case) -> Any:
    amax = np.abs(a[0]).max(axis=1)
    scale = np.where(amax > 0, amax / 127, 1.0)
    return scale, np.zeros(len(scale))


ZERO = ("0.0 must be exactly representable (a zero weight, and padding, must stay exactly 0): "
        "extend each channel's range to include it, lo = min(w_min, 0) and hi = max(w_max, 0)")
PARAMS_HINTS = (
    _mistake(0, _zero_scale,
             "a channel of zeros has a range of 0, so hi - lo = 0 and its scale 0 (its zero "
             "point 0 / 0): give such a channel the scale 1.0, as the contract says"),
    NonFinite("NaN or inf: a channel of zeros has hi - lo = 0, and 0 / 0 is NaN; give it the "
              "scale 1.0", when=_dead),
    _mistake(0, lambda e, a: _params_with(a[0], a[0].min(axis=1), a[0].max(axis=1))[0], ZERO),
    _mistake(None, _per_tensor,
             "one scale for the whole tensor: per-channel means a scale and a zero point for "
             "each output channel (each row of w), from that row's own range"),
    _mistake(None, _per_column,
             "the ranges of the columns (the input features): an output channel is a row of "
             "w, shape (out_features, in_features); reduce over axis 1"),
    _mistake(None, _symmetric,
             "that is symmetric quantization (max |w| / 127, zero point 0): asymmetric uses the "
             "whole range from lo to hi, so a channel that is mostly positive wastes no codes"),
    _mistake(None, lambda e, a: _params_with(a[0], *_range(a[0]), offset=0),
             "that zero point is uint8's, in [0, 255]: the int8 codes run from -128 to 127, so "
             "lo must map to -128: zero_point = -128 - round(lo / scale)"),
    _mistake(1, lambda e, a: -128 + np.round(_range(a[0])[0] / e[0]),
             "the zero point's sign: lo maps to -128, so -128 = lo / scale + zero_point, and "
             "zero_point = -128 - lo / scale (lo <= 0 gives zero_point >= -128)"),
    _mistake(None, lambda e, a: _params_with(a[0], *_range(a[0]), levels=256),
             "256 codes have 255 steps between them: scale = (hi - lo) / 255"),
    _mistake(1, lambda e, a: _params_with(a[0], *_range(a[0]), rounded=False)[1],
             "the zero point must be an integer (the code of real 0.0): round it, "
             "-128 - round(lo / scale)"),
    _mistake(1, lambda e, a: np.floor(-128 - _range(a[0])[0] / e[0]),
             "round the zero point to the nearest integer (np.round), not down: truncation "
             "leaves 0.0 up to a whole step off its code"),
    _mistake(1, lambda e, a: np.trunc(-128 - _range(a[0])[0] / e[0]),
             "round the zero point to the nearest integer (np.round): astype(int) truncates"),
)


# --------------------------------------------------------------------------- quantize


def _quantize_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(w, scale, zero_point): the parameters of each channel's full range, and, in the second
    and later cases, of a range calibrated narrower than the weights (an outlier clipped). The
    first is square: scales broadcast along the wrong axis get their hint there."""
    shapes = [(5, 5), (3, 4), (4, 6), (2, 7)] if not hidden else \
        [(int(rng.integers(1, 10)), int(rng.integers(1, 30))) for _ in range(4)] + [(6, 6)]
    cases = []
    for j, (out, inp) in enumerate(shapes):
        w = _layer(rng, out, inp)
        scale, zero_point = _params(w)
        if j >= 1:  # calibrated on a narrower range: the largest weights fall outside it
            lo, hi = _range(w)
            shrink = rng.uniform(0.5, 0.8, out)
            scale, zero_point = _params(np.stack([lo * shrink, hi * shrink], axis=1))
        cases.append((w, scale, zero_point.astype(np.int32)))
    return cases


def _quantize(w: Array, scale: Array, zero_point: Array) -> tuple[Array, Array]:
    s, z = scale[:, None], zero_point[:, None].astype(np.int64)
    q = np.clip(np.round(w / s) + z, QMIN, QMAX).astype(np.int8)
    return q, (q.astype(np.int64) - z) * s


def _codes(a: Case, rounding: Any = np.round, sign: int = 1, low: int = QMIN, high: int = QMAX,
           clipped: bool = True) -> Array:
    w, scale, zero_point = a
    codes = rounding(w / scale[:, None]) + sign * zero_point[:, None].astype(np.int64)
    if clipped:
        return np.clip(codes, low, high)
    return codes.astype(np.int64).astype(np.int8)  # wraps: 130 -> -126


def _with_codes(codes: Array, a: Case) -> tuple[Array, Array]:
    _, scale, zero_point = a
    return codes, (codes - zero_point[:, None].astype(np.int64)) * scale[:, None]


QUANTIZE_HINTS = (
    _mistake(0, lambda e, a: _codes(a, clipped=False),
             "codes outside [-128, 127] wrapped around (130 became -126): clip to [-128, 127] "
             "before the cast to int8; a weight beyond the calibrated range saturates"),
    _mistake(0, lambda e, a: _codes(a, low=0, high=255),
             "clipped to [0, 255], uint8's range: the int8 codes run from -128 to 127"),
    _mistake(0, lambda e, a: _codes(a, rounding=np.trunc),
             "truncated instead of rounded: astype(int) cuts toward zero, so most values land "
             "on the wrong code; round with np.round first (an error of at most half a step)"),
    _mistake(0, lambda e, a: _codes(a, rounding=np.floor),
             "rounded down (np.floor): round to the nearest code with np.round"),
    _mistake(0, lambda e, a: _codes(a, sign=-1),
             "the zero point is added, not subtracted: q = round(w / scale) + zero_point, "
             "so that w = 0 lands on the code zero_point"),
    _mistake(0, lambda e, a: np.clip(np.round(a[0] / a[1][None, :]) + a[2][None, :], QMIN, QMAX)
             if a[0].shape[0] == a[0].shape[1] else None,
             "the scales go along the rows: channel c (row c of w) has scale[c]; use "
             "scale[:, None] so it broadcasts across that row's columns"),
    _mistake(1, lambda e, a: e[0].astype(np.int64) * a[1][:, None],
             "dequantized without the zero point: w_hat = (q - zero_point) * scale (the code "
             "zero_point means 0.0)"),
    _mistake(1, lambda e, a: (e[0].astype(np.int64) + a[2][:, None]) * a[1][:, None],
             "dequantizing undoes quantizing: subtract the zero point, w_hat = (q - zero_point) "
             "* scale"),
    _mistake(1, lambda e, a: ((e[0] - a[2][:, None].astype(np.int8)).astype(np.int64)
                              * a[1][:, None]),
             "q - zero_point computed in int8 wraps around (100 - (-100) is not 200 in int8): "
             "convert to a wider type before subtracting"),
    _mistake(1, lambda e, a: a[0].copy(),
             "w_hat is the dequantized value of q, not w itself: it shows what quantization "
             "lost, clipping included"),
)


# --------------------------------------------------------------------------- int8 matmul


def _matmul_case(rng: np.random.Generator, n: int, k: int, m: int, saturated: bool,
                 zero_x: int) -> Case:
    """Activations quantized per tensor (asymmetric), weights per output channel (symmetric);
    ``saturated``: the first rows and channels at the extreme codes, whose sums overflow."""
    qx = rng.integers(QMIN, QMAX + 1, (n, k)).astype(np.int8)
    qw = rng.integers(QMIN, QMAX + 1, (m, k)).astype(np.int8)
    if saturated:  # (127 - zero_x) * 127, odd, every term: the sum far beyond float32's 2^24
        qx[0] = QMAX
        qw[0] = QMAX
        if m > 1:
            qw[1] = QMIN
    scale_x = float(rng.uniform(0.005, 0.05))
    scale_w = rng.uniform(0.001, 0.02, m)
    return qx, scale_x, zero_x, qw, scale_w


def _matmul_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(n, k, m, saturated, zero_x): square first (an axis slip keeps the shape, and gets its
    hint); a small plain one; a long one whose saturated sums overflow int16 and float32 (zero_x
    even, so that every term is odd); zero points far from 0, where qx - zero_x leaves int8's
    range."""
    if not hidden:
        specs = [(3, 8, 3, False, -20), (2, 3, 4, False, 3), (2, 6000, 3, True, -60),
                 (4, 16, 2, False, 101)]
    else:
        specs = [(int(rng.integers(1, 6)), int(rng.integers(1, 40)), int(rng.integers(1, 6)),
                  False, int(rng.integers(-128, 128))) for _ in range(2)] + \
            [(4, 12, 4, False, int(rng.integers(-20, 20))),
             (3, int(rng.integers(5000, 9000)), 2, True, -2 * int(rng.integers(20, 64))),
             (2, 5, 3, False, -110)]
    return [_matmul_case(rng, *spec) for spec in specs]


def _matmul(qx: Array, scale_x: Any, zero_x: Any, qw: Array, scale_w: Array
            ) -> tuple[Array, Array]:
    acc = (qx.astype(np.int64) - int(zero_x)) @ qw.astype(np.int64).T
    assert np.abs(acc).max(initial=0) < 2**31  # what int32 holds: k up to 2^31 / 255 / 128
    return acc.astype(np.int32), acc * (float(scale_x) * scale_w[None, :])


def _acc(a: Case, wide: Any = np.int64, zero: bool = True) -> Array:
    qx, _, zero_x, qw, _ = a
    return (qx.astype(wide) - (int(zero_x) if zero else 0)).astype(wide) @ qw.astype(wide).T


def _acc_float32(a: Case) -> Array:
    """The sums accumulated in float32 term by term, in order: the same bits on every machine.
    A float32 matmul is not replayed: its BLAS kernel sums in blocks of its own, which differ
    between CPUs, so a release made on one machine named a different answer than the grader
    found on another (measured: this visible case's [1, 0] is 46143292 from one BLAS, 46143384
    in order, 46143291 exactly). A student's float32 matmul that misses this replay still sees
    which entries differ, by how much, and that they lie beyond 2^24."""
    qx, _, zero_x, qw, _ = a
    products = (qx.astype(np.float32) - np.float32(zero_x))[:, None, :] \
        * qw.astype(np.float32)[None, :, :]  # exact: at most 255 * 128
    return np.cumsum(products, axis=-1, dtype=np.float32)[..., -1].astype(np.int64)


def _rescaled(a: Case, acc: Array) -> Array:
    return acc.astype(np.float64) * (float(a[1]) * a[4][None, :])


MATMUL_HINTS = (
    _mistake(0, lambda e, a: _acc(a, np.int8),
             "accumulated in int8: a single product 127 * 127 = 16129 is already far beyond "
             "int8's range, and the sum wrapped around; widen to int32 before multiplying"),
    _mistake(0, lambda e, a: _acc(a, np.int16),
             "accumulated in int16 (at most 32767, two products of 127 * 127): widen to int32 "
             "before multiplying"),
    _mistake(0, lambda e, a: (a[0] - np.int8(a[2])).astype(np.int64)
             @ a[3].astype(np.int64).T,
             "qx - zero_x computed in int8 wraps around (it can reach 255 in size): convert qx "
             "to int32 first, then subtract the zero point"),
    _mistake(0, lambda e, a: _acc(a, zero=False),
             "the activations' zero point is missing: the real value of code qx is "
             "scale_x * (qx - zero_x), so the product sums (qx - zero_x) * qw"),
    _mistake(0, lambda e, a: (a[0].astype(np.int64) + int(a[2])) @ a[3].astype(np.int64).T,
             "the zero point's sign: the real value is scale_x * (qx - zero_x)"),
    _mistake(0, lambda e, a: _acc_float32(a),
             "accumulated in float32: its 24-bit significand holds integers exactly only up to "
             "2^24 = 16,777,216, and a long sum of saturated products passes that; accumulate "
             "in int32"),
    _mistake(1, lambda e, a: e[0].astype(np.float64) * a[4][None, :],
             "the rescale lost scale_x: y = scale_x * scale_w[j] * acc[i, j]"),
    _mistake(1, lambda e, a: e[0].astype(np.float64) * float(a[1]),
             "the rescale lost scale_w: y = scale_x * scale_w[j] * acc[i, j]"),
    _mistake(1, lambda e, a: e[0].astype(np.float64) * float(a[1]) * a[4][:, None]
             if e[0].shape[0] == e[0].shape[1] else None,
             "scale_w is per output channel, a column j of the result: use scale_w[None, :] "
             "(scale_w[:, None] scales the rows, the samples)"),
    _mistake(1, lambda e, a: e[0].astype(np.float64) / (float(a[1]) * a[4][None, :]),
             "divided by the scales: a code times its scale is the real value, so multiply"),
    _mistake(1, lambda e, a: _rescaled(a, _acc(a, zero=False)),
             "y without the activations' zero point: the real value of qx is scale_x * (qx - "
             "zero_x)"),
)


PARTS = [
    Part(
        id="ex19.per_channel_params", points=3, cases=_params_cases, expected=_params,
        compare=CLOSE, call=call_params, hints=PARAMS_HINTS, result_check=params_result_check,
        arg_names=("w",), output_names=("scale", "zero_point"),
    ),
    Part(
        id="ex19.quantize_per_channel", points=2, cases=_quantize_cases, expected=_quantize,
        compare=CLOSE, call=call_quantize, hints=QUANTIZE_HINTS,
        result_check=quantize_result_check,
        arg_names=("w", "scale", "zero_point"), output_names=("q", "w_hat"),
    ),
    Part(
        id="ex19.int8_matmul", points=4, cases=_matmul_cases, expected=_matmul,
        compare=CLOSE, call=call_matmul, hints=MATMUL_HINTS, result_check=matmul_result_check,
        arg_names=("qx", "scale_x", "zero_x", "qw", "scale_w"), output_names=("acc", "y"),
    ),
]
