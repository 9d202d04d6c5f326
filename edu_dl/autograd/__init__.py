"""Autograd: one set of ops (ops.py), an eager engine (tensor.py), a static one (graph.py)."""

from . import ops
from .tensor import Tensor, enable_grad, is_grad_enabled, no_grad, ones, tensor, zeros

__all__ = ["Tensor", "enable_grad", "is_grad_enabled", "no_grad", "ones", "ops", "tensor", "zeros"]
