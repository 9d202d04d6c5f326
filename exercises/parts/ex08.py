"""Exercise 8, static vs dynamic: a data-dependent RNN eagerly and unrolled, a Session's plan,
and a Caffe net's forward pass.

Oracles: ``torch.autograd`` for the RNN's loss and gradients (PyTorch runs the same program
define-by-run); a transitive closure by boolean matrix products for the plan (no graph search);
``edu_dl.caffe``'s own reader and ``Net`` for the Caffe forward pass.

Judged outside the sandbox: every value against the oracle (the plan as a set of integer node
ids, in linear time); for rnn_static also the submitted source: it runs an edu_dl.graph Session
(``source_check``). That a Session really ran is check()'s feedback only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.grading.source import names_check
from edu_dl.grading.spec import CheckFailure, Part, Verdict, tolerance

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-7, atol=1e-10)


def _close(a: Any, b: Any, rtol: float = 1e-7, atol: float = 1e-10) -> bool:
    try:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=rtol, atol=atol))


# --------------------------------------------------------------------------- the RNN


def _h_final(X: Array, W: Array, U: Array, steps: int | None = None) -> Array:
    h = np.zeros((1, W.shape[0]))
    for t in range(X.shape[0] if steps is None else steps):
        h = np.tanh(h @ W + X[t:t + 1] @ U)
    return h


def _rnn_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(X, W, U) with both branches met: sum(h) > 0 and sum(h) <= 0."""
    if not hidden:
        wanted = [(3, 5, 4, True), (5, 5, 4, False), (1, 2, 3, True)]
    else:
        wanted = [(int(rng.integers(1, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 6)),
                   bool(b)) for b in (True, False, rng.integers(0, 2), rng.integers(0, 2))]
    cases: list[Case] = []
    for T, D, H, positive in wanted:
        while True:
            X = rng.standard_normal((T, D))
            W, U = 0.5 * rng.standard_normal((H, H)), 0.5 * rng.standard_normal((D, H))
            s = _h_final(X, W, U).sum()
            if (s > 0) == positive and abs(s) > 1e-3:  # no case sits on the branch's edge
                cases.append((X, W, U))
                break
    return cases


def _rnn_expected(X: Array, W: Array, U: Array) -> tuple[float, Array, Array]:
    """The lecture's rnn_torch: loss and autograd's dW, dU."""
    import torch

    Wt = torch.tensor(W, dtype=torch.float64, requires_grad=True)
    Ut = torch.tensor(U, dtype=torch.float64, requires_grad=True)
    h = torch.zeros((1, W.shape[0]), dtype=torch.float64)
    for x_t in torch.tensor(X, dtype=torch.float64):
        h = torch.tanh(h @ Wt + x_t[None] @ Ut)
    loss = (h * h).sum() if h.sum() > 0 else -h.sum()
    loss.backward()
    assert Wt.grad is not None and Ut.grad is not None
    return loss.item(), Wt.grad.numpy().copy(), Ut.grad.numpy().copy()


def _loss(g: Any) -> Any:
    return g[0] if isinstance(g, tuple | list) and len(g) == 3 else None


def _one_step_short(g: Any, a: tuple[Any, ...]) -> bool:
    h = _h_final(a[0], a[1], a[2], steps=a[0].shape[0] - 1)
    return _close(_loss(g), (h**2).sum()) or _close(_loss(g), -h.sum())


RNN_HINTS = (
    (lambda e, g, a: _close(_loss(g), (_h_final(*a) ** 2).sum()) and not _close(_loss(g), e[0]),
     "the loss takes the other branch: when sum(h) <= 0 the loss is -sum(h); decide with the "
     "value, `if h.sum().item() > 0:`"),
    (lambda e, g, a: _close(_loss(g), -_h_final(*a).sum()) and not _close(_loss(g), e[0]),
     "the loss takes the other branch: when sum(h) > 0 the loss is sum(h * h)"),
    (lambda e, g, a: a[0].shape[0] > 1 and _one_step_short(g, a),
     "one step short: the loop runs over all T rows of X (T = X.shape[0])"),
    (lambda e, g, a: _close(_loss(g), e[0]) and (_close(g[1], e[1].T) or _close(g[2], e[2].T)),
     "the loss is right but a gradient looks transposed: dW has W's shape (H, H)"),
    (lambda e, g, a: _close(_loss(g), e[0]),
     "the loss is right but the gradients are not: make W and U tensors with "
     "requires_grad=True, call loss.backward() once, and return W.grad and U.grad as arrays"),
)


def _call_static(fn: Callable[..., Any], args: Case) -> Any:
    """Run fn, then check that an edu_dl.graph Session computed the result."""
    from edu_dl.autograd import graph

    runs = 0
    original = graph.Session.run

    def counting_run(self: Any, *a: Any, **kw: Any) -> Any:
        nonlocal runs
        runs += 1
        return original(self, *a, **kw)

    graph.Session.run = counting_run  # type: ignore[method-assign]
    try:
        result = fn(*args)
    finally:
        graph.Session.run = original  # type: ignore[method-assign]
    if runs == 0:
        raise CheckFailure("no edu_dl.graph Session ran: build the unrolled graph (placeholder, "
                           "Variable, eg.tanh, eg.matmul, eg.gradients) and fetch the values "
                           "with sess.run")
    return result


STATIC_SOURCE = names_check(required=[(
    ("Session",), "no edu_dl.graph Session runs in the function: build the unrolled graph "
                  "(placeholder, Variable, eg.tanh, eg.matmul, eg.gradients) and fetch the "
                  "values with sess.run")])


# --------------------------------------------------------------------------- the plan


def _random_parents(rng: np.random.Generator, n: int, sources: int) -> Array:
    parents = np.full((n, 3), -1, dtype=np.int64)
    for i in range(sources, n):
        k = int(rng.integers(1, min(3, i) + 1))
        parents[i, :k] = rng.choice(i, size=k, replace=False)
    return parents


# The lecture's graph: x, y, z (0-2), a = x * y (3), b = a + z (4), c = sum(b) (5), and a cheap
# branch d = sum(x) (6); then a constant (7), e = d * const (8).
LECTURE_PARENTS = np.array([[-1, -1, -1], [-1, -1, -1], [-1, -1, -1], [0, 1, -1], [3, 2, -1],
                            [4, -1, -1], [0, -1, -1], [-1, -1, -1], [6, 7, -1]], dtype=np.int64)


def _plan_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [(LECTURE_PARENTS, np.array([5])), (LECTURE_PARENTS, np.array([6])),
                (LECTURE_PARENTS, np.array([8, 3]))]
    cases: list[Case] = []
    for _ in range(4):
        n = int(rng.integers(6, 25))
        parents = _random_parents(rng, n, int(rng.integers(1, 4)))
        fetches = rng.choice(n, size=int(rng.integers(1, 4)), replace=False).astype(np.int64)
        cases.append((parents, fetches))
    cases.append((_random_parents(rng, 10, 2), np.array([1])))  # a fetched placeholder
    return cases


def _adjacency(parents: Array) -> Array:
    n = len(parents)
    adj = np.zeros((n, n), dtype=np.int64)  # adj[i, j] = 1: j is an input of i
    for i, row in enumerate(parents):
        for j in row[row >= 0]:
            adj[i, j] = 1
    return adj


def _plan_expected(parents: Array, fetches: Array) -> Array:
    """Ancestors of the fetches and the fetches: iterate reach |= reach @ adjacency."""
    n = len(parents)
    adj = _adjacency(parents)
    reach = np.zeros(n, dtype=np.int64)
    reach[np.asarray(fetches, dtype=np.int64)] = 1
    while True:
        grown = np.minimum(reach + reach @ adj, 1)
        if np.array_equal(grown, reach):
            return np.flatnonzero(reach).astype(np.int64)
        reach = grown


def _node_ids(values: Any) -> Array | None:
    """Distinct node ids, sorted, from an array of integers; None when they are not integers."""
    a = np.asarray(values).ravel()
    if a.size and a.dtype.kind not in "iu":
        return None
    return np.unique(a.astype(np.int64))


def _call_plan(fn: Callable[..., Any], args: Case) -> Array:
    """The student's nodes as a sorted array of distinct ints: graded as a set."""
    result = fn(*args)
    try:
        nodes = _node_ids(list(result))
    except (TypeError, ValueError) as exc:
        raise CheckFailure(f"return node indices (a list, set or array of ints), got "
                           f"{type(result).__name__} ({exc})") from None
    if nodes is None:
        raise CheckFailure(f"return node indices as integers, got {type(result).__name__} of "
                           f"{np.asarray(list(result)).dtype} values")
    return nodes


def _compare_sets(expected: Any, got: Any) -> Verdict:
    """The same set of integer node ids (np.unique: n log n on a result the size cap bounds)."""
    e = _node_ids(expected)
    try:
        g = _node_ids(got)
    except (TypeError, ValueError):
        g = None
    if e is None or g is None:
        return Verdict(False, f"expected node indices (integers), got {type(got).__name__}")
    if np.array_equal(e, g):
        return Verdict(True)
    missing, extra = np.setdiff1d(e, g).tolist(), np.setdiff1d(g, e)[:20].tolist()
    parts = []
    if missing:
        parts.append(f"missing nodes {missing}")
    if extra:
        parts.append(f"nodes not needed {extra}")
    shown = g.tolist() if len(g) <= 40 else [*g[:40].tolist(), "..."]
    return Verdict(False, f"expected nodes {e.tolist()}, got {shown}: " + "; ".join(parts))


def _direct(parents: Array, fetches: Array) -> set[int]:
    out = {int(f) for f in fetches}
    for f in fetches:
        out |= {int(p) for p in parents[int(f)] if p >= 0}
    return out


def _closure_children(parents: Array, fetches: Array) -> Array:
    adj = _adjacency(parents).T  # children
    reach = np.zeros(len(parents), dtype=np.int64)
    reach[np.asarray(fetches, dtype=np.int64)] = 1
    while True:
        grown = np.minimum(reach + reach @ adj, 1)
        if np.array_equal(grown, reach):
            return reach
        reach = grown


def _as_set(g: Any) -> set[int]:
    return {int(i) for i in np.asarray(g).ravel()}


PLAN_HINTS = (
    (lambda e, g, a: _as_set(g) == _direct(*a) != _as_set(e),
     "only the direct inputs: a plan needs the inputs of the inputs too, all the way back "
     "(a stack or a recursive walk over parents)"),
    (lambda e, g, a: _as_set(g) == set(range(len(a[0]))) != _as_set(e),
     "that is every node of the graph: prune, keep only what the fetches depend on"),
    (lambda e, g, a: _as_set(g) == _as_set(e) - {int(f) for f in a[1]},
     "the fetched nodes themselves belong to the plan"),
    (lambda e, g, a: _as_set(g) == {int(i) for i in np.flatnonzero(
        _closure_children(*a))} != _as_set(e),
     "that walks forward, to the nodes that USE the fetches: follow the parents (inputs) "
     "instead"),
)


# --------------------------------------------------------------------------- Caffe

_IP = ('layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{top}" '
       'inner_product_param {{ num_output: {out} }} }}')
_RELU = 'layer {{ name: "{name}" type: "ReLU" bottom: "{bottom}" top: "{top}" }}'
_LOSS = ('layer {{ name: "{name}" type: "EuclideanLoss" bottom: "{pred}" bottom: "y" '
         'top: "{name}" }}')


def _net_case(rng: np.random.Generator, n: int, dims: list[int], in_place: bool,
              relu_last: bool = False, names: tuple[str, str, str] = ("fc", "relu", "loss")
              ) -> Case:
    """InnerProducts of sizes dims[1:] on x (n, dims[0]), ReLU between them, EuclideanLoss."""
    lines, params = [], []
    blob = "x"
    n_ip = len(dims) - 1
    for i in range(n_ip):
        top = f"h{i + 1}" if i < n_ip - 1 else "y_hat"
        lines.append(_IP.format(name=f"{names[0]}{i + 1}", bottom=blob, top=top,
                                out=dims[i + 1]))
        params += [rng.standard_normal((dims[i + 1], dims[i])), rng.standard_normal(dims[i + 1])]
        blob = top
        if i < n_ip - 1 or relu_last:
            top = blob if in_place else f"{blob}_relu"
            lines.append(_RELU.format(name=f"{names[1]}{i + 1}", bottom=blob, top=top))
            blob = top
    lines.append(_LOSS.format(name=names[2], pred=blob))
    x = rng.standard_normal((n, dims[0]))
    y = rng.standard_normal((n, dims[-1]))
    return (np.array(lines), x, y, *params)


def _caffe_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [_net_case(rng, 4, [5, 3, 2], in_place=True),  # the lecture's net, small
                _net_case(rng, 3, [4, 4, 4], in_place=False, names=("ip", "act", "euclid")),
                _net_case(rng, 2, [3, 2], in_place=True)]
    cases: list[Case] = []
    for _ in range(3):
        depth = int(rng.integers(1, 4))
        dims = [int(d) for d in rng.integers(1, 6, size=depth + 1)]
        cases.append(_net_case(rng, int(rng.integers(1, 6)), dims, bool(rng.integers(0, 2)),
                               relu_last=bool(rng.integers(0, 2)),
                               names=("ip", "r", "loss") if rng.integers(0, 2) else
                               ("fc", "relu", "cost")))
    cases.append(_net_case(rng, 3, [4, 4, 4, 4], in_place=False))  # square: transposes pass
    return cases


def _caffe_expected(lines: Array, x: Array, y: Array, *params: Array) -> tuple[float, Array]:
    """edu_dl.caffe itself: the layers behind an HDF5Data layer serving x and y, these weights."""
    from edu_dl.caffe import Net, read_net

    with tempfile.TemporaryDirectory(prefix="edu_dl_ex08_") as tmp:
        folder = Path(tmp)
        np.savez(folder / "data.npz", x=x, y=y)
        data = ('layer { name: "data" type: "HDF5Data" top: "x" top: "y" '
                f'hdf5_data_param {{ source: "data.npz" batch_size: {len(x)} }} }}')
        (folder / "net.prototxt").write_text("\n".join([data, *map(str, lines)]) + "\n")
        spec, sources = read_net(folder / "net.prototxt")
        net = Net(spec, sources, folder, dtype=np.float64)
        for param, value in zip(net.params, params, strict=True):
            param.tensor.data = np.asarray(value, dtype=np.float64)
        loss, blobs = net.forward()
    (loss_layer,) = [layer for layer in net.layers if layer.loss_weight]
    return float(loss.item()), blobs[loss_layer.bottom[0]].numpy().copy()


def _np_forward(lines: Array, x: Array, y: Array, params: tuple[Array, ...],
                transpose: bool = True, bias: bool = True, relu: bool = True
                ) -> tuple[Array, Array]:
    """A NumPy reading of the same layers with one thing changed, for hints."""
    from google.protobuf import text_format

    from edu_dl.caffe import caffe_subset_pb2 as pb

    blobs = {"x": x, "y": y}
    it = iter(params)
    pred = x
    for line in lines:
        layer = text_format.Parse(str(line), pb.NetParameter()).layer[0]
        if layer.type == "InnerProduct":
            W, b = next(it), next(it)
            out = blobs[layer.bottom[0]] @ (W.T if transpose else W) + (b if bias else 0)
        elif layer.type == "ReLU":
            out = np.maximum(blobs[layer.bottom[0]], 0) if relu else blobs[layer.bottom[0]]
        else:
            pred = blobs[layer.bottom[0]]
            continue
        blobs[layer.top[0]] = out
    return pred, pred - y


def _caffe_hint(**kw: bool) -> Callable[[Any, Any, tuple[Any, ...]], bool]:
    def predicate(e: Any, g: Any, a: tuple[Any, ...]) -> bool:
        pred, _ = _np_forward(a[0], a[1], a[2], a[3:], **kw)
        return _close(g[1], pred) and not _close(g[1], e[1])

    return predicate


def _loss_scaled(factor: Callable[[Array], float]) -> Callable[[Any, Any, tuple[Any, ...]], bool]:
    def predicate(e: Any, g: Any, a: tuple[Any, ...]) -> bool:
        diff = np.asarray(e[1]) - a[2]
        return _close(g[1], e[1]) and _close(g[0], factor(diff)) and not _close(g[0], e[0])

    return predicate


CAFFE_HINTS = (
    (_caffe_hint(transpose=False),
     "InnerProduct stores W as (num_output, K), as nn.Linear does: y = x @ W.T + b"),
    (_caffe_hint(bias=False), "add the bias: y = x @ W.T + b"),
    (_caffe_hint(relu=False),
     "a ReLU layer was skipped: run every layer in the order written; with bottom == top it "
     "works in place, replacing the blob"),
    (_loss_scaled(lambda d: float(np.mean(d**2))),
     "EuclideanLoss is sum((y_hat - y)**2) / (2 N), N = rows: not the mean over all entries"),
    (_loss_scaled(lambda d: float(np.sum(d**2) / len(d))),
     "EuclideanLoss divides by 2 N, not N"),
    (_loss_scaled(lambda d: float(np.sum(d**2))),
     "EuclideanLoss divides the sum of squares by 2 N"),
)


PARTS = [
    Part(
        id="ex08.rnn_eager", points=2, cases=_rnn_cases, expected=_rnn_expected, compare=CLOSE,
        arg_names=("X", "W", "U"), output_names=("loss", "dW", "dU"), hints=RNN_HINTS,
    ),
    Part(
        id="ex08.rnn_static", points=3, cases=_rnn_cases, expected=_rnn_expected,
        compare=CLOSE, call=_call_static, source_check=STATIC_SOURCE,
        arg_names=("X", "W", "U"),
        output_names=("loss", "dW", "dU"), hints=RNN_HINTS,
    ),
    Part(
        id="ex08.plan", points=2, cases=_plan_cases, expected=_plan_expected,
        compare=_compare_sets, call=_call_plan, arg_names=("parents", "fetches"),
        hints=PLAN_HINTS,
    ),
    Part(
        id="ex08.caffe_forward", points=3, cases=_caffe_cases, expected=_caffe_expected,
        compare=CLOSE, arg_names=("lines", "x", "y", *(f"params[{i}]" for i in range(8))),
        output_names=("loss", "y_hat"),
        hints=CAFFE_HINTS,
    ),
]
