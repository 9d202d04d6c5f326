"""A static plan, compiled: one generated Python function runs all of a plan's steps.

A Session's plan is a list of steps: ops to run forward, and backward sweeps. Interpreting that
list on every run costs a dictionary lookup per input and per gradient, and a loop turn per step.
The plan never changes, so the Session writes it out once as straight-line Python, with every
value and every gradient in a local variable, and runs that function instead: what tf.function
does with a traced graph, in miniature. ``print(sess.plan_for(fetches, feed).source)`` shows it.

The generated code calls the very same op objects (``forward`` and ``backward``) as the eager
engine; it only removes the bookkeeping around them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..backend import ones_like

# (node, op, inputs, sweep) as in Plan.steps; a sweep has ys, grad_ys, order and steps.
Step = tuple[Any, Any, tuple[Any, ...], Any]
CompiledSteps = Callable[[dict[Any, Any], Any], None]


class StepFailed(Exception):
    """Raised by a compiled plan: step ``index`` raised ``error``."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(index, error)
        self.index, self.error = index, error


class _Writer:
    """Builds the source: names for nodes, ops and values, and the lines of the body."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {"ones_like": ones_like, "StepFailed": StepFailed}
        self.object_names: dict[int, str] = {}
        self.counts: dict[str, int] = {}  # names given so far, per prefix
        self.locals: dict[Any, str] = {}
        self.loads: list[str] = []
        self.body: list[str] = []

    def obj(self, thing: Any, prefix: str) -> str:
        """A global name of the generated function for a node or an op object."""
        name = self.object_names.get(id(thing))
        if name is None:
            count = self.counts.get(prefix, 0)
            self.counts[prefix] = count + 1
            name = self.object_names[id(thing)] = f"{prefix}{count}"
            self.objects[name] = thing
        return name

    def value(self, node: Any) -> str:
        """The local holding node's value; loaded from ``values`` if no step computes it."""
        name = self.locals.get(node)
        if name is None:
            name = self.locals[node] = f"v{len(self.locals)}"
            self.loads.append(f"    {name} = values.get({self.obj(node, 'n')})")
        return name

    def store(self, node: Any, expression: str) -> None:
        """Compute node's value into a fresh local, and into ``values`` for the Session."""
        name = self.locals[node] = f"v{len(self.locals)}"
        self.body += [f"        {name} = {expression}",
                      f"        values[{self.obj(node, 'n')}] = {name}"]

    def line(self, text: str, indent: int = 2) -> None:
        self.body.append("    " * indent + text)


def compile_steps(steps: Sequence[Step]) -> tuple[CompiledSteps, str]:
    """The function ``run(values, xp)`` doing ``steps`` in order, and its source."""
    w = _Writer()
    for index, (node, op, inputs, sweep) in enumerate(steps):
        w.line(f"at = {index}")
        if op is not None:
            args = ", ".join(["xp", *(w.value(i) for i in inputs)])
            w.store(node, f"{w.obj(op, 'op')}.forward({args})")
        elif sweep is not None:
            _write_sweep(w, sweep, index)
    source = "\n".join([
        "def run(values, xp):",
        *w.loads,
        "    at = -1",
        "    try:",
        *(w.body or ["        pass"]),
        "    except (ValueError, TypeError, IndexError) as exc:",
        "        raise StepFailed(at, exc) from exc",
    ]) + "\n"
    namespace = dict(w.objects)
    exec(compile(source, "<edu_dl compiled plan>", "exec"), namespace)  # our own source
    run: CompiledSteps = namespace["run"]
    return run, source


def _write_sweep(w: _Writer, sweep: Any, index: int) -> None:
    """One reverse sweep: seed the ys, then each node's VJP, newest node first."""
    grads = {node: f"g{index}_{j}" for j, node in enumerate(sweep.order)}
    w.line(f"# backward sweep {index}: {len(sweep.order)} nodes")
    if grads:
        w.line(" = ".join(grads.values()) + " = None")
    for i, y in enumerate(sweep.ys):
        if y not in grads:
            continue  # y does not depend on any x asked for
        seed = w.value(sweep.grad_ys[i]) if sweep.grad_ys else f"ones_like(xp, {w.value(y)})"
        _accumulate(w, grads[y], seed, indent=2)
    for node, op, targets in sweep.steps:
        g = grads[node]
        if targets:
            w.line(f"result = {g} if {g} is not None else xp.zeros_like({w.value(node)})")
            for target in targets:
                w.store(target, "result")
        if op is None:
            continue
        wanted = [(i, x) for i, x in enumerate(node.inputs) if x in grads]
        if not wanted:
            continue
        w.line(f"if {g} is not None:")
        w.line(f"vjp = {w.obj(op, 'op')}.backward({g})", indent=3)
        for i, x in wanted:
            w.line(f"if vjp[{i}] is not None:", indent=3)
            _accumulate(w, grads[x], f"vjp[{i}]", indent=4)


def _accumulate(w: _Writer, grad: str, expression: str, indent: int) -> None:
    """grad += expression, where None means no gradient yet."""
    w.line(f"{grad} = {expression} if {grad} is None else {grad} + {expression}", indent)
