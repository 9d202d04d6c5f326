"""The benchmarks' sizes: every benchmark trains ``models.sized(size).problem(np.float32)``.

The two-layer net y_pred = relu(x @ w1) @ w2 with the lecture's loss
mean(sum((y_pred - y)**2, axis=1)), float32, at the named sizes of ``models.SIZES``: the engine,
the transfer benchmark and the twins start from the same numbers for the same size.
"""

from __future__ import annotations

import numpy as np

from edu_dl.models import spec as models

SIZES = models.SIZES
CPU_SIZES: tuple[str, ...] = ("tiny", "lecture", "lecture_tf", "large")  # xl: ~1 s a CPU step
GPU_SIZES: tuple[str, ...] = tuple(SIZES)


def make_problem(size: str) -> models.TwoLayerProblem:
    """The seeded float32 data and initial weights of ``size`` (its SGD rate: ``spec.lr``)."""
    return models.sized(size).problem(np.float32)
