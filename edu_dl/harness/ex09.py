"""Exercise 9 (TensorFlow), public half: how its parts call a student's training function, and the
generic hints about a list of losses. Nothing here computes an answer.

The call adapters watch how the function ran (``Session.run`` in the TF 1.x parts: the graphs
the training runs used, whether each run updated the Variables and read them in order;
``GradientTape.gradient`` in the tape part, the tracing count of the returned ``tf.function``):
feedback for ``check()`` only, the grader ignores it. The rules compare a result with the
expected losses (shipped anyway), never with a value computed from the arguments; the mistake
replays and the oracle stay in the private part file. Exercise 10 reuses :func:`losses_of` and the
rules for its own lists of losses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule
from edu_dl.grading.authoring.spec import CheckFailure

Case = tuple[Any, ...]

NO_SESSION = ("your function never ran a tf.compat.v1.Session: write it in TF 1.x graph mode "
              "(placeholders, tf.compat.v1.gradients, sess.run(..., feed_dict=...)) inside "
              "`with tf.Graph().as_default():`")


# --------------------------------------------------------------------------- the losses


def losses_of(result: Any) -> np.ndarray:
    """The losses in a result: the result itself, or its first output (a Mistake's ``view``)."""
    return np.asarray(result[0] if isinstance(result, tuple) else result, dtype=np.float64)


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


@dataclass(frozen=True)
class Stuck(Rule):
    """More than one loss, all equal to the first expected loss: the weights never changed."""

    rtol: float = 1e-9
    atol: float = 1e-12

    def judge(self, expected: Any, got: Any, args: Case) -> bool:
        mine = losses_of(got)
        return len(mine) > 1 and _close(mine, np.full(len(mine), losses_of(expected)[0]),
                                        self.rtol, self.atol)


@dataclass(frozen=True)
class Imprecise(Rule):
    """The losses differ from the expected ones at ``rtol`` but agree at ``loose_rtol`` (say,
    float32 precision where float64 is asked for)."""

    rtol: float = 1e-9
    loose_rtol: float = 1e-4
    atol: float = 1e-12

    def judge(self, expected: Any, got: Any, args: Case) -> bool:
        mine, want = losses_of(got), losses_of(expected)
        return not _close(mine, want, self.rtol, self.atol) and _close(
            mine, want, self.loose_rtol, self.atol)


@dataclass(frozen=True)
class ObservedMore(Rule):
    """Output ``index`` (a count the call observed) exceeds the expected count. Judged whichever
    output failed (``output`` stays None): the observation explains the losses too, say a race
    that mixed old and new weights into them."""

    index: int = 1

    def judge(self, expected: Any, got: Any, args: Case) -> bool:
        return float(got[self.index]) > float(expected[self.index])


# --------------------------------------------------------------------------- spies


def _leaves(value: Any) -> Iterator[Any]:
    """The values in a nest of lists, tuples and dicts (what Session.run takes and returns)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _is_update(op: Any) -> bool:
    """An op that writes a Variable: assign, assign_sub, an optimizer's apply."""
    return "Assign" in op.type or op.type.startswith(("Apply", "ResourceApply", "Scatter",
                                                      "ResourceScatter"))


def _ancestors(ops: list[Any], stop: Callable[[Any], bool] = lambda op: False) -> set[Any]:
    """The ops these ops depend on (themselves included), through inputs and control inputs,
    not walking past an op for which ``stop`` holds."""
    seen: set[Any] = set()
    todo = list(ops)
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        if not stop(op):
            todo.extend(t.op for t in op.inputs)
            todo.extend(op.control_inputs)
    return seen


@dataclass
class RunSeen:
    """One training run (a Session.run that fetched a value), as the graph says it ran."""

    updates: bool  # it wrote a Variable
    unordered_reads: bool  # a fetched value reads an updated Variable, unordered with its update


def classify_run(graph: Any, fetches: Any) -> RunSeen:
    """Whether a run updates Variables, and whether a value it fetches reads an updated
    Variable with nothing ordering that read before or after the update (TensorFlow may then
    run them in either order)."""
    elements = []
    for fetch in _leaves(fetches):
        try:
            elements.append(graph.as_graph_element(fetch, allow_tensor=True,
                                                   allow_operation=True))
        except Exception:  # not a graph element (a string TF would refuse, say): no op
            continue
    ops = [e if not hasattr(e, "op") else e.op for e in elements]
    updates = [op for op in _ancestors(ops) if _is_update(op)]
    values = [e.op for e in elements if hasattr(e, "op")]
    # The reads a fetched value uses itself, not the ones that only feed an update.
    reads = [op for op in _ancestors(values, stop=_is_update) if op.type == "ReadVariableOp"]
    unordered = False
    for read in reads:
        handle = read.inputs[0].op  # the Variable's VarHandleOp
        writes = [u for u in updates if u.inputs and u.inputs[0].op is handle]
        if not writes:
            continue
        before = _ancestors(list(writes))  # the read feeds the update: ordered before it
        after = _ancestors([read])  # the update precedes the read
        if read not in before and not any(u in after for u in writes):
            unordered = True
    return RunSeen(bool(updates), unordered)


class SessionSpy:
    """Watches Session.run: the training runs (those that fetch a value; an initializer's run
    fetches only None) and the graph each ran, by identity and size.

    ``graphs_built`` counts the distinct graphs the training runs used, a graph that grew ops
    between two runs counting again; the graphs are kept, so no freed graph's id is reused.
    With ``classify``, each training run is also described by :func:`classify_run`.
    """

    def __init__(self, classify: bool = False) -> None:
        self.classify = classify
        self.runs = 0
        self.graphs: list[tuple[Any, int]] = []
        self.seen: list[RunSeen] = []

    @property
    def graphs_built(self) -> int:
        return len(self.graphs)

    def _training_run(self, session: Any, fetches: Any) -> None:
        graph = session.graph
        state = (graph, len(graph.get_operations()))
        if not any(g is graph and n == state[1] for g, n in self.graphs):
            self.graphs.append(state)
        if self.classify:
            self.seen.append(classify_run(graph, fetches))

    @contextlib.contextmanager
    def watching(self) -> Iterator[SessionSpy]:
        import tensorflow as tf

        # BaseSession.run serves Session, InteractiveSession, Tensor.eval and Operation.run.
        owner = next(c for c in tf.compat.v1.Session.__mro__ if "run" in c.__dict__)
        original = owner.__dict__["run"]
        spy = self

        def run(session: Any, fetches: Any, feed_dict: Any = None, *args: Any,
                **kwargs: Any) -> Any:
            result = original(session, fetches, feed_dict, *args, **kwargs)
            spy.runs += 1
            if any(value is not None for value in _leaves(result)):
                spy._training_run(session, fetches)
            return result

        owner.run = run
        try:
            yield self
        finally:
            owner.run = original


# --------------------------------------------------------------------------- calls

FIXED_BATCH = ("a placeholder's shape fixed the batch size, so a batch of another size could not "
               "be fed: leave the batch dimension of the placeholders unknown, so that the one "
               "graph takes every batch")


def call_tf1_minibatch(fn: Callable[..., Any], args: Case) -> tuple[Any, int]:
    """(losses, how many graphs the training runs used: 1 when the graph is built once)."""
    with SessionSpy().watching() as spy:
        try:
            result = fn(*args)
        except ValueError as exc:
            if "Cannot feed value of shape" in str(exc):
                raise CheckFailure(f"{FIXED_BATCH} ({str(exc).splitlines()[0]})") from None
            raise
    if spy.runs == 0:
        raise CheckFailure(NO_SESSION)
    return result, spy.graphs_built


def call_tf1_loss_after_update(fn: Callable[..., Any], args: Case) -> tuple[Any, int, int]:
    """(losses, training runs that updated no Variable, training runs whose fetched values read
    an updated Variable unordered with its update)."""
    with SessionSpy(classify=True).watching() as spy:
        result = fn(*args)
    if spy.runs == 0:
        raise CheckFailure(NO_SESSION)
    return (result, sum(not run.updates for run in spy.seen),
            sum(run.unordered_reads for run in spy.seen))


def call_tape(fn: Callable[..., Any], args: Case) -> Any:
    """fn(*args), which must call GradientTape.gradient."""
    import tensorflow as tf

    calls = [0]
    original = tf.GradientTape.__dict__["gradient"]

    def gradient(tape: Any, *a: Any, **kw: Any) -> Any:
        calls[0] += 1
        return original(tape, *a, **kw)

    tf.GradientTape.gradient = gradient
    try:
        result = fn(*args)
    finally:
        tf.GradientTape.gradient = original
    if calls[0] == 0:
        raise CheckFailure("your function never called tape.gradient: record the forward pass "
                           "in `with tf.GradientTape() as tape:` and take "
                           "tape.gradient(loss, [w1, w2])")
    return result


def call_tf_function(fn: Callable[..., Any], args: Case) -> tuple[Any, int]:
    """(losses, the returned tf.function's tracing count)."""
    import tensorflow as tf

    # Each case builds a new tf.function: TensorFlow's "retracing" warning would blame the check.
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        result = fn(*args)
    finally:
        logger.setLevel(level)
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise CheckFailure("return two things: (losses, train_step), train_step being the "
                           "tf.function you trained with")
    found, step = result
    count = getattr(step, "experimental_get_tracing_count", None)
    if count is None:
        raise CheckFailure(f"the second value returned is a {type(step).__name__}, not a "
                           "tf.function: wrap the step with tf.function and return it")
    return found, int(count())
