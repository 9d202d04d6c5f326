"""The benchmarks' problems, all drawn by ``edu_dl.models.spec``: one meaning of every size name.

The two-layer net y_pred = relu(x @ w1) @ w2 with the lecture's loss
mean(sum((y_pred - y)**2, axis=1)), float32, at the named sizes of ``models.SIZES``. Data and
He-initialised weights come from ``models.sized(size)``, so the engine, the transfer benchmark
and the twins start from the same numbers for the same size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edu_dl.models import spec as models

SIZES = models.SIZES
CPU_SIZES: tuple[str, ...] = ("tiny", "lecture", "lecture_tf", "large")  # xl: ~1 s a CPU step
GPU_SIZES: tuple[str, ...] = tuple(SIZES)


@dataclass(frozen=True)
class Problem:
    """Data and initial weights of one size, identical in every worker process (float32)."""

    size: str
    spec: models.TwoLayerNet
    x: np.ndarray
    y: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    lr: float


def make_problem(size: str) -> Problem:
    """The seeded data and initial weights of ``size``, from ``models.sized``."""
    spec = models.sized(size)
    x, y = spec.make_data(np.float32)
    weights = spec.init_weights(np.float32)
    return Problem(size, spec, x, y, weights["w1"], weights["w2"], spec.lr("sgd"))
