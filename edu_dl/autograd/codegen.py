"""A static plan, compiled: one generated Python function runs all of a plan's steps.

A Session's plan is a list of steps: ops to run forward, and backward sweeps. Interpreting that
list on every run costs a dictionary lookup per input and per gradient, and a loop turn per step.
The plan never changes, so the Session writes it out once as straight-line Python, with every
value and every gradient in a local variable, and runs that function instead: what tf.function
does with a traced graph, in miniature. ``print(sess.plan_for(fetches, feed).source)`` shows it.

The generated code calls the very same op objects (``forward`` and ``backward``) as the eager
engine; it only removes the bookkeeping around them. A backward sweep is written by running the
core loop itself (``core.backward``) on the names of the gradients instead of arrays: each VJP it
asks for and each sum it makes becomes a line, so the code is that loop, unrolled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from edu_dl.autograd import core
from edu_dl.autograd.nodes import Node
from edu_dl.autograd.plan import CompiledSteps, Forward, Step, Sweep
from edu_dl.backend import ones_like


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
        self.grads = 0  # gradient locals named so far

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

    def grad(self) -> str:
        """A fresh local for a gradient."""
        self.grads += 1
        return f"g{self.grads - 1}"


def compile_steps(steps: Sequence[Step]) -> tuple[CompiledSteps, str]:
    """The function ``run(values, xp)`` doing ``steps`` in order, and its source."""
    w = _Writer()
    for index, step in enumerate(steps):
        w.line(f"at = {index}")
        if isinstance(step, Forward):
            args = ", ".join(["xp", *(w.value(i) for i in step.node.inputs)])
            w.store(step.node, f"{w.obj(step.op, 'op')}.forward({args})")
        else:
            _write_sweep(w, step, index)
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


def _write_sweep(w: _Writer, sweep: Sweep, index: int) -> None:
    """One backward pass: seed the ys, then run ``core.backward`` writing each step as a line."""
    w.line(f"# backward sweep {index}: core.backward over {len(sweep.order)} nodes")
    in_sweep = set(sweep.order)
    grads: dict[Node, str] = {}
    for i, y in enumerate(sweep.ys):
        if y not in in_sweep:
            continue  # y does not depend on any x asked for
        seed = w.value(sweep.grad_ys[i]) if sweep.grad_ys else f"ones_like(xp, {w.value(y)})"
        grads[y] = _add(w, grads[y], seed) if y in grads else _let(w, seed)

    def vjp(node: Node, grad: str) -> list[tuple[Node, str]]:
        for target in sweep.targets.get(node, ()):
            w.store(target, grad)
        op = sweep.ops.get(node)
        wanted = [x in in_sweep for x in node.inputs] if op is not None else []
        if not any(wanted):
            return []
        names = [w.grad() if want else "_" for want in wanted]
        lhs = f"({names[0]},)" if len(names) == 1 else ", ".join(names)
        w.line(f"{lhs} = {w.obj(op, 'op')}.backward({grad})")
        return [(x, name) for x, name, want in zip(node.inputs, names, wanted) if want]

    core.backward(sweep.order, grads, vjp, add=lambda a, b: _add(w, a, b))
    assert all(t in w.locals for ts in sweep.targets.values() for t in ts), "a gradient got none"


def _let(w: _Writer, expression: str) -> str:
    name = w.grad()
    w.line(f"{name} = {expression}")
    return name


def _add(w: _Writer, a: str, b: str) -> str:
    """The sum of two contributions, in a fresh local (the loop's ``add``)."""
    return _let(w, f"{a} + {b}")
