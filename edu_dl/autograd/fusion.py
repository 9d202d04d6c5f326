"""A plan, fused: elementwise chains in one pass, Variable updates in place, compiled when it pays.

``codegen.py`` writes a plan as one call per op and per VJP: each elementwise op and each update
is its own pass over memory, and at small sizes Python's dispatch is most of the step. The plan
never changes, and after its first run every shape is known, so the Session lowers it once more
(``lower``), the way TorchInductor lowers a captured graph:

- every value of an elementwise op (forward or VJP) stays an *expression* until something needs
  an array (a matmul, a reduction, a fetch): a chain between matmuls becomes one loop, and a
  reduction (``sum((y_pred - y) ** 2)``) computes its whole chain in the same pass;
- ``assign_sub``/``assign_add``, and ``assign`` (``w.assign(w - lr * grad)``, the TensorFlow
  lecture's spelling, is ``w -= lr * grad``; ``v.assign(e)`` is ``v[...] = e``) write into the
  Variable's own buffer, fused with their chain (reads ``grad`` once, makes no temporary); an
  update that reads another updated Variable goes first, so every read sees the old value;
- one walk over the statements (``write``) writes them in a dialect per target: NumPy (runs
  anywhere, the same ops in the same order as the unfused plan, so the same numbers), one Numba
  function for the whole step, matmuls included (``np.dot`` calls BLAS), or CuPy with generated
  kernels. The Session compiles the Numba
  one only when it pays: once the plan has spent as long running as compiling costs (the
  ski-rental rule: never more than twice the best choice made in hindsight).

Anything the lowering does not know (another op, broadcasting that needs an unbroadcast, updates
that read each other's Variables, a fetched Variable) keeps the unfused plan, and says why
(``plan.unfused_reason``; the Session warns when asked to optimize): fusion is an optimization,
never a change of meaning. The fused function is specialised to the shapes of the first run
and checks the feeds against them (a guard, as TorchDynamo's); a feed that differs runs the
unfused plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edu_dl.autograd import core, ops
from edu_dl.autograd.nodes import (
    Assign,
    Constant,
    Gradient,
    Node,
    OpNode,
    Placeholder,
    Variable,
)
from edu_dl.autograd.plan import Forward, Plan, Sweep
from edu_dl.backend import to_numpy

Shape = tuple[int, ...]
# Seconds a Numba compile of a training step costs (the two-layer step: 2 to 4.5 s on the
# course's shared two-core machine, Numba's import included); a plan switches to Numba once it
# has spent this long running its NumPy code.
NUMBA_COMPILE_S = 3.0
MAX_EXPRESSION_SIZE = 32  # a longer chain is materialized: recomputing it would cost more


class Unsupported(Exception):
    """The plan holds something the lowering does not know: the Session keeps the unfused plan.
    Its message names that thing, as a phrase ("the op tanh")."""


class UnfusedPlanWarning(UserWarning):
    """A Session asked to optimize ('numba' or 'numpy') keeps a plan unfused: the message says
    why, once per plan."""


# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Leaf:
    """An array (or a scalar, shape ()) held in a local of the generated function."""

    name: str
    shape: Shape


@dataclass(frozen=True)
class Literal:
    """A scalar written into the code, in the plan's dtype: ``float32(0.001)``."""

    text: str
    shape: Shape = ()
    value: float = 0.0  # for CUDA C: ((float)0.001)


@dataclass(frozen=True)
class Call:
    """An elementwise op over its arguments: ``numba`` formats one element of each argument,
    ``numpy`` whole arrays; both with ``{0}``, ``{1}``... for the arguments."""

    numba: str
    numpy: str
    args: tuple[Expr, ...]
    shape: Shape
    size: int = 1  # nodes in the tree: a long one is materialized instead of recomputed
    cuda: str = ""  # CUDA C for one element, where it is not the numba template


Expr = Leaf | Literal | Call


# --------------------------------------------------------------------------- statements


@dataclass
class Elementwise:
    """``out = expr``: one pass over ``expr``'s shape."""

    out: str
    expr: Expr


@dataclass
class Reduce:
    """``out = sum (or mean) of expr over axes``: the chain and the reduction in one pass."""

    out: str
    expr: Expr
    axes: tuple[int, ...]
    keepdims: bool
    count: int  # divide by it (a mean); 1: a sum
    shape: Shape


@dataclass
class MatMul:
    """``out = a @ b`` with either operand transposed (a view, no copy)."""

    out: str
    a: Leaf
    b: Leaf
    transpose_a: bool
    transpose_b: bool


@dataclass
class Reshape:
    """``out = source.reshape(shape)``: a reduced gradient given back its kept axes."""

    out: str
    source: Leaf
    shape: Shape


@dataclass
class Update:
    """``variable -= expr`` (sign '-'), ``+=`` ('+') or ``variable[...] = expr`` (''), in the
    Variable's own buffer, in one pass."""

    variable: Leaf
    expr: Expr
    sign: str
    # Where expr is ``scale * (a @ b)`` and nothing else reads the product: that matmul, so
    # that compiled code can make BLAS add the product into the Variable (gemm's beta = 1),
    # with no product array and no update pass.
    product: MatMul | None = None
    scale: Literal | None = None


Statement = Elementwise | Reduce | MatMul | Reshape | Update


@dataclass
class Program:
    """A lowered plan: the arguments it reads, its statements, and what it returns."""

    dtype: np.dtype
    placeholders: list[tuple[Placeholder, str, Shape]] = field(default_factory=list)
    variables: list[tuple[Variable, str, Shape]] = field(default_factory=list)
    constants: list[tuple[Node, str]] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    returns: list[str] = field(default_factory=list)  # one per value fetch, in fetch order
    xp: Any = np  # the arrays' library: NumPy, or CuPy on a GPU

    @property
    def on_gpu(self) -> bool:
        return self.xp is not np

    @property
    def arguments(self) -> list[str]:
        return ([name for _, name, _ in self.placeholders]
                + [name for _, name, _ in self.variables] + [name for _, name in self.constants])

    @property
    def passes(self) -> int:
        """Passes over memory the step makes: one per statement (a matmul counts one)."""
        return sum(1 for s in self.statements if not isinstance(s, Reshape))


# --------------------------------------------------------------------------- lowering


# Elementwise functions, by op: the same name in NumPy, in Numba (on one element) and in CUDA C.
_FUNCTIONS: dict[type, str] = {ops.Exp: "exp", ops.Log: "log", ops.Sqrt: "sqrt", ops.Tanh: "tanh"}


class _Lowerer:
    def __init__(self, plan: Plan, fetched: list[Node], constants: Mapping[Node, Any],
                 values: Mapping[Node, Any], dtype: np.dtype) -> None:
        self.plan, self.fetched, self.constants, self.values = plan, fetched, constants, values
        self.dtype = dtype
        self.program = Program(dtype)
        self.exprs: dict[Node, Expr] = {}
        self.materialized: dict[Call, Leaf] = {}
        self.temporaries = 0

    # helpers ---------------------------------------------------------------
    def literal(self, value: float) -> Literal:
        exact = float(self.dtype.type(value))
        return Literal(f"{self.dtype.name}({exact!r})", (), exact)

    def fresh(self) -> str:
        self.temporaries += 1
        return f"t{self.temporaries - 1}"

    def shape_of(self, node: Node) -> Shape:
        value = self.values.get(node)
        if value is None:
            raise Unsupported(f"'{node.name}', which has no recorded value")
        if np.dtype(value.dtype) != self.dtype:
            raise Unsupported(f"mixed dtypes ('{node.name}' is {value.dtype}, the plan "
                              f"{self.dtype})")
        return tuple(value.shape)

    def call(self, numba: str, numpy: str, args: tuple[Expr, ...], shape: Shape,
             cuda: str = "") -> Call:
        for a in args:
            if a.shape not in (shape, ()):
                raise Unsupported(f"broadcasting {a.shape} to {shape}")
        args = tuple(self.leaf(a) if isinstance(a, Call) and a.size > MAX_EXPRESSION_SIZE
                     else a for a in args)
        size = 1 + sum(a.size for a in args if isinstance(a, Call))
        return Call(numba, numpy, args, shape, size, cuda)

    def leaf(self, expr: Expr) -> Leaf | Literal:
        """The expression as an array in a local (one pass), unless it already is one; an
        expression met again is the same array (every leaf is read-only until the updates)."""
        if isinstance(expr, Leaf | Literal):
            return expr
        leaf = self.materialized.get(expr)
        if leaf is None:
            leaf = self.materialized[expr] = Leaf(self.fresh(), expr.shape)
            self.program.statements.append(Elementwise(leaf.name, expr))
        return leaf

    def array(self, expr: Expr) -> Leaf:
        leaf = self.leaf(expr)
        if not isinstance(leaf, Leaf) or not leaf.shape:
            raise Unsupported("a matmul of a scalar")
        return leaf

    # the plan ----------------------------------------------------------------
    def lower(self) -> Program:
        plan, program = self.plan, self.program
        for i, ph in enumerate(plan.placeholders):
            shape = self.shape_of(ph)
            if not shape:
                raise Unsupported("a 0-d feed")
            program.placeholders.append((ph, f"x{i}", shape))
            self.exprs[ph] = Leaf(f"x{i}", shape)
        for i, var in enumerate(plan.variables):
            shape = self.shape_of(var)
            program.variables.append((var, f"w{i}", shape))
            self.exprs[var] = Leaf(f"w{i}", shape)
        for i, const in enumerate(plan.constants):
            value = self.constants[const]
            if np.dtype(value.dtype) != self.dtype:
                raise Unsupported(f"mixed dtypes (constant '{const.name}' is {value.dtype})")
            if value.shape == ():  # written into the code (a CuPy scalar, copied to the host)
                self.exprs[const] = self.literal(float(to_numpy(value)))
            else:
                program.constants.append((const, f"c{i}"))
                self.exprs[const] = Leaf(f"c{i}", tuple(value.shape))
        for step in plan.steps:
            if isinstance(step, Forward):
                self.exprs[step.node] = self.forward(step.node, step.op)
            else:
                self.sweep(step)
        # The fetches first: they read the values of this run, before any update writes.
        for node in self.fetched:
            expr = self.exprs.get(node)
            if expr is None or not isinstance(node, OpNode | Gradient):
                raise Unsupported(f"a fetch of '{node.name}' ({type(node).__name__})")
            leaf = self.leaf(expr)
            name = leaf.name if isinstance(leaf, Leaf) else leaf.text
            if name in [n for _, n, _ in program.placeholders + program.variables] + [
                    n for _, n in program.constants]:
                raise Unsupported(f"a fetch of '{node.name}', an alias of an input")
            program.returns.append(name)
        self.updates()
        return program

    def forward(self, node: OpNode, op: ops.Op) -> Expr:
        args = tuple(self.exprs[i] for i in node.inputs)
        shape = self.shape_of(node)
        kind = type(op)
        if kind is ops.Add:
            return self.call("({0} + {1})", "({0} + {1})", args, shape)
        if kind is ops.Sub:
            return self.call("({0} - {1})", "({0} - {1})", args, shape)
        if kind is ops.Mul:
            return self.call("({0} * {1})", "({0} * {1})", args, shape)
        if kind is ops.Neg:
            return self.call("(-{0})", "(-{0})", args, shape)
        if kind is ops.Div:
            return self.call("({0} / {1})", "({0} / {1})", args, shape)
        if kind in _FUNCTIONS:  # np.exp(x) and the like: Numba's and CUDA C's on one element
            name = _FUNCTIONS[kind]
            return self.call(f"np.{name}({{0}})", f"np.{name}({{0}})", args, shape,
                             cuda=f"{name}({{0}})")
        if kind is ops.Pow and isinstance(op, ops.Pow) and op.exponent == 2:
            return self.call("({0} * {0})", "({0} * {0})", args, shape)
        if kind is ops.ReLU:
            zero = self.literal(0)
            return self.call("max({0}, {1})", "np.maximum({0}, {1})", (*args, zero), shape)
        if kind is ops.Maximum:
            return self.call("max({0}, {1})", "np.maximum({0}, {1})", args, shape)
        if kind is ops.MatMul:
            a, b = self.array(args[0]), self.array(args[1])
            if len(a.shape) != 2 or len(b.shape) != 2:
                raise Unsupported("a matmul of other than two matrices")
            out = self.fresh()
            self.program.statements.append(MatMul(out, a, b, False, False))
            return Leaf(out, shape)
        if kind in (ops.Sum, ops.Mean) and isinstance(op, ops.Sum | ops.Mean):
            _, axes, count, _ = ops._reduction(op.axis, args[0].shape)
            out = self.fresh()
            self.program.statements.append(Reduce(
                out, args[0], axes, op.keepdims, count if kind is ops.Mean else 1, shape))
            return Leaf(out, shape)
        raise Unsupported(f"the op {op.name}")

    def sweep(self, sweep: Sweep) -> None:
        if sweep.grad_ys:
            raise Unsupported("gradients seeded with grad_ys")
        in_sweep = set(sweep.order)
        grads: dict[Node, Expr] = {}
        for y in sweep.ys:
            if y in in_sweep:
                if self.shape_of(y) != ():
                    raise Unsupported("gradients of a non-scalar")
                one = self.literal(1)
                grads[y] = self.call("({0} + {1})", "({0} + {1})", (grads[y], one), ()) \
                    if y in grads else one

        def vjp(node: Node, grad: Expr) -> list[tuple[Node, Expr]]:
            for target in sweep.targets.get(node, ()):
                self.exprs[target] = grad
            op = sweep.ops.get(node)
            if op is None or not isinstance(node, OpNode):
                return []
            wanted = [x in in_sweep for x in node.inputs]
            grads_in = self.vjp(node, op, grad, wanted)
            return [(x, g) for x, g, want in zip(node.inputs, grads_in, wanted)
                    if want and g is not None]

        def add(a: Expr, b: Expr) -> Expr:
            return self.call("({0} + {1})", "({0} + {1})", (a, b), a.shape)

        core.backward(sweep.order, grads, vjp, add)

    def vjp(self, node: OpNode, op: ops.Op, g: Expr, wanted: list[bool]) -> list[Expr | None]:
        """The VJP of each input of ``node`` as an expression (None where not wanted)."""
        args = [self.exprs[i] for i in node.inputs]
        for a, want in zip(args, wanted):
            if want and a.shape != g.shape and not isinstance(op, ops.Sum | ops.Mean
                                                                | ops.MatMul):
                raise Unsupported(f"the unbroadcast {op.name}'s gradient needs")
        kind, shape = type(op), g.shape
        if kind is ops.Add:
            return [g, g]
        if kind is ops.Sub:
            return [g, self.call("(-{0})", "(-{0})", (g,), shape)]
        if kind is ops.Mul:
            return [self.call("({0} * {1})", "({0} * {1})", (g, args[1]), shape),
                    self.call("({0} * {1})", "({0} * {1})", (g, args[0]), shape)]
        if kind is ops.Neg:
            return [self.call("(-{0})", "(-{0})", (g,), shape)]
        if kind is ops.Div:  # as ops.Div: grad / y, -grad * x / (y * y)
            x, y = args
            return [self.call("({0} / {1})", "({0} / {1})", (g, y), shape),
                    self.call("(((-{0}) * {1}) / ({2} * {2}))", "(((-{0}) * {1}) / ({2} * {2}))",
                              (g, x, y), shape)]
        if kind in _FUNCTIONS:  # as the ops' backward, from the forward's value (ours: out)
            value, one, two = self.exprs[node], self.literal(1), self.literal(2)
            formula = {ops.Exp: ("({0} * {1})", (g, value)),
                       ops.Log: ("({0} / {1})", (g, args[0])),
                       ops.Sqrt: ("({0} / ({2} * {1}))", (g, value, two)),
                       ops.Tanh: ("({0} * ({2} - ({1} * {1})))", (g, value, one))}[kind]
            return [self.call(formula[0], formula[0], formula[1], shape)]
        if kind is ops.Pow:  # exponent 2 (forward refused others): 2 * g * x, as g*x + g*x
            return [self.call("(({0} * {1}) * {2})", "(({0} * {1}) * {2})",
                              (g, args[0], self.literal(2)), shape)]
        if kind is ops.ReLU:
            zero, dt = self.literal(0), self.dtype.name
            return [self.call("({0} if {1} > {2} else {2})",
                              f"({{0}} * ({{1}} > {{2}}).astype(np.{dt}))",
                              (g, args[0], zero), shape, cuda="({1} > {2} ? {0} : {2})")]
        if kind is ops.Maximum:  # x's share: 1 where x > y, 1/2 on a tie; y gets the rest
            half, zero, dt = self.literal(0.5), self.literal(0), self.dtype.name
            to_x = self.call(
                "({0} if {1} > {2} else ({0} * {3} if {1} == {2} else {4}))",
                f"({{0}} * (({{1}} > {{2}}).astype(np.{dt}) "
                f"+ ({{1}} == {{2}}).astype(np.{dt}) * {{3}}))",
                (g, args[0], args[1], half, zero), shape,
                cuda="({1} > {2} ? {0} : ({1} == {2} ? {0} * {3} : {4}))")
            return [to_x, self.call("({0} - {1})", "({0} - {1})", (g, to_x), shape)]
        if kind is ops.MatMul:
            grad, x, y = self.array(g), self.array(args[0]), self.array(args[1])
            out: list[Expr | None] = [None, None]
            if wanted[0]:
                dx = Leaf(self.fresh(), x.shape)
                self.program.statements.append(MatMul(dx.name, grad, y, False, True))
                out[0] = dx
            if wanted[1]:
                dy = Leaf(self.fresh(), y.shape)
                self.program.statements.append(MatMul(dy.name, x, grad, True, False))
                out[1] = dy
            return out
        if isinstance(op, ops.Sum | ops.Mean):
            in_shape = args[0].shape
            _, _, count, kept = ops._reduction(op.axis, in_shape)
            if isinstance(g, Call) and g.numba == "{0}" and g.args[0].shape == ():
                g = g.args[0]  # a scalar spread by an earlier reduction's VJP: spread it once
            if isinstance(op, ops.Mean):
                g = self.call("({0} / {1})", "({0} / {1})", (g, self.literal(count)), shape)
            spread = self.leaf(g)
            if isinstance(spread, Leaf) and spread.shape and spread.shape != kept:
                name = self.fresh()
                self.program.statements.append(Reshape(name, spread, kept))
                spread = Leaf(name, kept)
            broadcast = f"np.broadcast_to({{0}}, {in_shape})"
            return [Call("{0}", broadcast, (spread,), in_shape)]
        raise Unsupported(f"the gradient of {op.name}")

    def updates(self) -> None:
        """Each assignment as an in-place update of its Variable's buffer, after every other
        statement: ``assign_sub(e)`` is ``w -= e``, ``assign(w - e)`` too (the lecture's
        spelling), ``assign(e)`` is ``w[...] = e``. An update that reads another updated
        Variable runs before that one's update (the run reads old values); a cycle refuses."""
        assigned = {a.variable for a in self.plan.assigns}
        if len(assigned) != len(self.plan.assigns):
            raise Unsupported("a Variable assigned twice in one run")
        names = {var: name for var, name, _ in self.program.variables}
        pending: list[tuple[Assign, Update]] = []
        for a in self.plan.assigns:
            var = a.variable
            if var not in names:
                name = names[var] = f"w{len(names)}"
                value = self.values.get(a)
                if value is None:
                    raise Unsupported(f"'{var.name}', which has no recorded value")
                self.program.variables.append((var, name, tuple(value.shape)))
            shape = next(s for v, _, s in self.program.variables if v is var)
            expr = self.exprs[a.value]
            if expr.shape != shape:
                raise Unsupported(f"a broadcasting assignment ('{a.name}' gives a value of shape "
                                  f"{expr.shape} to a Variable of shape {shape})")
            variable = Leaf(names[var], shape)
            if a.mode == "set":
                expr, sign = _as_update(expr, variable)
            else:
                sign = "-" if a.mode == "sub" else "+"
            pending.append((a, Update(variable, expr, sign)))
        updated = {u.variable.name for _, u in pending}
        # An update that reads another updated Variable goes before that one's update: an
        # update is ready once no other update still to write reads its Variable.
        while pending:
            ready = [(a, u) for a, u in pending
                     if not any(u.variable.name in _leaf_names(other.expr)
                                for _, other in pending if other is not u)]
            if not ready:
                a, u = pending[0]
                reader = next(b for b, other in pending
                              if other is not u and u.variable.name in _leaf_names(other.expr))
                raise Unsupported(
                    f"updates that read each other's Variables (the update of "
                    f"'{a.variable.name}' must wait for '{reader.name}', which reads it, and "
                    f"so on round a cycle): no order of in-place updates keeps the old values")
            self.program.statements += [u for _, u in ready]
            done = {id(u) for _, u in ready}
            pending = [(a, u) for a, u in pending if id(u) not in done]
        for update in self.program.statements:
            if isinstance(update, Update) and update.sign:
                update.product, update.scale = self.scaled_product(update.expr, updated)

    def scaled_product(self, expr: Expr, variables: set[str]
                       ) -> tuple[MatMul | None, Literal | None]:
        """(the matmul, the scale) where expr is ``scale * product`` read nowhere else (its
        update is its one reader), and
        the product's operands are no Variable (an earlier update may have changed one)."""
        if not (isinstance(expr, Call) and expr.numba == "({0} * {1})"
                and isinstance(expr.args[0], Literal) and isinstance(expr.args[1], Leaf)):
            return None, None
        name = expr.args[1].name
        products = [s for s in self.program.statements
                    if isinstance(s, MatMul) and s.out == name]
        if not products or {products[0].a.name, products[0].b.name} & variables:
            return None, None
        if _reads(self.program, self.fetched_names(), name) != 1:
            return None, None
        return products[0], expr.args[0]

    def fetched_names(self) -> set[str]:
        names = set()
        for node in self.fetched:
            expr = self.exprs.get(node)
            if isinstance(expr, Leaf):
                names.add(expr.name)
        return names


def _as_update(expr: Expr, variable: Leaf) -> tuple[Expr, str]:
    """A 'set' assignment's value as an in-place update: ``w - e`` is ``w -= e``, ``w + e`` and
    ``e + w`` are ``w += e`` (where ``e`` does not read ``w``); anything else ``w[...] = e``, which
    is in place too: every element of ``e`` reads ``w`` at its own index only, if at all."""
    if isinstance(expr, Call) and len(expr.args) == 2 and expr.shape == variable.shape:
        first, second = expr.args
        if expr.numba == "({0} - {1})" and first == variable and \
                variable.name not in _leaf_names(second):
            return second, "-"
        if expr.numba == "({0} + {1})":
            for mine, rest in ((first, second), (second, first)):
                if mine == variable and variable.name not in _leaf_names(rest):
                    return rest, "+"
    return expr, ""


def _reads(program: Program, fetched: set[str], name: str) -> int:
    """How many statements (and fetches) read the local ``name``."""
    count = int(name in fetched)
    for s in program.statements:
        if isinstance(s, MatMul):
            count += (s.a.name == name) + (s.b.name == name)
        elif isinstance(s, Reshape):
            count += s.source.name == name
        else:
            count += name in _leaf_names(s.expr)
    return count


def _leaf_names(expr: Expr) -> set[str]:
    if isinstance(expr, Leaf):
        return {expr.name}
    if isinstance(expr, Literal):
        return set()
    return set().union(*(_leaf_names(a) for a in expr.args))


def lower(plan: Plan, fetches: list[Node], constants: Mapping[Node, Any],
          values: Mapping[Node, Any], xp: Any = np) -> Program:
    """The plan for ``fetches`` as fused statements, given the values of one run (their shapes
    and dtype) and the Session's array library ``xp`` (NumPy, or CuPy on a GPU)."""
    dtypes = {np.dtype(v.dtype) for n, v in values.items()
              if isinstance(n, OpNode | Placeholder | Variable | Constant)
              and hasattr(v, "dtype")}
    if len(dtypes) != 1 or next(iter(dtypes)).kind != "f":
        raise Unsupported(f"the dtypes {sorted(map(str, dtypes))} (one floating dtype is "
                          f"fused)")
    fetched = [fetches[i] for i in plan.value_fetches]
    program = _Lowerer(plan, fetched, constants, values, dtypes.pop()).lower()
    program.xp = xp
    return program


# --------------------------------------------------------------------------- writing code


def _index(leaf_shape: Shape, space: Shape) -> str:
    """How one element of an array of ``leaf_shape`` is read in a loop over ``space``
    (broadcasting: aligned on the right, a size-1 axis read at 0); ``()`` for a 0-d array."""
    lead = len(space) - len(leaf_shape)
    parts = [f"i{lead + d}" if n == space[lead + d] else "0" for d, n in enumerate(leaf_shape)]
    return ", ".join(parts) or "()"


def _loops(space: Shape, body: str) -> list[str]:
    lines = [f"{'    ' * (d + 1)}for i{d} in range({n}):" for d, n in enumerate(space)]
    return [*lines, "    " * (len(space) + 1) + body]


def _matmul(s: MatMul) -> str:
    a = s.a.name + (".T" if s.transpose_a else "")
    b = s.b.name + (".T" if s.transpose_b else "")
    return f"np.dot({a}, {b})"


def _divide(s: Reduce, dtype: str) -> str:
    return f" / {dtype}({float(s.count)!r})" if s.count != 1 else ""


class Dialect:
    """How one target writes each statement of a Program; ``write`` walks them once. This one
    is NumPy on whole arrays, the same ops in the same order as the unfused plan (CuPy takes
    the same calls); matmuls, reshapes and the return are every dialect's."""

    def __init__(self, program: Program) -> None:
        self.program, self.dt = program, program.dtype.name

    def statement(self, s: Statement) -> list[str]:
        if isinstance(s, MatMul):
            return [f"    {s.out} = {_matmul(s)}"]
        if isinstance(s, Reshape):
            return [f"    {s.out} = {s.source.name}.reshape({s.shape})"]
        if isinstance(s, Elementwise):
            return self.elementwise(s)
        if isinstance(s, Reduce):
            return self.reduce(s)
        return self.update(s)

    def value(self, expr: Expr) -> str:
        """The whole array ``expr``."""
        if isinstance(expr, Literal):
            return expr.text
        if isinstance(expr, Leaf):
            return expr.name
        return expr.numpy.format(*(self.value(a) for a in expr.args))

    def elementwise(self, s: Elementwise) -> list[str]:
        if isinstance(s.expr, Call) and s.expr.numpy.startswith("np.broadcast_to"):
            # A broadcast view is read-only and strided: make it an array of its own.
            return [f"    {s.out} = np.array({self.value(s.expr)})"]
        return [f"    {s.out} = {self.value(s.expr)}"]

    def reduce(self, s: Reduce) -> list[str]:
        total = f"{self.value(s.expr)}.sum(axis={s.axes}, keepdims={s.keepdims})"
        return [f"    {s.out} = {total}{_divide(s, self.dt)}"]

    def update(self, s: Update) -> list[str]:
        target = s.variable.name + ("" if s.sign else "[...]")
        return [f"    {target} {s.sign}= {self.value(s.expr)}"]


class NumbaDialect(Dialect):
    """Explicit loops, one element at a time; with ``gemm``, each matmul one call of NumPy's
    own BLAS (``gemm_into``), and an update ``w -= scale * (a @ b)`` one such call adding into
    ``w`` (beta = 1); without it, Numba's ``np.dot``."""

    def __init__(self, program: Program, gemm: bool) -> None:
        super().__init__(program)
        # 0-d Variables are arrays in the step (updated in place): read as name[()].
        self.zero_d = {name for _, name, shape in program.variables if not shape}
        self.gemm = gemm
        self.into = {id(s.product): s for s in program.statements
                     if gemm and isinstance(s, Update) and s.product is not None}

    def element(self, expr: Expr, space: Shape) -> str:
        if isinstance(expr, Literal):
            return expr.text
        if isinstance(expr, Leaf):
            if not expr.shape and expr.name not in self.zero_d:
                return expr.name
            return f"{expr.name}[{_index(expr.shape, space)}]"
        return expr.numba.format(*(self.element(a, space) for a in expr.args))

    def statement(self, s: Statement) -> list[str]:
        if id(s) in self.into:
            return []  # computed by its update, as gemm's epilogue
        if isinstance(s, MatMul) and self.gemm:
            rows = s.a.shape[1] if s.transpose_a else s.a.shape[0]
            cols = s.b.shape[0] if s.transpose_b else s.b.shape[1]
            return [f"    {s.out} = np.empty({(rows, cols)}, np.{self.dt})",
                    f"    gemm_into({s.out}, {s.a.name}, {s.b.name}, {s.transpose_a}, "
                    f"{s.transpose_b}, {self.dt}(1), {self.dt}(0))  # {s.out} = {_matmul(s)}"]
        return super().statement(s)

    def elementwise(self, s: Elementwise) -> list[str]:
        space = s.expr.shape
        if not space:
            return [f"    {s.out} = {self.element(s.expr, ())}"]
        return [f"    {s.out} = np.empty({space}, np.{self.dt})",
                *_loops(space, f"{s.out}[{_index(space, space)}] = {self.element(s.expr, space)}")]

    def reduce(self, s: Reduce) -> list[str]:
        space = s.expr.shape
        kept = [f"i{d}" if d not in s.axes else "0" for d in range(len(space))]
        index = kept if s.keepdims else [k for d, k in enumerate(kept) if d not in s.axes]
        target = f"{s.out}[{', '.join(index)}]" if s.shape else s.out
        init = f"np.zeros({s.shape}, np.{self.dt})" if s.shape else f"{self.dt}(0)"
        lines = [f"    {s.out} = {init}",
                 *_loops(space, f"{target} += {self.element(s.expr, space)}")]
        if s.count != 1:
            lines.append(f"    {s.out} /= {self.dt}({float(s.count)!r})")
        return lines

    def update(self, s: Update) -> list[str]:
        w, m, scale = s.variable.name, s.product, s.scale
        if m is not None and scale is not None and id(m) in self.into:
            alpha = f"-{scale.text}" if s.sign == "-" else scale.text
            return [f"    gemm_into({w}, {m.a.name}, {m.b.name}, {m.transpose_a}, "
                    f"{m.transpose_b}, {alpha}, {self.dt}(1))  "
                    f"# {w} {s.sign}= {scale.text} * {_matmul(m)}"]
        space = s.variable.shape
        return _loops(space, f"{w}[{_index(space, space)}] {s.sign}= {self.element(s.expr, space)}")


class CupyDialect(Dialect):
    """NumPy's calls through CuPy, except that each elementwise chain and each update is one
    generated ``ElementwiseKernel``: its CUDA C goes into ``kernels``, name -> (in, out, body)."""

    def __init__(self, program: Program, kernels: dict[str, Any]) -> None:
        super().__init__(program)
        self.kernels = kernels
        self.ctype = {"float32": "float32", "float64": "float64"}[self.dt]
        self.c_scalar = {"float32": "float", "float64": "double"}[self.dt]

    def element(self, expr: Expr) -> str:
        """One element of expr in CUDA C (an ElementwiseKernel broadcasts its arguments)."""
        if isinstance(expr, Literal):
            return f"(({self.c_scalar}){expr.value!r})"
        if isinstance(expr, Leaf):
            return expr.name
        template = expr.cuda or expr.numba
        return template.format(*(self.element(a) for a in expr.args))

    def kernel(self, ins: list[str], out: str, body: str) -> str:
        name = f"k{len(self.kernels)}"
        self.kernels[name] = (", ".join(f"{self.ctype} {n}" for n in ins),
                              f"{self.ctype} {out}", body)
        return name

    def elementwise(self, s: Elementwise) -> list[str]:
        if not s.expr.shape:  # a scalar: on the host
            return super().elementwise(s)
        names, body = sorted(_leaf_names(s.expr)), self.element(s.expr)
        name = self.kernel(names, "out", f"out = {body}")
        # The output passed in: its shape, not the inputs' broadcast, is the loop's.
        out = f"np.empty({s.expr.shape}, np.{self.dt})"
        return [f"    {s.out} = {name}({', '.join([*names, out])})  # out = {body}"]

    def update(self, s: Update) -> list[str]:
        w, body = s.variable.name, self.element(s.expr)
        ins = [n for n in sorted(_leaf_names(s.expr)) if n != w]
        value = f"{w} {s.sign} ({body})" if s.sign else body
        name = self.kernel(ins, w, f"{w} = {value}")
        return [f"    {name}({', '.join([*ins, w])})  # {w} {s.sign}= {body}"]


def write(program: Program, dialect: Dialect) -> str:
    """The step as one Python function: each statement in order, in ``dialect``."""
    lines = [f"def step({', '.join(program.arguments)}):"]
    for s in program.statements:
        lines += dialect.statement(s)
    lines.append(f"    return ({''.join(r + ', ' for r in program.returns)})")
    return "\n".join(lines) + "\n"


def numpy_source(program: Program) -> str:
    """The fused path without Numba: whole-array NumPy calls."""
    return write(program, Dialect(program))


def numba_source(program: Program, gemm: bool = True) -> str:
    """The whole step as one function of explicit loops, for Numba to compile."""
    return write(program, NumbaDialect(program, gemm))


def cupy_source(program: Program, kernels: dict[str, Any] | None) -> str:
    """The step for CuPy, its kernels' CUDA C put into ``kernels``; where the library has no
    kernels (``kernels`` None: a stand-in for tests), the whole-array code through ``xp``."""
    return numpy_source(program) if kernels is None else write(program,
                                                               CupyDialect(program, kernels))


def _compile(source: str, dtype: np.dtype, **names: Any) -> Callable[..., tuple[Any, ...]]:
    namespace: dict[str, Any] = {"np": np, dtype.name: dtype.type, **names}
    exec(compile(source, "<edu_dl fused plan>", "exec"), namespace)  # our own source
    fn: Callable[..., tuple[Any, ...]] = namespace["step"]
    return fn


# BLAS's transa/transb flags: the characters 'T' (use the transpose) and 'N' (as stored).
TRANSPOSE, NO_TRANSPOSE = ord("T"), ord("N")


def _gemm_into(blas: Any, index: Any) -> Callable[..., None]:
    """``c = alpha * op(a) @ op(b) + beta * c`` in place, one BLAS gemm, for C-contiguous
    ``c`` (to BLAS, which reads columns, each matrix is its transpose: so it computes
    c.T = alpha * op(b).T @ op(a).T + beta * c.T). To be compiled by Numba; ``blas`` is a
    Fortran sgemm or dgemm, ``index`` its integer type (np.int64 for an ILP64 BLAS)."""

    def gemm_into(c: Any, a: Any, b: Any, transpose_a: bool, transpose_b: bool,
                  alpha: Any, beta: Any) -> None:
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)  # no copy when they are
        p, q = c.shape
        r = a.shape[0] if transpose_a else a.shape[1]
        if p == 0 or q == 0:
            return
        if r == 0:  # an empty sum: BLAS refuses the zero leading dimension it would get
            if beta == 0:
                c[:, :] = 0
            else:
                c *= beta
            return
        ints = np.array([q, p, r, b.shape[1], a.shape[1], q], index)
        scalars = np.empty(2, c.dtype)
        scalars[0], scalars[1] = alpha, beta
        flags = np.array([TRANSPOSE if transpose_b else NO_TRANSPOSE,
                          TRANSPOSE if transpose_a else NO_TRANSPOSE], np.uint8)
        blas(flags[0:].ctypes, flags[1:].ctypes, ints[0:].ctypes, ints[1:].ctypes,
             ints[2:].ctypes, scalars[0:].ctypes, b.ctypes, ints[3:].ctypes, a.ctypes,
             ints[4:].ctypes, scalars[1:].ctypes, c.ctypes, ints[5:].ctypes)

    return gemm_into


def numpy_blas(name: str) -> tuple[int, type] | None:
    """(address, integer type) of NumPy's own BLAS routine ``name`` ('sgemm'), the library the
    hand-written step's ``@`` calls, or None where it cannot be found. NumPy's wheels bundle
    OpenBLAS built with 64-bit integers and its symbols renamed (``scipy_sgemm_64_``);
    the search goes through NumPy's core extension, which links it."""
    import ctypes
    import importlib

    try:
        core = importlib.import_module("numpy._core._multiarray_umath")
        lib = ctypes.CDLL(core.__file__)
    except (ImportError, OSError):
        return None
    for symbol, index in ((f"scipy_{name}_64_", np.int64), (f"{name}_64_", np.int64)):
        found = getattr(lib, symbol, None)
        address = ctypes.cast(found, ctypes.c_void_p).value if found is not None else None
        if address:
            return address, index
    return None


def load_gemm(dtype: np.dtype) -> Any:
    """BLAS's gemm for ``dtype`` compiled into a Numba ``gemm_into``: NumPy's own BLAS, else
    SciPy's (the one Numba's ``np.dot`` calls, 10 to 17% slower at the lecture's sizes on one
    thread: OpenBLAS 0.3.30 against NumPy's 0.3.31, 2026-12-05); None without either."""
    if dtype not in _GEMMS:
        try:
            import ctypes

            from numba import njit
            from numba.extending import get_cython_function_address
            name = {"float32": "sgemm", "float64": "dgemm"}[dtype.name]
            found = numpy_blas(name)
            if found is None:
                found = (get_cython_function_address("scipy.linalg.cython_blas", name),
                         np.int32)
        except (ImportError, KeyError, ValueError):
            _GEMMS[dtype] = None
        else:
            address, index = found
            blas = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 13)(address)
            _GEMMS[dtype] = njit(_gemm_into(blas, index))
    return _GEMMS[dtype]


_GEMMS: dict[np.dtype, Any] = {}


def load_numba() -> Any:
    """Numba's ``njit``, or None where Numba is not installed (the NumPy fused path runs)."""
    try:
        from numba import njit
    except ImportError:
        return None
    return njit


# --------------------------------------------------------------------------- running


class FusedPlan:
    """A plan's fused step: NumPy code at first, Numba once the plan has run long enough."""

    def __init__(self, plan: Plan, program: Program, compile_now: bool | None) -> None:
        """``compile_now``: True compiles with Numba at once, False never, None when it pays."""
        self.plan, self.program = plan, program
        self.numba_code = ""  # written when compiled: it depends on SciPy's BLAS being there
        self.compiled = self.tried = False
        self.numpy_fn: Callable[..., tuple[Any, ...]] | None = None
        self.spent_s = 0.0  # time spent running the NumPy code, for the ski-rental rule
        self.array_class: Any = np.ndarray if not program.on_gpu else program.xp.ndarray
        if program.on_gpu:  # Numba compiles for the CPU: on a GPU, CuPy's generated kernels
            self.numpy_code = self._cupy_code()
            self.may_compile = False
            return
        self.numpy_code = numpy_source(program)
        self.fn = _compile(self.numpy_code, program.dtype)
        self.may_compile = compile_now is not False and load_numba() is not None
        if compile_now and self.may_compile:
            self.compile()

    def _cupy_code(self) -> str:
        xp = self.program.xp
        make = getattr(xp, "ElementwiseKernel", None)
        specs: dict[str, Any] | None = {} if make is not None else None
        code = cupy_source(self.program, specs)
        kernels = {name: make(ins, out, body, f"edu_dl_fused_{name}")
                   for name, (ins, out, body) in (specs or {}).items()} if make else {}
        self.fn = _compile(code, self.program.dtype, **kernels)
        # The code calls np.dot, np.maximum...: on the GPU those are CuPy's.
        self.fn.__globals__["np"] = xp
        self.gpu_kernels = len(kernels)
        return code

    @property
    def source(self) -> str:
        """The code that runs now (what ``plan.source`` shows)."""
        head = ("# fused plan, compiled by Numba (@njit)\n" if self.compiled
                else "# fused plan, CuPy (k0, k1...: generated ElementwiseKernels)\n"
                if self.program.on_gpu else "# fused plan, NumPy\n")
        return head + (self.numba_code if self.compiled else self.numpy_code)

    def compile(self) -> None:
        njit = load_numba()
        if njit is None:
            return
        gemm = load_gemm(self.program.dtype)
        self.numba_code = numba_source(self.program, gemm=gemm is not None)
        fn = njit(_compile(self.numba_code, self.program.dtype, gemm_into=gemm))
        self.numpy_fn, self.fn, self.compiled = self.fn, fn, True
        self.plan.source = self.source
        self.tried = False  # Numba compiles at the first call: that one may still fail

    def _first_compiled_call(self, args: list[Any]) -> tuple[Any, ...]:
        """Numba types and compiles now; if it cannot, the NumPy code stays (and says why)."""
        from numba.core.errors import NumbaError

        self.tried = True
        try:
            return self.fn(*args)
        except NumbaError as exc:  # raised while typing or lowering: nothing ran yet
            assert self.numpy_fn is not None
            self.fn, self.compiled, self.may_compile = self.numpy_fn, False, False
            self.plan.source = self.source + f"# (Numba could not compile it: {exc!s:.200})\n"
            return self.fn(*args)

    def run(self, feed_dict: Mapping[Any, Any], stored: Mapping[Node, Any],
            constants: Mapping[Node, Any]) -> tuple[Any, ...] | None:
        """The fetched values, or None when a guard fails (the Session runs the plan unfused)."""
        args: list[Any] = []
        dtype = self.program.dtype
        for ph, _, shape in self.program.placeholders:
            value: Any = feed_dict.get(ph)
            if (value.__class__ is not self.array_class or value.shape != shape
                    or value.dtype != dtype or not value.flags.c_contiguous):
                return None
            args.append(value)
        for var, _, _ in self.program.variables:
            value = stored.get(var)
            if value is None or var in feed_dict or not value.flags.c_contiguous:
                return None
            args.append(value)
        args += [constants[c] for c, _ in self.program.constants]
        if self.compiled:
            return self.fn(*args) if self.tried else self._first_compiled_call(args)
        start = time.perf_counter()
        out = self.fn(*args)
        self.spent_s += time.perf_counter() - start
        if self.may_compile and self.spent_s >= NUMBA_COMPILE_S:
            self.compile()
        return out
