"""A Session's plan: what one set of fetches needs, in order, made once and then reused.

Planning is where "static graphs can be optimized" happens: only the nodes the fetches need are
kept (pruning), ops on constants run once (folding), and every gradient of one loss shares one
backward sweep. The steps are typed (``Forward``, ``Sweep``); ``codegen.py`` writes them out as
one Python function.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from edu_dl import backend
from edu_dl.autograd import core
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
    parents,
    reaching,
    shape_str,
)
from edu_dl.autograd.ops import Op


@dataclass(frozen=True)
class Forward:
    """Run one op: ``values[node] = op.forward(xp, *(values[i] for i in node.inputs))``."""

    node: OpNode
    op: Op


@dataclass
class Sweep:
    """One backward pass of the core loop (``core.backward``), from ys back to the xs that
    Gradient nodes ask for: the same loop the eager engine runs, over the same order."""

    ys: tuple[Node, ...]
    grad_ys: tuple[Node, ...]                       # the seeds; empty: ones
    targets: dict[Node, list[Gradient]]             # x -> the Gradient nodes that want d/dx
    order: list[Node] = field(default_factory=list)  # what a gradient flows through, inputs first
    ops: dict[Node, Op] = field(default_factory=dict)  # the op whose VJP each op node calls

    @property
    def node(self) -> Gradient:
        """The sweep's first Gradient node: errors are reported at it."""
        return next(iter(self.targets.values()))[0]


Step = Forward | Sweep
CompiledSteps = Callable[[dict[Node, Any], ModuleType], None]


@dataclass
class Plan:
    """The steps to run for one set of fetches; the Session runs them, then commits ``assigns``.

    The values of ``placeholders`` come from the feed, of ``variables`` from the Session, of
    ``constants`` (constant nodes and folded subgraphs) from the Planner's cache.
    """

    steps: list[Step]
    placeholders: list[Placeholder]
    variables: list[Variable]
    constants: list[Node]
    assigns: list[Assign]
    graph_size: int = 0
    folded: int = 0
    # Positions in the fetch list: nodes whose value the run returns, read before the
    # assignments commit, and assignments, which report the committed value.
    value_fetches: list[int] = field(default_factory=list)
    assign_fetches: list[int] = field(default_factory=list)
    # The steps written out as one Python function (see codegen.py), and its source.
    run_steps: CompiledSteps | None = None
    source: str = ""
    # After its first run: the plan fused (``fusion.FusedPlan``), or None where it cannot be;
    # ``source`` then shows the fused code, ``unfused_source`` the code above.
    fused: Any = None
    fusion_tried: bool = False
    unfused_reason: str = ""  # why the fusion refused it, where it did
    unfused_source: str = ""

    @property
    def ops_run(self) -> int:
        return sum(1 for step in self.steps if isinstance(step, Forward))

    @property
    def sweeps(self) -> list[Sweep]:
        return [step for step in self.steps if isinstance(step, Sweep)]

    def __str__(self) -> str:
        swept = sum(len(s.order) for s in self.sweeps)
        return (f"plan: runs {_count(self.ops_run, 'op')} of the "
                f"{_count(self.graph_size, 'node')} in the graph; "
                f"{_count(self.folded, 'constant subgraph node')} folded once; "
                f"{_count(len(self.sweeps), 'backward sweep')} of {_count(swept, 'node')}; "
                f"{_count(len(self.assigns), 'assignment')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


class Planner:
    """Makes a Session's plans, and keeps what they share: one op object per op node (forward
    and backward run on the same one, as eagerly), and the values of folded nodes."""

    def __init__(self, graph: Graph, device: str) -> None:
        self.graph, self.device = graph, device
        self.xp = backend.xp_for(device)
        self.ops: dict[OpNode, Op] = {}
        self.constants: dict[Node, Any] = {}  # constants and folded subgraphs, on the device

    def clear(self) -> None:
        self.ops.clear()
        self.constants.clear()

    def plan(self, fetches: list[Node], fed: Collection[Node]) -> Plan:
        """The plan for ``fetches`` when the nodes ``fed`` get values from the feed_dict."""
        for n in fetches:
            if n.graph is not self.graph:
                raise ValueError(f"Session.run: fetch '{n.name}' belongs to another Graph "
                                 f"than this Session's")
        for key in fed:
            if not isinstance(key, Placeholder | Variable):
                what = (f"'{key.name}' ({type(key).__name__})" if isinstance(key, Node)
                        else repr(key))
                raise TypeError(f"Session.run: feed_dict keys must be placeholders or "
                                f"Variables, got {what}")
        order = core.toposort(fetches, parents)
        for p in order:
            if isinstance(p, Placeholder) and p not in fed:
                shape = "unknown" if p.shape is None else shape_str(p.shape)
                raise ValueError(
                    f"Session.run: placeholder '{p.name}' (shape {shape}, dtype {p.dtype}) "
                    f"needs a value: pass it in feed_dict")
        sweeps = self._sweeps([n for n in order if isinstance(n, Gradient)])
        differentiated = {n for s in sweeps.values() for n in s.ops}

        plan = Plan([], [], [], [], [], graph_size=len(self.graph.nodes))
        for n in order:
            if isinstance(n, Placeholder):
                plan.placeholders.append(n)
            elif isinstance(n, Variable):
                plan.variables.append(n)
            elif isinstance(n, Constant) or (n not in differentiated and self._foldable(n)):
                plan.folded += isinstance(n, OpNode)
                self._fold(n)
                plan.constants.append(n)
            elif isinstance(n, OpNode):
                plan.steps.append(Forward(n, self.op(n)))
            elif isinstance(n, Gradient):
                sweep = sweeps.pop((n.ys, n.grad_ys), None)
                if sweep is not None:  # the first Gradient node of a sweep runs all of it
                    plan.steps.append(sweep)
            elif isinstance(n, Assign):
                plan.assigns.append(n)
            else:
                assert isinstance(n, Group)  # runs its inputs, has no value
        plan.value_fetches = [i for i, n in enumerate(fetches)
                              if not isinstance(n, Assign | Group)]
        plan.assign_fetches = [i for i, n in enumerate(fetches) if isinstance(n, Assign)]
        return plan

    def op(self, node: OpNode) -> Op:
        """The op object of ``node``, shared by every plan of the Session."""
        op = self.ops.get(node)
        if op is None:
            op = self.ops[node] = node.make_op()
            op.needs = (False,) * len(node.inputs)
        return op

    def _sweeps(self, gradient_nodes: list[Gradient]) -> dict[Any, Sweep]:
        """One Sweep per (ys, grad_ys): several gradients of one loss share one pass."""
        sweeps: dict[Any, Sweep] = {}
        for g in gradient_nodes:
            sweep = sweeps.setdefault((g.ys, g.grad_ys), Sweep(g.ys, g.grad_ys, {}))
            sweep.targets.setdefault(g.x, []).append(g)
        for sweep in sweeps.values():
            sweep.order = reaching(sweep.ys, set(sweep.targets))
            reach = set(sweep.order)
            for n in sweep.order:
                if isinstance(n, OpNode):
                    op = sweep.ops[n] = self.op(n)
                    # Union over plans: a gradient computed but unused is harmless.
                    op.needs = tuple(a or (i in reach) for a, i in zip(op.needs, n.inputs))
        return sweeps

    def _foldable(self, n: Node) -> bool:
        """An op whose inputs are all constants (or folded): its value never changes."""
        return isinstance(n, OpNode) and n.op.pure and all(
            i in self.constants or isinstance(i, Constant) for i in n.inputs)

    def _fold(self, n: Node) -> None:
        """Compute n's value once. Its inputs come first in a plan's order, so are folded."""
        if n in self.constants:
            return
        if isinstance(n, Constant):
            self.constants[n] = backend.to_device(n.value, self.device)
            return
        assert isinstance(n, OpNode)
        op = n.make_op()
        arrays = [self.constants[i] for i in n.inputs]
        try:
            self.constants[n] = op.forward(self.xp, *arrays)
        except (ValueError, TypeError, IndexError) as exc:
            raise core.op_error(exc, op.name, arrays, node=n.name) from exc

