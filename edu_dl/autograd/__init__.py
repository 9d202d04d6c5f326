"""Autograd: one set of ops (ops.py), one core (core.py), an eager engine (tensor.py) and a
static one (graph.py, run by session.py through plan.py and codegen.py)."""

from edu_dl.autograd import ops
from edu_dl.autograd.tensor import (
    Tensor,
    enable_grad,
    is_grad_enabled,
    no_grad,
    ones,
    set_grad_enabled,
    tensor,
    zeros,
)

__all__ = ["Tensor", "enable_grad", "is_grad_enabled", "no_grad", "ones", "ops",
           "set_grad_enabled", "tensor", "zeros"]
