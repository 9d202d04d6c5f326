"""The eager engine: accumulation, which tensors get gradients, no_grad, retain_graph, errors."""

from __future__ import annotations

import gc
import sys
import weakref

import numpy as np
import pytest
from fixtures.frameworks import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import edu_dl as ed
from edu_dl import backend
from edu_dl.autograd import ops

GPU = pytest.mark.skipif(not ed.gpu_status()[0], reason="no CUDA GPU / CuPy here")


def leaf(values, dtype=np.float64):
    return ed.tensor(np.array(values, dtype=dtype), requires_grad=True)


# --------------------------------------------------------------------------- accumulation


def test_tensor_used_twice_in_one_op_gets_both_contributions():
    x = leaf([1.0, -2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])
    y = leaf([1.0, 2.0])
    (y + y).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])
    z = leaf([1.0, 2.0])
    (z - z).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [0.0, 0.0])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_graphs_give_torchs_gradients(data):
    """Random DAGs of two-input ops that reuse earlier values: the newest-first walk (and its
    shortcut for chains) must give every leaf exactly torch's gradient."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    leaves = [rng.standard_normal(3) for _ in range(data.draw(st.integers(1, 3)))]
    ours = [ed.tensor(v, requires_grad=True) for v in leaves]
    theirs = [torch.tensor(v, requires_grad=True) for v in leaves]
    values_ed, values_torch = list(ours), list(theirs)
    for _ in range(data.draw(st.integers(1, 12), label="ops")):
        name = data.draw(st.sampled_from(["add", "sub", "mul", "tanh"]))
        i = data.draw(st.integers(0, len(values_ed) - 1))
        j = data.draw(st.integers(0, len(values_ed) - 1))  # may equal i: x * x, x + x
        if name == "tanh":
            values_ed.append(values_ed[i].tanh())
            values_torch.append(torch.tanh(values_torch[i]))
            continue
        op = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
              "mul": lambda a, b: a * b}[name]
        values_ed.append(op(values_ed[i], values_ed[j]))
        values_torch.append(op(values_torch[i], values_torch[j]))
    # The output sums a random selection of values: some branches lead nowhere.
    picked = data.draw(st.lists(st.integers(0, len(values_ed) - 1), min_size=1, max_size=4))
    out_ed = sum((values_ed[k] for k in picked[1:]), values_ed[picked[0]]).sum()
    out_torch = sum((values_torch[k] for k in picked[1:]), values_torch[picked[0]]).sum()
    out_ed.backward()
    out_torch.backward()
    for mine, reference in zip(ours, theirs):
        expected = reference.grad
        if expected is None:
            assert mine.grad is None or np.allclose(mine.grad.numpy(), 0)
        else:
            assert mine.grad is not None
            np.testing.assert_allclose(mine.grad.numpy(), expected.numpy(), rtol=1e-12,
                                       atol=1e-12)


def test_diamond_graph():
    """x feeds a and b, both feed c: dc/dx = d(2x * 3x)/dx = 12 x; compare with PyTorch."""
    x = leaf([0.5, -1.0, 2.0])
    a, b = x * 2, x * 3
    c = (a * b + a).sum()
    c.backward()
    t = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    ta, tb = t * 2, t * 3
    (ta * tb + ta).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 12 * x.numpy() + 2)


def test_deep_diamond_shares_subgraph_once():
    """A node reached by many paths must run its backward once, with the summed gradient."""
    x = leaf([1.0, 2.0])
    h = x.exp()
    total = h
    for _ in range(10):
        total = total + h
    total.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 11 * np.exp([1.0, 2.0]))


def test_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, 2.0])
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])
    x.grad = None  # zeroing is the caller's job, as in PyTorch
    (x * 4).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 4.0])


def test_only_inputs_that_require_grad_get_grad():
    x = leaf([1.0, 2.0])
    w = ed.tensor([3.0, 4.0])
    (x * w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    assert w.grad is None
    assert not w.requires_grad


def test_non_leaf_tensors_do_not_keep_grad():
    x = leaf([1.0, 2.0])
    y = x * 2
    z = y.sum()
    assert x.is_leaf and not y.is_leaf and not z.is_leaf
    assert y.requires_grad and z.requires_grad
    z.backward()
    assert y.grad is None and z.grad is None
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


def test_ops_on_constants_build_nothing():
    a = ed.tensor([1.0, 2.0])
    b = a * 2 + 1
    assert not b.requires_grad and b.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        b.sum().backward()


def test_scalar_leaf_backward():
    x = ed.tensor(3.0, requires_grad=True)
    x.backward()
    assert x.grad.item() == 1.0
    y = ed.tensor(2.0, requires_grad=True)
    (y * y * y).backward()
    assert y.grad.item() == 12.0


# --------------------------------------------------------------------------- leaf .grad arrays


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.sum(),
        lambda x: x.mean(),
        lambda x: x.broadcast_to((4, 2, 3)).sum(),
        lambda x: (x * 1.0).sum(),
        lambda x: x.reshape(6).sum(),
    ],
    ids=["sum", "mean", "broadcast_to", "mul", "reshape"],
)
def test_leaf_grad_is_a_writeable_array(make):
    x = leaf(np.ones((2, 3)))
    make(x).backward()
    g = x.grad.data
    assert isinstance(g, np.ndarray)
    assert g.flags.writeable
    g[0, 0] = 42.0  # a read-only broadcast view would raise here
    assert x.grad.numpy()[0, 0] == 42.0


def test_zero_dim_leaf_grad_is_a_writeable_array():
    x = ed.tensor(np.array(2.0), requires_grad=True)
    (x * 3).backward()
    (x * 3).backward()
    assert isinstance(x.grad.data, np.ndarray) and x.grad.data.flags.writeable
    assert x.grad.item() == 6.0


def test_two_leaves_do_not_share_a_grad_buffer():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).backward(np.ones(2))
    assert not np.shares_memory(a.grad.data, b.grad.data)
    a.grad.data *= 0  # e.g. an optimizer that clips in place
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])
    c, d = leaf([[1.0, 2.0]]), leaf([3.0, 4.0])
    (c.reshape(2) + d).sum().backward()
    assert not np.shares_memory(c.grad.data, d.grad.data)


def test_backward_does_not_modify_or_keep_the_callers_grad():
    x = leaf([1.0, 2.0])
    seed = np.array([1.0, 1.0])
    (x * 1.0).backward(seed)
    x.grad.data += 1
    np.testing.assert_array_equal(seed, [1.0, 1.0])


# --------------------------------------------------------------------------- no_grad, detach


def test_no_grad_builds_nothing():
    x = leaf([1.0, 2.0])
    with ed.no_grad():
        assert not ed.is_grad_enabled()
        y = x * 2 + x.exp()
    assert ed.is_grad_enabled()
    assert not y.requires_grad and y.is_leaf
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [2 + np.e, 4 + np.e**2])


def test_no_grad_as_decorator_and_reentrant():
    x = leaf([1.0])

    @ed.no_grad()
    def f(n):
        assert not ed.is_grad_enabled()
        return x * 2 if n == 0 else f(n - 1)  # the same no_grad instance, entered again

    y = f(3)
    assert not y.requires_grad
    assert ed.is_grad_enabled()
    assert (x * 2).requires_grad


def test_no_grad_restores_after_an_exception():
    with pytest.raises(ZeroDivisionError), ed.no_grad():
        1 / 0  # noqa: B018
    assert ed.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = leaf([1.0])
    with ed.no_grad():
        with ed.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad


def test_detach():
    x = leaf([1.0, 2.0])
    d = x.detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), x.numpy())
    (d * x).sum().backward()  # the detached factor is a constant
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0])


# --------------------------------------------------------------------------- long graphs, freeing


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_100k_op_chain_backpropagates_without_recursion_and_can_be_freed():
    n = 100_000
    x = ed.tensor(1.0, requires_grad=True)
    y = x
    first = None
    for i in range(n):
        y = y * 1.0
        if i == 0:
            first = weakref.ref(y)
    assert n > sys.getrecursionlimit()
    y.backward()
    assert x.grad.item() == 1.0
    del y
    gc.collect()
    assert first() is None, "the chain is still alive after its last reference was deleted"


def test_saved_arrays_are_freed_after_backward():
    x = leaf([-1.0, 2.0])
    r = x.relu()
    mask = weakref.ref(r._op.saved)  # the relu mask lives only in the op
    r.sum().backward()
    gc.collect()
    assert mask() is None
    assert r._op.saved is ops.FREED


def test_retain_graph_allows_a_second_backward_that_doubles_the_grads():
    x = leaf([1.0, -2.0])
    w = leaf([3.0, 0.5])
    loss = ((x * w).relu() + x.exp()).sum()
    loss.backward(retain_graph=True)
    g1x, g1w = x.grad.numpy().copy(), w.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * g1x)
    np.testing.assert_allclose(w.grad.numpy(), 2 * g1w)


def test_second_backward_without_retain_graph_is_a_clear_error():
    x = leaf([1.0, 2.0])
    loss = (x * x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        loss.backward()
    # A graph without saved arrays is freed too (the error does not depend on the op).
    y = (-x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_backward_of_non_scalar_needs_grad():
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    with pytest.raises(RuntimeError, match=r"scalar.*shape \(3,\).*grad="):
        y.backward()
    with pytest.raises(ValueError, match=r"grad has shape \(2,\).*shape \(3,\)"):
        y.backward(np.ones(2))
    y.backward(np.array([1.0, 10.0, 100.0]))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 20.0, 200.0])
    z = x * 3
    z.backward(ed.tensor([1.0, 1.0, 1.0]))  # a Tensor works as grad= too
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 23.0, 203.0])


def test_requires_grad_on_integer_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="floating-point"):
        ed.tensor([1, 2, 3], requires_grad=True)
    with pytest.raises(TypeError, match="floating-point"):
        ed.tensor([1, 2]).requires_grad_()
    with pytest.raises(TypeError, match="floating-point"):
        ed.zeros(2, dtype=np.int64, requires_grad=True)
    with pytest.raises(TypeError, match="floating-point"):
        ed.tensor([True, False], requires_grad=True)


# --------------------------------------------------------------------------- operands


def test_python_scalars_and_numpy_arrays_on_either_side():
    x = leaf([1.0, 2.0, 4.0])
    a = np.array([10.0, 20.0, 30.0])
    cases = {
        "2 * t": (lambda t: 2 * t, [2.0, 2.0, 2.0]),
        "t * 2": (lambda t: t * 2, [2.0, 2.0, 2.0]),
        "np + t": (lambda t: a + t, [1.0, 1.0, 1.0]),
        "t + np": (lambda t: t + a, [1.0, 1.0, 1.0]),
        "np * t": (lambda t: a * t, a),
        "np - t": (lambda t: a - t, [-1.0, -1.0, -1.0]),
        "t / 3": (lambda t: t / 3, [1 / 3] * 3),
        "3 / t": (lambda t: 3 / t, -3 / np.array([1.0, 4.0, 16.0])),
        "np / t": (lambda t: a / t, -a / np.array([1.0, 4.0, 16.0])),
        "1 - t": (lambda t: 1 - t, [-1.0, -1.0, -1.0]),
        "t - 1": (lambda t: t - 1, [1.0, 1.0, 1.0]),
        "np @ t": (lambda t: a @ t, a),
        "t @ np": (lambda t: t @ a, a),
        "-t": (lambda t: -t, [-1.0, -1.0, -1.0]),
        "t ** 2": (lambda t: t**2, [2.0, 4.0, 8.0]),
    }
    for name, (f, grad) in cases.items():
        x.grad = None
        out = f(x)
        assert isinstance(out, ed.Tensor), name
        expected = f(x.numpy())
        np.testing.assert_allclose(out.numpy(), expected, err_msg=name)
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), grad, err_msg=name)


def test_numpy_array_on_the_left_of_a_2d_op_is_handed_to_the_tensor():
    x = leaf(np.ones((2, 3)))
    out = np.ones((4, 1, 3)) + x  # NumPy must not loop over elements and make an object array
    assert isinstance(out, ed.Tensor) and out.shape == (4, 2, 3)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 4.0))


def test_python_scalar_keeps_integer_and_float_tensor_dtypes():
    f32 = ed.tensor(np.ones(2, np.float32))
    assert (f32 * 2).dtype == np.float32
    assert (2.5 - f32).dtype == np.float32
    i64 = ed.tensor([1, 2])
    assert (i64 + 1).dtype == np.int64
    assert (i64 * 1.5).dtype.kind == "f"
    i8 = ed.tensor(np.array([1, 2], dtype=np.int8))
    assert (i8 + 1).dtype == np.int8
    flags = ed.tensor([True, False])
    np.testing.assert_array_equal((flags + 5).numpy(), np.array([True, False]) + 5)
    np.testing.assert_array_equal((flags * True).numpy(), [True, False])


def test_unsupported_operand_is_a_type_error():
    x = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="str"):
        x + "a"


# --------------------------------------------------------------------------- clear errors


def test_matmul_shape_mismatch_names_op_and_both_shapes():
    x = leaf(np.ones((2, 3)))
    y = leaf(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        x @ y
    with pytest.raises(ValueError, match=r"matmul.*\(3,\).*\(2,\)"):
        ops.matmul(ed.tensor(np.ones(3)), ed.tensor(np.ones(2)))


def test_matmul_batch_mismatch_names_op_and_both_shapes():
    x = ed.tensor(np.ones((2, 3, 4)))
    y = ed.tensor(np.ones((5, 4, 2)))
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3, 4\).*\(5, 4, 2\)"):
        x @ y


@pytest.mark.parametrize(
    ("name", "fn"),
    [("add", ops.add), ("sub", ops.sub), ("mul", ops.mul), ("div", ops.div),
     ("maximum", ops.maximum)],
)
def test_broadcasting_failure_names_op_and_shapes(name, fn):
    x = leaf(np.ones((2, 3)))
    y = leaf(np.ones(4))
    with pytest.raises(ValueError, match=rf"{name}.*\(2, 3\).*\(4,\)"):
        fn(x, y)


def test_broadcast_to_and_reshape_failures_name_the_op():
    x = leaf(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"broadcast.*\(2, 3\)"):
        x.broadcast_to((4, 3))
    with pytest.raises(ValueError, match=r"reshape.*\(2, 3\)"):
        x.reshape(4, 2)


def test_index_out_of_range_names_the_op():
    x = leaf([1.0, 2.0])
    with pytest.raises(IndexError, match=r"getitem.*\(2,\)"):
        x[5]


# --------------------------------------------------------------------------- tensor basics


def test_tensor_facts_and_conversions():
    x = ed.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32, requires_grad=True)
    assert x.shape == (2, 3) and x.ndim == 2 and x.size == 6 and len(x) == 2
    assert x.dtype == np.float32 and x.device == "cpu"
    assert isinstance(x.numpy(), np.ndarray)
    assert x.to("cpu") is x and x.cpu() is x
    assert "requires_grad=True" in repr(x)
    assert ed.tensor(7.0).item() == 7.0
    with pytest.raises(ValueError, match="one element"):
        x.item()
    assert ed.zeros(2, 3).shape == (2, 3) and ed.ones((4,)).dtype == np.float32


def test_asking_for_gpu_without_one_is_a_device_error(monkeypatch):
    monkeypatch.setattr(backend, "gpu_status", lambda: (False, "no GPU in this test"))
    x = leaf([1.0])
    for make in (lambda: x.to("gpu"), lambda: ed.tensor([1.0], device="gpu"),
                 lambda: ed.zeros(2, device="gpu"), lambda: x.gpu()):
        with pytest.raises(backend.DeviceError, match="device='cpu'"):
            make()
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        x.to("cuda")


def test_mixed_devices_in_one_op_is_a_type_error(monkeypatch):
    """A CuPy array meeting a NumPy array: faked, since no CuPy array can exist here."""
    fake_cupy = type(sys)("cupy")
    fake_array_type = type("ndarray", (), {"__module__": "cupy"})
    monkeypatch.setattr(backend, "require_gpu", lambda: fake_cupy)
    on_gpu = ed.Tensor._wrap(fake_array_type(), None, False)
    on_cpu = leaf([1.0])
    with pytest.raises(TypeError, match="different devices"):
        on_cpu + on_gpu
    with pytest.raises(TypeError, match="different devices"):
        ops.matmul(on_gpu, on_cpu)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=[GPU, pytest.mark.gpu])])
def test_forward_backward_on_each_device_matches_cpu(device):
    rng = np.random.default_rng(0)
    X, W, b = rng.standard_normal((8, 5)), rng.standard_normal((5, 4)), rng.standard_normal(4)
    y = np.array([0, 1, 2, 3, 0, 1, 2, 3])

    def run(dev):
        Wt = ed.tensor(W, requires_grad=True, device=dev)
        bt = ed.tensor(b, requires_grad=True, device=dev)
        Xt = ed.tensor(X, device=dev)
        h = ops.maximum(Xt @ Wt + bt, 0)
        loss = ops.softmax_cross_entropy(h, ed.tensor(y, device=dev)) + (Wt**2).mean()
        loss.backward()
        assert loss.device == dev and Wt.grad.device == dev
        return loss.item(), Wt.grad.numpy(), bt.grad.numpy()

    got, want = run(device), run("cpu")
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-9, atol=1e-12)


@GPU
@pytest.mark.gpu
def test_to_device_gradient_flows_back_to_the_cpu():
    x = leaf([1.0, 2.0])
    y = (x.to("gpu") * 3).sum()
    assert y.device == "gpu"
    y.backward()
    assert x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


@pytest.mark.usefixtures("numpy_as_cupy")
def test_the_gpu_cases_on_numpy_as_cupy():
    """The two GPU tests above where CI has no GPU: NumPy stands in for CuPy, so a tensor's
    trip to the 'gpu' and its gradient's way back run through the same code."""
    test_forward_backward_on_each_device_matches_cpu("gpu")
    test_to_device_gradient_flows_back_to_the_cpu()
