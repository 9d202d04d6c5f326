"""Exercise 12, static vs dynamic: a data-dependent RNN on a batch of sequences of their own
lengths, eagerly and as ONE static graph for the whole batch (the lecture builds a graph per
sequence length and leaves both open), a Session's plan, and what a fused plan writes to memory.

Oracles: ``torch.autograd`` for the RNN's loss and gradients (a batch's: the sum over its
sequences) (PyTorch runs the same program
define-by-run); a transitive closure by boolean matrix products for the plan (no graph search)
and, for the fused plan, masks over that closure (who reads whom, as a matrix product).

Judged outside the sandbox: every value against the oracle (the plan as a set of integer node
ids, in linear time); for rnn_static also the submitted source: it runs an edu_dl.graph Session
(``source_check``); for rnn_eager, that it does not run the oracle's PyTorch. That a Session
really ran is check()'s feedback only.

The private half: ``edu_dl.harness.ex12`` holds the public calls, compares and rules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, close
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex12 import (
    OutputRight,
    RightButTransposed,
    call_plan,
    call_static,
    compare_sets,
    id_set,
    loss_of,
)
from edu_dl.harness.mytorch import call_schedule, schedule_compare, schedule_result_check

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-7, atol=1e-10)


# --------------------------------------------------------------------------- the RNN


def _h_final(X: Array, W: Array, U: Array) -> Array:
    h = np.zeros((1, W.shape[0]))
    for t in range(X.shape[0]):
        h = np.tanh(h @ W + X[t:t + 1] @ U)
    return h


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


def _unless_right(value: float, e: Any) -> float | None:
    """The mistake's loss, or None where it is the right one (that branch is the answer)."""
    return None if close(value, e[0], rtol=1e-7, atol=1e-10) else value


# ------------------------------------------------------------- the batch, eagerly and in one graph


def _batch_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(X (B, T_max, D) zero-padded, lengths (B,), W, U): sequences of their own lengths whose
    final states take both branches (no sequence on a branch's edge); one length may be T_max."""
    if not hidden:
        wanted = [(4, 3, [3, 1, 5]), (2, 4, [2, 4]), (5, 2, [1, 3, 2, 4])]
    else:
        wanted = [(int(rng.integers(1, 6)), int(rng.integers(1, 5)),
                   [int(n) for n in rng.integers(1, 8, size=int(rng.integers(b, 5)))])
                  for b in (1, 2, 2, 3)]
    cases: list[Case] = []
    for D, H, lengths in wanted:
        while True:
            X = np.zeros((len(lengths), max(lengths), D))
            for b, n in enumerate(lengths):
                X[b, :n] = rng.standard_normal((n, D))
            W, U = 0.5 * rng.standard_normal((H, H)), 0.5 * rng.standard_normal((D, H))
            sums = [_h_final(X[b, :n], W, U).sum() for b, n in enumerate(lengths)]
            both = len(lengths) < 2 or min(sums) < 0 < max(sums)
            if both and min(abs(v) for v in sums) > 1e-3:
                cases.append((X, np.array(lengths, dtype=np.int64), W, U))
                break
    return cases


def _batch_expected(X: Array, lengths: Array, W: Array, U: Array) -> tuple[float, Array, Array]:
    """torch.autograd per sequence (the lecture's rnn_torch); a sum's gradients add up."""
    parts = [_rnn_expected(X[b, :int(n)], W, U) for b, n in enumerate(lengths)]
    return (float(sum(q[0] for q in parts)), np.sum([q[1] for q in parts], axis=0),
            np.sum([q[2] for q in parts], axis=0))


def _batch_loss(X: Array, lengths: Array, W: Array, U: Array, *, padded: bool = False,
                one_branch: bool = False, mean: bool = False) -> float:
    """The batch's loss with a mistake: padding rows run too, one branch for the whole batch
    (decided by the sum of all final states), or the mean over the sequences."""
    finals = [_h_final(X[b] if padded else X[b, :int(n)], W, U) for b, n in enumerate(lengths)]
    positive = [sum(h.sum() for h in finals) > 0] * len(finals) if one_branch else [
        h.sum() > 0 for h in finals]
    losses = [float((h ** 2).sum()) if pos else float(-h.sum())
              for h, pos in zip(finals, positive)]
    return sum(losses) / (len(losses) if mean else 1)


def _batch_mistake(e: Any, a: Case, *, padded: bool = False, one_branch: bool = False,
                   mean: bool = False) -> float | None:
    """The mistake's loss on case a, or None where it is the right one."""
    X, lengths, W, U = a
    return _unless_right(_batch_loss(X, lengths, W, U, padded=padded, one_branch=one_branch,
                                     mean=mean), e)


def _batch_hints(gradients_wrong: str, padded: str) -> tuple[Any, ...]:
    """The batch's mistakes, eager or static: they differ in what the last two say."""
    return (
        Mistake(lambda e, a: _batch_mistake(e, a, padded=True), padded, view=loss_of,
                rtol=1e-7, atol=1e-10),
        Mistake(lambda e, a: _batch_mistake(e, a, one_branch=True),
                "one branch for the whole batch: each sequence's own final h decides its "
                "loss's branch", view=loss_of, rtol=1e-7, atol=1e-10),
        Mistake(lambda e, a: _batch_mistake(e, a, mean=True),
                "the batch's loss is the SUM of its sequences' losses, not their mean",
                view=loss_of, rtol=1e-7, atol=1e-10),
        RightButTransposed("the loss is right but a gradient looks transposed: dW has W's "
                           "shape (H, H)", right=0, transposed=(1, 2), rtol=1e-7, atol=1e-10),
        OutputRight(gradients_wrong, right=0, rtol=1e-7, atol=1e-10),
    )


BATCH_HINTS = _batch_hints(
    "the loss is right but the gradients are not: make W and U tensors with "
    "requires_grad=True once, add the sequences' losses and call backward() on the sum once "
    "(or add up every sequence's gradients)",
    padded="the padding ran too: sequence b has lengths[b] rows (X[b, :lengths[b]]), the rest "
    "of X[b] is zeros that are not part of it")
STATIC_HINTS = _batch_hints(
    "the loss is right but the gradients are not: fetch eg.gradients of the loss you fetched, "
    "with respect to the Variables made from W and U, in the same run",
    padded="the padding ran too: in one graph every sequence takes T_max steps, so after its "
    "own lengths[b] steps a sequence's state must stop changing (its padded rows are zeros, "
    "but tanh(h @ W) still moves h)")


STATIC_SOURCE = names_check(required=[(
    ("Session",), "no edu_dl.graph Session runs in the function: build one unrolled graph "
                  "for the batch (placeholder, Variable, eg.tanh, eg.matmul, eg.gradients) "
                  "and fetch the values with sess.run")])
EAGER_SOURCE = names_check(forbidden=[(
    ("torch",),
    "this part asks you to write the RNN with edu_dl's eager engine (ed.tensor, @, .tanh(), "
    ".backward()): the check runs the same program in PyTorch (do not call torch)")])


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


def _ids(nodes: Any) -> Array:
    return np.unique(np.asarray(list(nodes), dtype=np.int64))


def _unless_expected(nodes: Any, e: Any) -> Array | None:
    """The mistake's node set, or None where it is the right one."""
    wrong = _ids(nodes)
    return None if np.array_equal(wrong, _ids(np.asarray(e).ravel())) else wrong


PLAN_HINTS = (
    Mistake(lambda e, a: _unless_expected(_direct(*a), e),
            "only the direct inputs: a plan needs the inputs of the inputs too, all the way back "
            "(a stack or a recursive walk over parents)", view=id_set, rtol=0.0, atol=0.0),
    Mistake(lambda e, a: _unless_expected(range(len(a[0])), e),
            "that is every node of the graph: prune, keep only what the fetches depend on",
            view=id_set, rtol=0.0, atol=0.0),
    Mistake(lambda e, a: _ids(set(_ids(np.asarray(e).ravel()).tolist())
                              - {int(f) for f in a[1]}),
            "the fetched nodes themselves belong to the plan", view=id_set, rtol=0.0, atol=0.0),
    Mistake(lambda e, a: _unless_expected(np.flatnonzero(_closure_children(*a)), e),
            "that walks forward, to the nodes that USE the fetches: follow the parents (inputs) "
            "instead", view=id_set, rtol=0.0, atol=0.0),
)


# --------------------------------------------------------------------------- the fused plan

INPUT, ELEMENTWISE, MATMUL, FUSING = 0, 1, 2, 3  # node kinds; FUSING: a reduction or an update

# The lecture's training step (section 3.2): x, y, w1, w2 (0-3); z = x @ w1 (4), a = relu(z) (5),
# y_pred = a @ w2 (6), d = y_pred - y (7), d * d (8), row sums (9), loss = mean (10);
# g = (2 / N) * d (11), dw2 = a.T @ g (12), da = g @ w2.T (13), dz = da * (z > 0) (14),
# dw1 = x.T @ dz (15), lr * dw1 (16), w1 -= ... (17), lr * dw2 (18), w2 -= ... (19).
STEP_KINDS = np.array([0, 0, 0, 0, 2, 1, 2, 1, 1, 3, 3, 1, 2, 2, 1, 2, 1, 3, 1, 3],
                      dtype=np.int64)
STEP_PARENTS = np.array([[-1, -1], [-1, -1], [-1, -1], [-1, -1], [0, 2], [4, -1], [5, 3],
                         [6, 1], [7, 7], [8, -1], [9, -1], [7, -1], [5, 11], [11, 3],
                         [13, 4], [0, 14], [15, -1], [16, -1], [12, -1], [18, -1]],
                        dtype=np.int64)


def _relabeled(rng: np.random.Generator, kinds: Array, parents: Array, fetches: Array) -> Case:
    """The same graph with its nodes numbered in a random order (a plan is not a list)."""
    order = rng.permutation(len(kinds))  # old node i is new node order[i]
    new_parents = np.full_like(parents, -1)
    new_kinds = np.empty_like(kinds)
    for i in range(len(kinds)):
        new_kinds[order[i]] = kinds[i]
        new_parents[order[i]] = [order[p] if p >= 0 else -1 for p in parents[i]]
    return new_kinds, new_parents, order[np.asarray(fetches)].astype(np.int64)


def _random_fusion_case(rng: np.random.Generator) -> Case:
    n, sources = int(rng.integers(8, 25)), int(rng.integers(1, 4))
    parents = _random_parents(rng, n, sources)
    # Elementwise ops most often, as in a real step.
    kinds = np.concatenate([np.zeros(sources, dtype=np.int64),
                            rng.choice([1, 1, 2, 3], size=n - sources)]).astype(np.int64)
    fetches = rng.choice(n, size=int(rng.integers(1, 4)), replace=False).astype(np.int64)
    return kinds, parents, fetches


FUSION_MISTAKES: tuple[dict[str, bool], ...] = (
    {"fuse": False}, {"prune": False}, {"inputs_written": True}, {"fetched_written": False},
    {"matmuls_read_arrays": False}, {"fusing_sinks": False}, {"readers_in_plan": False})


def _fusion_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [(STEP_KINDS, STEP_PARENTS, np.array([10, 17, 19])),
                (STEP_KINDS, STEP_PARENTS, np.array([10])),  # the loss alone: no backward
                (STEP_KINDS, STEP_PARENTS, np.array([8, 14]))]  # two elementwise fetches
    cases = [_relabeled(rng, STEP_KINDS, STEP_PARENTS, np.array([10, 17, 19])),
             _relabeled(rng, STEP_KINDS, STEP_PARENTS, np.array([8, 14])),
             *(_random_fusion_case(rng) for _ in range(3))]
    for flags in FUSION_MISTAKES:  # every mistake must show on some case: draw until it does
        for _ in range(500):
            if any(not np.array_equal(_written(c[0], c[1], c[2], **flags),
                                      _written(c[0], c[1], c[2])) for c in cases):
                break
            cases.append(_random_fusion_case(rng))
    return cases


def _written(kinds: Array, parents: Array, fetches: Array, *, prune: bool = True,
             fuse: bool = True, fetched_written: bool = True, matmuls_read_arrays: bool = True,
             fusing_sinks: bool = True, readers_in_plan: bool = True,
             inputs_written: bool = False) -> Array:
    """The nodes a fused plan writes, as masks (no graph search); each flag off is a mistake."""
    n = len(parents)
    adj = _adjacency(parents)  # adj[i, j] = 1: node j is an input of node i
    plan = np.zeros(n, dtype=np.int64)
    plan[_plan_expected(parents, fetches)] = 1
    if not prune:
        plan[:] = 1
    kinds = np.asarray(kinds)
    fetched = np.zeros(n, dtype=np.int64)
    fetched[np.asarray(fetches, dtype=np.int64)] = 1
    readers = plan if readers_in_plan else np.ones(n, dtype=np.int64)
    sinks = (kinds == MATMUL) if fusing_sinks else (kinds == MATMUL) | (kinds == FUSING)
    read_as_array = ((readers * sinks) @ adj) > 0 if matmuls_read_arrays else np.zeros(n, bool)
    elementwise = kinds == ELEMENTWISE
    kept = (kinds == MATMUL) | (kinds == FUSING)
    if fuse:
        kept |= elementwise & (read_as_array | (fetched_written & (fetched > 0)))
    else:
        kept |= elementwise
    if inputs_written:
        kept |= kinds == INPUT
    return np.flatnonzero(kept & (plan > 0)).astype(np.int64)


def _fusion_expected(kinds: Array, parents: Array, fetches: Array) -> Array:
    return _written(kinds, parents, fetches)


def _fusion_mistake(**flags: bool) -> Callable[[Any, Case], Any]:
    def replay(e: Any, a: Case) -> Array | None:
        return _unless_expected(_written(a[0], a[1], a[2], **flags), e)

    return replay


# The most specific first: where two mistakes give the same answer, its hint is the one shown.
FUSION_HINTS = (
    Mistake(_fusion_mistake(readers_in_plan=False),
            "a matmul outside the plan made a value be written: only readers that run (in the "
            "plan) count", view=id_set, rtol=0.0, atol=0.0),
    Mistake(_fusion_mistake(fusing_sinks=False),
            "an elementwise value read only by a reduction or an update (kind 3) is written: "
            "those compute their elementwise inputs in their own pass, as w -= lr * g computes "
            "lr * g", view=id_set, rtol=0.0, atol=0.0),
    Mistake(_fusion_mistake(inputs_written=True),
            "an input (kind 0: a placeholder, Variable or constant) is an array already: "
            "nothing writes it", view=id_set, rtol=0.0, atol=0.0),
    Mistake(_fusion_mistake(fetched_written=False),
            "a fetched elementwise value is missing: the caller reads it, so it must be written",
            view=id_set, rtol=0.0, atol=0.0),
    Mistake(_fusion_mistake(matmuls_read_arrays=False),
            "an elementwise value read by a matmul (kind 2) is missing: a matmul reads its "
            "inputs from memory, so they must be written first", view=id_set, rtol=0.0,
            atol=0.0),
    Mistake(_fusion_mistake(prune=False),
            "nodes outside the plan are written: only the fetches and their inputs, all the way "
            "back, run at all (your plan function)", view=id_set, rtol=0.0, atol=0.0),
    Mistake(_fusion_mistake(fuse=False),
            "every op of the plan is written: an elementwise value that only elementwise ops, "
            "reductions or updates read is computed inside their pass, never written",
            view=id_set, rtol=0.0, atol=0.0),
    Mistake(_fusion_mistake(fuse=False, inputs_written=True),
            "that is the whole plan (section 3's answer): inputs are arrays already, and an "
            "elementwise value is written only when the caller or a matmul reads it",
            view=id_set, rtol=0.0, atol=0.0),
)


PARTS = [
    Part(
        id="ex12.rnn_eager_batch", points=2, cases=_batch_cases, expected=_batch_expected,
        compare=CLOSE, arg_names=("X", "lengths", "W", "U"), output_names=("loss", "dW", "dU"),
        hints=BATCH_HINTS, source_check=EAGER_SOURCE,
    ),
    Part(
        id="ex12.rnn_static", points=3, cases=_batch_cases, expected=_batch_expected,
        compare=CLOSE, call=call_static, source_check=STATIC_SOURCE,
        arg_names=("X", "lengths", "W", "U"), output_names=("loss", "dW", "dU"),
        hints=STATIC_HINTS,
    ),
    Part(
        id="ex12.plan", points=2, cases=_plan_cases, expected=_plan_expected,
        compare=compare_sets, call=call_plan, arg_names=("parents", "fetches"),
        hints=PLAN_HINTS,
    ),
    Part(
        id="ex12.fusion", points=2, cases=_fusion_cases, expected=_fusion_expected,
        compare=compare_sets, call=call_plan, arg_names=("kinds", "parents", "fetches"),
        hints=FUSION_HINTS,
    ),
    Part(
        id="ex12.my_schedule", points=2, cases=_plan_cases, expected=_plan_expected,
        compare=schedule_compare, result_check=schedule_result_check, call=call_schedule,
        arg_names=("parents", "fetches"), uses=("ex12.plan", "ex07.topological_order"),
        generic_hints=False,  # "the right values in another order" is the question itself
    ),
]
