"""``Session.run(fetches, feed_dict)``: TensorFlow 1.x's way to run a graph.

A Session keeps the Variables' values across runs; each set of fetches gets a plan once
(``plan.py``), compiled to one Python function (``codegen.py``), reused by every later run.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.autograd import core, fusion
from edu_dl.autograd.codegen import StepFailed, compile_steps
from edu_dl.autograd.nodes import (
    Assign,
    Graph,
    Node,
    OpNode,
    Placeholder,
    Variable,
    get_default_graph,
    shape_str,
    shapes_compatible,
)
from edu_dl.autograd.plan import Forward, Plan, Planner

OPTIMIZE = ("auto", "numba", "numpy", "off")


class Session:
    """Runs a Graph: ``sess.run(fetches, feed_dict)`` with fetches a node, a list or a dict.

    ``optimize``: after a plan's first run, fuse it (``fusion.py``): 'auto' compiles the fused
    step with Numba once that pays, 'numba' at once, 'numpy' never; 'off' keeps every plan as
    ``codegen.py`` writes it.

    Not thread-safe: each op node keeps one op instance, reused by every run of the Session.
    """

    def __init__(self, graph: Graph | None = None, device: str = "cpu",
                 optimize: str = "auto") -> None:
        if optimize not in OPTIMIZE:
            raise ValueError(f"Session: optimize must be one of {', '.join(OPTIMIZE)}, "
                             f"got {optimize!r}")
        self.optimize = optimize
        self.graph = graph or get_default_graph()
        self.device = backend.check_device(device)
        self.xp = backend.xp_for(device)
        self._variables: dict[Node, Any] = {}
        self._planner = Planner(self.graph, self.device)
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
        self._planner.clear()
        self._plans.clear()
        self._fed_shapes.clear()

    # ------------------------------------------------------------------ run
    def run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None) -> Any:
        """Evaluate ``fetches`` (a node, or a list, tuple or dict of nodes) given the feeds."""
        flat: list[Node] = []
        rebuild = _flatten_fetches(fetches, flat)
        feed_dict = feed_dict or {}
        plan = self._plan(flat, feed_dict)
        if plan.fused is not None:
            out = plan.fused.run(feed_dict, self._variables, self._planner.constants)
            if out is not None:  # None: a feed the fused step was not made for
                return rebuild(iter(self._fused_results(plan, flat, out)))
        values = self._execute(plan, feed_dict)
        # Fetches read the values of this run; assignments commit after, then report theirs.
        results: list[Any] = [None] * len(flat)
        for i in plan.value_fetches:
            results[i] = self._fetch_value(flat[i], values)
        self._commit(plan, values)
        for i in plan.assign_fetches:
            results[i] = self._fetch_value(flat[i], values)
        if not plan.fusion_tried:
            self._fuse(plan, flat, values)
        return rebuild(iter(results))

    def _fuse(self, plan: Plan, flat: list[Node], values: dict[Node, Any]) -> None:
        """Lower the plan once, with the shapes of its first run; keep it unfused if it can't."""
        plan.fusion_tried = True
        if self.optimize == "off":
            return
        try:
            program = fusion.lower(plan, flat, self._planner.constants, values, self.xp)
        except fusion.Unsupported as exc:
            plan.unfused_reason = str(exc)
            # Said once (a plan is lowered once), where fusion was asked for and there were
            # ops to fuse; 'auto' (the default) stays quiet: plan.unfused_reason says it.
            if self.optimize in ("numba", "numpy") and plan.steps:
                names = ", ".join(f"'{n.name}'" for n in flat)
                warnings.warn(f"Session(optimize={self.optimize!r}): the plan for {names} stays "
                              f"unfused (it runs as written, one call per op) because of {exc}",
                              fusion.UnfusedPlanWarning, stacklevel=3)
            return
        compile_now = {"auto": None, "numba": True, "numpy": False}[self.optimize]
        plan.fused = fusion.FusedPlan(plan, program, compile_now)
        plan.unfused_source, plan.source = plan.source, plan.fused.source

    def _fused_results(self, plan: Plan, flat: list[Node], out: tuple[Any, ...]) -> list[Any]:
        results: list[Any] = [None] * len(flat)
        dtype = plan.fused.program.dtype
        for i, value in zip(plan.value_fetches, out):
            # As _fetch_value gives them: on the host, a 0-d result as a NumPy scalar (Numba
            # gives a Python float, CuPy a 0-d device array).
            if isinstance(value, float | int):
                value = dtype.type(value)
            elif not isinstance(value, np.generic):
                value = backend.to_numpy(value)
                value = value[()] if value.ndim == 0 else value
            results[i] = value
        for i in plan.assign_fetches:
            node = flat[i]
            assert isinstance(node, Assign)
            results[i] = self._variables[node.variable].copy()
        return results

    def plan_for(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None) -> Plan:
        """The plan ``run`` uses for these fetches: made on first use, then reused."""
        flat: list[Node] = []
        _flatten_fetches(fetches, flat)
        return self._plan(flat, feed_dict or {})

    def _plan(self, flat: list[Node], feed_dict: Mapping[Any, Any]) -> Plan:
        if self.closed:
            raise RuntimeError("Session.run: this Session is closed")
        # Looked up by the feed's keys in their order (cheap), filed under the set too, so a
        # feed_dict written in another order still finds the one plan.
        key = (tuple(flat), tuple(feed_dict))
        plan = self._plans.get(key)
        if plan is None:
            same_set = (key[0], frozenset(feed_dict))
            plan = self._plans.get(same_set)
            if plan is None:
                plan = self._planner.plan(flat, feed_dict)
                plan.run_steps, plan.source = compile_steps(plan.steps)
            self._plans[key] = self._plans[same_set] = plan
        return plan

    def _fetch_value(self, node: Node, values: dict[Node, Any]) -> Any:
        value = values[node]
        cpu = value.__class__ is np.ndarray or isinstance(value, np.generic)
        out = value if cpu else backend.to_numpy(value)
        # The Session's own storage (a Variable, a constant, a folded value) or a view of it, as
        # reshape or a slice give: the caller must not alias it. An op's fresh result is theirs.
        if out is value and (not isinstance(node, OpNode) or out.base is not None
                             or node in self._planner.constants):
            out = out.copy()
        return out[()] if out.ndim == 0 else out

    def _execute(self, plan: Plan, feed_dict: Mapping[Any, Any]) -> dict[Node, Any]:
        constants = self._planner.constants
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
            step = plan.steps[failed.index]
            name = step.op.name if isinstance(step, Forward) else "gradients"
            arrays = [values.get(i) for i in step.node.inputs]
            raise core.op_error(failed.error, name, arrays, node=step.node.name) from failed.error
        for a in plan.assigns:
            shape = tuple(values[a.value].shape)
            var = a.variable
            if var.shape is not None and shape != var.shape:
                raise ValueError(f"Session.run: '{a.name}' would give Variable '{var.name}' of "
                                 f"shape {shape_str(var.shape)} a value of shape {shape}")
        return values

    def _commit(self, plan: Plan, values: dict[Node, Any]) -> None:
        """Apply the run's assignments, after it: every read in the run saw the old values."""
        stored = self._variables
        for a in plan.assigns:
            var, value = a.variable, values[a.value]
            if a.mode == "set" or var not in stored:
                if a.mode != "set":
                    raise RuntimeError(
                        f"Session.run: Variable '{var.name}' is not initialized; run "
                        f"sess.run(global_variables_initializer()) first")
                # A copy: the value may be a constant or a view the Session must not alias.
                stored[var] = self.xp.array(value, dtype=var.dtype)
            elif a.mode == "sub":
                stored[var] -= value
            else:
                stored[var] += value
            values[a] = stored[var]

    def _feed_value(self, node: Placeholder | Variable, value: Any) -> Any:
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
            if not shapes_compatible(shape, node.shape):
                raise ValueError(
                    f"Session.run: {type(node).__name__.lower()} '{node.name}' expects shape "
                    f"{shape_str(node.shape)}, but the value fed has shape {shape}")
            self._fed_shapes.add((node, shape))
        return array


def _flatten_fetches(fetches: Any, out: list[Node]) -> Any:
    """Collect the nodes of a fetch structure; return a function that rebuilds its shape."""
    if type(fetches) is list and all(isinstance(f, Node) for f in fetches):  # the common case
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
