"""Exercise 22, JAX sharding: the PartitionSpecs of the two-layer net's arrays for data, tensor
and 2-D (data x tensor) parallelism; the per-device body of the tensor-parallel forward (w1 split
by columns, w2 by rows, one psum: Megatron-LM's MLP, Shoeybi et al. 2019); the per-device body of
the data-parallel gradient (each device's shard, one pmean: the all-reduce of data parallelism).

The net and its loss are lecture 16's (``edu_dl.parallel.problem``): y = relu(x @ w1) @ w2,
loss = sum((y - Y)**2) / N, a mean over the batch's rows.

Oracles: NumPy in float64. The bodies run on one device, mapped over the shards with ``vmap`` and
a named axis (``edu_dl.harness.ex22``), so a missing or wrong collective shows whatever the number
of devices. Judged outside the sandbox: every value. The tolerance allows float32 (a kernel where
``jax_enable_x64`` is off computes in float32): every mistake replayed differs far more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex22 import NOT_SPLIT, call_dp_grads, call_specs, call_tp_forward

Array = np.ndarray
Case = tuple[Any, ...]
EXACT = tolerance(rtol=0.0, atol=0.0)
CLOSE = tolerance(rtol=1e-5, atol=1e-6)  # float32 allowed; the mistakes differ by far more
_ = NOT_SPLIT


# --------------------------------------------------------------------------- the specs


def _table(x: tuple[str, str], w1: tuple[str, str], w2: tuple[str, str],
           y: tuple[str, str]) -> Array:
    return np.array([x, w1, w2, y], dtype=str)


def _specs(strategy: str, batch: str, model: str) -> Array:
    """Rows x, w1, w2, y; per dimension the mesh axis it is split over ('-': none)."""
    rows_split = (batch, _) if strategy in ("data", "both") else (_, _)
    if strategy in ("tensor", "both"):
        return _table(rows_split, (_, model), (model, _), rows_split)
    return _table(rows_split, (_, _), (_, _), rows_split)


def _spec_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(strategy, batch_axis, model_axis): each strategy with the mesh of the lecture; hidden:
    other axis names (a spec written with the names typed in fails there)."""
    if not hidden:
        return [("data", "data", "model"), ("tensor", "data", "model"),
                ("both", "data", "model")]
    names = [("batch", "hidden"), ("dp", "tp"), ("replica", "shard")]
    order = rng.permutation(3)
    return [(s, *names[int(i)]) for s, i in zip(("tensor", "both", "data"), order, strict=True)]


def _unless_right(value: Array, e: Array) -> Array | None:
    return None if np.array_equal(value, e) else value


def _swapped_weights(e: Array, a: Case) -> Array | None:
    strategy, _batch, model = a
    if strategy == "data":
        return None
    got = e.copy()
    got[1], got[2] = (model, _), (_, model)
    return _unless_right(got, e)


def _swapped_names(e: Array, a: Case) -> Array | None:
    strategy, batch, model = a
    return _unless_right(_specs(strategy, model, batch), e)


def _weights_split_in_data(e: Array, a: Case) -> Array | None:
    strategy, batch, _model = a
    if strategy != "data":
        return None
    return _unless_right(_table((batch, _), (batch, _), (batch, _), (batch, _)), e)


def _targets_whole(e: Array, a: Case) -> Array | None:
    got = e.copy()
    got[3] = (_, _)
    return _unless_right(got, e)


def _batch_split_in_tensor(e: Array, a: Case) -> Array | None:
    strategy, batch, model = a
    if strategy != "tensor":
        return None
    return _unless_right(_specs("both", batch, model), e)


def _features_split(e: Array, a: Case) -> Array | None:
    strategy, _batch, model = a
    if strategy == "data":
        return None
    got = e.copy()
    got[0] = (got[0][0], model)
    return _unless_right(got, e)


SPEC_HINTS = (
    Mistake(_swapped_weights,
            "w1 and w2 are split the other way round: split w1 by its COLUMNS (each device "
            "computes its own hidden units, and the ReLU needs nothing from the others) and w2 by "
            "its ROWS (the same hidden units), so that only the output needs one all-reduce"),
    Mistake(_swapped_names,
            "the axis names are swapped: the batch (rows of x and y) is split over batch_axis, "
            "the hidden units over model_axis"),
    Mistake(_weights_split_in_data,
            "in data parallelism every device keeps ALL the weights (replicated: P()); only the "
            "batch, the rows of x and of y, is split"),
    Mistake(_targets_whole,
            "y is not split like x: row i of y is the target of row i of x, so y's rows go where "
            "x's rows go"),
    Mistake(_batch_split_in_tensor,
            "in tensor parallelism alone every device sees the whole batch (x and y replicated); "
            "splitting the batch too is the 'both' strategy"),
    Mistake(_features_split,
            "x's columns (its input features) are not split: each device needs every feature to "
            "compute its own hidden units x @ w1[:, block]"),
)


# --------------------------------------------------------------------------- the bodies


def _forward(x: Array, w1: Array, w2: Array) -> Array:
    return np.maximum(x @ w1, 0.0) @ w2


def _tp_expected(x: Array, w1: Array, w2: Array, k: int) -> Array:
    return np.broadcast_to(_forward(x, w1, w2), (int(k), x.shape[0], w2.shape[1])).copy()


def _draw_net(rng: np.random.Generator, n: int, d_in: int, h: int,
              d_out: int) -> tuple[Array, Array, Array, Array]:
    w1 = rng.standard_normal((d_in, h)) * np.sqrt(2.0 / d_in)
    w2 = rng.standard_normal((h, d_out)) * np.sqrt(2.0 / h)
    return rng.standard_normal((n, d_in)), w1, w2, rng.standard_normal((n, d_out))


def _tp_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x, w1, w2, k): k devices, each with H / k hidden units. N, D_in, H / k and D_out all
    different (a transposed block fails to multiply or gives the wrong shape); k = 1 last (no
    collective needed there)."""
    shapes = [(5, 3, 8, 2, 4), (6, 4, 6, 3, 2), (3, 2, 4, 5, 1)]  # N, D_in, H, D_out, k
    if hidden:
        shapes = [(int(rng.integers(2, 9)), int(rng.integers(2, 7)), 2 * k * 3, int(rng.integers(
            1, 5)), k) for k in (2, 4)]
    cases: list[Case] = []
    for n, d_in, h, d_out, k in shapes:
        x, w1, w2, _y = _draw_net(rng, n, d_in, h, d_out)
        cases.append((x, w1, w2, k))
    return cases


def _blocks(a: Case) -> list[tuple[Array, Array]]:
    _x, w1, w2, k = a
    return list(zip(np.split(w1, int(k), axis=1), np.split(w2, int(k), axis=0), strict=True))


def _tp_replay(e: Array, a: Case, each: Any) -> Array | None:
    k = int(a[3])
    if k == 1:
        return None
    return np.stack([each(a[0], b1, b2, k, a) for b1, b2 in _blocks(a)])


TP_HINTS = (
    Mistake(lambda e, a: _tp_replay(e, a, lambda x, b1, b2, k, a: _forward(x, b1, b2)),
            "each device returned its own partial output relu(x @ w1_block) @ w2_block: the "
            "hidden units are spread over the devices, so the output is the SUM of these "
            "partials; add them over the 'model' axis with jax.lax.psum", rtol=1e-5, atol=1e-6),
    Mistake(lambda e, a: _tp_replay(e, a, lambda x, b1, b2, k, a: _forward(*a[:3]) / k),
            "that is the mean of the devices' partial outputs (pmean): the output is their SUM, "
            "jax.lax.psum", rtol=1e-5, atol=1e-6),
    Mistake(lambda e, a: _tp_replay(e, a, lambda x, b1, b2, k, a: np.maximum(
        x @ a[1] @ a[2], 0.0)),
            "the ReLU came after the sum: it belongs to the hidden units, between the two "
            "matmuls, relu(x @ w1_block) @ w2_block, and only then the psum", rtol=1e-5,
            atol=1e-6),
)


def _loss_grads(w1: Array, w2: Array, x: Array, y: Array) -> tuple[Array, Array]:
    """The gradient of sum((relu(x @ w1) @ w2 - y)**2) / len(x)."""
    pre = x @ w1
    h = np.maximum(pre, 0.0)
    d_out = 2.0 * (h @ w2 - y) / x.shape[0]
    d_pre = (d_out @ w2.T) * (pre > 0)
    return x.T @ d_pre, h.T @ d_out


def _dp_expected(w1: Array, w2: Array, x: Array, y: Array, k: int) -> tuple[Array, Array]:
    g1, g2 = _loss_grads(w1, w2, x, y)
    k = int(k)
    return np.broadcast_to(g1, (k, *g1.shape)).copy(), np.broadcast_to(g2, (k, *g2.shape)).copy()


def _dp_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(w1, w2, x, y, k): the batch of N rows split into k shards of N / k rows."""
    shapes = [(8, 3, 5, 2, 4), (6, 4, 3, 3, 2), (4, 2, 3, 2, 1)]  # N, D_in, H, D_out, k
    if hidden:
        shapes = [(k * int(rng.integers(1, 4)), int(rng.integers(2, 6)), int(rng.integers(2, 7)),
                   int(rng.integers(1, 4)), k) for k in (2, 4)]
    cases: list[Case] = []
    for n, d_in, h, d_out, k in shapes:
        x, w1, w2, y = _draw_net(rng, n, d_in, h, d_out)
        cases.append((w1, w2, x, y, k))
    return cases


def _dp_replay(e: Any, a: Case, each: Any) -> tuple[Array, Array] | None:
    w1, w2, x, y, k = a
    k = int(k)
    if k == 1:
        return None
    shards = [_loss_grads(w1, w2, xs, ys) for xs, ys in
              zip(np.split(x, k), np.split(y, k), strict=True)]
    value = each([s[0] for s in shards], [s[1] for s in shards], k, a)
    same = all(np.allclose(v, r, rtol=1e-9, atol=1e-12) for v, r in zip(value, e, strict=True))
    return None if same else value


DP_HINTS = (
    Mistake(lambda e, a: _dp_replay(e, a, lambda g1, g2, k, a: (np.stack(g1), np.stack(g2))),
            "each device returned its own shard's gradient: data parallelism averages them "
            "over the devices (the all-reduce), jax.lax.pmean over the 'data' axis",
            rtol=1e-5, atol=1e-6),
    Mistake(lambda e, a: _dp_replay(e, a, lambda g1, g2, k, a: (
        np.broadcast_to(sum(g1), (k, *g1[0].shape)), np.broadcast_to(sum(g2), (k, *g2[0].shape)))),
            "that is the SUM of the shards' gradients, k times too large: each shard's loss is "
            "already a mean over its rows, so average them (pmean), do not add them (psum)",
            rtol=1e-5, atol=1e-6),
    Mistake(lambda e, a: _dp_replay(e, a, lambda g1, g2, k, a: (
        np.broadcast_to(sum(g1) / k * (len(a[2]) // k), (k, *g1[0].shape)),
        np.broadcast_to(sum(g2) / k * (len(a[2]) // k), (k, *g2[0].shape)))),
            "the loss is a MEAN over the rows (sum of squared errors / the number of rows): "
            "with a summed loss the gradient is the batch size times too large",
            rtol=1e-5, atol=1e-6),
)


PARTS = [
    Part(
        id="ex22.partition_specs", points=3, cases=_spec_cases, expected=_specs,
        compare=EXACT, call=call_specs, hints=SPEC_HINTS,
        arg_names=("strategy", "batch_axis", "model_axis"), output_names=("specs",),
    ),
    Part(
        id="ex22.tp_forward", points=3, cases=_tp_cases, expected=_tp_expected,
        compare=CLOSE, call=call_tp_forward, hints=TP_HINTS, timeout_s=30.0,
        arg_names=("x", "w1", "w2", "k"), output_names=("out",),
    ),
    Part(
        id="ex22.dp_grads", points=3, cases=_dp_cases, expected=_dp_expected,
        compare=CLOSE, call=call_dp_grads, hints=DP_HINTS, timeout_s=30.0,
        arg_names=("w1", "w2", "x", "y", "k"), output_names=("g1", "g2"),
    ),
]
