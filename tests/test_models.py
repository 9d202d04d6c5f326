"""edu_dl.models.spec: the shared specs, losses, optimizer formulas and seeded starting points."""

from __future__ import annotations

import numpy as np
import pytest

from edu_dl.models import spec as models
from edu_dl.twins import get_twin

SMALL = models.TwoLayerNet(8, 6, 5, 4, "mean_row_sum")


def test_three_squared_error_losses_on_known_numbers():
    y_pred = np.array([[1.0, 2.0], [3.0, 4.0]])
    Y = np.zeros((2, 2))
    # row sums 5 and 25: TF mean of row sums 15; PyTorch sum 30; Caffe 30 / (2 * 2) = 7.5
    expected = {"mean_row_sum": 15.0, "sum": 30.0, "euclidean": 7.5}
    for loss, value in expected.items():
        got, grad = models.loss_and_grad(np, y_pred, Y, loss)
        assert got == pytest.approx(value, rel=1e-15)
        assert np.allclose(grad, 2 * models.loss_scale(loss, 2) * y_pred)


def test_cross_entropy_value_is_minus_log_softmax_of_the_label():
    logits = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    labels = np.array([2, 0])
    got, _ = models.loss_and_grad(np, logits, labels, "cross_entropy")
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert got == pytest.approx(-np.log(p[[0, 1], labels]).mean(), rel=1e-14)


@pytest.mark.parametrize("loss", list(models.LOSSES))
def test_loss_gradient_matches_central_differences(loss):
    rng = np.random.default_rng(3)
    y_pred = rng.standard_normal((4, 3))
    Y = rng.integers(0, 3, 4) if loss == "cross_entropy" else rng.standard_normal((4, 3))
    _, grad = models.loss_and_grad(np, y_pred, Y, loss)
    numeric = np.zeros_like(y_pred)
    h = 1e-6
    for idx in np.ndindex(*y_pred.shape):
        up, down = y_pred.copy(), y_pred.copy()
        up[idx] += h
        down[idx] -= h
        numeric[idx] = (models.loss_and_grad(np, up, Y, loss)[0]
                        - models.loss_and_grad(np, down, Y, loss)[0]) / (2 * h)
    assert np.allclose(grad, numeric, rtol=1e-6, atol=1e-9)


def test_weights_come_from_one_seed():
    a, b = SMALL.init_weights(), SMALL.init_weights()
    assert a.keys() == {"w1", "w2"} and a["w1"].shape == (6, 5) and a["w2"].shape == (5, 4)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = models.TwoLayerNet(8, 6, 5, 4, "mean_row_sum", seed=1).init_weights()
    assert not np.array_equal(a["w1"], other["w1"])
    # float32 weights are the float64 ones rounded, so every twin starts from the same numbers.
    f32 = SMALL.init_weights(np.float32)
    assert f32["w1"].dtype == np.float32
    assert np.array_equal(f32["w1"], a["w1"].astype(np.float32))
    # He scaling: std close to sqrt(2 / fan_in) at a size where the estimate is good.
    w1 = models.TwoLayerNet(4, 400, 300, 2, "sum").init_weights()["w1"]
    assert w1.std() == pytest.approx(np.sqrt(2 / 400), rel=0.02)


def test_data_comes_from_the_seed_and_does_not_move_the_weights():
    X, Y = SMALL.make_data()
    X2, Y2 = SMALL.make_data()
    assert X.shape == (8, 6) and Y.shape == (8, 4)
    assert np.array_equal(X, X2) and np.array_equal(Y, Y2)
    bigger = models.TwoLayerNet(16, 6, 5, 4, "mean_row_sum")
    # separate streams: a bigger batch keeps the same initial weights
    assert np.array_equal(bigger.init_weights()["w1"], SMALL.init_weights()["w1"])


def test_digits_classifier_uses_the_bundled_digits():
    spec = models.DigitsClassifier(N=300)
    X, y = spec.make_data()
    assert X.shape == (300, 64) and y.shape == (300,) and y.dtype == np.int64
    assert X.min() >= 0.0 and X.max() <= 1.0 and X.max() > 0.9  # pixels 0..16, scaled by 1/16
    assert set(np.unique(y)) == set(range(10))
    assert np.array_equal(spec.make_data()[0], X)


@pytest.mark.parametrize("bad, match", [
    (dict(N=0, D_in=2, H=2, D_out=2, loss="sum"), "N must be a positive int"),
    (dict(N=2, D_in=2, H=2, D_out=2, loss="l1"), "unknown loss 'l1'"),
])
def test_bad_specs_are_clear_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        models.TwoLayerNet(**bad)


def test_bad_digits_and_loss_combinations_are_clear_errors():
    with pytest.raises(ValueError, match="1797 samples"):
        models.DigitsClassifier(N=5000)
    with pytest.raises(ValueError, match="D_out=10"):
        models.DigitsClassifier(D_out=3)
    with pytest.raises(ValueError, match="DigitsClassifier"):
        models.TwoLayerNet(4, 3, 2, 10, "cross_entropy").make_data()
    with pytest.raises(ValueError, match="unknown optimizer 'rmsprop'"):
        SMALL.lr("rmsprop")


def test_default_sgd_rate_keeps_the_step_size_across_losses():
    rates = {loss: models.TwoLayerNet(8, 6, 5, 4, loss).lr("sgd")
             for loss in models.REGRESSION_LOSSES}
    # lr * loss_scale is the same for every squared-error loss
    steps = {loss: rate * models.loss_scale(loss, 8) for loss, rate in rates.items()}
    assert len({round(s, 15) for s in steps.values()}) == 1
    assert SMALL.lr("adam") == models.ADAM_RATE


def test_adam_reference_is_pytorchs_adam():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4))
    p = torch.tensor(w.copy(), requires_grad=True)
    opt = torch.optim.Adam([p], lr=0.1, betas=(models.ADAM_BETA1, models.ADAM_BETA2),
                           eps=models.ADAM_EPS)
    state = models.adam_init(np, [w])
    for _ in range(5):
        g = rng.standard_normal((3, 4)) * 1e-3
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        models.adam_update(np, [w], [g], state, lr=0.1)
    assert np.allclose(w, p.detach().numpy(), rtol=1e-12, atol=1e-14)
    # ... and not Keras's / TF 1.x's "epsilon hat" placement, which differs for tiny gradients:
    # lr * sqrt(c2) / c1 * m / (sqrt(v) + eps) at step 1, with m = (1 - b1) g, v = (1 - b2) g^2
    g, c1, c2 = 1e-9, 1 - models.ADAM_BETA1, 1 - models.ADAM_BETA2
    m, v = c1 * g, c2 * g * g
    torch_step = (m / c1) / (np.sqrt(v / c2) + models.ADAM_EPS)
    hat_step = np.sqrt(c2) / c1 * m / (np.sqrt(v) + models.ADAM_EPS)
    assert abs(torch_step - hat_step) > 0.1 * abs(torch_step)


def _alive(spec: models.ModelSpec, X: np.ndarray, w1: np.ndarray) -> float:
    """Fraction of hidden units that fire for at least one example."""
    return float((X @ w1 > 0).any(axis=0).mean())


@pytest.mark.slow
def test_lecture_rates_train_and_a_large_rate_kills_every_relu():
    train = get_twin("numpy")
    spec = models.LECTURE_TF
    X, Y = spec.make_data()
    for optimizer in models.OPTIMIZERS:
        h = train(spec, X, Y, 8, spec.lr(optimizer), optimizer)
        assert h.losses[-1] < 0.5 * h.losses[0]
        assert _alive(spec, X, h.weights["w1"]) > 0.9
    dead = train(spec, X, Y, 15, 1e-2, "sgd")
    assert _alive(spec, X, dead.weights["w1"]) == 0.0


@pytest.mark.parametrize("spec", [models.LECTURE_TORCH, models.CAFFE_EUCLIDEAN, models.DIGITS],
                         ids=["lecture_torch", "caffe_euclidean", "digits"])
@pytest.mark.parametrize("optimizer", models.OPTIMIZERS)
def test_default_rates_train(spec, optimizer):
    X, Y = spec.make_data()
    h = get_twin("numpy")(spec, X, Y, 30, spec.lr(optimizer), optimizer)
    assert all(np.isfinite(h.losses))
    assert h.losses[-1] < 0.3 * h.losses[0]


def test_named_sizes_have_one_meaning_and_the_benchmark_rates() -> None:
    spec = models.sized("tiny")
    assert (spec.N, spec.D_in, spec.H, spec.D_out) == models.SIZES["tiny"] == (8, 16, 16, 10)
    assert spec.loss == "mean_row_sum" and spec.lr("sgd") == models.BENCH_RATES["tiny"]
    # lr * c is what moves the weights: the 'sum' loss (c = 1) gets the rate divided by N.
    assert models.sized("lecture", "sum").lr("sgd") == pytest.approx(
        models.BENCH_RATES["lecture"] / 64)
    with pytest.raises(KeyError, match="unknown size 'huge'"):
        models.sized("huge")


def test_one_stream_draws_data_then_weights_from_one_generator() -> None:
    """The data-parallel lecture's problem: X, Y, w1, w2 in that order from default_rng(seed)."""
    spec = models.TwoLayerNet(6, 5, 4, 3, "mean_row_sum", seed=7, one_stream=True)
    rng = np.random.default_rng(7)
    X, Y = rng.standard_normal((6, 5)), rng.standard_normal((6, 3))
    w1 = rng.standard_normal((5, 4)) * np.sqrt(2.0 / 5)
    w2 = rng.standard_normal((4, 3)) * np.sqrt(2.0 / 4)
    got_X, got_Y = spec.make_data()
    weights = spec.init_weights()
    for got, want in ((got_X, X), (got_Y, Y), (weights["w1"], w1), (weights["w2"], w2)):
        np.testing.assert_array_equal(got, want)
    # The default: a stream each, so the weights do not change with the data's size.
    a = models.TwoLayerNet(6, 5, 4, 3, "mean_row_sum").init_weights()
    b = models.TwoLayerNet(60, 5, 4, 3, "mean_row_sum").init_weights()
    np.testing.assert_array_equal(a["w1"], b["w1"])
