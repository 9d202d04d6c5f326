"""Exercise 8, autograd from scratch: how its parts call a student's function or engine.

Public code (a release names it by ``edu_dl.harness.ex08:<name>``), and it computes no answer
of any part: the adapters drive the student's own ``Tape`` on a program given as data, hand
the student's ``backward`` a tape recorded here with ops that are *not* the exercise's (a
weighted sum, sin, tanh: their gradients answer nothing the student writes), and hand the
guard (``edu_dl.grading.authoring.guard``) the copies they give in place of a case's arrays, so a
function that writes into them fails as one that writes into the case does. The oracles
(``torch.autograd``, central differences), the hidden cases and the mistake replays stay in the
course's private part file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import CheckFailure

Case = tuple[Any, ...]
Vjp = Callable[[Any], tuple[Any, ...]]

# --------------------------------------------------------------------------- inputs left alone


def call_leaving_inputs(fn: Callable[..., Any], args: Case) -> Any:
    """fn(*args). The guard every part runs under (``edu_dl.grading.authoring.guard``, in
    check() and in the grader alike) fails a case whose arguments the function wrote into; the
    name stays for the releases that refer to it."""
    return fn(*args)


def call_unbroadcast(fn: Callable[..., Any], args: Case) -> Any:
    """fn(grad, shape): a case stores the shape as an array of zeros of that shape (so a
    message shows it as a shape)."""
    grad, like = args
    return call_leaving_inputs(fn, (grad, tuple(int(d) for d in np.shape(like))))


# --------------------------------------------------------------------------- the student's tape

TAPE_OPS = ("add", "mul", "matmul", "exp", "log", "relu", "sum", "mean")


def call_tape_op(tape_class: Callable[[], Any], args: Case) -> Any:
    """(op, dout, *inputs): record ``op`` on a fresh student Tape, then call its record's vjp.

    Returns (the op's value, *the vjp's gradients), one gradient per input."""
    op, dout, *inputs = args
    op = str(op)
    if op not in TAPE_OPS:
        raise CheckFailure(f"unknown op {op!r}")
    tape = tape_class()
    ids = [tape.input(x) for x in inputs]  # the case's own arrays: the guard compares them
    out = getattr(tape, op)(*ids)
    if not tape.records:
        raise CheckFailure(f"Tape.{op} recorded nothing: append (output id, input ids, vjp) "
                           "to tape.records")
    record = tape.records[-1]
    if len(record) != 3 or record[0] != out or tuple(record[1]) != tuple(ids):
        raise CheckFailure(f"Tape.{op} returned id {out!r} for inputs {ids}, but its last "
                           f"record is ({record[0]!r}, {record[1]!r}, ...): each record is "
                           "(output id, input ids, vjp)")
    seed = guard.watch(1, np.array(dout, copy=True) if isinstance(dout, np.ndarray) else dout)
    grads = record[2](seed)
    if not isinstance(grads, tuple | list) or len(grads) != len(ids):
        raise CheckFailure(f"the vjp of Tape.{op} returned {type(grads).__name__}: return a "
                           f"tuple of {len(ids)} gradient(s), one per input")
    return (tape.values[out], *grads)


# --------------------------------------------------------------------------- a tape to replay

# A program given as data: rows (opcode, first input id, second input id), one per op. Its ops
# are none of the exercise's, so recording them here gives no answer away.
LINEAR, SIN, TANH = 0, 1, 2
OP_NAMES = {LINEAR: "weighted sum", SIN: "sin", TANH: "tanh"}


class RecordedTape:
    """A tape recorded by the harness, in the format of the exercise's ``Tape``:
    ``values[i]`` is variable i's value, ``records`` lists (output id, input ids, vjp)."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.records: list[tuple[int, tuple[int, ...], Vjp]] = []

    def input(self, value: Any) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def record(self, value: Any, inputs: tuple[int, ...], vjp: Vjp) -> int:
        out = self.input(value)
        self.records.append((out, inputs, vjp))
        return out


def _linear_vjp(c1: float, c2: float) -> Vjp:
    """A weight of exactly 1 hands dout on itself, as a real add's vjp does: a backward that
    keeps that reference and adds into it later changes the caller's dout (the guard sees it)."""
    return lambda dout: (dout if c1 == 1.0 else c1 * dout, dout if c2 == 1.0 else c2 * dout)


def _sin_vjp(x: np.ndarray) -> Vjp:
    return lambda dout: (dout * np.cos(x),)


def _tanh_vjp(t: np.ndarray) -> Vjp:
    return lambda dout: (dout * (1.0 - t * t),)


def record_program(leaves: np.ndarray, program: np.ndarray, coeffs: np.ndarray) -> RecordedTape:
    """The tape of ``program`` run on the rows of ``leaves`` (ids 0..L-1); op k makes id L+k."""
    tape = RecordedTape()
    for leaf in np.asarray(leaves, dtype=np.float64):
        tape.input(leaf)
    for (code, i, j), (c1, c2) in zip(np.asarray(program, dtype=np.int64).tolist(),
                                      np.asarray(coeffs, dtype=np.float64).tolist()):
        a, b = tape.values[i], tape.values[j]
        if code == LINEAR:
            tape.record(c1 * a + c2 * b, (i, j), _linear_vjp(c1, c2))
        elif code == SIN:
            tape.record(np.sin(a), (i,), _sin_vjp(a))
        elif code == TANH:
            t = np.tanh(a)
            tape.record(t, (i,), _tanh_vjp(t))
        else:
            raise CheckFailure(f"unknown opcode {code}")
    return tape


def call_backward(fn: Callable[..., Any], args: Case) -> Any:
    """(leaves, program, coeffs, dout): fn(tape, output id, dout) on the harness's tape; the
    gradients of the leaves, stacked as leaves are."""
    leaves, program, coeffs, dout = args
    tape = record_program(leaves, program, coeffs)
    output = len(tape.values) - 1
    seed = guard.watch(3, np.array(dout, copy=True))  # argument 3: the caller's dout
    grads = fn(tape, output, seed)
    if not isinstance(grads, Sequence) or len(grads) != len(tape.values):
        raise CheckFailure(f"backward returned a {type(grads).__name__} of "
                           f"{len(grads) if isinstance(grads, Sequence) else '?'} items: "
                           f"return one gradient per variable of the tape ({len(tape.values)})")
    for i in range(len(np.asarray(leaves))):  # a leaf's gradient that IS dout: a reference kept
        guard.alias(3, grads[i], seed)
    return np.stack([np.asarray(grads[i], dtype=np.float64)
                     for i in range(len(np.asarray(leaves)))])


# --------------------------------------------------------------------------- source checks

LIBRARY_GRADIENTS = ("backward", "gradients", "autograd", "torch", "gradcheck", "ops", "tensor",
                     "Tensor", "grad", "loss_and_grad", "jacobian")
BY_HAND = names_check(forbidden=[(
    LIBRARY_GRADIENTS,
    "this part asks you to derive the gradient yourself, from the local derivative and dout "
    "(do not call .backward(), torch.autograd, edu_dl's tensors, ops or gradient check, or "
    "edu_dl.models.spec.loss_and_grad)")])
NO_LIBRARY_LAYER = names_check(forbidden=[(
    ("torch", "nn", "functional", "batch_norm", "BatchNorm1d", "dropout", "Dropout"),
    "this part asks you to write the layer yourself with NumPy (do not call torch's or "
    "edu_dl.nn's BatchNorm or dropout)")])
