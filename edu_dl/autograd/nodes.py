"""The static graph's data: a Graph of typed Nodes, and how an op applied to nodes makes one.

``graph.py`` gives these TensorFlow 1.x's names; ``plan.py`` and ``session.py`` run them.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.autograd import core, ops
from edu_dl.autograd.operators import Operators
from edu_dl.autograd.ops import Op

Shape = tuple[int | None, ...]

# Build-time shape checks run the op on zeros; skip them for inputs larger than this.
_PROBE_MAX_ELEMENTS = 1_000_000


class Graph:
    """A container of Nodes. ``with graph.as_default():`` makes new nodes land in it."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.variables: list[Variable] = []
        self._name_counts: dict[str, itertools.count[int]] = {}

    def unique_name(self, base: str) -> str:
        n = next(self._name_counts.setdefault(base, itertools.count()))
        return base if n == 0 else f"{base}_{n}"

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        _GRAPH_STACK.append(self)
        try:
            yield self
        finally:
            _GRAPH_STACK.pop()

    def __repr__(self) -> str:
        return f"<Graph with {len(self.nodes)} nodes, {len(self.variables)} variables>"


_GRAPH_STACK: list[Graph] = [Graph()]


def get_default_graph() -> Graph:
    """The Graph new nodes go to: the innermost ``graph.as_default()``, else the global one."""
    return _GRAPH_STACK[-1]


def reset_default_graph() -> None:
    """Start a fresh default graph (re-running notebook cells otherwise keeps adding nodes)."""
    if len(_GRAPH_STACK) > 1:
        raise RuntimeError("reset_default_graph() cannot run inside a `with graph.as_default()`")
    _GRAPH_STACK[0] = Graph()


# ---------------------------------------------------------------------- the kinds of node


class Node(Operators):
    """A symbolic value in a Graph: a name, its inputs, and (when known) its dtype and shape.

    One subclass per kind: Placeholder, Constant, Variable, OpNode, Gradient, Assign, Group.
    Operators and methods (``+``, ``@``, ``exp``, ``sum``...) come from ``Operators``.
    """

    def __init__(self, name: str, inputs: Sequence[Node] = (), dtype: Any = None,
                 shape: Shape | None = None, graph: Graph | None = None) -> None:
        self.graph = graph or get_default_graph()
        self.name = self.graph.unique_name(name)
        self.inputs = tuple(inputs)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.shape = shape
        for x in self.inputs:
            if x.graph is not self.graph:
                raise ValueError(f"{self.name}: input '{x.name}' belongs to another Graph")
        self.graph.nodes.append(self)

    @property
    def parents(self) -> tuple[Node, ...]:
        """The nodes whose values this one reads when it runs."""
        return self.inputs

    def __repr__(self) -> str:
        dtype = "?" if self.dtype is None else self.dtype.name
        shape = "?" if self.shape is None else shape_str(self.shape)
        return f"<{self._what()} '{self.name}' shape={shape} dtype={dtype}>"

    def _what(self) -> str:
        return type(self).__name__

    def assign(self, value: Any, name: str = "Assign", mode: str = "set") -> Assign:
        raise TypeError(f"assign: '{self.name}' is a {type(self).__name__}, not a Variable")

    # An op applied to a Node builds a node (see Op.apply): each op serves both engines.
    @staticmethod
    def _apply_op(op_cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> OpNode:
        return _op_node(op_cls, inputs, attrs)


class Placeholder(Node):
    """An input slot, filled by ``feed_dict`` at every run."""


class Constant(Node):
    """A fixed value, stored in the graph."""

    def __init__(self, value: Any, name: str) -> None:
        super().__init__(name, dtype=value.dtype, shape=value.shape)
        self.value = value


class OpNode(Node):
    """The output of an op of ``ops.py`` applied to the input nodes."""

    def __init__(self, op: type[Op], inputs: Sequence[Node], attrs: dict[str, Any],
                 dtype: Any, shape: Shape | None, graph: Graph) -> None:
        name = op.__name__ if op is not ops.GetItem else "strided_slice"
        super().__init__(name, inputs, dtype=dtype, shape=shape, graph=graph)
        self.op, self.attrs = op, attrs

    def make_op(self) -> Op:
        """A fresh instance of the op, to run (each Session keeps one per node)."""
        return self.op(**self.attrs)

    def _what(self) -> str:
        return self.op.__name__


class Variable(Node):
    """A value that lives in the Session across runs; set by the initializer, changed by assign.

    As ``tf.Variable(initial_value)``: ``initial_value`` is an array, a number or a node.
    """

    def __init__(self, initial_value: Any, dtype: Any = None, name: str = "Variable",
                 trainable: bool = True) -> None:
        init = initial_value if isinstance(initial_value, Node) else constant(initial_value,
                                                                              dtype)
        super().__init__(name, dtype=dtype or init.dtype, shape=init.shape, graph=init.graph)
        self.initial_value, self.trainable = init, trainable
        self.graph.variables.append(self)

    def assign(self, value: Any, name: str = "Assign", mode: str = "set") -> Assign:
        """A node that, when run, stores ``value`` in this Variable (committed after the run).

        ``mode`` 'sub' or 'add' updates the stored array in place by ``value`` instead, as
        TensorFlow's AssignSub and ApplyGradientDescent kernels do: no new array each step.
        """
        node = _as_node(value, like=self)
        if self.shape is not None and node.shape is not None and not shapes_compatible(
            node.shape, self.shape
        ):
            raise ValueError(f"assign: Variable '{self.name}' has shape {shape_str(self.shape)}"
                             f" but the value has shape {shape_str(node.shape)}")
        return Assign(self, node, mode, name)

    def assign_sub(self, delta: Any) -> Assign:
        return self.assign(delta, name="AssignSub", mode="sub")

    def assign_add(self, delta: Any) -> Assign:
        return self.assign(delta, name="AssignAdd", mode="add")

    @property
    def initializer(self) -> Assign:
        return self.assign(self.initial_value, name=f"{self.name}/Assign")


class Assign(Node):
    """Stores ``value`` in ``variable`` ('set'), or subtracts or adds it ('sub', 'add')."""

    def __init__(self, variable: Variable, value: Node, mode: str, name: str) -> None:
        super().__init__(name, (variable, value), dtype=variable.dtype, shape=variable.shape,
                         graph=variable.graph)
        self.variable, self.value, self.mode = variable, value, mode

    @property
    def parents(self) -> tuple[Node, ...]:
        # It reads its value, not the Variable it overwrites (which may be unset).
        return (self.value,)


class Gradient(Node):
    """d(sum of ys)/dx, filled by a backward sweep; ``grad_ys`` seed it (ones if empty)."""

    def __init__(self, ys: tuple[Node, ...], x: Node, grad_ys: tuple[Node, ...]) -> None:
        super().__init__(f"gradients/{x.name}_grad", ys + grad_ys, dtype=x.dtype, shape=x.shape,
                         graph=x.graph)
        self.ys, self.x, self.grad_ys = ys, x, grad_ys


class Group(Node):
    """Runs its inputs and has no value (fetching it gives None)."""


# ---------------------------------------------------------------------- building nodes


def shape_str(shape: Sequence[int | None]) -> str:
    """A shape as Python prints a tuple, None for an unknown size: ``(None, 3)``, ``(5,)``."""
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + (
        ",)" if len(shape) == 1 else ")")


def shapes_compatible(actual: Sequence[int | None], expected: Sequence[int | None]) -> bool:
    """Same rank, and every size equal where both are known (None matches any size)."""
    return len(actual) == len(expected) and all(
        e is None or a is None or a == e for a, e in zip(actual, expected)
    )


def _as_node(x: Any, like: Node | None = None) -> Node:
    """Nodes pass through; numbers and arrays become constants, by core's operand rule."""
    if isinstance(x, Node):
        return x
    return constant(core.operand(x, None if like is None else like.dtype, np))


def _op_node(op_cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> OpNode:
    like = next(x for x in inputs if isinstance(x, Node))
    with like.graph.as_default():
        nodes = tuple(_as_node(x, like) for x in inputs)
    probe = op_cls(**attrs)  # validates the attributes now, not at run time
    shape, dtype = _infer(probe, nodes)
    return OpNode(op_cls, nodes, attrs, dtype=dtype, shape=shape, graph=like.graph)


def known_shape(shape: Sequence[int | None] | None) -> tuple[int, ...]:
    """A shape whose every dimension is known (callers check first)."""
    assert shape is not None and None not in shape
    return tuple(d for d in shape if d is not None)


def _infer(op: Op, nodes: tuple[Node, ...]) -> tuple[Shape | None, Any]:
    """The output's shape and dtype, found by running the op on zeros, as TensorFlow checks
    shapes while building. Unknown (None) dimensions leave the shape unknown; the dtype is then
    found on stand-ins of size 1 (NumPy 2's dtypes do not depend on shapes)."""
    shapes = [n.shape for n in nodes]
    known = all(s is not None and None not in s for s in shapes)
    if known and sum(int(np.prod(known_shape(s))) for s in shapes) <= _PROBE_MAX_ELEMENTS:
        out = _probe(op, [known_shape(s) for s in shapes], nodes, name_errors=True)
        return tuple(int(d) for d in np.shape(out)), out.dtype
    ones = [(1,) * len(s) if s is not None else () for s in shapes]
    try:
        dtype = _probe(op, ones, nodes, name_errors=False).dtype
    except (ValueError, TypeError, IndexError):  # a shape op that needs the real shape
        dtype = np.result_type(*(n.dtype for n in nodes))
    return None, dtype


def _probe(op: Op, shapes: list[tuple[int, ...]], nodes: tuple[Node, ...], name_errors: bool
           ) -> Any:
    zeros = [np.zeros(s, dtype=n.dtype) for s, n in zip(shapes, nodes)]
    try:
        with np.errstate(all="ignore"):
            return np.asarray(op.forward(np, *zeros))
    except (ValueError, TypeError, IndexError) as exc:
        if not name_errors:
            raise
        raise core.op_error(exc, op.name, zeros) from exc


def constant(value: Any, dtype: Any = None, name: str = "Const") -> Constant:
    """A fixed value, stored in the graph."""
    array = np.array(backend.to_numpy(value), dtype=dtype)  # a copy: the graph owns its value
    return Constant(array, name)


_NO_HIGHER_ORDER = ("gradients of gradients (higher-order derivatives) are not supported by "
                    "edu_dl's static graph")


def reaching(ys: Iterable[Node], xs: set[Node]) -> list[Node]:
    """The nodes among ys' ancestors (ys included) that a gradient flows through on its way to
    an x, inputs first: those an x flows into along ops, of a floating dtype (as in TensorFlow,
    integers get no gradient)."""
    order = core.toposort(ys, parents)
    if any(isinstance(n, Gradient) for n in order):
        # A gradient node is no op: no path would be seen through it, and the answer would
        # wrongly be None ("ys do not depend on x"). Refuse instead.
        raise NotImplementedError(_NO_HIGHER_ORDER)
    reach: set[Node] = set()
    for n in order:
        if n.dtype is not None and n.dtype.kind in "fc" and (n in xs or (
                isinstance(n, OpNode) and any(i in reach for i in n.inputs))):
            reach.add(n)
    return [n for n in order if n in reach]


def parents(n: Node) -> tuple[Node, ...]:
    """What ``core.toposort`` follows: the nodes n reads when it runs."""
    return n.parents
