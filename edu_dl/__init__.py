"""edu_dl: computational graphs, autograd and GPUs in the smallest honest code.

- ``edu_dl.tensor`` / ``edu_dl.Tensor``: the eager engine (define-by-run, like PyTorch)
- ``edu_dl.graph``: the static engine (define-then-run, like TensorFlow 1.x)
- ``edu_dl.nn`` and ``edu_dl.optim``: modules and optimizers on top of the eager engine
- ``edu_dl.backend``: NumPy on the CPU or CuPy on the GPU, through one namespace ``xp``
"""

from edu_dl import backend, graph, nn, optim
from edu_dl.autograd import ops
from edu_dl.autograd.gradcheck import gradcheck, rel_error
from edu_dl.autograd.tensor import (
    Tensor,
    enable_grad,
    is_grad_enabled,
    no_grad,
    ones,
    tensor,
    zeros,
)
from edu_dl.backend import get_xp, gpu_status, synchronize, to_device, to_numpy

__version__ = "0.1.0"

__all__ = [
    "Tensor",
    "backend",
    "enable_grad",
    "get_xp",
    "gpu_status",
    "gradcheck",
    "graph",
    "is_grad_enabled",
    "nn",
    "no_grad",
    "ones",
    "ops",
    "optim",
    "rel_error",
    "synchronize",
    "tensor",
    "to_device",
    "to_numpy",
    "zeros",
]
