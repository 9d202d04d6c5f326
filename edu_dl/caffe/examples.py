"""The example files shipped with edu_dl: the lecture's two-layer net, and a LeNet for
scikit-learn's 8x8 digits, as Caffe prototxt files with their solvers and data."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.models import spec as models

EXAMPLES_DIR = Path(__file__).with_name("examples")
TWO_LAYER_NET = EXAMPLES_DIR / "two_layer_net.prototxt"
TWO_LAYER_SOLVER = EXAMPLES_DIR / "two_layer_solver.prototxt"
TWO_LAYER_DATA = EXAMPLES_DIR / "two_layer_data.npz"
LENET_NET = EXAMPLES_DIR / "lenet_digits.prototxt"
LENET_SOLVER = EXAMPLES_DIR / "lenet_digits_solver.prototxt"
DIGITS_DATA = EXAMPLES_DIR / "digits.npz"
# `edu-dl train --example NAME`: (net, solver).
EXAMPLES = {"two_layer": (TWO_LAYER_NET, TWO_LAYER_SOLVER), "lenet": (LENET_NET, LENET_SOLVER)}

# The lecture's sizes: batch N, input D_in, hidden H, output D_out.
N, D_IN, H, D_OUT = models.SIZES["lecture"]
SEED = 0


def two_layer_data(seed: int = SEED) -> dict[str, np.ndarray]:
    """x ~ N(0, 1) of shape (N, D_in) and y ~ N(0, 1) of shape (N, D_out), float32 as Caffe:
    the data of ``models.CAFFE_EUCLIDEAN`` (the lecture's problem, Caffe's loss) with ``seed``."""
    x, y = dataclasses.replace(models.CAFFE_EUCLIDEAN, seed=seed).make_data(np.float32)
    return {"x": x, "y": y}


def write_two_layer_data(path: str | Path = TWO_LAYER_DATA, seed: int = SEED) -> Path:
    """(Re)write the example's data file; the shipped one is exactly this with the default seed."""
    path = Path(path)
    arrays: dict[str, Any] = dict(two_layer_data(seed))  # numpy's savez stub wants Any
    np.savez(path, **arrays)
    return path


def digits_data() -> dict[str, np.ndarray]:
    """scikit-learn's 1797 digits as Caffe blobs: x (N, 1, 8, 8) with pixels / 16 in [0, 1],
    y (N,) the labels (floats, as HDF5 data for Caffe holds them); float32, in sklearn's order."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images[:, None, :, :] / 16.0).astype(np.float32)
    return {"x": x, "y": digits.target.astype(np.float32)}


def write_digits_data(path: str | Path = DIGITS_DATA) -> Path:
    """(Re)write the LeNet example's data file; the shipped one is exactly this."""
    path = Path(path)
    arrays: dict[str, Any] = dict(digits_data())
    np.savez_compressed(path, **arrays)
    return path
