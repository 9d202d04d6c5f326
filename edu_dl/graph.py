"""The static engine (define-then-run, like TensorFlow 1.x), with TensorFlow's names.

Phase 1 builds a graph of Nodes (``autograd/nodes.py``): ``placeholder``, ``Variable``,
``constant`` and
the ops of ``autograd/ops.py`` (the very classes the eager engine runs). Phase 2 runs it:
``Session.run(fetches, feed_dict)`` (``session.py``) plans the evaluation once per set of fetches
(``plan.py``) and runs the plan compiled to Python (``codegen.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from edu_dl.autograd import ops
from edu_dl.autograd.nodes import (
    Assign,
    Constant,
    Gradient,
    Graph,
    Group,
    Node,
    OpNode,
    Placeholder,
    Variable,
    constant,
    get_default_graph,
    known_shape,
    reaching,
    reset_default_graph,
)
from edu_dl.autograd.plan import Forward, Plan, Sweep
from edu_dl.autograd.session import Session

__all__ = [
    "AdamOptimizer", "Assign", "Constant", "Forward", "Gradient", "GradientDescentOptimizer",
    "Graph", "Group", "Node", "OpNode", "Optimizer", "Placeholder", "Plan", "Session", "Sweep",
    "Variable", "add", "assign", "bool_", "broadcast_to", "constant", "divide", "exp", "float16",
    "float32", "float64", "get_default_graph", "global_variables_initializer", "gradients",
    "group", "int32", "int64", "log", "matmul", "maximum", "multiply", "negative", "nn",
    "placeholder", "random_normal", "reduce_max", "reduce_mean", "reduce_sum",
    "reset_default_graph", "reshape", "sigmoid", "sqrt", "square", "subtract", "tanh", "train",
    "transpose", "variables_initializer",
]

float16, float32, float64 = np.float16, np.float32, np.float64
int32, int64, bool_ = np.int32, np.int64, np.bool_


# ---------------------------------------------------------------------- building nodes


def placeholder(dtype: Any, shape: Sequence[int | None] | None = None,
                name: str = "Placeholder") -> Placeholder:
    """An input slot filled by ``feed_dict`` at every run; None in ``shape`` means any size."""
    return Placeholder(name, dtype=dtype, shape=None if shape is None else tuple(shape))


def group(*nodes: Node, name: str = "group") -> Group:
    """A node that runs ``nodes`` and has no value (fetching it gives None)."""
    return Group(name, tuple(nodes))


def global_variables_initializer() -> Group:
    """Assign every Variable of the default graph its initial value."""
    graph = get_default_graph()
    return group(*(v.initializer for v in graph.variables), name="init")


def variables_initializer(var_list: Iterable[Variable]) -> Group:
    """A node that assigns each Variable of ``var_list`` its initial value."""
    return group(*(v.initializer for v in var_list), name="init")


def assign(ref: Node, value: Any) -> Assign:
    """A node that, when run, stores ``value`` in the Variable ``ref``; TypeError when ``ref`` is
    not a Variable, ValueError when the shapes differ."""
    return ref.assign(value)


def gradients(ys: Node | Sequence[Node], xs: Node | Sequence[Node],
              grad_ys: Node | Sequence[Node] | None = None) -> list[Node | None]:
    """d(sum of ys)/dx for each x, as nodes; None for an x that ys do not depend on."""
    ys_t = (ys,) if isinstance(ys, Node) else tuple(ys)
    xs_t = (xs,) if isinstance(xs, Node) else tuple(xs)
    if grad_ys is None:
        gys: tuple[Node, ...] = ()
    else:
        gys = (grad_ys,) if isinstance(grad_ys, Node) else tuple(grad_ys)
        if len(gys) != len(ys_t):
            raise ValueError(f"gradients: got {len(ys_t)} ys but {len(gys)} grad_ys")
    for n in ys_t + xs_t:
        if not isinstance(n, Node):
            raise TypeError(f"gradients: expected graph nodes, got {type(n).__name__}")
    reach = set(reaching(ys_t, set(xs_t)))
    return [Gradient(ys_t, x, gys) if x in reach else None for x in xs_t]



# ---------------------------------------------------------------------- functions, TF names


def matmul(a: Any, b: Any) -> Any:
    """``tf.matmul``: a @ b, with NumPy's rules for 1-D and batched operands."""
    return ops.matmul(a, b)


def maximum(x: Any, y: Any) -> Any:
    """``tf.maximum``: max(x, y) elementwise, broadcast as NumPy does."""
    return ops.maximum(x, y)


def reduce_sum(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """``tf.reduce_sum``: the sum of x over ``axis`` (every axis when None)."""
    return ops.sum(x, axis=axis, keepdims=keepdims)


def reduce_mean(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """``tf.reduce_mean``: the mean of x over ``axis`` (every axis when None)."""
    return ops.mean(x, axis=axis, keepdims=keepdims)


def reduce_max(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    """``tf.reduce_max``: the max of x over ``axis`` (every axis when None)."""
    return ops.max(x, axis=axis, keepdims=keepdims)


def square(x: Any) -> Any:
    """``tf.square``: x ** 2 elementwise."""
    return ops.pow(x, 2)


exp, log, sqrt, tanh, sigmoid = ops.exp, ops.log, ops.sqrt, ops.tanh, ops.sigmoid
reshape, transpose, broadcast_to = ops.reshape, ops.transpose, ops.broadcast_to
add, subtract, multiply, divide, negative = ops.add, ops.sub, ops.mul, ops.div, ops.neg


def random_normal(shape: Sequence[int], mean: float = 0.0, stddev: float = 1.0,
                  dtype: Any = float32, seed: int | None = None) -> Node:
    """Normal samples, drawn once at graph-building time (use for initial values)."""
    rng = np.random.default_rng(seed)
    return constant(rng.normal(mean, stddev, tuple(shape)), dtype=dtype)


def _sparse_softmax_cross_entropy_with_logits(*, labels: Any, logits: Any) -> Any:
    """Per-row cross-entropy, as tf.nn.sparse_softmax_cross_entropy_with_logits."""
    return ops.softmax_cross_entropy(logits, labels, reduction="none")


def _conv2d(input: Any, filters: Any, strides: Any = 1, padding: Any = 0) -> Any:
    """tf.nn.conv2d's names on edu_dl's layout: ``input`` NCHW (TensorFlow's
    ``data_format="NCHW"``), ``filters`` (out, in, kh, kw) as in PyTorch and Caffe, ``strides``
    and ``padding`` integers (or (h, w) pairs) rather than TensorFlow's 4-lists and 'SAME'."""
    return ops.conv2d(input, filters, stride=strides, padding=padding)


def _max_pool2d(input: Any, ksize: Any, strides: Any = None, padding: Any = 0) -> Any:
    """tf.nn.max_pool2d's names on NCHW ``input``; ``strides`` defaults to ``ksize``."""
    return ops.max_pool2d(input, ksize, stride=strides, padding=padding)


nn = SimpleNamespace(relu=ops.relu, sigmoid=ops.sigmoid, tanh=ops.tanh,
                     conv2d=_conv2d, max_pool2d=_max_pool2d,
                     sparse_softmax_cross_entropy_with_logits=(
                         _sparse_softmax_cross_entropy_with_logits))


# ---------------------------------------------------------------------- optimizers


class Optimizer:
    """Builds the update nodes for ``minimize(loss)``; the Session runs them."""

    def __init__(self, learning_rate: float) -> None:
        if learning_rate <= 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be positive")
        self.learning_rate = learning_rate

    def minimize(self, loss: Node, var_list: Sequence[Variable] | None = None) -> Group:
        if var_list is None:
            reach = set(reaching([loss], set(loss.graph.variables)))
            var_list = [v for v in loss.graph.variables if v in reach and v.trainable]
        if not var_list:
            raise ValueError(f"{type(self).__name__}.minimize: '{loss.name}' depends on no "
                             f"trainable Variable")
        grads = gradients(loss, var_list)
        with loss.graph.as_default():
            updates = [self._update(v, g) for v, g in zip(var_list, grads) if g is not None]
            return group(*itertools.chain.from_iterable(updates),
                         name=type(self).__name__.removesuffix("Optimizer"))

    def _update(self, var: Variable, grad: Node) -> list[Assign]:
        raise NotImplementedError


class GradientDescentOptimizer(Optimizer):
    """var <- var - learning_rate * grad"""

    def _update(self, var: Variable, grad: Node) -> list[Assign]:
        return [var.assign_sub(self.learning_rate * grad)]


class AdamOptimizer(Optimizer):
    """PyTorch's Adam formula: var -= lr * m_hat / (sqrt(v_hat) + epsilon).

    (TensorFlow 1.x puts epsilon inside the bias correction instead; the course pins one formula
    so every framework's Adam gives the same numbers.)
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8) -> None:
        super().__init__(learning_rate)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def _update(self, var: Variable, grad: Node) -> list[Assign]:
        b1, b2 = self.beta1, self.beta2
        if var.shape is None or None in var.shape:
            raise ValueError(f"AdamOptimizer: Variable '{var.name}' needs a fully known shape")
        zeros = np.zeros(known_shape(var.shape), dtype=var.dtype)
        m = Variable(zeros, name=f"{var.name}/Adam_m", trainable=False)
        v = Variable(zeros, name=f"{var.name}/Adam_v", trainable=False)
        b1_power = Variable(np.ones((), dtype=var.dtype), name=f"{var.name}/beta1_power",
                            trainable=False)
        b2_power = Variable(np.ones((), dtype=var.dtype), name=f"{var.name}/beta2_power",
                            trainable=False)
        b1_next, b2_next = b1_power * b1, b2_power * b2
        m_next = b1 * m + (1 - b1) * grad
        v_next = b2 * v + (1 - b2) * (grad * grad)
        m_hat = m_next / (1 - b1_next)
        v_hat = v_next / (1 - b2_next)
        step = self.learning_rate * m_hat / (sqrt(v_hat) + self.epsilon)
        return [m.assign(m_next), v.assign(v_next), b1_power.assign(b1_next),
                b2_power.assign(b2_next), var.assign(var - step)]


train = SimpleNamespace(GradientDescentOptimizer=GradientDescentOptimizer,
                        AdamOptimizer=AdamOptimizer)
