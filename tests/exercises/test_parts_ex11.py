"""Exercise 11 (part ids ex11.*; convolutions one step past lecture 11): the solutions pass
every case, typical mistakes get specific messages, and no solution is lecture code re-typed.

The solution functions are taken from solutions/11_convolutions.ipynb itself (its setup and
solution cells are executed), so these tests follow the notebook. The mistakes are the ones issue
25 names (a forgotten padding, whose bare NumPy error is explained; the stride ignored; a reshape
where a transpose is needed; db from one image) and a few more, each written the way a student
would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_nothing_retyped,
    assert_solution_passes,
    code_lines,
    course_module,
    course_part,
    library_texts,
    longest_shared_run,
    run_check,
    solution_namespace,
    solution_package,
)
from fixtures.frameworks import F, torch

from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.spec import describe_case
from edu_dl.grading.checking import HIDDEN_SEED, VISIBLE_SEED
from edu_dl.grading.trust import source as trusted_source

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "11_convolutions.ipynb"
PART_FUNCTIONS = {
    "ex11.im2col_dilated": "im2col_dilated",
    "ex11.conv_forward_nhwc": "conv_forward_nhwc",
    "ex11.conv_backward_nhwc": "conv_backward_nhwc",
    "ex11.avg_pool_forward": "avg_pool_forward",
    "ex11.avg_pool_backward": "avg_pool_backward",
    "ex11.faster_max_pool": "max_pool",
    "ex11.my_conv2d": "Conv2d",  # the layer of the student's own framework, mytorch/conv.py
}
windows = np.lib.stride_tricks.sliding_window_view


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def sol():
    """The notebook's setup and solution cells, executed: its functions by name."""
    return solution_namespace("11_convolutions.ipynb")


run = run_check


def test_points_match_the_notebook():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    points = {c.source.split('"')[1]: c.metadata.nbgrader["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"}
    assert points == {pid: course_part(pid).points for pid in PART_FUNCTIONS}


@pytest.mark.parametrize("part_id", list(PART_FUNCTIONS))
def test_solution_passes_visible_hidden_and_fresh_cases(sol, part_id):
    """Fresh seeds stand in for the grader's secret one: every drawn geometry must be valid."""
    part = course_part(part_id)
    fn = sol[PART_FUNCTIONS[part_id]]
    seeds = [(VISIBLE_SEED, False), (HIDDEN_SEED, True), *((s, True) for s in range(25))]
    for seed, hidden in seeds:
        assert assert_solution_passes(part, fn, hidden, np.random.default_rng(seed)) >= 3


def test_solutions_pass_through_check(capsys, sol):
    for part_id, name in PART_FUNCTIONS.items():
        ok, out = run(capsys, part_id, sol[name], hidden=True)
        assert ok, out
        assert out == f"✓ {part_id}: 4 hidden cases passed\n"


def test_the_im2col_oracle_is_torchs_unfold():
    """The loop oracle against an independent library: F.unfold gives (N, C*kh*kw, OH*OW)."""
    im2col_loops = course_module("ex11").im2col_loops
    part = course_part("ex11.im2col_dilated")
    seen_dilation = False
    for seed in range(8):
        for x, kh, kw, stride, pad, dilation in part.cases(np.random.default_rng(seed), True):
            seen_dilation |= dilation > 1 and max(kh, kw) > 1
            unfolded = F.unfold(torch.tensor(x), (kh, kw), dilation=dilation, padding=pad,
                                stride=stride).numpy()
            cols = im2col_loops(x, kh, kw, stride, pad, dilation)
            np.testing.assert_array_equal(
                cols, unfolded.transpose(1, 0, 2).reshape(cols.shape[0], -1))
    assert seen_dilation


def test_the_docstring_examples_hold(sol):
    """The contracts' worked examples are what the solutions (and the oracles) compute."""
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    cols = sol["im2col_dilated"](x, 2, 2, 1, 0, 2)
    assert cols.shape == (4, 4) and cols[:, 0].tolist() == [0, 2, 8, 10]
    pooled = sol["avg_pool_forward"](x, 2, 2, 1)
    assert pooled.shape == (1, 1, 3, 3) and pooled[0, 0, 0, 0] == 0.0 and pooled[0, 0, 1, 0] == 6.0
    dx = sol["avg_pool_backward"](np.ones((1, 1, 3, 3)), x, 2, 2, 1)
    assert dx[0, 0, 0, 0] == 1.0 and dx[0, 0, 1, 0] == 0.5
    z = sol["conv_forward_nhwc"](np.ones((2, 5, 4, 3)), np.ones((3, 3, 3, 4)), np.zeros(4), 1, 1)
    assert z.shape == (2, 5, 4, 4)


def test_fresh_cases_differ_between_seeds():
    part = course_part("ex11.conv_backward_nhwc")
    a, b = (part.cases(np.random.default_rng(s), True) for s in (1, 2))
    assert not all(np.array_equal(x[1], y[1]) for x, y in zip(a, b) if x[1].shape == y[1].shape)


def test_the_notebook_shows_the_visible_cases():
    """The first cell promises the visible cases: each section lists them as check() names them."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "visible cases" in nb.cells[1].source
    for part_id in PART_FUNCTIONS:
        part = course_part(part_id)
        cases = part.cases(np.random.default_rng(VISIBLE_SEED), False)
        for i, args in enumerate(cases):
            described = describe_case(part, i, len(cases), args)
            assert f"{i + 1}. `{described[described.index('(') + 1 : -1]}`" in markdown


# ----------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_code_retyped():
    """Issue 25: no two consecutive lines of a solution appear together in a lecture or in
    edu_dl (single lines such as the np.pad call are shared vocabulary)."""
    assert_nothing_retyped(NOTEBOOK, set(PART_FUNCTIONS.values()))


def test_the_verbatim_check_finds_a_copy():
    """The check above can fail: lecture 11's col2im, pasted, is a long shared run."""
    lecture = json.loads((ROOT / "lectures" / "11_convolutions.ipynb").read_text())
    col2im = next("".join(c["source"]) for c in lecture["cells"]
                  if "def col2im" in "".join(c["source"]))
    pasted = code_lines(col2im.split("def conv2d_backward")[0])
    assert max(longest_shared_run(pasted, lines) for lines in library_texts().values()) >= 8


# ----------------------------------------------------------------------------- hints are quiet


@pytest.mark.parametrize("part_id", list(PART_FUNCTIONS))
def test_no_hint_fires_on_a_correct_answer(sol, part_id):
    """Every hint stays quiet on the solution's answer (and on the oracle's), on visible and
    fresh cases alike."""
    part = course_part(part_id)
    fn = sol[PART_FUNCTIONS[part_id]]
    for seed, hidden in [(VISIBLE_SEED, False), *((s, True) for s in range(6))]:
        for args in part.cases(np.random.default_rng(seed), hidden):
            expected = part.expected(*args)
            for answer in (expected, part.call(fn, args)):
                fired = [h.message for h in part.hints if h.applies(expected, answer, args)]
                assert not fired, fired


@pytest.mark.parametrize("part_id", list(PART_FUNCTIONS))
def test_every_mistake_applies_on_some_visible_case(part_id):
    """A Mistake whose replay gives nothing on every visible case would never ship."""
    part = course_part(part_id)
    cases = part.cases(np.random.default_rng(VISIBLE_SEED), False)
    for hint in part.hints:
        if isinstance(hint, Mistake):
            assert any(hint.value(part.expected(*a), a) is not None for a in cases), hint.message


# ----------------------------------------------------------------------------- im2col mistakes


def im2col_variant(x, kh, kw, stride=1, pad=0, dilation=1, *, use_pad=True, count_pad=True,
                   use_stride=True, use_dilation=True, tap_step=None, order="ok"):
    """A loop over the taps, with one mistake switched on."""
    step = (dilation if use_dilation else 1) if tap_step is None else tap_step
    dilation = dilation if use_dilation else 1
    stride = stride if use_stride else 1
    N, C, H, W = x.shape
    counted = pad if count_pad and use_pad else 0
    OH = (H + 2 * counted - dilation * (kh - 1) - 1) // stride + 1
    OW = (W + 2 * counted - dilation * (kw - 1) - 1) // stride + 1
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if use_pad else x
    cols = np.empty((C, kh, kw, N, OH, OW))
    for p in range(kh):
        for q in range(kw):
            rows = slice(p * step, p * step + stride * OH, stride)
            columns = slice(q * step, q * step + stride * OW, stride)
            cols[:, p, q] = x_pad[:, :, rows, columns].transpose(1, 0, 2, 3)
    if order == "pixels_first":  # columns ordered (i, j, n)
        cols = cols.transpose(0, 1, 2, 4, 5, 3)
    if order == "channels_last":  # rows ordered (p, q, c)
        cols = cols.transpose(1, 2, 0, 3, 4, 5)
    if order == "reshaped":  # windows (N, C, OH, OW, kh, kw) reshaped, never transposed
        cols = cols.transpose(3, 0, 4, 5, 1, 2)
    matrix = cols.reshape(C * kh * kw, N * OH * OW)
    if order == "transposed_reshaped":  # one row per window, reshaped to X_col's shape
        return np.ascontiguousarray(matrix.T).reshape(matrix.shape)
    return matrix.T if order == "transposed" else matrix


def forgot_padding(x, kh, kw, stride=1, pad=0, dilation=1):
    """What students write: x_pad = x, the rest right (NumPy: could not broadcast)."""
    N, C, H, W = x.shape
    OH = (H + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    x_pad = x  # the padding forgotten
    cols = np.empty((C, kh, kw, N, OH, OW))
    for p in range(kh):
        for q in range(kw):
            patch = x_pad[:, :, p * dilation : p * dilation + stride * OH : stride,
                          q * dilation : q * dilation + stride * OW : stride]
            cols[:, p, q] = patch.transpose(1, 0, 2, 3)
    return cols.reshape(C * kh * kw, N * OH * OW)


@pytest.mark.parametrize(("mistake", "case", "hint"), [
    ({"order": "transposed"}, 1, "your matrix is transposed: X_col has one COLUMN per output "
                                 "position"),
    ({"use_pad": False, "count_pad": False}, 1, "you forgot the padding: take the windows"),
    ({"count_pad": False}, 1, "your X_col has as many columns as the image WITHOUT its padding"),
    ({"use_stride": False}, 2, "you ignored the stride"),
    ({"use_dilation": False}, 3, "your number of windows is the undilated kernel's"),
    ({"tap_step": 1}, 3, "your windows have the right positions but their taps are next to "
                         "each other"),
    ({"order": "pixels_first"}, 1, "your columns are the right windows in another order"),
    ({"order": "channels_last"}, 1, "each window's taps are in another order"),
    ({"order": "reshaped"}, 1, "the right numbers in a scrambled order: reshape keeps the order"),
    ({"order": "transposed_reshaped"}, 1, "the right numbers in another order: check which axes "
                                          "you reshape and which you transpose"),
])
def test_im2col_mistakes(capsys, mistake, case, hint):
    ok, out = run(capsys, "ex11.im2col_dilated", lambda *a: im2col_variant(*a, **mistake))
    assert not ok
    assert f"case {case} of 3 (x " in out and f"hint: {hint}" in out


def test_im2col_forgotten_padding_error_is_explained(capsys):
    ok, out = run(capsys, "ex11.im2col_dilated", forgot_padding)
    assert not ok
    assert out.startswith("✗ ex11.im2col_dilated: 1 of 3 cases passed")
    assert "✗ case 1 of 3 (x (2, 3, 5, 4), kh=3, kw=3, stride=1, pad=1, dilation=1) failed: " \
        "ValueError: could not broadcast" in out
    assert "hint: your function raises only when pad > 0" in out


def test_an_error_without_padding_is_not_blamed_on_it(capsys):
    """The padding hint needs the error to vanish on the padded image: an error of another
    cause keeps NumPy's message alone."""
    def broken(x, kh, kw, stride=1, pad=0, dilation=1):
        return np.empty((2, 3)) + np.empty((3, 2))

    ok, out = run(capsys, "ex11.im2col_dilated", broken)
    assert not ok and "operands could not be broadcast" in out and "hint" not in out


# ----------------------------------------------------------------------------- forward mistakes


def conv_variant(x, w, b, stride=1, pad=0, dilation=1, *, im2col=None, use_pad=True,
                 use_stride=True, use_dilation=True, x_layout="transpose",
                 w_layout="transpose", out_layout="ok", kernel="ok", bias=True):
    """A student's NHWC convolution through an im2col, with one mistake switched on."""
    im2col = im2col or im2col_variant
    pad, stride = (pad if use_pad else 0), (stride if use_stride else 1)
    dilation = dilation if use_dilation else 1
    if kernel == "flipped":
        w = w[::-1, ::-1]
    N, H, W, C = x.shape
    kh, kw, _, O = w.shape
    OH = (H + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    x_nchw = x.reshape(N, C, H, W) if x_layout == "reshape" else x.transpose(0, 3, 1, 2)
    W_taps = (w.reshape(C * kh * kw, O) if w_layout == "reshape"
              else w.transpose(2, 0, 1, 3).reshape(C * kh * kw, O))
    Z = W_taps.T @ im2col(x_nchw, kh, kw, stride, pad, dilation)  # (O, N*OH*OW)
    if bias:
        Z = Z + b[:, None]
    if out_layout == "reshape":
        return Z.reshape(N, OH, OW, O)
    if out_layout == "nchw":
        return Z.reshape(O, N, OH, OW).transpose(1, 0, 2, 3)
    return Z.reshape(O, N, OH, OW).transpose(1, 2, 3, 0)


def test_conv_variant_without_mistakes_passes(capsys):
    """The variants below differ from a right answer only by their mistake."""
    ok, out = run(capsys, "ex11.conv_forward_nhwc", conv_variant)
    assert ok, out


@pytest.mark.parametrize(("mistake", "case", "hint"), [
    ({"use_pad": False}, 1, "your output has the size of a convolution without padding"),
    ({"use_stride": False}, 2, "your output has the size of a convolution with stride 1"),
    ({"use_dilation": False}, 3, "your output has the size of an undilated convolution"),
    ({"out_layout": "nchw"}, 1, "your output is NCHW (N, O, OH, OW)"),
    ({"x_layout": "reshape"}, 1, "the input is reshaped where a transpose is needed"),
    ({"w_layout": "reshape"}, 1, "the weight is reshaped where a transpose is needed"),
    ({"out_layout": "reshape"}, 1, "the output is reshaped where a transpose is needed"),
    ({"bias": False}, 1, "add the bias: b[o] goes to every output position of filter o"),
    ({"kernel": "flipped"}, 1, "you flipped the kernel (a mathematician's convolution)"),
])
def test_conv_forward_mistakes(capsys, mistake, case, hint):
    ok, out = run(capsys, "ex11.conv_forward_nhwc", lambda *a: conv_variant(*a, **mistake))
    assert not ok
    assert f"case {case} of 3 (x " in out and f"hint: {hint}" in out


STUDENT_CELLS = '''
import numpy as np

def im2col_dilated(x, kh, kw, stride=1, pad=0, dilation=1):
    return forgot_padding(x, kh, kw, stride, pad, dilation)

def conv_forward_nhwc(x, w, b, stride=1, pad=0, dilation=1):
    return conv_variant(x, w, b, stride, pad, dilation, im2col=im2col_dilated)
'''


def test_an_error_in_the_students_im2col_is_named(capsys):
    """A conv_forward_nhwc that is right but calls a broken im2col_dilated: the failure says
    where the error comes from, and what caused it."""
    namespace = {"forgot_padding": forgot_padding, "conv_variant": conv_variant}
    exec(compile(STUDENT_CELLS, "<cell>", "exec"), namespace)
    ok, out = run(capsys, "ex11.conv_forward_nhwc", namespace["conv_forward_nhwc"])
    assert not ok and "ValueError: could not broadcast" in out
    assert 'hint: the error is raised inside your im2col_dilated, which this function calls: ' \
           'make check("ex11.im2col_dilated", im2col_dilated) pass first' in out
    assert "hint: your function raises only when pad > 0" in out


# ----------------------------------------------------------------------------- backward mistakes


def conv_backward_variant(dout, x, w, stride=1, pad=0, dilation=1, *, crop=True, add=True,
                          pad_dx=True, db="ok", dw_layout="transpose", per_pixel=False):
    N, H, W, C = x.shape
    kh, kw, _, O = w.shape
    OH, OW = dout.shape[1:3]
    G = dout.transpose(3, 0, 1, 2).reshape(O, -1)  # (O, N*OH*OW)
    X_col = im2col_variant(x.transpose(0, 3, 1, 2), kh, kw, stride, pad, dilation)
    dW = G @ X_col.T  # (O, C*kh*kw)
    dw = {"reshape": lambda: dW.T.reshape(kh, kw, C, O), "oihw": lambda: dW.reshape(O, C, kh, kw),
          "transpose": lambda: dW.reshape(O, C, kh, kw).transpose(2, 3, 1, 0)}[dw_layout]()
    db = {"ok": G.sum(axis=1), "one_image": dout[0].sum(axis=(0, 1)),
          "keepdims": dout.sum(axis=(0, 1, 2), keepdims=True)}[db]
    W_row = w.transpose(3, 2, 0, 1).reshape(O, -1)
    d_cols = (W_row.T @ G).reshape(C, kh, kw, N, OH, OW)
    dx_pad = np.zeros((N, C, H + 2 * pad, W + 2 * pad)) if pad_dx else np.zeros((N, C, H, W))
    if per_pixel:  # one window and tap at a time, assigned
        for n, i, j, p, q in np.ndindex(N, OH, OW, kh, kw):
            dx_pad[n, :, i * stride + p * dilation, j * stride + q * dilation] = \
                d_cols[:, p, q, n, i, j]
        return dx_pad[:, :, pad : pad + H, pad : pad + W].transpose(0, 2, 3, 1), dw, db
    for p in range(kh):
        for q in range(kw):
            target = (slice(None), slice(None),
                      slice(p * dilation, p * dilation + stride * OH, stride),
                      slice(q * dilation, q * dilation + stride * OW, stride))
            if add:
                dx_pad[target] += d_cols[:, p, q].transpose(1, 0, 2, 3)
            else:
                dx_pad[target] = d_cols[:, p, q].transpose(1, 0, 2, 3)
    dx = dx_pad[:, :, pad : pad + H, pad : pad + W] if crop and pad_dx else dx_pad
    return dx.transpose(0, 2, 3, 1), dw, db


def test_conv_backward_variant_without_mistakes_passes(capsys):
    ok, out = run(capsys, "ex11.conv_backward_nhwc", conv_backward_variant)
    assert ok, out


@pytest.mark.parametrize(("mistake", "output", "hint"), [
    ({"crop": False}, "output 0 (dx)", "your dx has the padded image's shape: x's gradient has "
                                       "x's shape"),
    ({"add": False}, "output 0 (dx)", "windows overlap: col2im must ADD each tap's gradient"),
    ({"db": "one_image"}, "output 2 (db)", "your db is the sum over ONE image"),
    ({"db": "keepdims"}, "output 2 (db)", "db has b's shape (O,)"),
    ({"per_pixel": True}, "output 0 (dx)", "windows overlap: col2im must ADD each tap's "
                                           "gradient"),
    ({"dw_layout": "reshape"}, "output 1 (dw)", "dw is reshaped where a transpose is needed"),
    ({"dw_layout": "oihw"}, "output 1 (dw)", "dw has w's shape (kh, kw, C, O)"),
])
def test_conv_backward_mistakes(capsys, mistake, output, hint):
    ok, out = run(capsys, "ex11.conv_backward_nhwc",
                  lambda *a: conv_backward_variant(*a, **mistake))
    assert not ok
    assert "case 1 of 3 (dout (2, 5, 4, 4), x (2, 5, 4, 3), w (3, 3, 3, 4), stride=1, pad=1, " \
           f"dilation=1): {output}" in out
    assert f"hint: {hint}" in out


def test_conv_backward_unpadded_gradient_error_is_explained(capsys):
    ok, out = run(capsys, "ex11.conv_backward_nhwc",
                  lambda *a: conv_backward_variant(*a, pad_dx=False))
    assert not ok and "case 1 of 3" in out and "ValueError" in out
    assert "hint: your function raises only when pad > 0" in out


# ----------------------------------------------------------------------------- pooling mistakes


def avg_pool_variant(x, k, stride, pad, *, divisor="real", use_pad=True, use_stride=True,
                     reduce="mean"):
    stride = stride if use_stride else 1
    pad = pad if use_pad else 0
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf
                   if reduce == "max" else 0.0)
    views = windows(x_pad, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    if reduce == "max":
        return views.max(axis=(-2, -1))
    counts = windows(np.pad(np.ones(x.shape[2:]), pad), (k, k))[::stride, ::stride].sum(
        axis=(-2, -1))
    return views.sum(axis=(-2, -1)) / (counts if divisor == "real" else k * k)


def test_avg_pool_variant_without_mistakes_passes(capsys):
    ok, out = run(capsys, "ex11.avg_pool_forward", avg_pool_variant)
    assert ok, out


@pytest.mark.parametrize(("mistake", "case", "hint"), [
    ({"divisor": "k*k"}, 1, "a window that overlaps the padding has fewer than k*k real "
                            "pixels"),
    ({"use_pad": False}, 1, "your output has the size without padding"),
    ({"use_stride": False}, 1, "use the stride"),
    ({"reduce": "max"}, 1, "that is max pooling"),
])
def test_avg_pool_forward_mistakes(capsys, mistake, case, hint):
    ok, out = run(capsys, "ex11.avg_pool_forward", lambda *a: avg_pool_variant(*a, **mistake))
    assert not ok
    assert f"case {case} of 3 (x " in out and f"hint: {hint}" in out


def avg_pool_backward_variant(dout, x, k, stride, pad, *, share="real", add=True, crop=True):
    N, C, H, W = x.shape
    OH, OW = dout.shape[2:]
    real = np.pad(np.ones((H, W)), pad)
    counts = windows(real, (k, k))[::stride, ::stride].sum(axis=(-2, -1))
    part = {"real": dout / counts, "k*k": dout / (k * k), "whole": dout}[share]
    dx_pad = np.zeros((N, C, H + 2 * pad, W + 2 * pad))
    for i in range(OH):
        for j in range(OW):
            target = (slice(None), slice(None), slice(i * stride, i * stride + k),
                      slice(j * stride, j * stride + k))
            if add:
                dx_pad[target] += part[:, :, i, j][:, :, None, None]
            else:
                dx_pad[target] = part[:, :, i, j][:, :, None, None]
    return dx_pad[:, :, pad : pad + H, pad : pad + W] if crop else dx_pad


def test_avg_pool_backward_variant_without_mistakes_passes(capsys):
    ok, out = run(capsys, "ex11.avg_pool_backward", avg_pool_backward_variant)
    assert ok, out


@pytest.mark.parametrize(("mistake", "case", "hint"), [
    ({"crop": False}, 1, "your dx has the padded image's shape"),
    ({"share": "k*k"}, 1, "you divided by k*k everywhere"),
    ({"share": "whole"}, 1, "each pixel got the window's whole gradient (a SUM pool's "
                            "backward)"),
    ({"add": False}, 1, "with stride < k the windows overlap"),
])
def test_avg_pool_backward_mistakes(capsys, mistake, case, hint):
    ok, out = run(capsys, "ex11.avg_pool_backward",
                  lambda *a: avg_pool_backward_variant(*a, **mistake))
    assert not ok
    assert f"case {case} of 3 (dout " in out and f"hint: {hint}" in out


def avg_pool_backward_unpadded(dout, x, k, stride, pad):
    """A loop over the window's offsets into dx itself: the padding forgotten."""
    OH, OW = dout.shape[2:]
    counts = windows(np.pad(np.ones(x.shape[2:]), pad), (k, k))[::stride, ::stride]
    share = dout / counts.sum(axis=(-2, -1))
    dx = np.zeros_like(x)
    for p in range(k):
        for q in range(k):
            dx[:, :, p : p + stride * OH : stride, q : q + stride * OW : stride] += share
    return dx


def test_avg_pool_backward_unpadded_gradient_error_is_explained(capsys):
    ok, out = run(capsys, "ex11.avg_pool_backward", avg_pool_backward_unpadded)
    assert not ok and "case 1 of 3" in out and "ValueError" in out
    assert "hint: your function raises only when pad > 0" in out


# ----------------------------------------------------------------------------- library oracles

# The parts' oracles are torch's unfold, conv2d and avg_pool2d: a function that calls them gets
# the right values without writing anything, so the source check refuses it (check() too).
LIBRARY_CALLS = {
    "ex11.im2col_dilated": ('''
def im2col_dilated(x, kh, kw, stride=1, pad=0, dilation=1):
    cols = F.unfold(torch.tensor(x), (kh, kw), dilation=dilation, padding=pad, stride=stride)
    return cols.numpy().transpose(1, 0, 2).reshape(cols.shape[1], -1)
''', "(do not call F.unfold or a library's convolution)"),
    "ex11.conv_forward_nhwc": ('''
def conv_forward_nhwc(x, w, b, stride=1, pad=0, dilation=1):
    out = F.conv2d(torch.tensor(x).permute(0, 3, 1, 2), torch.tensor(w).permute(3, 2, 0, 1),
                   torch.tensor(b), stride=stride, padding=pad, dilation=dilation)
    return out.permute(0, 2, 3, 1).numpy()
''', "(do not call F.conv2d, edu_dl's conv2d or another library's convolution)"),
    "ex11.conv_backward_nhwc": ('''
def conv_backward_nhwc(dout, x, w, stride=1, pad=0, dilation=1):
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = torch.zeros(w.shape[3], dtype=torch.float64, requires_grad=True)
    out = F.conv2d(xt.permute(0, 3, 1, 2).contiguous(), wt.permute(3, 2, 0, 1).contiguous(), bt,
                   stride=stride, padding=pad, dilation=dilation)
    out.backward(torch.tensor(dout).permute(0, 3, 1, 2).contiguous())
    return xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()
''', "(do not call F.conv2d and autograd, edu_dl's conv2d or another library's convolution)"),
    "ex11.avg_pool_forward": ('''
def avg_pool_forward(x, k, stride, pad):
    return F.avg_pool2d(torch.tensor(x), k, stride, pad, count_include_pad=False).numpy()
''', "(do not call F.avg_pool2d or another library's pooling)"),
    "ex11.avg_pool_backward": ('''
def avg_pool_backward(dout, x, k, stride, pad):
    xt = torch.tensor(x, requires_grad=True)
    F.avg_pool2d(xt, k, stride, pad, count_include_pad=False).backward(torch.tensor(dout))
    return xt.grad.numpy()
''', "(do not call F.avg_pool2d and autograd, or another library's pooling)"),
}


@pytest.mark.parametrize("part_id", list(LIBRARY_CALLS))
def test_calling_the_library_oracle_is_refused(capsys, tmp_path, part_id):
    text, message = LIBRARY_CALLS[part_id]
    path = tmp_path / "cell.py"  # a real file: check() reads the function's own source
    path.write_text("import torch\nimport torch.nn.functional as F\n" + text)
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    fn = namespace[PART_FUNCTIONS[part_id]]
    part = course_part(part_id)
    assert_solution_passes(part, fn, False, np.random.default_rng(VISIBLE_SEED))  # right values
    verdict = part.source_check(text)
    assert not verdict.ok
    assert verdict.message.startswith("this part asks you to write it yourself: ")
    assert verdict.message.endswith(message)
    ok, out = run(capsys, part_id, fn)
    assert not ok and out == f"✗ {part_id}: the values are right, but {verdict.message}\n"
    # the solution notebook's own function, as the grader finds it, passes
    found = trusted_source.find_source(nbformat.read(NOTEBOOK, as_version=4), part_id,
                                       solution_package())  # read from mytorch/conv.py
    assert found is not None and part.source_check(found).ok


@pytest.mark.parametrize(("part_id", "call"), [
    ("ex11.im2col_dilated", "torch.nn.Unfold((kh, kw))(x)"),
    ("ex11.conv_forward_nhwc", "torch.nn.functional.conv2d(x, w, b, stride, pad)"),
    ("ex11.conv_forward_nhwc", "torch.conv2d(x, w, b, stride, pad)"),
    ("ex11.conv_forward_nhwc", "ops.conv2d(x, w, b, stride, pad)"),  # edu_dl.autograd.ops
    ("ex11.conv_forward_nhwc", "edu_dl.bench.conv.numpy_forward(x, w, b, pad)"),
    ("ex11.conv_backward_nhwc", "torch.nn.grad.conv2d_input(x.shape, w, dout, stride, pad)"),
    ("ex11.conv_backward_nhwc", "ops.Conv2d.apply(x, w, stride=stride, padding=pad)"),
    ("ex11.avg_pool_forward", "torch.nn.AvgPool2d(k, stride)(x)"),
    ("ex11.avg_pool_backward", "torch.ops.aten.avg_pool2d_backward(dout, x)"),
])
def test_every_spelling_of_the_library_is_refused(part_id, call):
    source = f"def f(dout, x, w, b, k, stride, pad):\n    return {call}\n"
    verdict = course_part(part_id).source_check(source)
    assert not verdict.ok and "this part asks you to write it yourself" in verdict.message


def test_a_students_own_col2im_helper_is_not_refused():
    """The backward part asks for a col2im of the student's own: calling it is fine."""
    source = "def conv_backward_nhwc(dout, x, w):\n    return col2im(dout, x), im2col(x), 0\n"
    assert course_part("ex11.conv_backward_nhwc").source_check(source).ok


def test_a_conv_on_a_wrong_im2col_names_the_im2col_first(capsys, monkeypatch):
    """Issue 25: a correct conv layer on an im2col that returns wrong values (no error) used to
    fail with no word of the cause; its part `uses` im2col_dilated, so the report starts there."""
    ns = solution_namespace("11_convolutions.ipynb")
    conv = sys.modules[ns["conv_forward_nhwc"].__module__]  # the student's mytorch/conv.py
    right = ns["im2col_dilated"]
    wrong = lambda *args: 2 * right(*args)  # noqa: E731 (the conv layer calls it by name)
    monkeypatch.setattr(conv, "im2col_dilated", wrong)
    ok, out = run(capsys, "ex11.im2col_dilated", wrong)
    assert not ok
    for part_id, fn in (("ex11.conv_forward_nhwc", "conv_forward_nhwc"),
                        ("ex11.conv_backward_nhwc", "conv_backward_nhwc")):
        ok, out = run(capsys, part_id, ns[fn])
        assert not ok and out.startswith(
            f"✗ {part_id}: your `im2col_dilated` fails its own check (ex11.im2col_dilated); "
            "fix it first"), out
