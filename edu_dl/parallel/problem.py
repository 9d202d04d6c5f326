"""The model every data-parallel run trains: the lecture's two-layer ReLU net on random data.

    h = relu(X @ w1),  y_pred = h @ w2,  loss = sum((y_pred - Y)**2) / N

The loss is the TF 1.x program's mean over the batch of each row's summed squared error. Because
it is a MEAN, the full-batch gradient equals the average of the gradients of equal shards:
grad(full) = (1/R) * sum_r grad(shard r). That identity is what data parallelism relies on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from edu_dl.models import spec as models

# The lecture's PyTorch program: N, D_in, H, D_out = 64, 1000, 100, 10.
N, D_IN, HIDDEN, D_OUT = models.SIZES["lecture"]
LR = 1e-2  # trains these shapes from the He-initialised weights below without diverging


@dataclass(frozen=True)
class TwoLayerProblem:
    """Data X (N, D_in), targets Y (N, D_out) and starting weights w1 (D_in, H), w2 (H, D_out)."""

    X: np.ndarray
    Y: np.ndarray
    w1: np.ndarray
    w2: np.ndarray

    def __post_init__(self) -> None:
        n, d_in = self.X.shape
        hidden, d_out = self.w1.shape[1], self.Y.shape[1]
        if self.Y.shape[0] != n or self.w1.shape[0] != d_in or self.w2.shape != (hidden, d_out):
            raise ValueError(
                "TwoLayerProblem: shapes do not chain: X "
                f"{self.X.shape}, w1 {self.w1.shape}, w2 {self.w2.shape}, Y {self.Y.shape}"
            )

    @property
    def batch_size(self) -> int:
        return int(self.X.shape[0])

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


def make_problem(
    n: int = N,
    d_in: int = D_IN,
    hidden: int = HIDDEN,
    d_out: int = D_OUT,
    seed: int = 0,
    dtype: type = np.float64,
) -> TwoLayerProblem:
    """Random data (as in the lecture) and He-initialised weights w ~ N(0, 2 / fan_in), one seed.

    Built by ``edu_dl.models.spec`` (the one place the two-layer problem is drawn), from one stream:
    data first, then weights, as this lecture's printed numbers were made.
    """
    spec = models.TwoLayerNet(n, d_in, hidden, d_out, "mean_row_sum", seed, one_stream=True)
    X, Y = spec.make_data(dtype)
    weights = spec.init_weights(dtype)
    return TwoLayerProblem(X, Y, weights["w1"], weights["w2"])


class TwoLayerNet(torch.nn.Module):
    """y_pred = relu(x @ w1) @ w2, weights stored (in, out) like ``edu_dl.nn.Linear``."""

    def __init__(self, w1: np.ndarray, w2: np.ndarray) -> None:
        super().__init__()
        # Copies: every worker trains its own replica of the same starting weights.
        self.w1 = torch.nn.Parameter(torch.tensor(w1))
        self.w2 = torch.nn.Parameter(torch.tensor(w2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w1) @ self.w2


def mean_row_sum_loss(y_pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """loss = mean over rows of sum_j (y_pred - y)_ij**2 = sum(diff**2) / N."""
    return ((y_pred - y) ** 2).sum(dim=1).mean()
