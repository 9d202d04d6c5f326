"""Exercise 19's parts (per-channel scales and zero points, quantizing and dequantizing, the int8
matrix product): the solution passes (test_parts_trusted.py runs every part's), each typical
mistake gets its own hint and a correct answer none, a right value in the wrong dtype fails with
its own message, the oracles agree with PyTorch's own quantization, and no solution is lecture 19's
(or edu_dl's) code re-typed."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_no_hint_for,
    assert_nothing_retyped,
    checked,
    course_part,
    solution_namespace,
)

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "19_quantization.ipynb"
SOLUTION = solution_namespace("19_quantization.ipynb")
per_channel_params = SOLUTION["per_channel_params"]
quantize_per_channel = SOLUTION["quantize_per_channel"]
int8_matmul = SOLUTION["int8_matmul"]
FUNCTIONS = {"ex19.per_channel_params": per_channel_params,
             "ex19.quantize_per_channel": quantize_per_channel,
             "ex19.int8_matmul": int8_matmul}


# --------------------------------------------------------------------------- 1. the parameters


def params(w, lo=None, hi=None, levels=255, offset=-128, rounding=np.round, dead=1.0):
    lo = np.minimum(w.min(axis=1), 0.0) if lo is None else lo
    hi = np.maximum(w.max(axis=1), 0.0) if hi is None else hi
    scale = (hi - lo) / levels
    scale = np.where(scale > 0, scale, dead)
    with np.errstate(all="ignore"):
        return scale, rounding(offset - lo / scale).astype(np.int32)


def not_extended(w):
    return params(w, lo=w.min(axis=1), hi=w.max(axis=1))


def per_tensor(w):
    scale, zero = params(w.reshape(1, -1))
    return np.repeat(scale, w.shape[0]), np.repeat(zero, w.shape[0])


def symmetric(w):
    amax = np.abs(w).max(axis=1)
    return np.where(amax > 0, amax / 127, 1.0), np.zeros(w.shape[0], dtype=np.int32)


def uint8_zero_point(w):
    return params(w, offset=0)


def wrong_sign(w):
    scale, _ = params(w)
    return scale, (-128 + np.round(np.minimum(w.min(axis=1), 0.0) / scale)).astype(np.int32)


def zero_scale(w):
    lo, hi = np.minimum(w.min(axis=1), 0.0), np.maximum(w.max(axis=1), 0.0)
    with np.errstate(all="ignore"):
        scale = (hi - lo) / 255
        return scale, np.nan_to_num(-128 - np.round(lo / scale)).astype(np.int32)


def nan_for_dead(w):
    """The scale guarded, but the zero point computed before the guard: 0 / 0."""
    lo, hi = np.minimum(w.min(axis=1), 0.0), np.maximum(w.max(axis=1), 0.0)
    with np.errstate(all="ignore"):
        scale = (hi - lo) / 255
        zero_point = -128 - np.round(lo / scale)
    return np.where(scale > 0, scale, 1.0), zero_point


def truncated_zero_point(w):
    return params(w, rounding=np.trunc)


def float_zero_point(w):
    scale, zero = per_channel_params(w)
    return scale, zero.astype(np.float64)


@pytest.mark.parametrize(("fn", "output", "hint"), [
    (not_extended, "output 0 (scale)", "0.0 must be exactly representable"),
    (per_tensor, "output 0 (scale)", "one scale for the whole tensor"),
    (symmetric, "output 0 (scale)", "that is symmetric quantization"),
    (uint8_zero_point, "output 1 (zero_point)", "that zero point is uint8's"),
    (wrong_sign, "output 1 (zero_point)", "the zero point's sign"),
    (lambda w: params(w, levels=256), "output 0 (scale)", "256 codes have 255 steps"),
    (truncated_zero_point, "output 1 (zero_point)", "astype(int) truncates"),
    (zero_scale, "output 0 (scale)", "a channel of zeros has a range of 0"),
    (nan_for_dead, "output 1 (zero_point)", "0 / 0 is NaN"),
    (lambda w: (params(w)[0], -128 - np.minimum(w.min(axis=1), 0.0) / params(w)[0]),
     "output 1 (zero_point)",
     "must be an integer (the code"),
    (lambda w: params(w, rounding=np.floor), "output 1 (zero_point)", "not down: truncation"),
])
def test_params_mistakes_get_their_hints(fn: Any, output: str, hint: str) -> None:
    ok, out = checked("ex19.per_channel_params", fn)
    if not ok and hint not in out:  # a mistake the visible cases miss is the hidden cases' job
        ok, out = checked("ex19.per_channel_params", fn, hidden=True)
    assert not ok and hint in out, out
    assert output in out, out


def test_per_columns_gets_its_hint_on_a_square_and_an_oblong_layer() -> None:
    def per_column(w):
        return per_channel_params(w.T)

    ok, out = checked("ex19.per_channel_params", per_column)
    assert not ok and "the ranges of the columns" in out, out


def test_a_float_zero_point_fails_with_its_own_message() -> None:
    ok, out = checked("ex19.per_channel_params", float_zero_point)
    assert not ok and "a zero point is an integer" in out, out


def test_the_visible_cases_hold_a_dead_and_a_one_signed_channel() -> None:
    cases = course_part("ex19.per_channel_params").cases(np.random.default_rng(0), False)
    assert any((np.abs(w).max(axis=1) == 0).any() for (w,) in cases)
    assert any((w.min(axis=1) > 0).any() for (w,) in cases)
    assert any((w.max(axis=1) < 0).any() for (w,) in cases)
    assert any(w.shape[0] == w.shape[1] for (w,) in cases)


def test_the_params_oracle_is_pytorchs_observer() -> None:
    """The same scales and zero points as PyTorch's per-channel min-max observer (int8, affine),
    where the scale is not PyTorch's floor of float32 eps."""
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated
        from torch.ao.quantization.observer import PerChannelMinMaxObserver

        part = course_part("ex19.per_channel_params")
        for (w,) in part.cases(np.random.default_rng(3), True):
            live = np.abs(w).max(axis=1) > 0
            observer = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                                qscheme=torch.per_channel_affine)
            observer(torch.from_numpy(w))
            scale, zero = (t.numpy() for t in observer.calculate_qparams())
            mine_scale, mine_zero = part.expected(w)
            np.testing.assert_allclose(mine_scale[live], scale[live], rtol=1e-6)
            assert np.abs(mine_zero[live] - zero[live]).max(initial=0) <= 1  # float32 there


# --------------------------------------------------------------------------- 2. quantizing


def quantize(w, scale, zero_point, rounding=np.round, low=-128, high=127, sign=1,
             clip=True, dequantize=None):
    codes = rounding(w / scale[:, None]) + sign * zero_point[:, None]
    if clip:
        q = np.clip(codes, low, high).astype(np.int64)
    else:
        q = codes.astype(np.int64).astype(np.int8)
    w_hat = (q.astype(np.int64) - zero_point[:, None]) * scale[:, None] if dequantize is None \
        else dequantize(q.astype(np.int8), scale, zero_point)
    return q.astype(np.int8), w_hat


@pytest.mark.parametrize(("options", "output", "hint"), [
    ({"clip": False}, "output 0 (q)", "wrapped around"),
    ({"low": 0, "high": 255}, "output 0 (q)", "uint8's range"),
    ({"rounding": np.trunc}, "output 0 (q)", "truncated instead of rounded"),
    ({"rounding": np.floor}, "output 0 (q)", "rounded down"),
    ({"sign": -1}, "output 0 (q)", "the zero point is added"),
    ({"dequantize": lambda q, s, z: q.astype(np.int64) * s[:, None]}, "output 1 (w_hat)",
     "dequantized without the zero point"),
    ({"dequantize": lambda q, s, z: (q - z[:, None].astype(np.int8)) * s[:, None]},
     "output 1 (w_hat)", "computed in int8 wraps around"),
    ({"dequantize": lambda q, s, z: (q.astype(np.int64) + z[:, None]) * s[:, None]},
     "output 1 (w_hat)", "dequantizing undoes quantizing"),
])
def test_quantize_mistakes_get_their_hints(options: dict[str, Any], output: str,
                                           hint: str) -> None:
    def wrong(w, scale, zero_point):
        with np.errstate(all="ignore"):
            return quantize(w, scale, zero_point, **options)

    ok, out = checked("ex19.quantize_per_channel", wrong)
    assert not ok and hint in out, out
    assert output in out, out


def test_scales_along_the_columns_get_their_hint() -> None:
    def columns(w, scale, zero_point):
        codes = np.round(w / scale[None, :]) + zero_point[None, :]
        q = np.clip(codes, -128, 127).astype(np.int8)
        return q, (q.astype(np.int64) - zero_point[None, :]) * scale[None, :]

    ok, out = checked("ex19.quantize_per_channel", columns)
    assert not ok and "the scales go along the rows" in out, out


def test_returning_w_itself_gets_its_hint() -> None:
    def unchanged(w, scale, zero_point):
        return quantize_per_channel(w, scale, zero_point)[0], w.copy()

    ok, out = checked("ex19.quantize_per_channel", unchanged)
    assert not ok and "w_hat is the dequantized value" in out, out


def test_int_codes_in_a_float_array_fail_with_their_own_message() -> None:
    def as_floats(w, scale, zero_point):
        q, w_hat = quantize_per_channel(w, scale, zero_point)
        return q.astype(np.float64), w_hat

    ok, out = checked("ex19.quantize_per_channel", as_floats)
    assert not ok and "stored as np.int8" in out, out


def test_the_quantize_oracle_is_pytorchs() -> None:
    """The codes torch.quantize_per_channel gives (float32 there: equal but for a rare tie)."""
    torch = pytest.importorskip("torch")
    part = course_part("ex19.quantize_per_channel")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated
        for args in part.cases(np.random.default_rng(4), True):
            w, scale, zero_point = args
            theirs = torch.quantize_per_channel(
                torch.from_numpy(w.astype(np.float32)), torch.from_numpy(scale),
                torch.from_numpy(zero_point.astype(np.int64)), 0, torch.qint8).int_repr().numpy()
            q, _ = part.expected(*args)
            assert np.mean(q != theirs) < 0.02 and np.abs(q - theirs.astype(int)).max() <= 1


def test_some_visible_codes_need_the_clip() -> None:
    part = course_part("ex19.quantize_per_channel")
    outside = 0
    for w, scale, zero_point in part.cases(np.random.default_rng(0), False):
        codes = np.round(w / scale[:, None]) + zero_point[:, None]
        outside += int(((codes < -128) | (codes > 127)).sum())
    assert outside > 0


# --------------------------------------------------------------------------- 3. the matrix product


def matmul(qx, scale_x, zero_x, qw, scale_w, wide=np.int32, zero_first=True, rescale=None):
    if zero_first:
        shifted = qx.astype(wide) - np.asarray(zero_x).astype(wide)
    else:
        shifted = (qx - np.int8(zero_x)).astype(wide)  # subtracted in int8
    acc = shifted.astype(wide) @ qw.astype(wide).T
    y = (rescale or (lambda acc: scale_x * scale_w[None, :] * acc))(acc.astype(np.float64))
    return acc.astype(np.int32), y


def float32_matmul(qx, scale_x, zero_x, qw, scale_w):
    """Accumulated in float32, in a loop over k (a float32 matmul's last bits depend on the CPU's
    BLAS: the part file's replay says why it replays this order)."""
    acc = np.zeros((qx.shape[0], qw.shape[0]), dtype=np.float32)
    x = qx.astype(np.float32) - np.float32(zero_x)
    for j in range(qx.shape[1]):
        acc += x[:, j:j + 1] * qw[:, j].astype(np.float32)[None, :]
    return acc.astype(np.int32), scale_x * scale_w[None, :] * acc.astype(np.float64)


@pytest.mark.parametrize(("fn", "output", "hint"), [
    (lambda *a: matmul(*a, wide=np.int8), "output 0 (acc)", "accumulated in int8"),
    (lambda *a: matmul(*a, wide=np.int16), "output 0 (acc)", "accumulated in int16"),
    (lambda *a: matmul(*a, zero_first=False), "output 0 (acc)", "qx - zero_x computed in int8"),
    (lambda qx, sx, zx, qw, sw: matmul(qx, sx, 0, qw, sw), "output 0 (acc)",
     "the activations' zero point is missing"),
    (lambda qx, sx, zx, qw, sw: matmul(qx, sx, -zx, qw, sw), "output 0 (acc)",
     "the zero point's sign"),
    (float32_matmul, "output 0 (acc)", "accumulated in float32"),
    (lambda qx, sx, zx, qw, sw: matmul(qx, sx, zx, qw, sw, rescale=lambda acc: sw[None, :] * acc),
     "output 1 (y)", "the rescale lost scale_x"),
    (lambda qx, sx, zx, qw, sw: matmul(qx, sx, zx, qw, sw, rescale=lambda acc: sx * acc),
     "output 1 (y)", "the rescale lost scale_w"),
    (lambda qx, sx, zx, qw, sw: matmul(qx, sx, zx, qw, sw,
                                       rescale=lambda acc: sx * sw[:, None] * acc),
     "", "scale_w is per output channel"),
    (lambda qx, sx, zx, qw, sw: matmul(qx, sx, zx, qw, sw,
                                       rescale=lambda acc: acc / (sx * sw[None, :])),
     "output 1 (y)", "divided by the scales"),
    (lambda qx, sx, zx, qw, sw: (matmul(qx, sx, zx, qw, sw)[0], matmul(qx, sx, 0, qw, sw)[1]),
     "output 1 (y)", "y without the activations'"),
])
def test_matmul_mistakes_get_their_hints(fn: Any, output: str, hint: str) -> None:
    def wrong(*args):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args)

    ok, out = checked("ex19.int8_matmul", wrong)
    assert not ok and hint in out, out
    assert output in out, out


def test_an_int64_accumulator_fails_with_its_own_message() -> None:
    def wide(qx, scale_x, zero_x, qw, scale_w):
        acc, y = int8_matmul(qx, scale_x, zero_x, qw, scale_w)
        return acc.astype(np.int64), y

    ok, out = checked("ex19.int8_matmul", wide)
    assert not ok and "accumulates in int32" in out, out


def test_a_visible_case_overflows_int16_and_float32() -> None:
    part = course_part("ex19.int8_matmul")
    sums = [np.abs(part.expected(*args)[0]).max()
            for args in part.cases(np.random.default_rng(0), False)]
    assert max(sums) > 2**24  # beyond float32's exact integers, and so int16's range


def test_the_matmul_oracle_equals_the_dequantized_float_product() -> None:
    part = course_part("ex19.int8_matmul")
    for args in part.cases(np.random.default_rng(6), True):
        qx, scale_x, zero_x, qw, scale_w = args
        x = scale_x * (qx.astype(np.float64) - zero_x)
        w = scale_w[:, None] * qw.astype(np.float64)
        np.testing.assert_allclose(part.expected(*args)[1], x @ w.T, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- every part


@pytest.mark.parametrize("part_id", list(FUNCTIONS))
def test_a_correct_answer_gets_no_hint(part_id: str) -> None:
    assert_no_hint_for(part_id, FUNCTIONS[part_id])


SHOWN = [  # what the tests above find in check()'s report, one per hint at least
    "0.0 must be exactly representable", "one scale for the whole tensor",
    "that is symmetric quantization", "that zero point is uint8's", "the zero point's sign",
    "256 codes have 255 steps", "astype(int) truncates", "a channel of zeros has a range of 0",
    "0 / 0 is NaN", "the ranges of the columns", "wrapped around", "uint8's range",
    "truncated instead of rounded", "rounded down", "the zero point is added",
    "dequantized without the zero point", "computed in int8 wraps around",
    "accumulated in int8", "accumulated in int16", "qx - zero_x computed in int8",
    "the activations' zero point is missing", "accumulated in float32",
    "the rescale lost scale_x", "the rescale lost scale_w", "scale_w is per output channel",
    "divided by the scales", "w_hat is the dequantized value", "must be an integer (the code",
    "not down: truncation", "dequantizing undoes quantizing", "y without the activations'",
    "the scales go along the rows"]


def test_every_hint_is_shown_by_some_mistake_here() -> None:
    """No hint is dead text: each one's message holds a fragment some test here checks for."""
    text = Path(__file__).read_text()
    for part_id in FUNCTIONS:
        for hint in course_part(part_id).hints:
            assert any(f in hint.message for f in SHOWN), hint.message
    for fragment in SHOWN:  # and each fragment is asked for by a test, not just listed
        assert text.count(f'"{fragment}') >= 2, fragment


# --------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_code_retyped() -> None:
    """No two consecutive lines of a solution appear together in a lecture (19's own
    quantization code included) or in edu_dl."""
    assert_nothing_retyped(NOTEBOOK, {"per_channel_params", "quantize_per_channel", "int8_matmul",
                           "predict_smaller_error", "predict_largest_exact_k"},
                           lecture="19_quantization")
