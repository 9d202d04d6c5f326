"""conv2d and max_pool2d: parity with torch.nn.functional and a numeric gradient check.

Hypothesis draws batch sizes, channels, kernel sizes, strides, paddings and image sizes (every
geometry where at least one window fits); the values come from a drawn seed. Each case runs on
both engines, eager Tensors and a static graph's Session (its compiled plan), on the same float64
inputs, and must give PyTorch's values and gradients (of a random projection of the output).
Max pooling is tested on inputs without ties; ties have their own test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fixtures.frameworks import F, torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import edu_dl as ed
from edu_dl import graph as tf
from edu_dl.autograd import ops

SEEDS = st.integers(0, 2**32 - 1)
CASES = settings(max_examples=40)
DEVICES = ["cpu", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not ed.gpu_status()[0], reason="no CUDA GPU / CuPy here")])]


def eager(fn, arrays, projection, device):
    """fn's value and the gradients of sum(fn * projection), on Tensors."""
    xs = [ed.tensor(a, requires_grad=True, device=device) for a in arrays]
    out = fn(*xs)
    (out * ed.tensor(projection, device=device)).sum().backward()
    return out.numpy(), [x.grad.numpy() for x in xs]


def static(fn, arrays, projection, device):
    """The same through a static graph: placeholders, tf.gradients, Session.run."""
    g = tf.Graph()
    with g.as_default():
        xs = [tf.placeholder(tf.float64, a.shape) for a in arrays]
        out = fn(*xs)
        assert out.shape == projection.shape, "the graph inferred the wrong output shape"
        grads = tf.gradients(tf.reduce_sum(out * projection), xs)
        with tf.Session(device=device) as sess:
            value, *gs = sess.run([out, *grads], feed_dict=dict(zip(xs, arrays)))
    return value, gs


def check(fn, tfn, arrays, seed, device="cpu", eps=1e-4):
    """fn (edu_dl, both engines) against tfn (PyTorch): values, gradients, gradcheck with a
    step of ``eps``."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    tout = tfn(*ts)
    projection = np.random.default_rng(seed).standard_normal(tuple(tout.shape))
    (tout * torch.from_numpy(projection)).sum().backward()
    expected = [t.grad.numpy() for t in ts]
    for engine in (eager, static):
        value, grads = engine(fn, arrays, projection, device)
        assert value.dtype == np.float64
        np.testing.assert_allclose(value, tout.detach().numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{engine.__name__}: values")
        for i, (g, e) in enumerate(zip(grads, expected, strict=True)):
            assert g.shape == e.shape
            np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{engine.__name__}: gradient of input {i}")
    # Both ops are linear in each input taken alone (max pooling piecewise, its pieces wider than
    # the step), so the step costs no truncation error and a larger one loses less to rounding.
    report = ed.gradcheck(fn, *[ed.tensor(a, requires_grad=True) for a in arrays], eps=eps)
    assert report.passed, str(report)


# --------------------------------------------------------------------------- geometry


def side(draw, kernel: int, pad: int) -> int:
    """An image side on which at least one window fits (kernel <= side + 2 pad)."""
    smallest = max(1, kernel - 2 * pad)
    return draw(st.integers(smallest, smallest + 5))



@st.composite
def conv_cases(draw):
    n, c, o = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = draw(st.one_of(st.integers(1, 3), st.tuples(st.integers(1, 3), st.integers(1, 3))))
    padding = draw(st.one_of(st.integers(0, 2), st.tuples(st.integers(0, 2), st.integers(0, 2))))
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    shape = (n, c, side(draw, kh, ph), side(draw, kw, pw))
    return shape, (o, c, kh, kw), stride, padding, draw(st.booleans())


@pytest.mark.parametrize("device", DEVICES)
@CASES
@given(case=conv_cases(), seed=SEEDS)
@example(case=((3, 3, 2, 6), (1, 3, 4, 4), 2, 2, False), seed=17045)  # a gradient entry of 2e-6
def test_conv2d_matches_torch(case, seed, device):
    x_shape, w_shape, stride, padding, with_bias = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(x_shape), rng.standard_normal(w_shape)]
    if with_bias:
        arrays.append(rng.standard_normal(w_shape[0]))
    # conv2d is linear in each input alone, so any step is exact but for rounding: a step of 1
    # keeps the rounding (about 1e-16 |f| / step) far below a gradient entry that a random
    # projection makes small. With 1e-4, an entry of 2.2e-6 missed by 6e-11 (relative 1.2e-5).
    check(lambda *a: ops.conv2d(*a, stride=stride, padding=padding),
          lambda *t: F.conv2d(*t, stride=stride, padding=padding), arrays, seed, device,
          eps=1.0)


@st.composite
def pool_cases(draw):
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = draw(st.one_of(st.none(), st.integers(1, 3),
                            st.tuples(st.integers(1, 3), st.integers(1, 3))))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))  # PyTorch's limit
    shape = (n, c, side(draw, kh, ph), side(draw, kw, pw))
    return shape, (kh, kw), stride, (ph, pw), draw(st.booleans())


def distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values at least 0.006 apart, so no ties, and no finite difference (1e-4) changes a
    window's winner; small, so the difference quotients keep their precision."""
    size = math.prod(shape)
    steps = rng.permutation(size) - size / 2
    return (steps * 0.01 + rng.uniform(-0.002, 0.002, size)).reshape(shape)


@pytest.mark.parametrize("device", DEVICES)
@CASES
@given(case=pool_cases(), seed=SEEDS)
def test_max_pool2d_matches_torch(case, seed, device):
    shape, kernel, stride, padding, ceil_mode = case
    x = distinct(np.random.default_rng(seed), shape)
    check(lambda a: ops.max_pool2d(a, kernel, stride, padding, ceil_mode),
          lambda t: F.max_pool2d(t, kernel, stride, padding, ceil_mode=ceil_mode), [x], seed,
          device)


@pytest.mark.usefixtures("numpy_as_cupy")
@pytest.mark.parametrize("gpu_case", [test_conv2d_matches_torch, test_max_pool2d_matches_torch],
                         ids=lambda case: case.__name__)
def test_the_gpu_cases_on_numpy_as_cupy(gpu_case):
    """The [gpu] cases where CI has no GPU: NumPy stands in for CuPy (the same drawn cases)."""
    gpu_case(device="gpu")


def test_the_lecture_geometry_runs_through_both_ops():
    """Caffe's LeNet adapted to 8x8 digits: 3x3 pad 1 convolutions and 2x2 pooling."""
    rng = np.random.default_rng(0)
    x, w1, w2 = distinct(rng, (4, 1, 8, 8)), rng.standard_normal((3, 1, 3, 3)), \
        rng.standard_normal((5, 3, 3, 3))
    check(lambda a, b, c: ops.max_pool2d(ops.conv2d(ops.max_pool2d(
              ops.conv2d(a, b, padding=1), 2), c, padding=1), 2),
          lambda a, b, c: F.max_pool2d(F.conv2d(F.max_pool2d(
              F.conv2d(a, b, padding=1), 2), c, padding=1), 2), [x, w1, w2], seed=1)


# --------------------------------------------------------------------------- ties and dtypes


def test_max_pool2d_ties_send_the_gradient_to_the_first_maximum():
    """As PyTorch's CPU kernel and Caffe: the first maximum of a window in row-major order."""
    x = np.array([[[[1.0, 3.0, 3.0, 0.0],
                    [3.0, 2.0, 0.0, 0.0],
                    [5.0, 5.0, 4.0, 1.0],
                    [5.0, 5.0, 1.0, 4.0]]]])
    t = ed.tensor(x, requires_grad=True)
    ops.max_pool2d(t, 2).sum().backward()
    expected = [[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    np.testing.assert_array_equal(t.grad.numpy()[0, 0], expected)
    tt = torch.tensor(x, requires_grad=True)
    F.max_pool2d(tt, 2).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())


def test_overlapping_windows_add_their_gradients():
    x = np.array([[[[0.0, 1.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 0.0]]]])
    t = ed.tensor(x, requires_grad=True)
    ops.max_pool2d(t, 2, stride=1).sum().backward()
    assert t.grad.numpy()[0, 0, 1, 1] == 4.0  # the 9 wins all four windows


def test_padding_never_wins_a_max_pool():
    x = -np.arange(1.0, 10.0).reshape(1, 1, 3, 3)  # all negative: a zero padding would win
    out = ops.max_pool2d(ed.tensor(x), 2, padding=1).numpy()
    np.testing.assert_array_equal(out, F.max_pool2d(torch.tensor(x), 2, padding=1).numpy())
    assert (out < 0).all()


@pytest.mark.parametrize("fn", [lambda x, w: ops.conv2d(x, w, padding=1),
                                lambda x, w: ops.max_pool2d(x, 2, ceil_mode=True)])
def test_float32_stays_float32(fn):
    rng = np.random.default_rng(0)
    x = ed.tensor(rng.standard_normal((2, 3, 5, 5)).astype(np.float32), requires_grad=True)
    w = ed.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    out = fn(x, w)
    assert out.dtype == np.float32
    out.sum().backward()
    assert x.grad is not None and x.grad.dtype == np.float32


def test_only_the_gradients_asked_for_are_computed():
    rng = np.random.default_rng(0)
    x = ed.tensor(rng.standard_normal((2, 3, 5, 5)))  # data: needs no gradient
    w = ed.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    b = ed.tensor(rng.standard_normal(4), requires_grad=True)
    ops.conv2d(x, w, b).sum().backward()
    assert x.grad is None and w.grad is not None
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, 2 * 3 * 3))  # one per output pixel


def test_graph_names_as_tensorflow():
    """tf.nn.conv2d(input, filters, strides, padding) and tf.nn.max_pool2d(input, ksize, ...)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 1, 8, 8)), rng.standard_normal((4, 1, 3, 3))
    g = tf.Graph()
    with g.as_default():
        X = tf.placeholder(tf.float64, (None, 1, 8, 8))
        h = tf.nn.max_pool2d(tf.nn.conv2d(X, tf.constant(w), strides=1, padding=1), ksize=2)
        with tf.Session() as sess:
            out = sess.run(h, feed_dict={X: x})
    expected = F.max_pool2d(F.conv2d(torch.tensor(x), torch.tensor(w), padding=1), 2)
    np.testing.assert_allclose(out, expected.numpy(), rtol=1e-12)


# --------------------------------------------------------------------------- clear errors


def conv_error(x_shape, w_shape, b_shape=None, **attrs) -> str:
    arrays = [np.zeros(x_shape), np.zeros(w_shape)] + ([] if b_shape is None else
                                                       [np.zeros(b_shape)])
    with pytest.raises(ValueError) as eager_info:
        ops.conv2d(*[ed.tensor(a) for a in arrays], **attrs)
    g = tf.Graph()
    with g.as_default(), pytest.raises(ValueError) as graph_info:  # at build time, as TF
        ops.conv2d(*[tf.placeholder(tf.float64, a.shape) for a in arrays], **attrs)
    assert str(graph_info.value) == str(eager_info.value)
    return str(eager_info.value)


@pytest.mark.parametrize(("x_shape", "w_shape", "b_shape", "attrs", "words"), [
    ((2, 3, 4, 4), (5, 3, 5, 5), None, {}, ["5x5 kernel", "(2, 3, 4, 4)", "4x4 after padding"]),
    ((2, 3, 4, 4), (5, 3, 7, 7), None, {"padding": 1}, ["7x7 kernel", "6x6 after padding"]),
    ((2, 3, 4, 4), (5, 2, 3, 3), None, {}, ["(2, 3, 4, 4) has 3 channels", "(5, 2, 3, 3)"]),
    ((3, 4, 4), (5, 3, 3, 3), None, {}, ["(N, C, H, W)", "(3, 4, 4)"]),
    ((2, 3, 4, 4), (5, 3, 3), None, {}, ["(out_channels, in_channels, kh, kw)", "(5, 3, 3)"]),
    ((2, 3, 4, 4), (5, 3, 3, 3), (4,), {}, ["bias of shape (5,)", "got shape (4,)"]),
])
def test_impossible_conv_geometry_names_the_op_and_shapes(x_shape, w_shape, b_shape, attrs,
                                                          words):
    message = conv_error(x_shape, w_shape, b_shape, **attrs)
    assert message.startswith("conv2d: ")
    for word in words:
        assert word in message


@pytest.mark.parametrize(("attrs", "words"), [
    ({"stride": 0}, ["stride must be positive", "(0, 0)"]),
    ({"padding": -1}, ["padding not negative"]),
    ({"stride": (1, 2, 3)}, ["stride must be an integer or a pair"]),
])
def test_bad_conv_attributes(attrs, words):
    with pytest.raises((ValueError, TypeError)) as info:
        ops.conv2d(ed.tensor(np.zeros((1, 1, 4, 4))), ed.tensor(np.zeros((1, 1, 3, 3))), **attrs)
    assert str(info.value).startswith("conv2d: ")
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(("shape", "attrs", "words"), [
    ((1, 1, 2, 2), {"kernel_size": 3}, ["3x3 kernel", "(1, 1, 2, 2)", "2x2 after padding"]),
    ((1, 1, 4, 4), {"kernel_size": 2, "padding": 2}, ["padding must lie in [0, kernel_size)"]),
    ((1, 1, 4, 4), {"kernel_size": 0}, ["must be positive"]),
    ((4, 4), {"kernel_size": 2}, ["(N, C, H, W)", "(4, 4)"]),
])
def test_impossible_pool_geometry_names_the_op_and_shapes(shape, attrs, words):
    with pytest.raises(ValueError) as info:
        ops.max_pool2d(ed.tensor(np.zeros(shape)), **attrs)
    assert str(info.value).startswith("max_pool2d: ")
    for word in words:
        assert word in str(info.value)


def test_session_errors_name_the_node():
    """A shape known only at run time fails in Session.run, naming the node, op and shapes."""
    g = tf.Graph()
    with g.as_default():
        X = tf.placeholder(tf.float64, (None, 1, None, None))
        h = tf.nn.conv2d(X, tf.constant(np.zeros((2, 1, 3, 3))))
        with tf.Session() as sess, pytest.raises(ValueError) as info:
            sess.run(h, feed_dict={X: np.zeros((1, 1, 2, 2))})
    assert "node 'Conv2d'" in str(info.value) and "3x3 kernel" in str(info.value)
