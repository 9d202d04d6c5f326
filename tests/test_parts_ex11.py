"""Exercise 11 (convolutions): the solutions pass every case, typical mistakes get specific
messages.

The solution functions are taken from solutions/11_convolutions.ipynb itself (its setup and
solution cells are executed), so these tests follow the notebook. The mistakes are the ones the
issue names (a forgotten padding, a transposed kernel, the pooling gradient sent to every
element) and a few more, each written the way a student would.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import (
    assert_solution_passes,
    course_module,
    course_part,
    run_check,
    solution_namespace,
)

from edu_dl.grading.checking import HIDDEN_SEED, VISIBLE_SEED
from edu_dl.grading.trust import source as trusted_source

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "11_convolutions.ipynb"
PART_FUNCTIONS = {
    "ex11.im2col": "im2col",
    "ex11.conv_forward": "conv_forward",
    "ex11.conv_backward": "conv_backward",
    "ex11.max_pool_forward": "max_pool_forward",
    "ex11.max_pool_backward": "max_pool_backward",
}


@pytest.fixture(scope="module")
def sol():
    """The notebook's setup and solution cells, executed: its functions by name."""
    return solution_namespace("11_convolutions.ipynb")


run = run_check


def test_points_match_the_notebook():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    points = {c.source.split('"')[1]: c.metadata.nbgrader["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
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
    part = course_part("ex11.im2col")
    for seed in range(5):
        for x, kh, kw, stride, pad in part.cases(np.random.default_rng(seed), True):
            unfolded = F.unfold(torch.tensor(x), (kh, kw), padding=pad, stride=stride).numpy()
            cols = im2col_loops(x, kh, kw, stride, pad)
            np.testing.assert_array_equal(
                cols, unfolded.transpose(1, 0, 2).reshape(cols.shape[0], -1))


def test_fresh_cases_differ_between_seeds():
    part = course_part("ex11.conv_backward")
    a, b = (part.cases(np.random.default_rng(s), True) for s in (1, 2))
    assert not all(np.array_equal(x[1], y[1]) for x, y in zip(a, b) if x[1].shape == y[1].shape)


# ----------------------------------------------------------------------------- typical mistakes


def im2col_variant(x, kh, kw, stride=1, pad=0, *, use_pad=True, use_stride=True, order="ok"):
    """The solution's loop over kernel offsets, with one mistake switched on."""
    pad = pad if use_pad else 0
    stride = stride if use_stride else 1
    N, C, H, W = x.shape
    OH, OW = (H + 2 * pad - kh) // stride + 1, (W + 2 * pad - kw) // stride + 1
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    cols = np.empty((C, kh, kw, N, OH, OW))
    for p in range(kh):
        for q in range(kw):
            patch = x_pad[:, :, p : p + stride * OH : stride, q : q + stride * OW : stride]
            cols[:, p, q] = patch.transpose(1, 0, 2, 3)
    if order == "pixels_first":  # columns ordered (i, j, n)
        cols = cols.transpose(0, 1, 2, 4, 5, 3)
    if order == "channels_last":  # rows ordered (p, q, c)
        cols = cols.transpose(1, 2, 0, 3, 4, 5)
    matrix = cols.reshape(C * kh * kw, N * OH * OW)
    return matrix.T if order == "transposed" else matrix


@pytest.mark.parametrize(("mistake", "case", "hint"), [
    ({"order": "transposed"}, 1, "your matrix is transposed: im2col has one COLUMN per output "
                                 "position"),
    ({"use_pad": False}, 1, "you forgot the padding: pad the image with `pad` zeros"),
    ({"use_stride": False}, 2, "you ignored the stride"),
    ({"order": "pixels_first"}, 1, "your columns are the right windows in another order"),
    ({"order": "channels_last"}, 1, "each window is flattened in another order"),
])
def test_im2col_mistakes(capsys, mistake, case, hint):
    ok, out = run(capsys, "ex11.im2col", lambda *a: im2col_variant(*a, **mistake))
    assert not ok
    assert f"case {case} of 3 (x " in out and f"hint: {hint}" in out


def test_im2col_failure_names_the_case(capsys):
    ok, out = run(capsys, "ex11.im2col", lambda *a: im2col_variant(*a, use_pad=False))
    assert not ok
    assert "case 1 of 3 (x (2, 3, 5, 4), kh=3, kw=3, stride=1, pad=1): expected shape (27, " \
           "40), got shape (27, 12)" in out


def conv_variant(x, w, b, stride=1, pad=0, *, use_pad=True, kernel="ok", bias=True):
    """im2col and one matmul, with one mistake switched on."""
    if kernel == "transposed":
        w = w.transpose(0, 1, 3, 2)
    if kernel == "flipped":
        w = w[:, :, ::-1, ::-1]
    pad = pad if use_pad else 0
    N, _, H, W = x.shape
    O, _, kh, kw = w.shape
    OH, OW = (H + 2 * pad - kh) // stride + 1, (W + 2 * pad - kw) // stride + 1
    Z = w.reshape(O, -1) @ im2col_variant(x, kh, kw, stride, pad)
    if bias:
        Z = Z + b[:, None]
    return Z.reshape(O, N, OH, OW).transpose(1, 0, 2, 3)


@pytest.mark.parametrize(("mistake", "hint"), [
    ({"use_pad": False}, "you forgot the padding: pad x with `pad` zeros on every side"),
    ({"kernel": "transposed"}, "your kernel is transposed: w[o, c, p, q] multiplies "
                               "x_pad[n, c, i*stride + p, j*stride + q]"),
    ({"kernel": "flipped"}, "you flipped the kernel (a mathematician's convolution)"),
    ({"bias": False}, "add the bias: b[o] goes to every output position of filter o"),
])
def test_conv_forward_mistakes(capsys, mistake, hint):
    ok, out = run(capsys, "ex11.conv_forward", lambda *a: conv_variant(*a, **mistake))
    assert not ok
    assert "case 1 of 3 (x (2, 3, 5, 4), w (4, 3, 3, 3), b (4,), stride=1, pad=1)" in out
    assert f"hint: {hint}" in out


def test_conv_forward_output_left_in_matrix_layout(capsys):
    def no_transpose(x, w, b, stride=1, pad=0):
        out = conv_variant(x, w, b, stride, pad)
        return np.ascontiguousarray(out.transpose(1, 0, 2, 3))  # (O, N, OH, OW)

    ok, out = run(capsys, "ex11.conv_forward", no_transpose)
    assert not ok and "hint: W_row @ X_col reshapes to (O, N, OH, OW)" in out


def conv_backward_variant(dout, x, w, stride=1, pad=0, *, crop=True, add=True, db_axes=None):
    N, C, H, W = x.shape
    O, _, kh, kw = w.shape
    OH, OW = dout.shape[2:]
    G = dout.transpose(1, 0, 2, 3).reshape(O, -1)
    dw = (G @ im2col_variant(x, kh, kw, stride, pad).T).reshape(w.shape)
    db = G.sum(axis=1) if db_axes is None else dout.sum(axis=db_axes)
    d_cols = (w.reshape(O, -1).T @ G).reshape(C, kh, kw, N, OH, OW)
    dx_pad = np.zeros((N, C, H + 2 * pad, W + 2 * pad))
    for p in range(kh):
        for q in range(kw):
            target = (slice(None), slice(None), slice(p, p + stride * OH, stride),
                      slice(q, q + stride * OW, stride))
            if add:
                dx_pad[target] += d_cols[:, p, q].transpose(1, 0, 2, 3)
            else:
                dx_pad[target] = d_cols[:, p, q].transpose(1, 0, 2, 3)
    dx = dx_pad[:, :, pad : pad + H, pad : pad + W] if crop else dx_pad
    return dx, dw, db


@pytest.mark.parametrize(("mistake", "output", "hint"), [
    ({"crop": False}, "output 0 (dx)", "dx has the padded image's shape: crop the padding"),
    ({"add": False}, "output 0 (dx)", "windows overlap: col2im must ADD each column's gradient"),
    ({"db_axes": (2, 3)}, "output 2 (db)", "db sums dout over the batch and every output "
                                           "position"),
])
def test_conv_backward_mistakes(capsys, mistake, output, hint):
    ok, out = run(capsys, "ex11.conv_backward", lambda *a: conv_backward_variant(*a, **mistake))
    assert not ok
    assert "case 1 of 3 (dout (2, 4, 5, 4), x (2, 3, 5, 4), w (4, 3, 3, 3), stride=1, pad=1): " \
           f"{output}" in out
    assert f"hint: {hint}" in out


def test_max_pool_forward_mean_and_stride(capsys):
    def mean_pool(x, k, stride):
        OH, OW = (x.shape[2] - k) // stride + 1, (x.shape[3] - k) // stride + 1
        return np.array([[x[:, :, i * stride : i * stride + k, j * stride : j * stride + k]
                          .mean(axis=(2, 3)) for j in range(OW)] for i in range(OH)]
                        ).transpose(2, 3, 0, 1)

    ok, out = run(capsys, "ex11.max_pool_forward", mean_pool)
    assert not ok and "case 1 of 3" in out and "hint: that is average pooling" in out

    sol = solution_namespace("11_convolutions.ipynb")
    ok, out = run(capsys, "ex11.max_pool_forward", lambda x, k, s: sol["max_pool_forward"](x, k, k))
    assert not ok and "case 2 of 3" in out and "hint: use the stride" in out


def pool_backward_variant(dout, x, k, stride, *, spread=False, scale=1.0, add=True):
    N, C = x.shape[:2]
    dx = np.zeros_like(x)
    n, c = np.meshgrid(np.arange(N), np.arange(C), indexing="ij")
    for i in range(dout.shape[2]):
        for j in range(dout.shape[3]):
            rows, cols = slice(i * stride, i * stride + k), slice(j * stride, j * stride + k)
            if spread:  # every element of the window gets the window's gradient
                dx[:, :, rows, cols] += scale * dout[:, :, i, j][:, :, None, None]
                continue
            window = x[:, :, rows, cols]
            p, q = np.divmod(window.reshape(N, C, -1).argmax(axis=-1), k)
            if add:
                dx[n, c, i * stride + p, j * stride + q] += dout[:, :, i, j]
            else:
                dx[n, c, i * stride + p, j * stride + q] = dout[:, :, i, j]
    return dx


@pytest.mark.parametrize(("mistake", "case", "hint"), [
    ({"spread": True}, 1, "you sent each window's gradient to every element of the window"),
    ({"spread": True, "scale": 0.25}, 1, "that is average pooling's backward"),
    ({"add": False}, 2, "with stride < kernel the windows overlap"),
])
def test_max_pool_backward_mistakes(capsys, mistake, case, hint):
    ok, out = run(capsys, "ex11.max_pool_backward",
                  lambda *a: pool_backward_variant(*a, **mistake))
    assert not ok
    assert f"case {case} of 3 (dout " in out and f"hint: {hint}" in out


@pytest.mark.parametrize("part_id", list(PART_FUNCTIONS))
def test_stub_is_not_implemented_yet(capsys, part_id):
    def stub(*args):
        # YOUR CODE HERE
        raise NotImplementedError()

    ok, out = run(capsys, part_id, stub)
    assert not ok and out == f"✗ {part_id}: not implemented yet\n"


# ----------------------------------------------------------------------------- library oracles

# The parts' oracles are torch's conv2d and max_pool2d: a function that calls them gets the right
# values without writing anything, so the source check refuses it (check() says so too).
LIBRARY_CALLS = {
    "ex11.conv_forward": ('''
def conv_forward(x, w, b, stride=1, pad=0):
    out = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=stride, padding=pad)
    return out.numpy()
''', "(do not call F.conv2d, edu_dl's conv2d or another library's convolution)"),
    "ex11.conv_backward": ('''
def conv_backward(dout, x, w, stride=1, pad=0):
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = torch.zeros(w.shape[0], dtype=torch.float64, requires_grad=True)
    F.conv2d(xt, wt, bt, stride=stride, padding=pad).backward(torch.tensor(dout))
    return xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()
''', "(do not call F.conv2d and autograd, edu_dl's conv2d or another library's convolution)"),
    "ex11.max_pool_forward": ('''
def max_pool_forward(x, k, stride):
    return F.max_pool2d(torch.tensor(x), k, stride).numpy()
''', "(do not call F.max_pool2d or edu_dl's max_pool2d)"),
    "ex11.max_pool_backward": ('''
def max_pool_backward(dout, x, k, stride):
    xt = torch.tensor(x, requires_grad=True)
    F.max_pool2d(xt, k, stride).backward(torch.tensor(dout))
    return xt.grad.numpy()
''', "(do not call F.max_pool2d and autograd, or edu_dl's max_pool2d)"),
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
    found = trusted_source.find_source(nbformat.read(NOTEBOOK, as_version=4), part_id)
    assert found is not None and part.source_check(found).ok


@pytest.mark.parametrize(("part_id", "call"), [
    ("ex11.conv_forward", "torch.nn.functional.conv2d(x, w, b, stride, pad)"),
    ("ex11.conv_forward", "torch.conv2d(x, w, b, stride, pad)"),
    ("ex11.conv_forward", "ops.conv2d(x, w, b, stride, pad)"),  # edu_dl.autograd.ops
    ("ex11.conv_forward", "edu_dl.bench.conv.numpy_forward(x, w, b, pad)"),
    ("ex11.conv_backward", "torch.nn.grad.conv2d_input(x.shape, w, dout, stride, pad)"),
    ("ex11.conv_backward", "ops.Conv2d.apply(x, w, stride=stride, padding=pad)"),
    ("ex11.max_pool_forward", "torch.nn.MaxPool2d(k, stride)(x)"),
    ("ex11.max_pool_backward", "torch.ops.aten.max_pool2d_with_indices_backward(dout, x)"),
])
def test_every_spelling_of_the_library_is_refused(part_id, call):
    source = f"def f(dout, x, w, b, k, stride, pad):\n    return {call}\n"
    verdict = course_part(part_id).source_check(source)
    assert not verdict.ok and "this part asks you to write it yourself" in verdict.message

