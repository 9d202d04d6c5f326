"""edu_dl.nn and edu_dl.optim against torch.nn and torch.optim on the same weights and data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from fixtures.frameworks import torch

import edu_dl
from edu_dl import nn, optim

DIMS = (5, 7, 3)  # in, hidden, out
N = 6


def _weights(seed: int = 0, dims: tuple[int, ...] = DIMS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((a, b)), rng.standard_normal(b))
            for a, b in itertools.pairwise(dims)]


def _models(dtype: type = np.float64, seed: int = 0) -> tuple[nn.Sequential, torch.nn.Sequential]:
    """Linear-ReLU-Linear in edu_dl and in torch, with the same weights.

    edu_dl stores a Linear weight as (in, out), torch as (out, in): the copy transposes.
    """
    (w1, b1), (w2, b2) = _weights(seed)
    ours = nn.Sequential(
        nn.Linear(DIMS[0], DIMS[1], weight=w1, bias_value=b1, dtype=dtype),
        nn.ReLU(),
        nn.Linear(DIMS[1], DIMS[2], weight=w2, bias_value=b2, dtype=dtype),
    )
    tdtype = torch.float64 if dtype == np.float64 else torch.float32
    theirs = torch.nn.Sequential(
        torch.nn.Linear(DIMS[0], DIMS[1], dtype=tdtype),
        torch.nn.ReLU(),
        torch.nn.Linear(DIMS[1], DIMS[2], dtype=tdtype),
    )
    with torch.no_grad():
        for layer, (w, b) in zip((theirs[0], theirs[2]), ((w1, b1), (w2, b2))):
            layer.weight.copy_(torch.tensor(w.T))
            layer.bias.copy_(torch.tensor(b))
    return ours, theirs


def _data(seed: int = 1, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, DIMS[0])).astype(dtype),
            rng.standard_normal((N, DIMS[2])).astype(dtype))


def _torch_params_as_ours(model: torch.nn.Sequential) -> list[np.ndarray]:
    """torch's parameters in edu_dl's order and layout (weights transposed to (in, out))."""
    out = []
    for layer in (model[0], model[2]):
        out += [layer.weight.detach().numpy().T, layer.bias.detach().numpy()]
    return out


def _torch_grads_as_ours(model: torch.nn.Sequential) -> list[np.ndarray]:
    out = []
    for layer in (model[0], model[2]):
        out += [layer.weight.grad.numpy().T, layer.bias.grad.numpy()]
    return out


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


# --------------------------------------------------------------------------- modules


def test_linear_relu_sequential_forward_equals_torch() -> None:
    ours, theirs = _models()
    X, _ = _data()
    np.testing.assert_allclose(ours(edu_dl.tensor(X)).numpy(),
                               theirs(torch.tensor(X)).detach().numpy(), rtol=1e-13, atol=1e-13)
    # Each layer on its own, too.
    h_ours = ours[0](edu_dl.tensor(X))
    h_theirs = theirs[0](torch.tensor(X))
    np.testing.assert_allclose(h_ours.numpy(), h_theirs.detach().numpy(), rtol=1e-13, atol=1e-13)
    h = h_ours.numpy()
    np.testing.assert_array_equal(ours[1](h_ours).numpy(),
                                  theirs[1](torch.tensor(h)).numpy())
    assert (h_ours.numpy() < 0).any(), "the ReLU check needs negative pre-activations"


def test_linear_without_bias_and_shape_check() -> None:
    w = np.arange(6.0).reshape(2, 3)
    layer = nn.Linear(2, 3, bias=False, weight=w, dtype=np.float64)
    assert layer.bias is None
    assert len(layer.parameters()) == 1
    np.testing.assert_array_equal(layer(edu_dl.tensor(np.ones((1, 2)))).numpy(), [[3.0, 5.0, 7.0]])
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        nn.Linear(2, 3, weight=np.ones((3, 2)))


def test_linear_default_init_is_pytorch_uniform_bound() -> None:
    layer = nn.Linear(400, 50, rng=np.random.default_rng(0))
    bound = 1 / np.sqrt(400)
    w, b = layer.weight.numpy(), layer.bias.numpy()  # type: ignore[union-attr]
    assert w.dtype == np.float32 and w.shape == (400, 50) and b.shape == (50,)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(b).max() <= bound


def test_parameters_order_and_count() -> None:
    ours, _ = _models()
    params = ours.parameters()
    assert len(params) == 4
    assert [p.shape for p in params] == [(5, 7), (7,), (7, 3), (3,)]
    assert params[0] is ours[0].weight and params[1] is ours[0].bias
    assert params[2] is ours[2].weight and params[3] is ours[2].bias
    assert [name for name, _ in ours.named_parameters()] == [
        "layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in params)


def test_shared_layer_counts_its_parameters_once() -> None:
    layer = nn.Linear(3, 3, dtype=np.float64)
    model = nn.Sequential(layer, nn.ReLU(), layer)
    assert len(model.parameters()) == 2


def test_module_zero_grad() -> None:
    ours, _ = _models()
    X, Y = _data()
    nn.MSELoss()(ours(edu_dl.tensor(X)), Y).backward()
    assert all(p.grad is not None for p in ours.parameters())
    ours.zero_grad()
    assert all(p.grad is None for p in ours.parameters())


def test_linear_copies_the_weight_it_is_given() -> None:
    """Training a Linear must not change the caller's array behind their back."""
    w = np.ones((2, 2))
    layer = nn.Linear(2, 2, bias=False, weight=w, dtype=np.float64)
    layer(edu_dl.tensor(np.ones((1, 2)))).sum().backward()
    optim.SGD(layer.parameters(), lr=0.5).step()
    np.testing.assert_array_equal(w, np.ones((2, 2)))
    np.testing.assert_array_equal(layer.weight.numpy(), np.full((2, 2), 0.5))


# --------------------------------------------------------------------------- losses


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_mse_loss_value_and_gradient_equal_torch(reduction: str) -> None:
    rng = np.random.default_rng(2)
    y_hat, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    a = edu_dl.tensor(y_hat, requires_grad=True)
    loss = nn.MSELoss(reduction=reduction)(a, y)
    loss.backward()
    t = torch.tensor(y_hat, requires_grad=True)
    expected = torch.nn.MSELoss(reduction=reduction)(t, torch.tensor(y))
    expected.backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-14)
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-14)  # type: ignore[union-attr]
    # The two reductions differ by the element count: a check that reduction is not ignored.
    other = "mean" if reduction == "sum" else "sum"
    assert not np.isclose(loss.item(), nn.MSELoss(reduction=other)(a, y).item())


def test_mse_loss_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(3, 4\)"):
        nn.MSELoss()(edu_dl.tensor(np.zeros((4, 3))), np.zeros((3, 4)))


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("labels_as_tensor", [False, True])
def test_cross_entropy_value_and_gradient_equal_torch(reduction: str,
                                                      labels_as_tensor: bool) -> None:
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 4)) * 3
    labels = np.array([0, 3, 1, 3, 2])
    a = edu_dl.tensor(logits, requires_grad=True)
    lab = edu_dl.tensor(labels) if labels_as_tensor else labels
    loss = nn.CrossEntropyLoss(reduction=reduction)(a, lab)
    loss.backward()
    t = torch.tensor(logits, requires_grad=True)
    expected = torch.nn.CrossEntropyLoss(reduction=reduction)(t, torch.tensor(labels))
    expected.backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-13)
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-15)  # type: ignore[union-attr]


@pytest.mark.parametrize("loss_cls", [nn.MSELoss, nn.CrossEntropyLoss])
@pytest.mark.parametrize("bad", ["none", "Mean", "avg", ""])
def test_bad_reduction_names_raise(loss_cls: type, bad: str) -> None:
    with pytest.raises(ValueError, match="reduction"):
        loss_cls(reduction=bad)


# --------------------------------------------------------------------------- optimizers


def _train_both(make_ours, make_theirs, steps: int = 10, dtype: type = np.float64):
    """Run the same MSE training on both models; return per-step (losses, params) for each."""
    ours, theirs = _models(dtype=dtype)
    X, Y = _data(dtype=dtype)
    opt_ours, opt_theirs = make_ours(ours.parameters()), make_theirs(theirs.parameters())
    loss_fn_ours, loss_fn_theirs = nn.MSELoss(), torch.nn.MSELoss()
    history = []
    for _ in range(steps):
        opt_ours.zero_grad()
        loss_ours = loss_fn_ours(ours(edu_dl.tensor(X)), Y)
        loss_ours.backward()
        opt_ours.step()
        opt_theirs.zero_grad()
        loss_theirs = loss_fn_theirs(theirs(torch.tensor(X)), torch.tensor(Y))
        loss_theirs.backward()
        opt_theirs.step()
        history.append((loss_ours.item(), loss_theirs.item(),
                        [p.numpy() for p in ours.parameters()], _torch_params_as_ours(theirs)))
    return history, ours


OPTIMIZERS = {
    "sgd": (lambda p: optim.SGD(p, lr=0.05), lambda p: torch.optim.SGD(p, lr=0.05)),
    "sgd_momentum": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9),
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
    "adam": (lambda p: optim.Adam(p, lr=0.05, betas=(0.8, 0.99), eps=1e-8),
             lambda p: torch.optim.Adam(p, lr=0.05, betas=(0.8, 0.99), eps=1e-8)),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_equals_torch_float64(name: str) -> None:
    history, _ = _train_both(*OPTIMIZERS[name], steps=10)
    for step, (loss_ours, loss_theirs, p_ours, p_theirs) in enumerate(history):
        assert abs(loss_ours - loss_theirs) <= 1e-10 * abs(loss_theirs), step
        for a, b in zip(p_ours, p_theirs):
            assert _rel_err(a, b) < 1e-10, (step, _rel_err(a, b))
    # The test has teeth: training moved the weights and lowered the loss.
    assert history[-1][0] < history[0][0]
    assert _rel_err(history[-1][2][0], _weights()[0][0]) > 1e-2


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizer_keeps_float32(name: str) -> None:
    history, ours = _train_both(*OPTIMIZERS[name], steps=3, dtype=np.float32)
    for p in ours.parameters():
        assert p.dtype == np.float32
    for a, b in zip(history[-1][2], history[-1][3]):
        assert _rel_err(a, b) < 1e-4


def test_adam_state_stays_float32() -> None:
    p = nn.Parameter(np.ones(3, dtype=np.float32))
    opt = optim.Adam([p], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    assert p.dtype == np.float32
    assert opt.m[0].dtype == np.float32 and opt.v[0].dtype == np.float32


def test_sgd_momentum_buffer_stays_float32() -> None:
    p = nn.Parameter(np.ones(3, dtype=np.float32))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    assert p.dtype == np.float32 and opt.velocity[0].dtype == np.float32


@pytest.mark.parametrize("name", ["sgd_momentum", "adam"])
def test_parameter_without_gradient_is_left_alone_as_in_torch(name: str) -> None:
    """A parameter that gets no gradient for a few steps: torch skips it and keeps its own step
    count; edu_dl must give the same numbers when it joins in later."""
    make_ours, make_theirs = OPTIMIZERS[name]
    a0, b0 = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    a, b = nn.Parameter(a0.copy()), nn.Parameter(b0.copy())
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt, topt = make_ours([a, b]), make_theirs([ta, tb])
    for step in range(8):
        opt.zero_grad()
        topt.zero_grad()
        loss = (a * a).sum() + ((a * b * b).sum() if step >= 3 else 0.0)
        tloss = (ta * ta).sum() + ((ta * tb * tb).sum() if step >= 3 else 0.0)
        loss.backward()
        tloss.backward()
        opt.step()
        topt.step()
        assert _rel_err(a.numpy(), ta.detach().numpy()) < 1e-10, step
        assert _rel_err(b.numpy(), tb.detach().numpy()) < 1e-10, step
    assert not np.allclose(b.numpy(), b0)


def test_optimizer_zero_grad_sets_none() -> None:
    p = nn.Parameter(np.ones(2))
    opt = optim.SGD([p], lr=0.1)
    (p * p).sum().backward()
    assert p.grad is not None
    opt.zero_grad()
    assert p.grad is None


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam])
def test_optimizers_reject_empty_params(cls: type) -> None:
    with pytest.raises(ValueError, match="empty"):
        cls([], lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        cls(iter([]), lr=0.1)


@pytest.mark.parametrize("cls", [optim.SGD, optim.Adam])
@pytest.mark.parametrize("lr", [0.0, -0.1])
def test_optimizers_reject_non_positive_lr(cls: type, lr: float) -> None:
    with pytest.raises(ValueError, match="learning rate"):
        cls([nn.Parameter(np.ones(2))], lr=lr)


def test_optimizer_rejects_tensors_without_grad() -> None:
    with pytest.raises(TypeError, match="requires_grad"):
        optim.SGD([edu_dl.tensor(np.ones(2))], lr=0.1)
