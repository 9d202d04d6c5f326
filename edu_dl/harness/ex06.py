"""Exercise 6 (TensorFlow), public half: how its parts call a student's training function, and the
generic hints about a list of losses. Nothing here computes an answer.

The call adapters watch how the function ran (``Session.run`` in the TF 1.x parts, the number of
weight-shaped values crossing it, ``GradientTape.gradient`` in the tape part, the tracing count of
the returned ``tf.function``): feedback for ``check()`` only, the grader ignores it. The rules
compare a result with the expected losses (shipped anyway), never with a value computed from the
arguments; the mistake replays and the oracle stay in the private part file. Exercise 7 reuses
:func:`losses_of` and the rules for its own lists of losses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.hints import Rule
from edu_dl.grading.spec import CheckFailure

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


class SessionSpy:
    """Counts Session.run calls and the weight-shaped values fed in or fetched out of them.

    Only runs that fetch a value count (training steps); a run that fetches only operations, such
    as the initializer's, may be fed the initial weights once.
    """

    def __init__(self, weight_shapes: set[tuple[int, ...]]) -> None:
        self.weight_shapes = weight_shapes
        self.runs = 0
        self.weight_values = 0

    def _count(self, value: Any) -> None:
        shape = getattr(value, "shape", None)
        if shape is None and isinstance(value, list | tuple):
            shape = np.shape(value)
        if shape is not None and tuple(shape) in self.weight_shapes:
            self.weight_values += int(np.prod(shape))

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
            fetched = list(_leaves(result))
            if any(value is not None for value in fetched):
                # a training step (it fetches a value): an initializer run fetches only None
                for value in [*_leaves(feed_dict or {}), *fetched]:
                    spy._count(value)
            return result

        owner.run = run
        try:
            yield self
        finally:
            owner.run = original


# --------------------------------------------------------------------------- calls


def call_tf1(fn: Callable[..., Any], args: Case) -> Any:
    """fn(*args), which must run a Session."""
    with SessionSpy(set()).watching() as spy:
        result = fn(*args)
    if spy.runs == 0:
        raise CheckFailure(NO_SESSION)
    return result


def call_tf1_variables(fn: Callable[..., Any], args: Case) -> tuple[Any, int]:
    """(losses, how many weight or weight-gradient values crossed Session.run's boundary)."""
    weight_shapes = {np.shape(args[2]), np.shape(args[3])}
    with SessionSpy(weight_shapes).watching() as spy:
        result = fn(*args)
    if spy.runs == 0:
        raise CheckFailure(NO_SESSION)
    return result, spy.weight_values


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
