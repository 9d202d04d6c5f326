"""The static engine (define-then-run, like TensorFlow 1.x), with TensorFlow's names.

Phase 1 builds a graph of Nodes: ``placeholder``, ``Variable``, ``constant`` and the ops of
``ops.py`` (the very classes the eager engine runs). Phase 2 runs it: ``Session.run(fetches,
feed_dict)``. A Session plans the evaluation once per set of fetches and reuses the plan; the plan
runs only the nodes the fetches need and folds constant subgraphs once.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from .. import backend
from . import ops
from .codegen import CompiledSteps, StepFailed, compile_steps
from .ops import Op

float16, float32, float64 = np.float16, np.float32, np.float64
int32, int64, bool_ = np.int32, np.int64, np.bool_

# Build-time shape checks run the op on zeros; skip them for inputs larger than this.
_PROBE_MAX_ELEMENTS = 1_000_000


class Graph:
    """A container of Nodes. ``with graph.as_default():`` makes new nodes land in it."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.variables: list[Node] = []
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
    return _GRAPH_STACK[-1]


def reset_default_graph() -> None:
    """Start a fresh default graph (re-running notebook cells otherwise keeps adding nodes)."""
    if len(_GRAPH_STACK) > 1:
        raise RuntimeError("reset_default_graph() cannot run inside a `with graph.as_default()`")
    _GRAPH_STACK[0] = Graph()


class Node:
    """A symbolic value in a Graph: its kind, the op that makes it, and its inputs."""

    # NumPy must hand `ndarray + node` to Node.__radd__ rather than loop over the array.
    __array_ufunc__ = None
    KINDS: ClassVar[tuple[str, ...]] = (
        "placeholder", "variable", "constant", "op", "gradient", "assign", "group")

    def __init__(
        self,
        kind: str,
        name: str,
        inputs: Sequence[Node] = (),
        op_cls: type[Op] | None = None,
        attrs: dict[str, Any] | None = None,
        dtype: Any = None,
        shape: tuple[int | None, ...] | None = None,
        value: Any = None,
        graph: Graph | None = None,
    ) -> None:
        self.graph = graph or get_default_graph()
        self.kind = kind
        self.name = self.graph.unique_name(name)
        self.inputs = tuple(inputs)
        self.op_cls = op_cls
        self.attrs = attrs or {}
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.shape = shape
        self.value = value  # a constant's array; a Variable's initial-value node
        for x in self.inputs:
            if x.graph is not self.graph:
                raise ValueError(f"{self.name}: input '{x.name}' belongs to another Graph")
        self.graph.nodes.append(self)

    def __repr__(self) -> str:
        dtype = "?" if self.dtype is None else self.dtype.name
        shape = "?" if self.shape is None else _shape_str(self.shape)
        what = self.op_cls.__name__ if self.op_cls else self.kind
        return f"<{what} '{self.name}' shape={shape} dtype={dtype}>"

    # An op applied to a Node builds a Node (see ops._apply): each op serves both engines.
    @staticmethod
    def _build_node(op_cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Node:
        return _op_node(op_cls, inputs, attrs)

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Node:
        return _op_node(ops.Add, (self, other), {})

    def __radd__(self, other: Any) -> Node:
        return _op_node(ops.Add, (other, self), {})

    def __sub__(self, other: Any) -> Node:
        return _op_node(ops.Sub, (self, other), {})

    def __rsub__(self, other: Any) -> Node:
        return _op_node(ops.Sub, (other, self), {})

    def __mul__(self, other: Any) -> Node:
        return _op_node(ops.Mul, (self, other), {})

    def __rmul__(self, other: Any) -> Node:
        return _op_node(ops.Mul, (other, self), {})

    def __truediv__(self, other: Any) -> Node:
        return _op_node(ops.Div, (self, other), {})

    def __rtruediv__(self, other: Any) -> Node:
        return _op_node(ops.Div, (other, self), {})

    def __neg__(self) -> Node:
        return _op_node(ops.Neg, (self,), {})

    def __pow__(self, exponent: float) -> Node:
        return _op_node(ops.Pow, (self,), {"exponent": exponent})

    def __matmul__(self, other: Any) -> Node:
        return _op_node(ops.MatMul, (self, other), {})

    def __rmatmul__(self, other: Any) -> Node:
        return _op_node(ops.MatMul, (other, self), {})

    def __getitem__(self, index: Any) -> Node:
        return _op_node(ops.GetItem, (self,), {"index": index})

    # ------------------------------------------------------------------ Variables
    def assign(self, value: Any, name: str = "Assign", mode: str = "set") -> Node:
        """A node that, when run, stores ``value`` in this Variable (committed after the run).

        ``mode`` 'sub' or 'add' updates the stored array in place by ``value`` instead, as
        TensorFlow's AssignSub and ApplyGradientDescent kernels do: no new array each step.
        """
        if self.kind != "variable":
            raise TypeError(f"assign: '{self.name}' is a {self.kind}, not a Variable")
        value = _as_node(value, like=self)
        if self.shape is not None and value.shape is not None and not _shapes_compatible(
            value.shape, self.shape
        ):
            raise ValueError(f"assign: Variable '{self.name}' has shape {_shape_str(self.shape)}"
                             f" but the value has shape {_shape_str(value.shape)}")
        return Node("assign", name, (self, value), attrs={"mode": mode}, dtype=self.dtype,
                    shape=self.shape, graph=self.graph)

    def assign_sub(self, delta: Any) -> Node:
        return self.assign(delta, name="AssignSub", mode="sub")

    def assign_add(self, delta: Any) -> Node:
        return self.assign(delta, name="AssignAdd", mode="add")

    @property
    def initializer(self) -> Node:
        if self.kind != "variable":
            raise TypeError(f"'{self.name}' is not a Variable")
        return self.assign(self.value, name=f"{self.name}/Assign")


# ---------------------------------------------------------------------- building nodes


def _shape_str(shape: Sequence[int | None]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + (
        ",)" if len(shape) == 1 else ")")


def _shapes_compatible(actual: Sequence[int | None], expected: Sequence[int | None]) -> bool:
    return len(actual) == len(expected) and all(
        e is None or a is None or a == e for a, e in zip(actual, expected)
    )


def _as_node(x: Any, like: Node | None = None) -> Node:
    """Nodes pass through; numbers and arrays become constants (numbers take like's dtype)."""
    if isinstance(x, Node):
        return x
    if isinstance(x, bool | int | float) and like is not None and like.dtype is not None:
        if like.dtype.kind in "fc" or isinstance(x, bool | int):
            return constant(x, dtype=like.dtype)
    return constant(x)


def _op_node(op_cls: type[Op], inputs: tuple[Any, ...], attrs: dict[str, Any]) -> Node:
    like = next((x for x in inputs if isinstance(x, Node)), None)
    graph = like.graph if like is not None else get_default_graph()
    with graph.as_default():
        nodes = tuple(_as_node(x, like) for x in inputs)
    probe = op_cls(**attrs)  # validates the attributes now, not at run time
    float_dtypes = [n.dtype for n in nodes if n.dtype is not None and n.dtype.kind in "fc"]
    dtype = np.result_type(*float_dtypes) if float_dtypes else (nodes[0].dtype if nodes else None)
    shape = _infer_shape(probe, nodes)
    name = op_cls.__name__ if op_cls is not ops.GetItem else "strided_slice"
    return Node("op", name, nodes, op_cls=op_cls, attrs=attrs, dtype=dtype, shape=shape,
                graph=graph)


def _known(shape: Sequence[int | None] | None) -> tuple[int, ...]:
    """A shape whose every dimension is known (callers check first)."""
    assert shape is not None and None not in shape
    return tuple(d for d in shape if d is not None)


def _infer_shape(op: Op, nodes: tuple[Node, ...]) -> tuple[int | None, ...] | None:
    """Run the op on zeros when every input shape is known: shape errors surface while building,
    as in TensorFlow. Unknown (None) dimensions leave the output shape unknown."""
    if any(n.shape is None or None in n.shape or n.dtype is None for n in nodes):
        return None
    shapes = [_known(n.shape) for n in nodes]
    if sum(int(np.prod(s)) for s in shapes) > _PROBE_MAX_ELEMENTS:
        return None
    zeros = [np.zeros(s, dtype=n.dtype) for s, n in zip(shapes, nodes)]
    try:
        with np.errstate(all="ignore"):
            out = op.forward(np, *zeros)
    except (ValueError, TypeError, IndexError) as exc:
        message = str(exc)
        if not message.startswith(op.name + ":"):
            message = f"{op.describe(tuple(zeros))}: {message}"
        raise type(exc)(message) from exc
    return tuple(int(d) for d in np.shape(out))


def placeholder(dtype: Any, shape: Sequence[int | None] | None = None,
                name: str = "Placeholder") -> Node:
    """An input slot filled by ``feed_dict`` at every run; None in ``shape`` means any size."""
    return Node("placeholder", name, dtype=dtype,
                shape=None if shape is None else tuple(shape))


def constant(value: Any, dtype: Any = None, name: str = "Const") -> Node:
    """A fixed value, stored in the graph."""
    array = np.array(backend.to_numpy(value), dtype=dtype)  # a copy: the graph owns its value
    return Node("constant", name, dtype=array.dtype, shape=array.shape, value=array)


def Variable(initial_value: Any, dtype: Any = None, name: str = "Variable",
             trainable: bool = True) -> Node:
    """A value that lives in the Session across runs; set by the initializer, changed by assign."""
    init = initial_value if isinstance(initial_value, Node) else constant(initial_value, dtype)
    node = Node("variable", name, dtype=dtype or init.dtype, shape=init.shape, value=init)
    node.attrs["trainable"] = trainable
    node.graph.variables.append(node)
    return node


def group(*nodes: Node, name: str = "group") -> Node:
    """A node that runs ``nodes`` and has no value (fetching it gives None)."""
    return Node("group", name, tuple(nodes))


def global_variables_initializer() -> Node:
    """Assign every Variable of the default graph its initial value."""
    graph = get_default_graph()
    return group(*(v.initializer for v in graph.variables), name="init")


def variables_initializer(var_list: Iterable[Node]) -> Node:
    return group(*(v.initializer for v in var_list), name="init")


def assign(ref: Node, value: Any) -> Node:
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
    # A gradient node is no op, so the walk below would see no path through it and answer
    # None ("ys do not depend on x"): refuse instead, as the Session does.
    if any(n.kind == "gradient" for n in _topological(ys_t)):
        raise NotImplementedError(_NO_HIGHER_ORDER)
    reach = _depends_on(ys_t, set(xs_t))
    out: list[Node | None] = []
    for x in xs_t:
        if x not in reach:
            out.append(None)
            continue
        out.append(Node("gradient", f"gradients/{x.name}_grad", ys_t + gys, dtype=x.dtype,
                        shape=x.shape, value=(ys_t, x, gys), graph=x.graph))
    return out


_NO_HIGHER_ORDER = ("gradients of gradients (higher-order derivatives) are not supported by "
                    "edu_dl's static graph")


def _depends_on(roots: Iterable[Node], xs: set[Node]) -> set[Node]:
    """Nodes among roots' ancestors (roots included) that some x in xs flows into."""
    order = _topological(roots)
    reach: set[Node] = set()
    for n in order:
        if n in xs or (n.kind == "op" and any(i in reach for i in n.inputs)):
            reach.add(n)
    return reach


def _topological(roots: Iterable[Node]) -> list[Node]:
    """Ancestors of roots (roots included), inputs first: an iterative DFS, no recursion."""
    order: list[Node] = []
    visited: set[Node] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in roots]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            order.append(n)
            continue
        if n in visited:
            continue
        visited.add(n)
        stack.append((n, True))
        # An assignment reads its value, not the Variable it overwrites (which may be unset).
        inputs = n.inputs[1:] if n.kind == "assign" else n.inputs
        stack.extend((i, False) for i in inputs if i not in visited)
    return order


# ---------------------------------------------------------------------- functions, TF names


def matmul(a: Any, b: Any) -> Any:
    return ops.matmul(a, b)


def maximum(x: Any, y: Any) -> Any:
    return ops.maximum(x, y)


def reduce_sum(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    return ops.sum(x, axis=axis, keepdims=keepdims)


def reduce_mean(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    return ops.mean(x, axis=axis, keepdims=keepdims)


def reduce_max(x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
    return ops.max(x, axis=axis, keepdims=keepdims)


def square(x: Any) -> Any:
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


nn = SimpleNamespace(relu=ops.relu, sigmoid=ops.sigmoid, tanh=ops.tanh,
                     sparse_softmax_cross_entropy_with_logits=(
                         _sparse_softmax_cross_entropy_with_logits))


# ---------------------------------------------------------------------- optimizers


class Optimizer:
    """Builds the update nodes for ``minimize(loss)``; the Session runs them."""

    def __init__(self, learning_rate: float) -> None:
        if learning_rate <= 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be positive")
        self.learning_rate = learning_rate

    def minimize(self, loss: Node, var_list: Sequence[Node] | None = None) -> Node:
        if var_list is None:
            reach = _depends_on([loss], set(loss.graph.variables))
            var_list = [v for v in loss.graph.variables if v in reach and v.attrs["trainable"]]
        if not var_list:
            raise ValueError(f"{type(self).__name__}.minimize: '{loss.name}' depends on no "
                             f"trainable Variable")
        grads = gradients(loss, var_list)
        with loss.graph.as_default():
            updates = [self._update(v, g) for v, g in zip(var_list, grads) if g is not None]
            return group(*itertools.chain.from_iterable(updates),
                         name=type(self).__name__.removesuffix("Optimizer"))

    def _update(self, var: Node, grad: Node) -> list[Node]:
        raise NotImplementedError


class GradientDescentOptimizer(Optimizer):
    """var <- var - learning_rate * grad"""

    def _update(self, var: Node, grad: Node) -> list[Node]:
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

    def _update(self, var: Node, grad: Node) -> list[Node]:
        b1, b2 = self.beta1, self.beta2
        if var.shape is None or None in var.shape:
            raise ValueError(f"AdamOptimizer: Variable '{var.name}' needs a fully known shape")
        zeros = np.zeros(_known(var.shape), dtype=var.dtype)
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


# ---------------------------------------------------------------------- running


@dataclass
class _Sweep:
    """One reverse sweep: from ys (seeded) back to the xs that gradient nodes ask for."""

    ys: tuple[Node, ...]
    grad_ys: tuple[Node, ...]
    order: list[Node]                      # nodes between xs and ys, outputs first
    targets: dict[Node, list[Node]]        # x -> the gradient nodes that want d/dx
    # order, ready to run: each node with its op (None if it is no op) and its targets
    steps: list[tuple[Node, Op | None, list[Node] | None]] = field(default_factory=list)


@dataclass
class Plan:
    """What one set of fetches needs, in order; made once and reused by Session.run.

    ``steps`` holds (node, op, inputs, sweep): an op to run forward, or (sweep set) the
    backward sweep that fills the gradient nodes; assignments are staged and committed last.
    """

    steps: list[tuple[Node, Op | None, tuple[Node, ...], _Sweep | None]]
    placeholders: list[Node]
    variables: list[Node]
    constants: list[Node]                  # constant and folded nodes whose value is cached
    assigns: list[Node]
    graph_size: int = 0
    folded: int = 0
    # Positions in the fetch list: nodes whose value the run returns, read before the
    # assignments commit, and assignments, which report the committed value.
    value_fetches: list[int] = field(default_factory=list)
    assign_fetches: list[int] = field(default_factory=list)
    # The steps written out as one Python function (see codegen.py), and its source.
    run_steps: CompiledSteps | None = None
    source: str = ""

    @property
    def ops_run(self) -> int:
        return sum(1 for _, op, _, _ in self.steps if op is not None)

    def __str__(self) -> str:
        sweeps = [s for _, _, _, s in self.steps if s is not None]
        swept = sum(len(s.order) for s in sweeps)
        return (f"plan: runs {_count(self.ops_run, 'op')} of the "
                f"{_count(self.graph_size, 'node')} in the graph; "
                f"{_count(self.folded, 'constant subgraph node')} folded once; "
                f"{_count(len(sweeps), 'backward sweep')} of {_count(swept, 'node')}; "
                f"{_count(len(self.assigns), 'assignment')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


class Session:
    """Runs a Graph: ``sess.run(fetches, feed_dict)`` with fetches a node, a list or a dict.

    Not thread-safe: each op node keeps one op instance, reused by every run of the Session.
    """

    def __init__(self, graph: Graph | None = None, device: str = "cpu") -> None:
        self.graph = graph or get_default_graph()
        self.device = backend.check_device(device)
        self.xp = backend.xp_for(device)
        self._variables: dict[Node, Any] = {}
        self._constants: dict[Node, Any] = {}   # constants and folded subgraphs, on device
        self._ops: dict[Node, Op] = {}
        self._plans: dict[tuple[tuple[Node, ...], Any], Plan] = {}
        self._fed_shapes: set[tuple[Node, tuple[int, ...]]] = set()  # checked once each
        self.closed = False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closed = True
        self._variables.clear()
        self._constants.clear()
        self._ops.clear()
        self._plans.clear()
        self._fed_shapes.clear()

    # ------------------------------------------------------------------ run
    def run(self, fetches: Any, feed_dict: dict[Node, Any] | None = None) -> Any:
        """Evaluate ``fetches`` (a node, or a list, tuple or dict of nodes) given the feeds."""
        flat: list[Node] = []
        rebuild = _flatten_fetches(fetches, flat)
        feed_dict = feed_dict or {}
        plan = self._plan(flat, feed_dict)
        values = self._execute(plan, feed_dict)
        # Fetches read the values of this run; assignments commit after, then report theirs.
        results: list[Any] = [None] * len(flat)
        for i in plan.value_fetches:
            results[i] = self._fetch_value(flat[i], values)
        self._commit(plan, values)
        for i in plan.assign_fetches:
            results[i] = self._fetch_value(flat[i], values)
        return rebuild(iter(results))

    def plan_for(self, fetches: Any, feed_dict: dict[Node, Any] | None = None) -> Plan:
        """The plan ``run`` uses for these fetches: made on first use, then reused."""
        flat: list[Node] = []
        _flatten_fetches(fetches, flat)
        return self._plan(flat, feed_dict or {})

    def _plan(self, flat: list[Node], feed_dict: dict[Node, Any]) -> Plan:
        if self.closed:
            raise RuntimeError("Session.run: this Session is closed")
        # Looked up by the feed's keys in their order (cheap), filed under the set too, so a
        # feed_dict written in another order still finds the one plan.
        key = (tuple(flat), tuple(feed_dict))
        plan = self._plans.get(key)
        if plan is None:
            same_set = (key[0], frozenset(feed_dict))
            plan = self._plans.get(same_set) or self._make_plan(flat, feed_dict)
            self._plans[key] = self._plans[same_set] = plan
        return plan

    def _fetch_value(self, node: Node, values: dict[Node, Any]) -> Any:
        value = values[node]
        cpu = value.__class__ is np.ndarray or isinstance(value, np.generic)
        out = value if cpu else backend.to_numpy(value)
        # The Session's own storage (a Variable, a constant, a folded value) or a view of it, as
        # reshape or a slice give: the caller must not alias it. An op's fresh result is theirs.
        if out is value and (node.kind != "op" or out.base is not None
                             or node in self._constants):
            out = out.copy()
        return out[()] if out.ndim == 0 else out

    def _execute(self, plan: Plan, feed_dict: dict[Node, Any]) -> dict[Node, Any]:
        constants = self._constants
        values: dict[Node, Any] = {n: constants[n] for n in plan.constants}
        for ph in plan.placeholders:
            values[ph] = self._feed_value(ph, feed_dict[ph])
        stored = self._variables
        for var in plan.variables:
            if var in feed_dict:
                values[var] = self._feed_value(var, feed_dict[var])
            elif var in stored:
                values[var] = stored[var]
            else:
                raise RuntimeError(
                    f"Session.run: Variable '{var.name}' is not initialized; run "
                    f"sess.run(global_variables_initializer()) first")
        assert plan.run_steps is not None
        try:
            plan.run_steps(values, self.xp)
        except StepFailed as failed:
            node = plan.steps[failed.index][0] if failed.index >= 0 else None
            raise _node_error(failed.error, node, values) from failed.error
        for a in plan.assigns:
            var, value = a.inputs
            shape = tuple(values[value].shape)
            if var.shape is not None and shape != var.shape:
                raise ValueError(f"Session.run: '{a.name}' would give Variable '{var.name}' of "
                                 f"shape {_shape_str(var.shape)} a value of shape {shape}")
        return values

    def _commit(self, plan: Plan, values: dict[Node, Any]) -> None:
        """Apply the run's assignments, after it: every read in the run saw the old values."""
        stored = self._variables
        for a in plan.assigns:
            var, value = a.inputs
            mode = a.attrs["mode"]
            if mode == "set" or var not in stored:
                # A copy: the value may be a constant or a view the Session must not alias.
                new = self.xp.array(values[value], dtype=var.dtype)
                if mode != "set":
                    raise RuntimeError(
                        f"Session.run: Variable '{var.name}' is not initialized; run "
                        f"sess.run(global_variables_initializer()) first")
                stored[var] = new
            elif mode == "sub":
                stored[var] -= values[value]
            else:
                stored[var] += values[value]
            values[a] = stored[var]

    def _feed_value(self, node: Node, value: Any) -> Any:
        if value.__class__ is np.ndarray and value.dtype == node.dtype and self.xp is np:
            array = value  # what asarray would return, sooner
        else:
            if isinstance(value, Node):
                raise TypeError(f"Session.run: the value fed to '{node.name}' is a graph node; "
                                f"feed arrays or numbers")
            if self.device != "cpu":
                value = backend.to_device(value, self.device)
            array = self.xp.asarray(value, dtype=node.dtype)
        shape = tuple(array.shape)
        if node.shape is not None and shape != node.shape and (
                node, shape) not in self._fed_shapes:
            if not _shapes_compatible(shape, node.shape):
                raise ValueError(
                    f"Session.run: {node.kind} '{node.name}' expects shape "
                    f"{_shape_str(node.shape)}, but the value fed has shape {shape}")
            self._fed_shapes.add((node, shape))
        return array

    # ------------------------------------------------------------------ planning
    def _make_plan(self, fetches: list[Node], feed_dict: dict[Node, Any]) -> Plan:
        for n in fetches:
            if n.graph is not self.graph:
                raise ValueError(f"Session.run: fetch '{n.name}' belongs to another Graph "
                                 f"than this Session's")
        for key in feed_dict:
            if not isinstance(key, Node) or key.kind not in ("placeholder", "variable"):
                what = f"'{key.name}' ({key.kind})" if isinstance(key, Node) else repr(key)
                raise TypeError(f"Session.run: feed_dict keys must be placeholders or "
                                f"Variables, got {what}")
        order = _topological(fetches)
        missing = [n for n in order if n.kind == "placeholder" and n not in feed_dict]
        if missing:
            p = missing[0]
            shape = "unknown" if p.shape is None else _shape_str(p.shape)
            raise ValueError(
                f"Session.run: placeholder '{p.name}' (shape {shape}, dtype {p.dtype}) needs a "
                f"value: pass it in feed_dict")
        sweeps = self._plan_sweeps([n for n in order if n.kind == "gradient"])
        differentiated = {n for s in sweeps.values() for n in s.order if n.kind == "op"}

        steps: list[tuple[Node, Op | None, tuple[Node, ...], _Sweep | None]] = []
        placeholders, variables, constants, assigns = [], [], [], []
        folded = 0
        for n in order:
            if n.kind == "placeholder":
                placeholders.append(n)
            elif n.kind == "variable":
                variables.append(n)
            elif n.kind == "constant" or (n not in differentiated and self._foldable(n)):
                folded += n.kind == "op"
                self._fold(n)
                constants.append(n)
            elif n.kind == "op":
                op = self._ops.get(n)
                if op is None:
                    op = self._ops[n] = n.op_cls(**n.attrs)  # type: ignore[misc]
                    op.needs = (False,) * len(n.inputs)
                steps.append((n, op, n.inputs, None))
            elif n.kind == "gradient":
                sweep = sweeps.pop(_sweep_key(n), None)
                if sweep is not None:  # the first gradient node of a sweep runs all of it
                    steps.append((n, None, n.inputs, sweep))
            elif n.kind == "assign":
                assigns.append(n)
        run_steps, source = compile_steps(steps)
        return Plan(steps, placeholders, variables, constants, assigns,
                    graph_size=len(self.graph.nodes), folded=folded,
                    value_fetches=[i for i, n in enumerate(fetches)
                                   if n.kind not in ("assign", "group")],
                    assign_fetches=[i for i, n in enumerate(fetches) if n.kind == "assign"],
                    run_steps=run_steps, source=source)

    def _plan_sweeps(self, gradient_nodes: list[Node]) -> dict[Any, _Sweep]:
        sweeps: dict[Any, _Sweep] = {}
        for g in gradient_nodes:
            ys, x, gys = g.value
            sweep = sweeps.get(_sweep_key(g))
            if sweep is None:
                sweep = sweeps[_sweep_key(g)] = _Sweep(ys, gys, [], {})
            sweep.targets.setdefault(x, []).append(g)
        for sweep in sweeps.values():
            ancestors = _topological(sweep.ys)
            if any(n.kind == "gradient" for n in ancestors):
                raise NotImplementedError(_NO_HIGHER_ORDER)
            reach = _depends_on(sweep.ys, set(sweep.targets))
            sweep.order = [n for n in reversed(ancestors) if n in reach]
            for n in sweep.order:
                op = None
                if n.kind == "op":
                    op = self._ops.get(n)
                    if op is None:
                        op = self._ops[n] = n.op_cls(**n.attrs)  # type: ignore[misc]
                        op.needs = (False,) * len(n.inputs)
                    # Union over plans: a gradient computed but unused is harmless.
                    op.needs = tuple(a or (i in reach) for a, i in zip(op.needs, n.inputs))
                sweep.steps.append((n, op, sweep.targets.get(n)))
        return sweeps

    def _foldable(self, n: Node) -> bool:
        """An op whose inputs are all constants (or folded): its value never changes."""
        return n.kind == "op" and n.op_cls is not None and n.op_cls.pure and all(
            i in self._constants or i.kind == "constant" for i in n.inputs)

    def _fold(self, n: Node) -> None:
        if n in self._constants:
            return
        if n.kind == "constant":
            self._constants[n] = backend.to_device(n.value, self.device)
            return
        for i in n.inputs:
            self._fold(i)
        op = n.op_cls(**n.attrs)  # type: ignore[misc]
        self._constants[n] = op.forward(self.xp, *[self._constants[i] for i in n.inputs])


def _sweep_key(gradient_node: Node) -> tuple[tuple[Node, ...], tuple[Node, ...]]:
    ys, _, gys = gradient_node.value
    return ys, gys


def _node_error(exc: Exception, node: Node | None, values: dict[Node, Any]) -> Exception:
    if node is None:
        return exc
    shapes = ", ".join(str(tuple(getattr(values.get(i), "shape", ()))) for i in node.inputs)
    what = node.op_cls.__name__.lower() if node.op_cls else node.kind
    return type(exc)(f"Session.run: node '{node.name}' ({what} with input shapes {shapes}) "
                     f"failed: {exc}")


def _flatten_fetches(fetches: Any, out: list[Node]) -> Any:
    """Collect the nodes of a fetch structure; return a function that rebuilds its shape."""
    if type(fetches) is list and all(type(f) is Node for f in fetches):  # the common case
        out.extend(fetches)
        return list
    if isinstance(fetches, Node):
        out.append(fetches)
        return lambda it: next(it)
    if isinstance(fetches, dict):
        parts = {k: _flatten_fetches(v, out) for k, v in fetches.items()}
        return lambda it: {k: f(it) for k, f in parts.items()}
    if isinstance(fetches, list | tuple):
        items = [_flatten_fetches(v, out) for v in fetches]
        kind = type(fetches)
        return lambda it: kind(f(it) for f in items)
    raise TypeError(
        f"Session.run: cannot fetch {type(fetches).__name__} {fetches!r}: fetches must be graph "
        f"nodes, or lists, tuples or dicts of them")
