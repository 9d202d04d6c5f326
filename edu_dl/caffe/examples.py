"""The example files shipped with edu_dl: the lecture's two-layer net as a Caffe prototxt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES_DIR = Path(__file__).with_name("examples")
TWO_LAYER_NET = EXAMPLES_DIR / "two_layer_net.prototxt"
TWO_LAYER_SOLVER = EXAMPLES_DIR / "two_layer_solver.prototxt"
TWO_LAYER_DATA = EXAMPLES_DIR / "two_layer_data.npz"

# The lecture's sizes: batch N, input D_in, hidden H, output D_out.
N, D_IN, H, D_OUT = 64, 1000, 100, 10
SEED = 0


def two_layer_data(seed: int = SEED) -> dict[str, np.ndarray]:
    """x ~ N(0, 1) of shape (N, D_in) and y ~ N(0, 1) of shape (N, D_out), float32 as Caffe."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D_IN)).astype(np.float32)
    y = rng.standard_normal((N, D_OUT)).astype(np.float32)
    return {"x": x, "y": y}


def write_two_layer_data(path: str | Path = TWO_LAYER_DATA, seed: int = SEED) -> Path:
    """(Re)write the example's data file; the shipped one is exactly this with the default seed."""
    path = Path(path)
    arrays: dict[str, Any] = dict(two_layer_data(seed))  # numpy's savez stub wants Any
    np.savez(path, **arrays)
    return path
