"""The student's own framework (``mytorch/``, issue 39): how exercises 10, 11, 12 and 18 drive the
layers, loss, optimizer, training step, schedule and attention a student writes, the layers on
their own exercise-8 engine.

Public code (a release names it by ``edu_dl.harness.mytorch:<name>``), and it computes no
answer: each adapter builds what a case describes from the student's own classes (their
``Tape`` and ``backward``, found in the package of the checked object), runs it, and returns
plain arrays for the grader to judge outside. The oracles (torch in float64) stay in the private
part file. A piece the student has not written yet raises NotImplementedError naming itself
(``edu-dl assign`` writes those stubs), so check() says which earlier piece to write first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.spec import CheckFailure, Verdict
from edu_dl.harness.ex07 import node_array

Case = tuple[Any, ...]


# The package the course's exercises have students write.
PACKAGE = "mytorch"


def package_module(obj: Any, name: str) -> ModuleType:
    """The module ``name`` ('tape') of the package that defines ``obj`` (the student's own,
    whatever they named it), or of ``mytorch`` where ``obj`` comes from no package (defined
    in the notebook); CheckFailure when there is none."""
    module = getattr(obj, "__module__", "") or ""
    package = module.partition(".")[0] if "." in module else PACKAGE
    try:
        return importlib.import_module(f"{package}.{name}")
    except ImportError as exc:
        raise CheckFailure(f"your package has no {package}/{name}.py that imports "
                           f"({exc})") from None


def engine(obj: Any) -> tuple[Any, Callable[..., Any]]:
    """The student's ``Tape`` class and ``backward`` function (their ``tape.py``)."""
    tape = package_module(obj, "tape")
    cls, backward = getattr(tape, "Tape", None), getattr(tape, "backward", None)
    if not callable(cls) or not callable(backward):
        raise CheckFailure(f"{tape.__name__} must define Tape and backward (exercise 08)")
    return cls, backward


def _array(value: Any, what: str) -> np.ndarray:
    """A result as a float64 array; CheckFailure naming ``what`` for anything else."""
    try:
        return np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise CheckFailure(f"{what} is {type(value).__name__}, not a number or an array of "
                           "numbers") from None


def _grads(grads: Any, ids: Any, what: str) -> list[np.ndarray]:
    """The gradients of the tape ids ``ids`` from ``backward``'s list."""
    try:
        return [_array(grads[i], f"backward's gradient of {what}") for i in ids]
    except (TypeError, IndexError, KeyError):
        raise CheckFailure(f"{what}'s ids ({ids!r}) are not ids of the tape backward "
                           "differentiated") from None


def run_layer(layer: Any, called: str, args: Case) -> tuple[np.ndarray, ...]:
    """A layer built by the student's class (``called``: how, for messages), given the case's
    weight and bias (arguments 1 and 2) in place of its own, run on the student's tape on x
    (argument 0) and differentiated by their backward from dout (argument 3):
    (value, dx, dweight, dbias)."""
    x, weight, bias, dout = args[:4]
    Tape, backward = engine(type(layer))
    for name, arg, value in (("weight", 1, weight), ("bias", 2, bias)):
        have = np.shape(getattr(layer, name, None))  # type: ignore[arg-type]
        if have != value.shape:
            raise CheckFailure(f"{called}.{name} has shape {have}, not {value.shape}")
        setattr(layer, name, guard.watch(arg, value.copy()))
    tape = Tape()
    xs = tape.input(guard.watch(0, x.copy()))
    out = layer(tape, xs)
    ids = list(getattr(layer, "ids", []))
    if len(ids) != 2:
        raise CheckFailure(f"after a forward pass, {type(layer).__name__}.ids should hold the "
                           f"tape ids of weight and bias (2 ids), not {ids!r}")
    grads = backward(tape, out, dout.copy())
    value = _array(tape.values[out], "the layer's value")
    return (value, *_grads(grads, [xs, *ids], "x, weight and bias"))


def call_linear(cls: Any, args: Case) -> tuple[np.ndarray, ...]:
    """Linear(n_in, n_out, rng) with the case's weight and bias (x, weight, bias, dout), on the
    student's tape: (value, dx, dweight, dbias)."""
    n_in, n_out = args[1].shape
    return run_layer(cls(n_in, n_out, np.random.default_rng(0)), f"Linear({n_in}, {n_out})",
                     args)


def call_conv2d(cls: Any, args: Case) -> tuple[np.ndarray, ...]:
    """Conv2d(C, O, k, rng, stride, pad, dilation) with the case's weight and bias (x, weight,
    bias, dout, stride, pad, dilation), on the student's tape: (value, dx, dweight, dbias)."""
    k, _, c_in, c_out = args[1].shape
    stride, pad, dilation = (int(v) for v in args[4:7])
    layer = cls(c_in, c_out, k, np.random.default_rng(0), stride=stride, pad=pad,
                dilation=dilation)
    return run_layer(layer, f"Conv2d({c_in}, {c_out}, {k})", args)


def call_cross_entropy(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, np.ndarray]:
    """cross_entropy(tape, logits id, y) on the student's tape, then backward from dout:
    (loss, dlogits)."""
    logits, y, dout = args
    Tape, backward = engine(fn)
    tape = Tape()
    ids = tape.input(guard.watch(0, logits.copy()))
    loss = fn(tape, ids, guard.watch(1, y.copy()))
    grads = backward(tape, loss, np.array(float(dout)))
    return _array(tape.values[loss], "the loss"), _grads(grads, [ids], "the logits")[0]


def call_sgd(cls: Any, args: Case) -> np.ndarray:
    """SGD(params, lr, momentum) over the case's two parameters, stepped once per gradient set:
    the parameters after every step, flattened side by side (steps, size)."""
    w, b, grads_w, grads_b, lr, momentum = args
    params = [w.copy(), b.copy()]  # updated in place: the contract
    optimizer = cls(params, lr=float(lr), momentum=float(momentum))
    seen = []
    for gw, gb in zip(grads_w, grads_b):
        result = optimizer.step([guard.watch(2, gw.copy()), guard.watch(3, gb.copy())])
        if result is not None:
            raise CheckFailure("step() updates the parameters in place and returns nothing, "
                               f"got {type(result).__name__}")
        seen.append(np.concatenate([params[0].ravel(), params[1].ravel()]))
    return np.array(seen)


def call_train_step(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, ...]:
    """num_steps of fn(model, optimizer, x, y) for Linear -> ReLU -> Linear built from the
    student's own nn module with the case's weights, and an SGD with the case's lr and
    momentum: (losses, W1, b1, W2, b2) after the last step."""
    x, y, w1, b1, w2, b2, lr, momentum, num_steps = args
    nn = package_module(fn, "nn")
    rng = np.random.default_rng(0)
    first, second = nn.Linear(*w1.shape, rng), nn.Linear(*w2.shape, rng)
    first.weight, first.bias = w1.copy(), b1.copy()
    second.weight, second.bias = w2.copy(), b2.copy()
    model = nn.Sequential(first, nn.ReLU(), second)
    optimizer = nn.SGD(model.parameters(), lr=float(lr), momentum=float(momentum))
    losses = [fn(model, optimizer, guard.watch(0, x.copy()), guard.watch(1, y.copy()))
              for _ in range(int(num_steps))]
    return (_array(losses, "train_step's losses"), first.weight, first.bias, second.weight,
            second.bias)


def call_attention(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, ...]:
    """attention(tape, q, k, v, causal) on the student's tape, then backward from dout:
    (out, dq, dk, dv)."""
    q, k, v, dout, causal = args
    Tape, backward = engine(fn)
    tape = Tape()
    ids = [tape.input(guard.watch(i, a.copy())) for i, a in enumerate((q, k, v))]
    out = fn(tape, *ids, bool(causal))
    grads = backward(tape, out, dout.copy())
    return (_array(tape.values[out], "the output"), *_grads(grads, ids, "q, k and v"))


def call_schedule(fn: Callable[..., Any], args: Case) -> np.ndarray:
    """fn(parents, fetches) as a 1-D int64 array, its order kept (the order is what is judged);
    CheckFailure for anything that is not a sequence of integers."""
    result = fn(*args)
    try:
        order = np.asarray(list(result))
    except (TypeError, ValueError) as exc:
        raise CheckFailure(f"return node indices in order (a list or an array of ints), got "
                           f"{type(result).__name__} ({exc})") from None
    if order.size and (order.ndim != 1 or order.dtype.kind not in "iu"):
        raise CheckFailure(f"return a flat sequence of integer node indices, got shape "
                           f"{order.shape} of {order.dtype}")
    return order.astype(np.int64)


def schedule_compare(expected: Any, got: Any) -> Verdict:
    """Valid when ``got`` lists exactly the needed nodes (``expected``, sorted), each once; the
    order is judged by :func:`schedule_result_check`."""
    g, verdict = node_array(got, "node ids")
    if g is None:
        return verdict
    want = np.asarray(expected, dtype=np.int64)
    if len(g) == len(want) and np.array_equal(np.sort(g), want):
        return Verdict(True)
    have = set(g.tolist())
    missing = sorted(set(want.tolist()) - have)[:10]
    extra = sorted(have - set(want.tolist()))[:10]
    return Verdict(False, f"expected the {len(want)} nodes the fetches need, each once; got "
                          f"{len(g)} ids (missing {missing}, not needed {extra})")


def schedule_result_check(got: Any, args: Case) -> Verdict:
    """Each node of the schedule comes after all of its inputs."""
    parents = np.asarray(args[0])
    order = np.asarray(got).astype(np.int64).tolist()
    seen: set[int] = set()
    for node in order:
        if not 0 <= node < len(parents):
            return Verdict(False, f"node {node} is not a node of the graph")
        late = [int(p) for p in parents[node] if p >= 0 and int(p) not in seen]
        if late:
            return Verdict(False, f"node {node} comes before its input {late[0]}")
        seen.add(node)
    return Verdict(True)
