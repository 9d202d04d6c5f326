"""Every op of ``edu_dl.autograd.ops``: numeric gradient check and parity with torch.autograd.

For each op, hypothesis draws the shapes (and broadcasting) and a seed for the values; the values
are drawn away from the op's kinks. The op then runs in edu_dl and in PyTorch on the same float64
inputs: forward values must agree, gradients (of a random projection of the output) must agree,
and ``edu_dl.gradcheck`` (central differences) must pass.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fixtures.frameworks import F, torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import (
    array_shapes,
    basic_indices,
    mutually_broadcastable_shapes,
    valid_tuple_axes,
)

import edu_dl as ed
from edu_dl.autograd import ops

SEEDS = st.integers(0, 2**32 - 1)
FEW = settings(max_examples=25)
SOME = settings(max_examples=40)


def check_op(fn, tfn, *arrays, seed=0):
    """fn on edu_dl Tensors vs tfn on torch tensors: values, gradients, and a numeric gradcheck."""
    xs = [ed.tensor(a.copy(), requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, tout = fn(*xs), tfn(*ts)
    assert out.shape == tuple(tout.shape)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)

    projection = np.asarray(np.random.default_rng(seed).standard_normal(out.shape))
    (out * projection).sum().backward()
    (tout * torch.from_numpy(projection)).sum().backward()
    for i, (x, t) in enumerate(zip(xs, ts, strict=True)):
        expected = np.zeros(x.shape) if t.grad is None else t.grad.numpy()
        assert x.grad is not None, f"input {i} got no gradient"
        assert x.grad.shape == x.shape, f"input {i}: grad shape {x.grad.shape} != {x.shape}"
        assert x.grad.dtype == np.float64
        np.testing.assert_allclose(
            x.grad.numpy(), expected, rtol=1e-9, atol=1e-12, err_msg=f"gradient of input {i}"
        )

    # The gradients were compared with PyTorch's at rtol 1e-9 above; central differences are the
    # second, independent check. Their elementwise relative error grows on tiny entries (a 2e-4
    # gradient with eps=1e-6 reached 1.07e-6 once in CI), so this check allows 1e-5: a wrong VJP
    # is off by far more.
    report = ed.gradcheck(fn, *[ed.tensor(a.copy(), requires_grad=True) for a in arrays],
                          tolerance=1e-5)
    assert report.passed, str(report)


# --------------------------------------------------------------------------- value generators
# Each takes (rng, shape) and returns a float64 array whose values keep finite differences off
# the op's kinks (a 0-d array, never a NumPy scalar, for shape ()).


def _array(gen):
    return lambda rng, shape: np.asarray(gen(rng, shape), dtype=np.float64)


@_array
def anywhere(rng, shape):
    return rng.uniform(-2.0, 2.0, shape)


@_array
def positive(rng, shape):
    return rng.uniform(0.5, 2.5, shape)


@_array
def nonzero(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.5, shape)


@_array
def away_from_zero(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 2.0, shape)


@_array
def grid_quarter(rng, shape):
    """k + 0.25 (+-0.05): never within 0.4 of a grid_three_quarters value."""
    return rng.integers(-3, 3, shape) + 0.25 + rng.uniform(-0.05, 0.05, shape)


@_array
def grid_three_quarters(rng, shape):
    return rng.integers(-3, 3, shape) + 0.75 + rng.uniform(-0.05, 0.05, shape)


@_array
def distinct(rng, shape):
    """All values at least 0.3 apart, so max has no ties and no near-ties."""
    size = math.prod(shape)
    return (rng.permutation(size) * 0.5 - size / 4 + rng.uniform(-0.1, 0.1, size)).reshape(shape)


# --------------------------------------------------------------------------- elementwise

# Each op beside the name of torch's (looked up in the test: collection imports no torch).
BINARY = {
    "add": (ops.add, "add", anywhere, anywhere),
    "sub": (ops.sub, "sub", anywhere, anywhere),
    "mul": (ops.mul, "mul", anywhere, anywhere),
    "div": (ops.div, "div", anywhere, nonzero),
    "maximum": (ops.maximum, "maximum", grid_quarter, grid_three_quarters),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@SOME
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       seed=SEEDS)
def test_binary_broadcasting(name, shapes, seed):
    fn, tname, gen_x, gen_y = BINARY[name]
    tfn = getattr(torch, tname)
    rng = np.random.default_rng(seed)
    x_shape, y_shape = shapes.input_shapes
    check_op(fn, tfn, gen_x(rng, x_shape), gen_y(rng, y_shape), seed=seed)


@pytest.mark.parametrize("name", sorted(BINARY))
@FEW
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
       seed=SEEDS)
def test_binary_with_one_constant_side(name, shapes, seed):
    """Only the Tensor side gets a gradient; the NumPy side is a constant."""
    fn, tname, gen_x, gen_y = BINARY[name]
    tfn = getattr(torch, tname)
    rng = np.random.default_rng(seed)
    x_shape, y_shape = shapes.input_shapes
    x, y = gen_x(rng, x_shape), gen_y(rng, y_shape)
    check_op(lambda a: fn(a, y), lambda a: tfn(a, torch.from_numpy(y)), x, seed=seed)
    check_op(lambda b: fn(x, b), lambda b: tfn(torch.from_numpy(x), b), y, seed=seed)


UNARY = {
    "neg": (ops.neg, "neg", anywhere),
    "exp": (ops.exp, "exp", anywhere),
    "log": (ops.log, "log", positive),
    "sqrt": (ops.sqrt, "sqrt", positive),
    "tanh": (ops.tanh, "tanh", anywhere),
    "sigmoid": (ops.sigmoid, "sigmoid", _array(lambda rng, s: rng.uniform(-4, 4, s))),
    "relu": (ops.relu, "relu", away_from_zero),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@SOME
@given(shape=array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4), seed=SEEDS)
def test_unary(name, shape, seed):
    fn, tname, gen = UNARY[name]
    tfn = getattr(torch, tname)
    check_op(fn, tfn, gen(np.random.default_rng(seed), shape), seed=seed)


@pytest.mark.parametrize("exponent", [2, 3, 1, 0, -1, -2, 2.0, 0.5, 1.5, -1.5])
@FEW
@given(shape=array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4), seed=SEEDS)
def test_pow_scalar_exponent(exponent, shape, seed):
    rng = np.random.default_rng(seed)
    # Integer exponents take negative bases too; fractional ones need positive bases.
    x = nonzero(rng, shape) if float(exponent).is_integer() else positive(rng, shape)
    check_op(lambda a: ops.pow(a, exponent), lambda t: torch.pow(t, exponent), x, seed=seed)
    check_op(lambda a: a**exponent, lambda t: t**exponent, x, seed=seed)


def test_pow_rejects_a_tensor_exponent():
    x = ed.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="exponent"):
        ops.pow(x, x)


@FEW
@given(shape=array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4), seed=SEEDS,
       c=st.sampled_from([0, 0.0, 0.5, -1]))
def test_maximum_with_python_scalar(shape, seed, c):
    """maximum(x, c), the lecture's tf.maximum(h, 0), away from the kink at x == c."""
    x = c + away_from_zero(np.random.default_rng(seed), shape)
    check_op(lambda a: ops.maximum(a, c), lambda t: torch.clamp(t, min=c), x, seed=seed)
    check_op(lambda a: ops.maximum(a, c),
             lambda t: torch.maximum(t, torch.tensor(float(c), dtype=torch.float64)), x, seed=seed)


# --------------------------------------------------------------------------- matmul


@st.composite
def matmul_shapes(draw):
    kind = draw(st.sampled_from(["vv", "vm", "mv", "mm", "bb", "vb", "bv"]))
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    b1, b2 = draw(
        mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=2, max_side=3)
    ).input_shapes
    return {
        "vv": ((k,), (k,)),
        "vm": ((k,), (k, n)),
        "mv": ((m, k), (k,)),
        "mm": ((m, k), (k, n)),
        "bb": ((*b1, m, k), (*b2, k, n)),  # batch dims broadcast against each other
        "vb": ((k,), (*b2, k, n)),
        "bv": ((*b1, m, k), (k,)),
    }[kind]


@SOME
@given(shapes=matmul_shapes(), seed=SEEDS)
def test_matmul(shapes, seed):
    rng = np.random.default_rng(seed)
    x, y = anywhere(rng, shapes[0]), anywhere(rng, shapes[1])
    check_op(ops.matmul, torch.matmul, x, y, seed=seed)
    check_op(lambda a, b: a @ b, lambda a, b: a @ b, x, y, seed=seed)


def test_matmul_of_two_vectors_is_a_scalar_with_gradients():
    x = ed.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = ed.tensor([4.0, 5.0, 6.0], requires_grad=True)
    z = x @ y
    assert z.shape == ()
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(y.grad.numpy(), [1.0, 2.0, 3.0])


# --------------------------------------------------------------------------- reductions


@st.composite
def shape_axis_keepdims(draw):
    shape = draw(array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3))
    ndim = len(shape)
    options = [st.none()]
    if ndim:
        options += [st.integers(-ndim, ndim - 1), valid_tuple_axes(ndim, min_size=1)]
    return shape, draw(st.one_of(*options)), draw(st.booleans())


def torch_reduce(reduce, axis, keepdims):
    def run(t):
        if t.ndim == 0:
            return reduce(t)
        dim = tuple(range(t.ndim)) if axis is None else axis
        return reduce(t, dim=dim, keepdim=keepdims)

    return run


REDUCTIONS = {
    "sum": (ops.sum, "sum", anywhere),
    "mean": (ops.mean, "mean", anywhere),
    "max": (ops.max, "amax", distinct),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@SOME
@given(case=shape_axis_keepdims(), seed=SEEDS)
def test_reductions(name, case, seed):
    fn, tname, gen = REDUCTIONS[name]
    treduce = getattr(torch, tname)
    shape, axis, keepdims = case
    x = gen(np.random.default_rng(seed), shape)
    check_op(lambda a: fn(a, axis=axis, keepdims=keepdims),
             torch_reduce(treduce, axis, keepdims), x, seed=seed)
    method = getattr(ed.Tensor, name)
    check_op(lambda a: method(a, axis, keepdims), torch_reduce(treduce, axis, keepdims), x,
             seed=seed)


@pytest.mark.parametrize("fn", [ops.sum, ops.mean, ops.max])
def test_reduction_axis_out_of_range_is_a_clear_error(fn):
    x = ed.tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        fn(x, axis=2)


# --------------------------------------------------------------------------- shape ops


@st.composite
def reshape_case(draw):
    shape = draw(array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4))
    size = math.prod(shape)
    targets = [(size,), (-1,), tuple(reversed(shape)), (1, *shape), (*shape, 1)]
    if len(shape) >= 2:
        targets += [(shape[0], -1), (-1, shape[-1])]
    return shape, draw(st.sampled_from(targets))


@SOME
@given(case=reshape_case(), seed=SEEDS)
def test_reshape(case, seed):
    shape, target = case
    x = anywhere(np.random.default_rng(seed), shape)
    check_op(lambda a: ops.reshape(a, target), lambda t: t.reshape(target), x, seed=seed)
    check_op(lambda a: a.reshape(*target), lambda t: t.reshape(target), x, seed=seed)


@st.composite
def transpose_case(draw):
    shape = draw(array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3))
    ndim = len(shape)
    axes = draw(st.none() | st.permutations(range(ndim)).map(tuple))
    if axes is not None and draw(st.booleans()):
        axes = tuple(a - ndim for a in axes)  # negative axes work too
    return shape, axes


@SOME
@given(case=transpose_case(), seed=SEEDS)
def test_transpose(case, seed):
    shape, axes = case
    x = anywhere(np.random.default_rng(seed), shape)
    perm = tuple(reversed(range(len(shape)))) if axes is None else axes
    check_op(lambda a: ops.transpose(a, axes), lambda t: t.permute(perm), x, seed=seed)
    if axes is None:
        check_op(lambda a: a.T, lambda t: t.permute(perm), x, seed=seed)
    else:
        check_op(lambda a: a.transpose(*axes), lambda t: t.permute(perm), x, seed=seed)


@st.composite
def broadcast_case(draw):
    target = draw(array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3))
    drop = draw(st.integers(0, len(target)))
    kept = target[drop:]
    ones = draw(st.lists(st.booleans(), min_size=len(kept), max_size=len(kept)))
    return tuple(1 if one else n for n, one in zip(kept, ones, strict=True)), target


@SOME
@given(case=broadcast_case(), seed=SEEDS)
def test_broadcast_to(case, seed):
    shape, target = case
    x = anywhere(np.random.default_rng(seed), shape)
    check_op(lambda a: ops.broadcast_to(a, target), lambda t: torch.broadcast_to(t, target), x,
             seed=seed)


# --------------------------------------------------------------------------- indexing


def _has_negative_step(index):
    parts = index if isinstance(index, tuple) else (index,)
    return any(isinstance(p, slice) and p.step is not None and p.step < 0 for p in parts)


@SOME
@given(data=st.data(), shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5),
       seed=SEEDS)
def test_getitem_basic(data, shape, seed):
    index = data.draw(basic_indices(shape, allow_ellipsis=True, allow_newaxis=False))
    assume(not _has_negative_step(index))  # PyTorch has no negative-step slices
    x = anywhere(np.random.default_rng(seed), shape)
    check_op(lambda a: a[index], lambda t: t[index], x, seed=seed)


@SOME
@given(rows=st.integers(1, 5), cols=st.integers(1, 4), k=st.integers(1, 6), seed=SEEDS)
def test_getitem_integer_arrays_with_repeats(rows, cols, k, seed):
    rng = np.random.default_rng(seed)
    x = anywhere(rng, (rows, cols))
    idx = rng.integers(-rows, rows, k)
    idx = np.concatenate([idx, idx[:1], idx[:1]])  # at least one index three times
    check_op(lambda a: a[idx], lambda t: t[torch.from_numpy(idx)], x, seed=seed)
    # A 2-D index array, and a pair of index arrays (one element per pair).
    idx2 = rng.integers(0, rows, (2, 3))
    check_op(lambda a: a[idx2], lambda t: t[torch.from_numpy(idx2)], x, seed=seed)
    r, c = rng.integers(0, rows, k + 2), rng.integers(0, cols, k + 2)
    r[-1], c[-1] = r[0], c[0]
    check_op(lambda a: a[r, c], lambda t: t[torch.from_numpy(r), torch.from_numpy(c)], x,
             seed=seed)
    check_op(lambda a: a[1:, c], lambda t: t[1:, torch.from_numpy(c)], x, seed=seed)


def test_getitem_repeated_index_accumulates():
    x = ed.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[np.array([0, 2, 0, 0])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 1.0])


def test_getitem_accepts_tensor_indices():
    x = ed.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x[ed.tensor([2, 2])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 2.0])


@SOME
@given(shape=array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), seed=SEEDS,
       full=st.booleans())
def test_getitem_boolean_mask(shape, seed, full):
    rng = np.random.default_rng(seed)
    x = anywhere(rng, shape)
    mask = rng.random(shape if full else shape[:1]) < 0.5
    check_op(lambda a: a[mask], lambda t: t[torch.from_numpy(mask)], x, seed=seed)


# --------------------------------------------------------------------------- softmax


@st.composite
def shape_and_axis(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    return shape, draw(st.integers(-len(shape), len(shape) - 1))


@SOME
@given(case=shape_and_axis(), seed=SEEDS)
def test_softmax(case, seed):
    shape, axis = case
    x = anywhere(np.random.default_rng(seed), shape)
    check_op(lambda a: ops.softmax(a, axis=axis), lambda t: F.softmax(t, dim=axis), x, seed=seed)


def test_softmax_is_stable_and_a_masked_score_gets_nothing():
    """exp(1000) overflows; a score of -inf (attention's mask) gets probability and gradient 0."""
    x = ed.tensor([[1000.0, 1000.0, -np.inf], [0.0, -1000.0, 2.0]], requires_grad=True)
    z = ops.softmax(x, axis=1)
    t = torch.tensor(x.numpy(), requires_grad=True)
    tz = F.softmax(t, dim=1)
    np.testing.assert_allclose(z.numpy(), tz.detach().numpy(), rtol=1e-12, atol=0)
    assert z.numpy()[0, 2] == 0.0
    projection = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    (z * projection).sum().backward()
    (tz * torch.from_numpy(projection)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-300)
    assert x.grad.numpy()[0, 2] == 0.0


# --------------------------------------------------------------------------- loss


@SOME
@given(n=st.integers(1, 6), c=st.integers(1, 5), seed=SEEDS,
       reduction=st.sampled_from(["mean", "sum", "none"]))
def test_softmax_cross_entropy(n, c, seed, reduction):
    rng = np.random.default_rng(seed)
    logits = rng.uniform(-3, 3, (n, c))
    labels = rng.integers(0, c, n)
    check_op(lambda z: ops.softmax_cross_entropy(z, labels, reduction=reduction),
             lambda t: F.cross_entropy(t, torch.from_numpy(labels), reduction=reduction),
             logits, seed=seed)


def test_softmax_cross_entropy_is_stable_for_huge_logits():
    logits = ed.tensor([[1000.0, 0.0, -1000.0], [0.0, 1000.0, 1000.0]], requires_grad=True)
    loss = ops.softmax_cross_entropy(logits, np.array([0, 2]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [0.0, math.log(2)], atol=1e-12)
    loss.sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), [[0, 0, 0], [0, 0.5, -0.5]], atol=1e-12)
    assert np.isfinite(logits.grad.numpy()).all()


def test_softmax_cross_entropy_bad_inputs():
    logits = ed.tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(ValueError, match="reduction"):
        ops.softmax_cross_entropy(logits, np.array([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(3,\)"):
        ops.softmax_cross_entropy(logits, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        ops.softmax_cross_entropy(logits, np.array([0, 3]))
    with pytest.raises(TypeError, match="integers"):
        ops.softmax_cross_entropy(logits, np.array([0.0, 1.0]))


# --------------------------------------------------------------------------- kinks, as PyTorch


def torch_grads(fn, *arrays):
    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    fn(*ts).sum().backward()
    return [t.grad.numpy() for t in ts]


def our_grads(fn, *arrays):
    xs = [ed.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    fn(*xs).sum().backward()
    return [x.grad.numpy() for x in xs]


def test_relu_gradient_at_zero_is_zero():
    x = [-1.0, 0.0, 0.0, 2.0]
    (g,) = our_grads(ops.relu, x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(g, torch_grads(torch.relu, x)[0])


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1), -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_max_ties_share_the_gradient_evenly(axis, keepdims):
    x = [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [3.0, 0.0, 3.0]]
    (g,) = our_grads(lambda a: ops.max(a, axis=axis, keepdims=keepdims), x)
    dim = (0, 1) if axis is None else axis
    (expected,) = torch_grads(lambda t: torch.amax(t, dim=dim, keepdim=keepdims), x)
    np.testing.assert_allclose(g, expected, rtol=0, atol=1e-15)
    if axis == 1:
        np.testing.assert_allclose(g, [[0, 0.5, 0.5], [1 / 3] * 3, [0.5, 0, 0.5]])
    if axis is None:  # four 3.0s share one unit of gradient
        np.testing.assert_allclose(g, [[0, 0.25, 0.25], [0, 0, 0], [0.25, 0, 0.25]])


def test_maximum_ties_send_half_to_each_side():
    x = [1.0, 2.0, 3.0, -1.0]
    y = [1.0, 5.0, 0.0, -1.0]
    gx, gy = our_grads(ops.maximum, x, y)
    np.testing.assert_array_equal(gx, [0.5, 0.0, 1.0, 0.5])
    np.testing.assert_array_equal(gy, [0.5, 1.0, 0.0, 0.5])
    tx, ty = torch_grads(torch.maximum, x, y)
    np.testing.assert_array_equal(gx, tx)
    np.testing.assert_array_equal(gy, ty)


def test_maximum_ties_with_broadcasting():
    x = [[0.0, 1.0], [2.0, 0.0]]
    y = [0.0, 1.0]
    gx, gy = our_grads(ops.maximum, x, y)
    tx, ty = torch_grads(torch.maximum, x, y)
    np.testing.assert_array_equal(gx, tx)
    np.testing.assert_array_equal(gy, ty)
    np.testing.assert_array_equal(gy, [0.5, 1.5])


def test_maximum_with_zero_at_zero_sends_half():
    """maximum(x, 0) at x == 0 differs from relu: half the gradient, as torch.maximum."""
    x = [-1.0, 0.0, 2.0]
    (g,) = our_grads(lambda a: ops.maximum(a, 0), x)
    np.testing.assert_array_equal(g, [0.0, 0.5, 1.0])
    (expected,) = torch_grads(lambda t: torch.maximum(t, torch.zeros((), dtype=t.dtype)), x)
    np.testing.assert_array_equal(g, expected)
    (g_method,) = our_grads(lambda a: a.maximum(0.0), x)
    np.testing.assert_array_equal(g_method, expected)


# --------------------------------------------------------------------------- float32 stays float32

F32_CASES = {
    "add_scalar": lambda x, y: (x + 2) + (3.5 + x),
    "sub_scalar": lambda x, y: (1 - x) - (x - 2.5),
    "mul_scalar": lambda x, y: 2 * x * 0.5,
    "div_scalar": lambda x, y: x / 3 + 1.5 / (x + 4),
    "add": lambda x, y: ops.add(x, y),
    "sub": lambda x, y: ops.sub(x, y),
    "mul": lambda x, y: ops.mul(x, y),
    "div": lambda x, y: ops.div(x, y + 4),
    "neg": lambda x, y: ops.neg(x),
    "pow2": lambda x, y: x**2,
    "pow_half": lambda x, y: (x + 4) ** 0.5,
    "pow_numpy_exponent": lambda x, y: (x + 4) ** np.float64(1.5),
    "exp": lambda x, y: ops.exp(x),
    "log": lambda x, y: ops.log(x + 4),
    "sqrt": lambda x, y: ops.sqrt(x + 4),
    "tanh": lambda x, y: ops.tanh(x),
    "sigmoid": lambda x, y: ops.sigmoid(x),
    "relu": lambda x, y: ops.relu(x),
    "maximum": lambda x, y: ops.maximum(x, y),
    "maximum_scalar": lambda x, y: ops.maximum(x, 0),
    "maximum_float_scalar": lambda x, y: ops.maximum(x, 0.25),
    "matmul": lambda x, y: ops.matmul(x, y.T),
    "matmul_vector": lambda x, y: ops.matmul(x[0], y.T),
    "sum": lambda x, y: ops.sum(x, axis=0),
    "mean": lambda x, y: ops.mean(x, axis=(0, 1), keepdims=True),
    "mean_all": lambda x, y: ops.mean(x),
    "max": lambda x, y: ops.max(x, axis=1),
    "max_all": lambda x, y: ops.max(x),
    "reshape": lambda x, y: ops.reshape(x, (-1,)),
    "transpose": lambda x, y: ops.transpose(x),
    "broadcast_to": lambda x, y: ops.broadcast_to(x, (2, 3, 4)),
    "getitem_slice": lambda x, y: x[1:, ::2],
    "getitem_mask": lambda x, y: x[x.numpy() > 0],
    "getitem_ints": lambda x, y: x[np.array([0, 0, 2])],
    "softmax": lambda x, y: ops.softmax(x, axis=0),
    "cross_entropy": lambda x, y: ops.softmax_cross_entropy(x, np.array([0, 3, 1])),
    "cross_entropy_none": lambda x, y: ops.softmax_cross_entropy(x, [0, 3, 1], reduction="none"),
    "cross_entropy_sum": lambda x, y: ops.softmax_cross_entropy(x, [0, 3, 1], reduction="sum"),
}


@pytest.mark.parametrize("name", sorted(F32_CASES))
def test_float32_stays_float32(name):
    rng = np.random.default_rng(0)
    x = ed.tensor(rng.uniform(-2, 2, (3, 4)).astype(np.float32), requires_grad=True)
    y = ed.tensor(rng.uniform(-2, 2, (3, 4)).astype(np.float32), requires_grad=True)
    out = F32_CASES[name](x, y)
    assert out.dtype == np.float32, f"{name} forward gave {out.dtype}"
    out.backward(np.ones(out.shape, dtype=np.float32))
    for t in (x, y):
        if t.grad is not None:
            assert t.grad.dtype == np.float32, f"{name} gradient gave {t.grad.dtype}"
    assert x.grad is not None


def test_numpy_scalars_are_strong_and_python_numbers_weak_as_in_numpy_2():
    """NEP 50: a NumPy float64 scalar promotes float32 to float64, as it does in NumPy; a Python
    float takes the tensor's dtype. (This used to keep float32 for NumPy scalars too.)"""
    a = np.ones(3, np.float32)
    x = ed.tensor(a, requires_grad=True)
    assert (x * np.float64(2.0)).dtype == (a * np.float64(2.0)).dtype == np.float64
    assert (x * 2.0 + np.float32(1.0)).dtype == np.float32
