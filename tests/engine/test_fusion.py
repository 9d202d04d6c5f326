"""The Session's fused plans (edu_dl/autograd/fusion.py): same numbers as the unfused plan,
the printed code is the code that runs, updates in the Variable's own buffer, Numba optional."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fixtures.frameworks import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from edu_dl import graph as tf
from edu_dl.autograd import fusion

F32 = np.float32


def _two_layer(n: int, d_in: int, h: int, d_out: int, loss: str = "mean_row_sum",
               act: str = "relu", seed: int = 0, optimize: str = "numpy",
               lr: float = 1e-3) -> dict[str, Any]:
    """The lecture's two-layer step as a graph, an open Session and its feed."""
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d_in)).astype(F32)
    Y = r.standard_normal((n, d_out)).astype(F32)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(F32, shape=(None, d_in))
        y = tf.placeholder(F32, shape=(None, d_out))
        w1 = tf.Variable((r.standard_normal((d_in, h)) / np.sqrt(d_in)).astype(F32))
        w2 = tf.Variable((r.standard_normal((h, d_out)) / np.sqrt(h)).astype(F32))
        z = tf.matmul(x, w1)
        a = tf.nn.relu(z) if act == "relu" else tf.maximum(z, 0.0)
        y_pred = tf.matmul(a, w2)
        if loss == "mean_row_sum":
            value = tf.reduce_mean(tf.reduce_sum((y_pred - y) ** 2, axis=1))
        else:  # sum, and a chain of other elementwise ops and a keepdims reduction
            diff = tf.negative(y - y_pred) * 0.5 + y_pred * 0.25
            value = tf.reduce_sum(tf.reduce_sum(tf.square(diff), axis=0, keepdims=True))
        train = tf.train.GradientDescentOptimizer(lr).minimize(value)
        init = tf.global_variables_initializer()
    sess = tf.Session(g, optimize=optimize)
    sess.run(init)
    return {"sess": sess, "loss": value, "train": train, "w": (w1, w2),
            "feed": {x: X, y: Y}, "x": x, "y": y}


def _train(net: dict[str, Any], steps: int) -> tuple[list[Any], list[np.ndarray]]:
    sess = net["sess"]
    losses = [sess.run([net["loss"], net["train"]], feed_dict=net["feed"])[0]
              for _ in range(steps)]
    return losses, [sess.run(w) for w in net["w"]]


def _plan(net: dict[str, Any]) -> Any:
    return net["sess"].plan_for([net["loss"], net["train"]], net["feed"])


@settings(max_examples=12)
@given(n=st.integers(1, 9), d_in=st.integers(1, 7), h=st.integers(1, 7),
       d_out=st.integers(1, 5), loss=st.sampled_from(["mean_row_sum", "sum"]),
       act=st.sampled_from(["relu", "maximum"]), seed=st.integers(0, 9))
def test_numpy_fused_plan_gives_the_unfused_numbers(n: int, d_in: int, h: int, d_out: int,
                                                     loss: str, act: str, seed: int) -> None:
    shapes = (n, d_in, h, d_out)
    fused = _two_layer(*shapes, loss=loss, act=act, seed=seed, optimize="numpy")
    unfused = _two_layer(*shapes, loss=loss, act=act, seed=seed, optimize="off")
    got, want = _train(fused, 4), _train(unfused, 4)
    assert _plan(fused).fused is not None and _plan(unfused).fused is None
    # The NumPy code does the unfused plan's ops in its order: the very same numbers.
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(a, b)
    assert type(got[0][-1]) is type(want[0][-1])


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("loss", ["mean_row_sum", "sum"])
def test_numba_fused_plan_matches_the_unfused_plan_and_pytorch(loss: str) -> None:
    if fusion.load_numba() is None:
        pytest.skip("Numba is not installed")
    shapes = (8, 16, 16, 10)
    fused = _two_layer(*shapes, loss=loss, optimize="numba")
    unfused = _two_layer(*shapes, loss=loss, optimize="off")
    got, want = _train(fused, 5), _train(unfused, 5)
    assert _plan(fused).fused.compiled
    # Numba's loops sum in another order than NumPy's pairwise sums: float32 rounding apart.
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert isinstance(got[0][-1], np.float32)
    if loss == "mean_row_sum":
        _check_against_torch(got[1], shapes, steps=5)


def _check_against_torch(weights: list[np.ndarray], shapes: tuple[int, ...], steps: int) -> None:
    net = _two_layer(*shapes, optimize="off")  # only for its start: the same seeded numbers
    X, Y = (torch.tensor(v) for v in net["feed"].values())
    w1, w2 = (torch.tensor(net["sess"].run(w), requires_grad=True) for w in net["w"])
    opt = torch.optim.SGD([w1, w2], lr=1e-3)
    for _ in range(steps):
        opt.zero_grad()
        ((torch.relu(X @ w1) @ w2 - Y) ** 2).sum(axis=1).mean().backward()
        opt.step()
    for mine, theirs in zip(weights, (w1, w2)):
        np.testing.assert_allclose(mine, theirs.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_the_printed_code_is_the_fused_code() -> None:
    net = _two_layer(8, 16, 16, 10, optimize="numpy")
    plan = _plan(net)
    assert plan.fused is None and "op0.forward" in plan.source  # before the first run
    _train(net, 2)
    assert plan.fused is not None and plan.source == plan.fused.source
    assert "op0.forward" in plan.unfused_source and "forward" not in plan.source
    lines = plan.source.splitlines()
    # Five matmuls; the loss's chain (sub, square, row sums) is one line, the updates in place.
    assert sum("np.dot(" in line for line in lines) == 5
    assert any("(t2 - x1) * (t2 - x1)" in line and ".sum(" in line for line in lines)
    assert [line.strip()[:6] for line in lines if "-= " in line] == ["w0 -= ", "w1 -= "]
    # The source printed is the function that runs: exec it and get the Session's numbers.
    namespace: dict[str, Any] = {"np": np, "float32": F32}
    exec(plan.source, namespace)
    start = [net["sess"].run(w).copy() for w in net["w"]]
    args = [*net["feed"].values(), *(w.copy() for w in start)]
    loss, = namespace["step"](*args)
    assert loss == net["sess"].run(net["loss"], feed_dict=net["feed"])


def test_numba_source_is_printed_once_compiled() -> None:
    if fusion.load_numba() is None:
        pytest.skip("Numba is not installed")
    net = _two_layer(8, 16, 16, 10, optimize="numba")
    _train(net, 2)
    source = _plan(net).source
    assert source.startswith("# fused plan, compiled by Numba")
    assert "for i0 in range(8):" in source
    if fusion.load_gemm(np.dtype(F32)) is not None:  # the updates are gemm's epilogue
        assert source.count("gemm_into(w") == 2


def test_the_update_writes_into_the_variables_buffer() -> None:
    for optimize in ("numpy", "numba"):
        if optimize == "numba" and fusion.load_numba() is None:
            continue
        net = _two_layer(8, 16, 16, 10, optimize=optimize)
        _train(net, 1)  # the first run plans and fuses
        stored = net["sess"]._variables
        buffers = [stored[w] for w in net["w"]]
        views = [b[:] for b in buffers]
        before = [b.copy() for b in buffers]
        _train(net, 1)
        for w, buffer, view, old in zip(net["w"], buffers, views, before):
            assert stored[w] is buffer  # the same array, changed where it is
            assert not np.array_equal(view, old)
            np.testing.assert_array_equal(view, net["sess"].run(w))


def test_without_numba_the_numpy_fused_code_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "load_numba", lambda: None)
    net = _two_layer(8, 16, 16, 10, optimize="numba")
    want = _train(_two_layer(8, 16, 16, 10, optimize="off"), 4)
    got = _train(net, 4)
    plan = _plan(net)
    assert plan.fused is not None and not plan.fused.compiled
    assert plan.source.startswith("# fused plan, NumPy")
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(a, b)


def test_auto_compiles_once_the_plan_has_run_as_long_as_a_compile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if fusion.load_numba() is None:
        pytest.skip("Numba is not installed")
    net = _two_layer(8, 16, 16, 10, optimize="auto")
    _train(net, 3)
    plan = _plan(net)
    assert plan.fused is not None and not plan.fused.compiled  # 3 runs: far from paying
    monkeypatch.setattr(fusion, "NUMBA_COMPILE_S", plan.fused.spent_s)
    _train(net, 2)
    assert plan.fused.compiled


def test_a_feed_of_another_shape_runs_the_unfused_plan() -> None:
    net = _two_layer(8, 5, 6, 3, optimize="numpy")
    ref = _two_layer(8, 5, 6, 3, optimize="off")
    for n in (8, 8, 3, 8):  # fused, fused, guard fails (batch of 3), fused again
        for m in (net, ref):
            m["feed"] = {m["x"]: np.ones((n, 5), F32), m["y"]: np.zeros((n, 3), F32)}
        got, want = _train(net, 1), _train(ref, 1)
        np.testing.assert_array_equal(got[0][0], want[0][0])
        for a, b in zip(got[1], want[1]):
            np.testing.assert_array_equal(a, b)


def test_what_the_lowering_does_not_know_stays_unfused() -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(F32, shape=(None, 3))
        w = tf.Variable(np.ones((3, 2), F32))
        loss = tf.reduce_max(tf.matmul(x, w))  # a max reduction: not lowered
        train = tf.train.AdamOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    sess = tf.Session(g, optimize="numpy")
    sess.run(init)
    feed = {x: np.ones((4, 3), F32)}
    for _ in range(2):
        sess.run([loss, train], feed_dict=feed)
    assert sess.plan_for([loss, train], feed).fused is None
    assert sess.plan_for(loss, feed).fused is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_into_adds_every_transposed_product(dtype: type) -> None:
    """c = alpha * op(a) @ op(b) + beta * c for every transposition, beta 1 (an update) and 0
    (a product into a fresh array), a strided operand, and sizes with nothing to multiply."""
    gemm = fusion.load_gemm(np.dtype(dtype)) if fusion.load_numba() else None
    if gemm is None:
        pytest.skip("Numba or a BLAS it can call is not installed")
    r = np.random.default_rng(0)
    tight = {"rtol": 1e-5, "atol": 1e-6} if dtype is np.float32 else {"rtol": 1e-12}
    for ta in (False, True):
        for tb in (False, True):
            for beta in (1.0, 0.0):
                a = r.standard_normal((4, 3) if ta else (3, 4)).astype(dtype)
                b = r.standard_normal((5, 4) if tb else (4, 5)).astype(dtype)
                c = r.standard_normal((3, 5)).astype(dtype)
                want = beta * c - dtype(0.5) * ((a.T if ta else a) @ (b.T if tb else b))
                gemm(c, a, b, ta, tb, dtype(-0.5), dtype(beta))
                np.testing.assert_allclose(c, want, **tight)
    wide = r.standard_normal((3, 8)).astype(dtype)
    b = r.standard_normal((4, 5)).astype(dtype)
    c = np.empty((3, 5), dtype)
    gemm(c, wide[:, ::2], b, False, False, dtype(1), dtype(0))  # a strided view: copied first
    np.testing.assert_allclose(c, wide[:, ::2] @ b, **tight)
    c = np.full((3, 5), 7.0, dtype)
    gemm(c, np.empty((3, 0), dtype), np.empty((0, 5), dtype), False, False, dtype(1),
         dtype(0))  # an empty sum: zero, not a BLAS error
    assert (c == 0).all()
    gemm(np.empty((0, 5), dtype), np.empty((0, 2), dtype), np.empty((2, 5), dtype), False,
         False, dtype(1), dtype(0))


def test_the_compiled_step_calls_numpys_own_blas() -> None:
    """The matmuls of a compiled step go to the BLAS NumPy's ``@`` uses (NumPy's wheels link
    an ILP64 OpenBLAS): the hand-written step and the fused plan share one library."""
    found = fusion.numpy_blas("sgemm")
    info = np.__config__.CONFIG["Build Dependencies"]["blas"]
    if info.get("name") != "scipy-openblas":
        pytest.skip(f"NumPy is built with {info.get('name')}, not the wheels' OpenBLAS")
    assert found is not None and found[0] and found[1] is np.int64
    if fusion.load_numba() is None:
        return
    net = _two_layer(8, 16, 16, 10, optimize="numba")
    _train(net, 2)
    source = _plan(net).source
    code = [line.split("#")[0] for line in source.splitlines()]  # the comments say np.dot
    assert not any("np.dot" in line for line in code), source
    assert source.count("gemm_into(") == 5  # two forward products, one backward, two updates


def test_optimize_is_checked() -> None:
    with pytest.raises(ValueError, match="optimize must be one of"):
        tf.Session(tf.Graph(), optimize="fast")


def _fake_gpu_step(optimize: str) -> tuple[list[Any], list[np.ndarray], Any]:
    from edu_dl.bench.problems import make_problem
    from edu_dl.twins import edu_static

    p = make_problem("tiny")
    step = edu_static.make_step(p.spec, p.X, p.Y, p.weights, p.spec.lr("sgd"), "sgd", "gpu",
                                optimize=optimize)
    losses = [step.step() for _ in range(4)]
    weights = step.weights()
    return losses, [weights["w1"], weights["w2"]], step.native


@pytest.mark.usefixtures("numpy_as_cupy")
def test_on_a_gpu_the_fused_plan_runs_through_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """CuPy's path, with NumPy standing in for it (no kernels there: the whole-array code)."""
    from edu_dl.autograd.session import Session

    unfused_runs: list[int] = []
    execute = Session._execute

    def counted(self: Session, *args: Any) -> Any:
        unfused_runs.append(1)
        return execute(self, *args)

    monkeypatch.setattr(Session, "_execute", counted)
    got_losses, got_w, _ = _fake_gpu_step("numba")
    # init, the first step (plans and fuses), then weights(); the other 3 steps ran fused.
    assert len(unfused_runs) == 3
    monkeypatch.setattr(Session, "_execute", execute)
    want_losses, want_w, _ = _fake_gpu_step("off")
    for a, b in zip(got_losses + got_w, want_losses + want_w):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert type(got_w[0]) is np.ndarray  # weights() brought them to the host


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("edu_dl").gpu_status()[0], reason="no CUDA GPU here")
def test_on_a_real_gpu_the_fused_kernels_give_the_unfused_numbers() -> None:
    """The generated ElementwiseKernels compiled by CuPy on a real GPU: the fused step's losses
    and weights agree with the unfused plan's to float32 rounding (kernels may reorder)."""
    got_losses, got_w, _ = _fake_gpu_step("numba")
    want_losses, want_w, _ = _fake_gpu_step("off")
    for a, b in zip(got_losses + got_w, want_losses + want_w):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_cupy_source_writes_one_kernel_per_chain_and_update() -> None:
    net = _two_layer(8, 16, 16, 10, optimize="numpy")
    _train(net, 2)
    program = _plan(net).fused.program
    kernels: dict[str, Any] = {}
    source = fusion.cupy_source(program, kernels)
    chains = sum(isinstance(s, fusion.Elementwise) and s.expr.shape != ()
                 for s in program.statements)  # a scalar is computed on the host
    updates = sum(isinstance(s, fusion.Update) for s in program.statements)
    assert len(kernels) == chains + updates == 5
    bodies = [body for _, _, body in kernels.values()]
    assert "((float)0.0)" in bodies[0] and "max(t0, ((float)0.0))" in bodies[0]
    assert any("(t0 > ((float)0.0) ? t7 : ((float)0.0))" in b for b in bodies)  # relu's VJP
    # The updates write the Variable in place: it is the kernel's output argument, read too.
    assert [out for _, out, _ in kernels.values()][-2:] == ["float32 w0", "float32 w1"]
    assert bodies[-1].startswith("w1 = w1 - (")
    assert "k4(t8, w1)" in source and "t5 = (float32(1.0) / float32(8.0))" in source
    assert "k0(t0, np.empty((8, 16), np.float32))" in source  # the output passed in


def test_code_numba_cannot_compile_leaves_the_numpy_code_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if fusion.load_numba() is None:
        pytest.skip("Numba is not installed")
    real = fusion.numba_source
    # A typing error in the generated code: Numba refuses it at the first call.
    monkeypatch.setattr(fusion, "numba_source",
                        lambda program, gemm=True: real(program, gemm).replace(
                            "return (", "x0.no_such_attribute\n    return (", 1))
    net = _two_layer(8, 16, 16, 10, optimize="numba")
    want = _train(_two_layer(8, 16, 16, 10, optimize="off"), 4)
    got = _train(net, 4)
    plan = _plan(net)
    assert not plan.fused.compiled and "Numba could not compile it" in plan.source
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(a, b)
