"""Twins: the same model (``edu_dl.models.spec``) trained in every framework the lecture compares.

Every twin is a small hand-written module with the same entry point::

    train(spec, X, Y, steps, lr, optimizer='sgd'|'adam', device='cpu'|'gpu',
          dtype=np.float64, weights=None) -> History

Each starts from ``spec.init_weights(dtype)`` (or ``weights``), takes ``steps`` full-batch steps
and records the loss before each update, the seconds of each step, and the final weights as NumPy.
``History.native`` holds the framework's own object (a Keras ``History``, the ``tf.function``, the
``tf.Graph``) and ``History.info`` the facts the tests use to prove that the twin is the real thing.

The frameworks are imported only inside their twin, so importing this package stays light:
``get_twin('keras')`` imports TensorFlow, ``get_twin('numpy')`` does not.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from edu_dl.backend import DEVICES, DeviceError
from edu_dl.models.spec import ModelSpec, check_optimizer

# name -> (module in this package, function, title): the order of the lecture.
TWINS: dict[str, tuple[str, str, str]] = {
    "numpy": ("numpy_twin", "train", "NumPy, hand-written gradients (CuPy with device='gpu')"),
    "edu_eager": ("edu_eager", "train", "edu_dl eager: Tensors, nn.Sequential, optim"),
    "edu_static": ("edu_static", "train", "edu_dl static graph: Session, optimizer.minimize"),
    "torch_raw": ("torch_raw", "train", "PyTorch: raw tensors and autograd"),
    "torch_nn": ("torch_nn", "train", "PyTorch: nn.Sequential and torch.optim"),
    "torch_custom": ("torch_custom", "train",
                     "PyTorch: custom autograd.Function and nn.Module"),
    "tf1_feed": ("tf1", "train_feed", "TF 1.x graph: weights fed through placeholders"),
    "tf1": ("tf1", "train", "TF 1.x graph: Variables updated by minimize / assign"),
    "tf2_eager": ("tf2_eager", "train", "TF 2 eager: GradientTape"),
    "tf_function": ("tf_function", "train", "TF 2: tf.function"),
    "tf_function_xla": ("tf_function", "train_xla", "TF 2: tf.function(jit_compile=True), XLA"),
    "keras": ("keras_twin", "train", "Keras: Sequential, compile, fit"),
}


@dataclass
class History:
    """What one training run gives back: per-step losses and seconds, and the final weights."""

    twin: str
    losses: list[float]
    seconds: list[float]
    weights: dict[str, np.ndarray]
    native: Any = None
    info: dict[str, Any] = field(default_factory=dict)


class Train(Protocol):
    def __call__(self, spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
                 optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
                 weights: dict[str, np.ndarray] | None = None) -> History: ...


def get_twin(name: str) -> Train:
    """The ``train`` function of twin ``name`` (imports its framework)."""
    if name not in TWINS:
        raise ValueError(f"unknown twin {name!r}: choose from {', '.join(TWINS)}")
    module, function, _ = TWINS[name]
    train: Train = getattr(importlib.import_module(f"{__name__}.{module}"), function)
    return train


def prepare(twin: str, spec: ModelSpec, X: Any, Y: Any, steps: int, optimizer: str,
            device: str, dtype: Any, weights: dict[str, np.ndarray] | None
            ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Check every argument once, for all twins; returns (X, Y, initial weights) as NumPy."""
    check_optimizer(optimizer)
    if device not in DEVICES:  # whether this framework sees a GPU is the twin's to check
        raise ValueError(f"{twin}: unknown device {device!r}: choose 'cpu' or 'gpu'")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"{twin}: dtype must be float32 or float64, got {dtype}")
    if not (isinstance(steps, int) and steps >= 1):
        raise ValueError(f"{twin}: steps must be a positive int, got {steps!r}")
    X = np.asarray(X, dtype=dtype)
    Y = np.asarray(Y)
    if X.shape != (spec.N, spec.D_in):
        raise ValueError(f"{twin}: X has shape {X.shape}, the model expects "
                         f"(N, D_in) = {(spec.N, spec.D_in)}")
    expected = (spec.N,) if spec.classifier else (spec.N, spec.D_out)
    if Y.shape != expected:
        raise ValueError(f"{twin}: Y has shape {Y.shape}, the model's loss {spec.loss!r} "
                         f"expects {expected}")
    Y = Y.astype(np.int64) if spec.classifier else Y.astype(dtype)
    init = spec.init_weights(dtype) if weights is None else {
        k: np.array(v, dtype=dtype) for k, v in weights.items()}
    shapes = {"w1": (spec.D_in, spec.H), "w2": (spec.H, spec.D_out)}
    got = {k: v.shape for k, v in init.items()}
    if got != shapes:
        raise ValueError(f"{twin}: weights have shapes {got}, the model expects {shapes}")
    return X, Y, init


class StepTimer:
    """Seconds of each step: call ``start()`` before and ``stop()`` after the step's last sync."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        self.seconds.append(time.perf_counter() - self._t0)


def torch_device(device: str) -> str:
    """'cpu' or 'cuda' for PyTorch; 'gpu' without a CUDA device PyTorch can use is an error."""
    import torch

    if device == "gpu":
        if not torch.cuda.is_available():
            raise DeviceError("No GPU is available to PyTorch (torch.cuda.is_available() is "
                              "False); run with device='cpu'.")
        return "cuda"
    return "cpu"


def tf_device(device: str) -> str:
    """'/CPU:0' or '/GPU:0' for TensorFlow; 'gpu' without a GPU TensorFlow sees is an error."""
    import tensorflow as tf

    if device == "gpu":
        if not tf.config.list_physical_devices("GPU"):
            raise DeviceError("No GPU is visible to TensorFlow "
                              "(tf.config.list_physical_devices('GPU') is empty); run with "
                              "device='cpu'.")
        return "/GPU:0"
    return "/CPU:0"


__all__ = ["TWINS", "History", "StepTimer", "Train", "get_twin", "prepare", "tf_device",
           "torch_device"]
