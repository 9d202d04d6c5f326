"""The shared models: exact shapes, losses, optimizer formulas and seeded starting points.

Every twin in ``edu_dl.twins`` trains the same network,

    h = relu(X @ w1)          X: (N, D_in),  w1: (D_in, H)
    y_pred = h @ w2           w2: (H, D_out)

from the weights that ``spec.init_weights()`` makes from ONE seed, so their losses can be compared
number by number. ``spec.problem(dtype)`` gives the data and those weights together, a
``TwoLayerProblem``: the one two-layer problem that the twins, the benchmarks, the data-parallel
lecture and the Caffe example all start from. There are no biases: the lecture's TensorFlow
program has none, and one weight list (w1, w2) keeps every twin's code and every comparison
the same.

Losses (``spec.loss``), each a sum of squared errors times a scale, or a cross-entropy:

- ``"mean_row_sum"``: the TF 1.x program's ``reduce_mean(reduce_sum(diff ** 2, axis=1))``,
  the mean over the batch of each row's summed squared error = sum(diff**2) / N;
- ``"sum"``: the PyTorch program's ``MSELoss(reduction='sum')`` = sum(diff**2);
- ``"euclidean"``: Caffe's EuclideanLoss = sum(diff**2) / (2 N);
- ``"cross_entropy"``: softmax cross-entropy of the logits y_pred against integer labels, mean
  over the batch (the digits classifier).

Optimizers (full batch, one step per call):

- SGD: w <- w - lr * g;
- Adam, PyTorch's formula with every constant explicit:
  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
  w <- w - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
  TF 1.x's AdamOptimizer and Keras add eps to sqrt(v) before the bias correction instead
  (their "epsilon hat"), so the twins of those frameworks write this formula by hand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import numpy as np

Loss = Literal["mean_row_sum", "sum", "euclidean", "cross_entropy"]
LOSSES: dict[str, str] = {
    "mean_row_sum": "mean over the batch of each row's summed squared error: sum(diff**2) / N",
    "sum": "plain sum of squared errors: sum(diff**2)",
    "euclidean": "Caffe's EuclideanLoss: sum(diff**2) / (2 N)",
    "cross_entropy": "softmax cross-entropy against integer labels, mean over the batch",
}
REGRESSION_LOSSES: tuple[str, ...] = ("mean_row_sum", "sum", "euclidean")

Optimizer = Literal["sgd", "adam"]
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
# Set explicitly in every twin: Keras's default is 1e-7, PyTorch's and TF 1.x's 1e-8.
ADAM_EPS = 1e-8

# Default rates of a TwoLayerNet: SGD's for the mean_row_sum loss (others scaled), Adam's.
SGD_RATE = 1e-2
ADAM_RATE = 1e-3

WEIGHT_NAMES: tuple[str, ...] = ("w1", "w2")


def loss_scale(loss: str, n: int) -> float:
    """The factor c in loss = c * sum(diff**2) for the squared-error losses with batch size n."""
    if loss == "mean_row_sum":
        return 1.0 / n
    if loss == "sum":
        return 1.0
    if loss == "euclidean":
        return 1.0 / (2 * n)
    raise ValueError(f"loss_scale: {loss!r} is not a squared-error loss (choose from "
                     f"{', '.join(REGRESSION_LOSSES)})")


@dataclass(frozen=True)
class ModelSpec:
    """y_pred = relu(X @ w1) @ w2, no biases; weights w ~ N(0, 2 / fan_in) (He) from ``seed``."""

    N: int
    D_in: int
    H: int
    D_out: int
    loss: Loss
    seed: int = 0
    # Learning rates per optimizer; None: SGD_RATE scaled by the loss, and ADAM_RATE.
    learning_rates: dict[str, float] | None = field(default=None, compare=False)
    # False: data and weights each from a stream of their own (the weights then do not change
    # when the data's size does). True: data, then weights, from ONE stream default_rng(seed),
    # as the data-parallel lecture's problem was drawn (its printed numbers depend on it).
    one_stream: bool = False

    def __post_init__(self) -> None:
        for name in ("N", "D_in", "H", "D_out"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{type(self).__name__}: {name} must be a positive int, "
                                 f"got {value!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"{type(self).__name__}: unknown loss {self.loss!r} (choose from "
                             f"{', '.join(LOSSES)})")

    @property
    def classifier(self) -> bool:
        return self.loss == "cross_entropy"

    def init_weights(self, dtype: Any = np.float64) -> dict[str, np.ndarray]:
        """{'w1': (D_in, H), 'w2': (H, D_out)}, drawn in float64 and then cast to ``dtype``."""
        rng = self._stream(1)
        w1 = rng.standard_normal((self.D_in, self.H)) * math.sqrt(2.0 / self.D_in)
        w2 = rng.standard_normal((self.H, self.D_out)) * math.sqrt(2.0 / self.H)
        return {"w1": w1.astype(dtype), "w2": w2.astype(dtype)}

    def make_data(self, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def problem(self, dtype: Any = np.float64) -> TwoLayerProblem:
        """This model's data and seeded starting weights, all in ``dtype`` (labels stay int)."""
        X, Y = self.make_data(dtype)
        weights = self.init_weights(dtype)
        return TwoLayerProblem(self, X, Y, weights["w1"], weights["w2"])

    def _stream(self, which: int) -> np.random.Generator:
        """The generator of the data (0) or of the weights (1)."""
        if not self.one_stream:
            return np.random.default_rng([self.seed, which])
        rng = np.random.default_rng(self.seed)
        if which == 1:  # the weights come after the data in the one stream: draw past it
            self._draw_data(rng)
        return rng

    def _draw_data(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError(f"{type(self).__name__} draws no random data")

    def lr(self, optimizer: str) -> float:
        """The learning rate that trains this model with ``optimizer``."""
        check_optimizer(optimizer)
        if self.learning_rates is not None:
            return self.learning_rates[optimizer]
        if optimizer == "adam":
            return ADAM_RATE  # Adam's step does not depend on the loss's scale
        # SGD's step scales with the loss: keep lr * c constant, c = loss_scale(loss, N).
        return SGD_RATE / (self.N * loss_scale(self.loss, self.N))


@dataclass(frozen=True)
class TwoLayerProblem:
    """THE two-layer problem: a spec, its data X (N, D_in) and Y, its starting w1 and w2.

    Made by ``spec.problem(dtype)``; every lecture, benchmark and twin that trains the two-layer
    net starts from one of these (``models.sized(size).problem(np.float32)`` for a benchmark).
    """

    spec: ModelSpec
    X: np.ndarray
    Y: np.ndarray
    w1: np.ndarray
    w2: np.ndarray

    def __post_init__(self) -> None:
        s = self.spec
        shapes = {"X": (self.X.shape, (s.N, s.D_in)), "Y": (self.Y.shape[:1], (s.N,)),
                  "w1": (self.w1.shape, (s.D_in, s.H)), "w2": (self.w2.shape, (s.H, s.D_out))}
        wrong = [f"{name} {got} (expected {want})" for name, (got, want) in shapes.items()
                 if got != want]
        if wrong:
            raise ValueError(f"TwoLayerProblem: shapes do not fit the spec: {', '.join(wrong)}")

    @property
    def batch_size(self) -> int:
        return int(self.X.shape[0])

    @property
    def weights(self) -> dict[str, np.ndarray]:
        """{'w1': w1, 'w2': w2}: the starting weights as a twin's ``weights=`` takes them."""
        return {"w1": self.w1, "w2": self.w2}

    def shard(self, rank: int, world_size: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows [rank * N/R, (rank + 1) * N/R) of X and Y: worker ``rank``'s equal share."""
        n = self.batch_size
        if n % world_size:
            # Unequal shards would weight rows unequally: mean of means != global mean.
            raise ValueError(
                f"batch of {n} rows does not split evenly over {world_size} workers; "
                "choose a batch size divisible by world_size"
            )
        rows = n // world_size
        return self.X[rank * rows : (rank + 1) * rows], self.Y[rank * rows : (rank + 1) * rows]


@dataclass(frozen=True)
class TwoLayerNet(ModelSpec):
    """The lecture's net on random data: X ~ N(0, 1) of (N, D_in), Y ~ N(0, 1) of (N, D_out)."""

    def make_data(self, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
        if self.classifier:
            raise ValueError("TwoLayerNet: random data is for squared-error losses; use "
                             "DigitsClassifier for cross_entropy")
        X, Y = self._draw_data(self._stream(0))
        return X.astype(dtype), Y.astype(dtype)

    def _draw_data(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return rng.standard_normal((self.N, self.D_in)), rng.standard_normal((self.N, self.D_out))


@dataclass(frozen=True)
class DigitsClassifier(ModelSpec):
    """Softmax classifier of scikit-learn's 8x8 digits (bundled, no download): pixels / 16.

    N samples are drawn without replacement (seeded) from the 1797; labels are int64 in 0..9.
    """

    N: int = 512
    D_in: int = 64
    H: int = 32
    D_out: int = 10
    loss: Loss = "cross_entropy"
    learning_rates: dict[str, float] | None = field(
        default_factory=lambda: {"sgd": 0.5, "adam": 1e-2}, compare=False
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.D_in, self.D_out, self.loss) != (64, 10, "cross_entropy"):
            raise ValueError("DigitsClassifier: the digits have D_in=64 pixels and D_out=10 "
                             "classes, with loss='cross_entropy'")
        if self.N > 1797:
            raise ValueError(f"DigitsClassifier: N={self.N} but the digits have 1797 samples")

    def make_data(self, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
        from sklearn.datasets import load_digits

        digits = load_digits()
        rows = np.random.default_rng([self.seed, 0]).permutation(len(digits.target))[: self.N]
        X = (digits.data[rows] / 16.0).astype(dtype)
        return X, digits.target[rows].astype(np.int64)


# The lecture's two programs, at their sizes, and Caffe's loss on the PyTorch program's net.
# Rates tried, not copied: the programs' own (1e-5, 1e-4) were for unscaled randn weights; with
# He-scaled weights an SGD rate of 1e-2 sends every ReLU of LECTURE_TF to zero in a few steps
# (D_out = 1000 makes the gradient large), while these train (tests/test_models.py checks both).
LECTURE_TF = TwoLayerNet(64, 1000, 100, 1000, "mean_row_sum",
                         learning_rates={"sgd": 1e-3, "adam": 1e-3})
LECTURE_TORCH = TwoLayerNet(64, 1000, 100, 10, "sum", learning_rates={"sgd": 1e-4, "adam": 1e-3})
CAFFE_EUCLIDEAN = TwoLayerNet(64, 1000, 100, 10, "euclidean",
                              learning_rates={"sgd": 1e-1, "adam": 1e-3})
DIGITS = DigitsClassifier()

# Named sizes (N, D_in, H, D_out) of the two-layer net, one meaning each for every benchmark.
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (8, 16, 16, 10),  # Python overhead per op is nearly all of a step
    "lecture": (64, 1000, 100, 10),  # the lecture's PyTorch program
    "lecture_tf": (64, 1000, 100, 1000),  # the lecture's TF 1.x program
    "large": (512, 4096, 1024, 10),
    "xl": (4096, 8192, 4096, 1000),  # a GPU's size: one float32 step is ~0.4 TFLOP
}
# SGD rates of the timed runs: the weights are put back before every timed batch, so a rate
# need only keep one batch (thousands of steps at tiny) from blowing up.
BENCH_RATES: dict[str, float] = {
    "tiny": 1e-3, "lecture": 1e-4, "lecture_tf": 1e-4, "large": 1e-5, "xl": 1e-5,
}


def sized(size: str, loss: Loss = "mean_row_sum", seed: int = 0) -> TwoLayerNet:
    """The two-layer net of a named size, with the benchmarks' SGD rate for that size."""
    if size not in SIZES:
        raise KeyError(f"unknown size {size!r} (choose from {', '.join(SIZES)})")
    n, d_in, hidden, d_out = SIZES[size]
    rate = BENCH_RATES[size] / (n * loss_scale(loss, n))  # lr * c is what moves the weights
    return TwoLayerNet(n, d_in, hidden, d_out, loss, seed,
                       learning_rates={"sgd": rate, "adam": ADAM_RATE})


def check_optimizer(optimizer: str) -> str:
    """``optimizer`` itself if it is one of OPTIMIZERS; else ValueError naming the choices."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}: choose from {', '.join(OPTIMIZERS)}")
    return optimizer


# --------------------------------------------------------------------------- reference formulas
# Written once over a namespace ``xp`` (NumPy, CuPy, or even the torch module): the NumPy/CuPy
# twin uses them, and so do twins whose framework only computes the gradients.


def forward(xp: ModuleType, X: Any, w1: Any, w2: Any) -> tuple[Any, Any]:
    """(h, y_pred) with h = X @ w1 (before the ReLU) and y_pred = relu(h) @ w2."""
    h = X @ w1
    return h, xp.maximum(h, 0) @ w2


def loss_and_grad(xp: ModuleType, y_pred: Any, Y: Any, loss: str) -> tuple[Any, Any]:
    """(loss, d loss / d y_pred) for any of the four losses."""
    n = y_pred.shape[0]
    if loss == "cross_entropy":
        shifted = y_pred - y_pred.max(axis=1, keepdims=True)
        log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        rows = xp.arange(n)
        value = -log_probs[rows, Y].mean()
        grad = xp.exp(log_probs)
        grad[rows, Y] -= 1  # softmax - onehot
        return value, grad / n
    c = loss_scale(loss, n)
    diff = y_pred - Y
    return c * (diff * diff).sum(), (2 * c) * diff


@dataclass
class AdamState:
    """Adam's moving averages m, v (one per parameter) and the step count t."""

    m: list[Any]
    v: list[Any]
    t: int = 0


def adam_init(xp: ModuleType, params: list[Any]) -> AdamState:
    """Adam's starting state: m and v zeros shaped like each parameter, t = 0."""
    return AdamState([xp.zeros_like(p) for p in params], [xp.zeros_like(p) for p in params])


def sgd_update(params: list[Any], grads: list[Any], lr: float) -> None:
    """In place: w <- w - lr * g."""
    for p, g in zip(params, grads):
        p -= lr * g


def adam_update(xp: ModuleType, params: list[Any], grads: list[Any], state: AdamState,
                lr: float, beta1: float = ADAM_BETA1, beta2: float = ADAM_BETA2,
                eps: float = ADAM_EPS) -> None:
    """In place, PyTorch's formula: w <- w - lr * m_hat / (sqrt(v_hat) + eps)."""
    state.t += 1
    c1, c2 = 1 - beta1**state.t, 1 - beta2**state.t
    for i, (p, g) in enumerate(zip(params, grads)):
        state.m[i] = beta1 * state.m[i] + (1 - beta1) * g
        state.v[i] = beta2 * state.v[i] + (1 - beta2) * (g * g)
        p -= lr * (state.m[i] / c1) / (xp.sqrt(state.v[i] / c2) + eps)
