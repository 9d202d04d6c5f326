"""Exercise 16, many devices: shards, all-reduce, data-parallel gradients, traffic, ring all-reduce,
and the backward pass of a tensor-parallel block.

The oracles are independent of the tasks' wording: ``np.array_split`` for the split rule,
torch.autograd on the WHOLE batch for the data-parallel gradient, parameter sizes of real
``torch.nn.Linear`` layers (on the meta device: nothing allocated) for the traffic, and the plain
sum for the ring all-reduce (plus the bytes each worker sends under the stated schedule, counted
from the chunk sizes), and torch.autograd on the UNSPLIT block for the tensor-parallel backward.
A reference ring simulator lives here for the hints only: it replays the typical mistakes (no
all-gather, adding in the all-gather, sending from a buffer already updated); so does a per-rank
backward without communication for the tensor-parallel hints.
Private: the public call adapter and generic hint rules live in ``edu_dl.harness.ex16``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import EqualsArgument, Mistake, Scaled
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex16 import (
    FirstAxisDropped,
    ValuesRightCountsScaled,
    WrongWhereRight,
    as_int,
    call_with_list,
    call_with_shards,
)

Array = np.ndarray
Case = tuple[Any, ...]
EXACT = tolerance(rtol=1e-12, atol=0.0)
GRAD = tolerance(rtol=1e-9, atol=1e-12)  # float64 sums in another order: ~1e-16 relative


TOL: dict[str, Any] = {"rtol": 1e-9, "atol": 1e-12}  # the hints: float64 sums in another order


def _blocks(n: int, k: int) -> list[Array]:
    """Part 1's rule, as NumPy implements it: contiguous, the first n % k get one row more."""
    return np.array_split(np.arange(n), k)


# --------------------------------------------------------------------------- 1. shard_indices


def _shard_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        # The uneven split's LAST worker first: it tells the usual wrong rules apart.
        return [(8, 2, 0), (8, 2, 1), (10, 3, 2), (10, 3, 1), (10, 3, 0), (5, 4, 3)]
    cases: list[Case] = []
    for _ in range(6):
        k = int(rng.integers(1, 9))
        n = int(rng.integers(k, 50))
        cases.append((n, k, int(rng.integers(0, k))))
    cases.append((3, 5, 4))  # more workers than rows: the last ones get nothing
    cases.append((1, 1, 0))
    return cases


def _shard_expected(n: int, k: int, rank: int) -> Array:
    return _blocks(n, k)[rank]


def _floor_block(a: Case) -> Array:
    n, k, rank = a
    return np.arange(rank * (n // k), (rank + 1) * (n // k))


def _last_takes_rest(a: Case) -> Array:
    n, k, rank = a
    return np.arange(rank * (n // k), n if rank == k - 1 else (rank + 1) * (n // k))


def _ceil_block(a: Case) -> Array:
    n, k, rank = a
    size = -(-n // k)
    return np.arange(min(rank * size, n), min((rank + 1) * size, n))


# --------------------------------------------------------------------------- 2. all_reduce_mean


def _allreduce_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        shapes = [(2, 3), (3, 2, 2), (4, 5), (1, 3)]
    else:
        shapes = [(int(rng.integers(1, 7)), *(int(d) for d in rng.integers(1, 5, size=int(
            rng.integers(1, 3))))) for _ in range(4)]
    return [(rng.standard_normal(s),) for s in shapes]


def _allreduce_expected(grads: Array) -> Array:
    return np.broadcast_to(grads.mean(axis=0), grads.shape).copy()


# --------------------------------------------------------------------------- 3. data_parallel_grad


def _dp_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (n, d, k, reduction); the visible ones: equal shards, unequal shards, then a SUM loss.
    if not hidden:
        sizes = [(8, 3, 2, "mean"), (10, 4, 3, "mean"), (8, 3, 2, "sum"), (9, 2, 4, "sum")]
    else:
        sizes = []
        for reduction in ("mean", "mean", "sum", "sum", "mean"):
            k = int(rng.integers(1, 6))
            sizes.append((int(rng.integers(k, 30)), int(rng.integers(1, 6)), k, reduction))
    return [(rng.standard_normal((n, d)), rng.standard_normal(n), rng.standard_normal(d), k, red)
            for n, d, k, red in sizes]


def _dp_expected(X: Array, y: Array, w: Array, k: int, reduction: str) -> Array:
    """torch.autograd of the whole batch's loss: the shards play no part in the oracle."""
    import torch

    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    per_row = (torch.tensor(X) @ wt - torch.tensor(y)) ** 2
    loss = per_row.mean() if reduction == "mean" else per_row.sum()
    loss.backward()
    assert wt.grad is not None
    return wt.grad.numpy()


def _shard_grads(X: Array, y: Array, w: Array, k: int, reduction: str) -> list[Array]:
    """Each worker's gradient of ITS OWN shard's loss (for the hints)."""
    out = []
    for rows in _blocks(len(y), k):
        Xr, yr = X[rows], y[rows]
        g = 2 * Xr.T @ (Xr @ w - yr)
        out.append(g / len(rows) if reduction == "mean" else g)
    return out


def _plain_mean(a: Case) -> Array:
    return np.mean(_shard_grads(*a), axis=0)


def _plain_sum(a: Case) -> Array:
    return np.sum(_shard_grads(*a), axis=0)


def _uneven(a: Case) -> bool:
    return len(a[1]) % a[3] != 0


# --------------------------------------------------------------------------- 4. allreduce_traffic


def _traffic_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        # The lecture's two-layer net (with biases here), then a wider net in half precision.
        return [(np.array([1000, 100, 10]), "float64", 2),
                (np.array([1000, 100, 10]), "float32", 4),
                (np.array([784, 512, 512, 10]), "float16", 8),
                (np.array([5, 3]), "float32", 1)]
    cases: list[Case] = []
    for _ in range(4):
        layers = rng.integers(1, 2049, size=int(rng.integers(2, 6)))
        cases.append((layers, str(rng.choice(["float16", "float32", "float64"])),
                      int(rng.integers(1, 65))))
    return cases


def _traffic_expected(layer_sizes: Array, dtype: str, k: int) -> tuple[int, float]:
    """Bytes of all the nn.Linear parameters (weights and biases), and a ring's 2(k-1)/k of them."""
    import torch

    layers = [torch.nn.Linear(int(a), int(b), device="meta", dtype=getattr(torch, dtype))
              for a, b in itertools.pairwise(layer_sizes)]
    grad_bytes = sum(p.numel() * p.element_size() for layer in layers for p in layer.parameters())
    return int(grad_bytes), 2.0 * (k - 1) / k * grad_bytes


def _n_weights(a: Case) -> int:
    s = [int(v) for v in a[0]]
    return sum(x * y for x, y in itertools.pairwise(s))


def _itemsize(a: Case) -> int:
    return int(np.dtype(a[1]).itemsize)


# --------------------------------------------------------------------------- 5. ring_all_reduce


def _ring_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        # Readable integers: worker r holds 10 * r + (0, 1, 2, ...).
        return [(10.0 * np.arange(k)[:, None] + np.arange(m)[None, :],)
                for k, m in [(2, 4), (3, 6), (3, 7), (4, 8), (1, 3)]]
    cases: list[Case] = []
    for _ in range(4):
        k = int(rng.integers(2, 7))
        cases.append((rng.standard_normal((k, int(rng.integers(k, 20)))),))
    cases.append((rng.standard_normal((5, 3)),))  # fewer elements than workers: empty chunks
    return cases


def _ring_expected(arrays: Array) -> tuple[Array, Array]:
    """All end with the sum; worker r sends all chunks but (r+1)%k, then all but (r+2)%k."""
    k, m = arrays.shape
    total = np.broadcast_to(arrays.sum(axis=0), arrays.shape).copy()
    sizes = np.array([len(c) for c in _blocks(m, k)])
    if k == 1:
        return total, np.zeros(1, dtype=np.int64)
    sent = np.array([2 * m - sizes[(r + 1) % k] - sizes[(r + 2) % k] for r in range(k)])
    return total, sent.astype(np.int64)


def _ring(arrays: Array, *, all_gather: bool = True, gather_adds: bool = False,
          gather_shift: int = 1) -> Array:
    """The ring schedule, with switches that replay the typical mistakes (hints only)."""
    k, m = arrays.shape
    data = np.array(arrays, dtype=np.float64)
    chunks = _blocks(m, k)
    phases = [("reduce", 0)] + ([("gather", gather_shift)] if all_gather else [])
    for phase, shift in phases:
        for s in range(k - 1):
            sends = [(r, chunks[(r + shift - s) % k]) for r in range(k)]
            payload = [data[r, idx].copy() for r, idx in sends]  # all send at the same time
            for (r, idx), value in zip(sends, payload):
                dst = (r + 1) % k
                if phase == "reduce" or gather_adds:
                    data[dst, idx] += value
                else:
                    data[dst, idx] = value
    return data


# ------------------------------------------------------------------ 6. tensor_parallel_backward


def _tp_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (n, d, hidden units per rank, m, k): two ranks first, then three, one, four.
    if not hidden:
        sizes = [(2, 3, 2, 2, 2), (3, 4, 2, 2, 3), (4, 2, 4, 3, 1), (5, 3, 2, 2, 4)]
    else:
        sizes = [(int(rng.integers(1, 7)), int(rng.integers(1, 6)), int(rng.integers(1, 4)),
                  int(rng.integers(1, 5)), int(k)) for k in (2, 3, 4, int(rng.integers(1, 5)))]
    cases: list[Case] = []
    for n, d, per_rank, m, k in sizes:
        h = per_rank * k
        w1, w2 = rng.standard_normal((d, h)), rng.standard_normal((h, m))
        # Rank r owns the hidden units [r * per_rank, (r + 1) * per_rank): w1's columns, w2's rows.
        w1_shards = np.stack([w1[:, r * per_rank:(r + 1) * per_rank] for r in range(k)])
        w2_shards = np.stack([w2[r * per_rank:(r + 1) * per_rank] for r in range(k)])
        cases.append((rng.standard_normal((n, d)), w1_shards, w2_shards,
                      rng.standard_normal((n, m))))
    return cases


def _tp_expected(x: Array, w1_shards: Array, w2_shards: Array, dy: Array) -> tuple[Array, ...]:
    """torch.autograd of the block with the WHOLE weights; the gradients cut into the shards."""
    import torch

    k = len(w1_shards)
    xt = torch.tensor(x, requires_grad=True)
    w1 = torch.tensor(np.concatenate(list(w1_shards), axis=1), requires_grad=True)
    w2 = torch.tensor(np.concatenate(list(w2_shards), axis=0), requires_grad=True)
    (torch.relu(xt @ w1) @ w2).backward(torch.tensor(dy))
    assert xt.grad is not None and w1.grad is not None and w2.grad is not None
    dx = np.broadcast_to(xt.grad.numpy(), (k, *x.shape)).copy()
    dw1 = np.stack(np.split(w1.grad.numpy(), k, axis=1))
    dw2 = np.stack(np.split(w2.grad.numpy(), k, axis=0))
    return dx, dw1, dw2


def _tp_local(x: Array, w1_shards: Array, w2_shards: Array, dy: Array,
              mask: bool = True) -> tuple[Array, Array, Array]:
    """Each rank's own backward, no communication: (partial dx per rank, dw1, dw2) (hints)."""
    partial_dx, dw1, dw2 = [], [], []
    for w1_r, w2_r in zip(w1_shards, w2_shards):
        pre = x @ w1_r
        dh = dy @ w2_r.T
        if mask:
            dh = dh * (pre > 0)
        partial_dx.append(dh @ w1_r.T)
        dw1.append(x.T @ dh)
        dw2.append(np.maximum(pre, 0).T @ dy)
    return np.stack(partial_dx), np.stack(dw1), np.stack(dw2)


def _tp_unmasked(a: Case) -> tuple[Array, Array, Array]:
    """The per-rank backward with relu's mask forgotten (hints)."""
    x, w1_shards, w2_shards, dy = a
    return _tp_local(x, w1_shards, w2_shards, dy, mask=False)


def _tp_many(a: Case) -> bool:
    return len(a[1]) > 1


def _tp_summed(j: int) -> Callable[[Any, Case], Array | None]:
    """Output j (a weight gradient) summed over the ranks, as an all-reduce would (hints)."""
    def replay(e: Any, a: Case) -> Array | None:
        return np.broadcast_to(e[j].sum(axis=0), e[j].shape) if _tp_many(a) else None
    return replay


TP_PARTIAL = ("rank r's dx is only the part that flows through ITS hidden units, "
              "dh_r @ w1_r.T; the layer below needs the whole dx = the SUM of the k partial dx: "
              "this is where the backward pass needs its all-reduce (sum)")


RING_TRAFFIC = ("a ring all-reduce sends 2 (k - 1) / k of the gradient from each worker: (k - 1) "
                "chunks of 1/k in the reduce-scatter, (k - 1) more in the all-gather")

PARTS = [
    Part(
        id="ex16.shard_indices", points=1, cases=_shard_cases, expected=_shard_expected,
        arg_names=("n", "k", "rank"),
        hints=(
            Mistake(lambda e, a: _floor_block(a) if a[0] % a[1] != 0 else None,
                    "n % k rows are left over and you dropped them: give one extra row to each "
                    "of the FIRST n % k workers", **TOL),
            Mistake(lambda e, a: _last_takes_rest(a),
                    "the rule spreads the n % k extra rows over the first workers, one each; it "
                    "does not give them all to the last worker", **TOL),
            Mistake(lambda e, a: _ceil_block(a),
                    "blocks of ceil(n / k) rows leave the last workers short: the first n % k "
                    "workers get n // k + 1 rows, the others n // k", **TOL),
            Mistake(lambda e, a: np.arange(a[2], a[0], a[1]),
                    "contiguous blocks, not every k-th row: worker 0 gets rows 0, 1, 2, ...",
                    **TOL),
        ),
    ),
    Part(
        id="ex16.all_reduce_mean", points=1, cases=_allreduce_cases, expected=_allreduce_expected,
        call=call_with_list, compare=GRAD, arg_names=("grads",),
        hints=(
            Mistake(lambda e, a: a[0].shape[0] * e if a[0].shape[0] > 1 else None,
                    "that is the SUM of the workers' gradients: divide by the number of workers "
                    "k", **TOL),
            FirstAxisDropped(
                "every worker ends with its own copy of the mean: return a list of k arrays "
                "(one per worker), not one array"),
            EqualsArgument(
                "you returned the gradients unchanged: each worker must end with the average of "
                "all", argument=0),
        ),
    ),
    Part(
        id="ex16.data_parallel_grad", points=2, cases=_dp_cases, expected=_dp_expected,
        compare=GRAD, arg_names=("X", "y", "w", "k", "reduction"),
        uses=("ex16.shard_indices", "ex16.all_reduce_mean"),
        hints=(
            Mistake(lambda e, a: e / a[3] if a[4] == "sum" and a[3] > 1 else None,
                    "with reduction='sum' you averaged the workers' gradients, which divides the "
                    "full gradient by k: the full batch's SUM loss is the SUM of the shards' sum "
                    "losses, so SUM the gradients (all-reduce sum; averaging is right only for a "
                    "mean loss)", **TOL),
            Mistake(lambda e, a: _plain_mean(a) if a[4] == "mean" and _uneven(a) else None,
                    "the shards are unequal here (n % k != 0): a plain average gives each row of "
                    "a small shard more weight; weight worker r's mean-loss gradient by n_r / N "
                    "(or scale it by k * n_r / N before the all-reduce mean)", **TOL),
            Mistake(lambda e, a: _plain_sum(a) if a[4] == "mean" and a[3] > 1 else None,
                    "you summed the workers' mean-loss gradients: for a mean loss over equal "
                    "shards, AVERAGE them (all_reduce_mean)", **TOL),
            Scaled("half the gradient: d/dy_hat (y_hat - y)^2 = 2 (y_hat - y)", factor=0.5,
                   rtol=1e-9),
            Scaled("wrong sign: the residual is y_hat - y = X @ w - y", factor=-1.0, rtol=1e-9),
        ),
    ),
    Part(
        id="ex16.allreduce_traffic", points=1, cases=_traffic_cases, expected=_traffic_expected,
        compare=EXACT, arg_names=("layer_sizes", "dtype", "k"),
        output_names=("gradient_bytes", "ring_bytes_per_worker"),
        hints=(
            Mistake(lambda e, a: _n_weights(a) * _itemsize(a),
                    "you forgot the biases: each Linear(a, b) layer has a * b weights and b "
                    "biases, and every parameter has a gradient", output=0, rtol=0.0, atol=0.0,
                    view=as_int),
            Mistake(lambda e, a: 8 * e[0],
                    "that is bits: np.dtype(dtype).itemsize is already in bytes (4 for float32)",
                    output=0, rtol=0.0, atol=0.0, view=as_int),
            Mistake(lambda e, a: e[0] // _itemsize(a),
                    "that is the number of parameters: multiply by the bytes per value "
                    "(np.dtype(dtype).itemsize)", output=0, rtol=0.0, atol=0.0, view=as_int),
            *(Mistake(replay, RING_TRAFFIC, output=1, rtol=1e-12, atol=0.0) for replay in (
                lambda e, a: 2 * e[0], lambda e, a: e[0], lambda e, a: (a[2] - 1) / a[2] * e[0])),
        ),
    ),
    Part(
        id="ex16.ring_all_reduce", points=2, cases=_ring_cases, expected=_ring_expected,
        compare=GRAD, arg_names=("arrays",), output_names=("final", "sent"),
        uses=("ex16.shard_indices",),
        hints=(
            Mistake(lambda e, a: e[0] / a[0].shape[0] if a[0].shape[0] > 1 else None,
                    "an all-reduce SUM: every worker ends with the sum of all the arrays, not the "
                    "mean", output=0, **TOL),
            Mistake(lambda e, a: _ring(a[0], gather_shift=0),
                    "the all-gather starts from the chunk each worker completed in the "
                    "reduce-scatter: in its step s, worker r sends chunk (r + 1 - s) % k, not "
                    "(r - s) % k", output=0, **TOL),
            Mistake(lambda e, a: _ring(a[0], all_gather=False),
                    "after the reduce-scatter each worker holds only ONE complete chunk "
                    "((r + 1) % k); the all-gather must pass the complete chunks around the ring",
                    output=0, **TOL),
            Mistake(lambda e, a: _ring(a[0], gather_adds=True),
                    "in the all-gather the receiver REPLACES its chunk with the complete one; "
                    "adding counts values twice", output=0, **TOL),
            ValuesRightCountsScaled(
                "sent counts elements each worker sends: one chunk per step, 2 (k - 1) steps; "
                "count each send once (the sender's side)", values=0, counts=1, factor=2.0,
                **TOL),
            WrongWhereRight(
                "the values are right; sent must count, for each worker, the elements of the "
                "chunks it sent under the schedule (chunk (r - s) % k, then (r + 1 - s) % k), "
                "with the chunks split as in part 1", output=1, right=0, **TOL),
        ),
    ),
    Part(
        id="ex16.tensor_parallel_backward", points=2, cases=_tp_cases, expected=_tp_expected,
        call=call_with_shards, compare=GRAD, arg_names=("x", "w1_shards", "w2_shards", "dy"),
        output_names=("dx", "dw1_shards", "dw2_shards"),
        hints=(
            Mistake(lambda e, a: _tp_local(*a)[0] if _tp_many(a) else None, TP_PARTIAL,
                    output=0, **TOL),
            Mistake(lambda e, a: e[0] / len(a[1]) if _tp_many(a) else None,
                    "the k partial dx are pieces of ONE sum over the hidden units, not k "
                    "estimates of the same gradient: add them (all-reduce sum), do not average",
                    output=0, **TOL),
            Mistake(lambda e, a: _tp_unmasked(a)[0].sum(axis=0, keepdims=True)
                    .repeat(len(a[1]), axis=0),
                    "relu passes the gradient only where its input x @ w1_r was positive: "
                    "multiply dh_r by that mask before it reaches w1_r", output=0, **TOL),
            *(Mistake(_tp_summed(j),
                      "a weight gradient needs no communication in tensor parallelism: each "
                      "rank owns its shard and computes its shard's gradient alone; summing "
                      "the ranks' shard gradients mixes different weights", output=j, **TOL)
              for j in (1, 2)),
            Mistake(lambda e, a: _tp_unmasked(a)[1],
                    "relu passes the gradient only where its input x @ w1_r was positive: "
                    "multiply dh_r by that mask before dw1_r", output=1, **TOL),
            Mistake(lambda e, a: np.stack([(a[0] @ w1_r).T @ a[3] for w1_r in a[1]]),
                    "dw2_r multiplies dy by the hidden activations AFTER relu, relu(x @ w1_r)",
                    output=2, **TOL),
        ),
    ),
]
