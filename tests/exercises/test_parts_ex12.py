"""Exercise 12's parts: the oracles agree with the solution notebook; wrong answers get hints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, run_check, solution_namespace

import edu_dl as ed
from edu_dl.grading.trust import source as trusted_source

ex12 = course_module("ex12")

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def solutions() -> dict[str, Any]:
    """The solution functions of exercise 12."""
    return solution_namespace("12_static_vs_dynamic.ipynb")


FUNCTIONS = {"ex12.rnn_eager_batch": "rnn_eager_batch", "ex12.rnn_static": "rnn_static",
             "ex12.plan": "plan", "ex12.fusion": "fused_writes",
             "ex12.my_schedule": "schedule"}  # mytorch/plan.py, the student's framework


run = run_check


def test_every_part_has_a_solution() -> None:
    assert {p.id for p in ex12.PARTS} == set(FUNCTIONS)


def test_plan_oracle_matches_edu_dl_session() -> None:
    """The lecture graph in edu_dl.graph: plan_for runs exactly the ops of the oracle's set."""
    from edu_dl import graph as eg

    g = eg.Graph()
    with g.as_default():
        x, y, z = (eg.placeholder(eg.float64, shape=(2,), name=n) for n in "xyz")
        c = eg.reduce_sum(x * y + z)
        d = eg.reduce_sum(x)
    feed = {p: np.ones(2) for p in (x, y, z)}
    sess = eg.Session(g)
    for fetch, index in ((c, 5), (d, 6)):
        nodes = ex12._plan_expected(ex12.LECTURE_PARENTS, np.array([index]))
        ops = [i for i in nodes if ex12.LECTURE_PARENTS[i][0] >= 0]
        assert sess.plan_for(fetch, feed).ops_run == len(ops)


def rnn_batch(X, lengths, W, U, padded=False, one_branch=False, mean=False, no_branch=False):
    """The batch RNN in edu_dl eager, with a mistake switched on."""
    W, U = ed.tensor(W, requires_grad=True), ed.tensor(U, requires_grad=True)
    finals = []
    for b in range(X.shape[0]):
        h = ed.zeros((1, W.shape[0]), dtype=np.float64)
        for t in range(X.shape[1] if padded else int(lengths[b])):
            h = (h @ W + ed.tensor(X[b, t:t + 1]) @ U).tanh()
        finals.append(h)
    total = sum(h.sum().item() for h in finals)
    loss = None
    for h in finals:
        positive = total > 0 if one_branch else h.sum().item() > 0
        own = (h * h).sum() if positive or no_branch else -h.sum()
        loss = own if loss is None else loss + own
    if mean:
        loss = loss * (1.0 / X.shape[0])
    loss.backward()
    return loss.item(), W.grad.numpy(), U.grad.numpy()


def test_batch_cases_take_both_branches_and_pad() -> None:
    for hidden in (False, True):
        cases = ex12._batch_cases(np.random.default_rng(3), hidden)
        sums = [ex12._h_final(X[b, :n], W, U).sum()
                for X, lengths, W, U in cases for b, n in enumerate(lengths)]
        assert min(sums) < 0 < max(sums)
        assert any(min(c[1]) < c[0].shape[1] for c in cases)  # some sequence is padded


@pytest.mark.parametrize(("mistake", "hint"), [
    ({}, None),
    ({"padded": True}, "the padding ran too"),
    ({"one_branch": True}, "one branch for the whole batch"),
    ({"mean": True}, "SUM of its sequences' losses, not their mean"),
    ({"no_branch": True}, "output 0 (loss)"),
])
def test_rnn_batch_mistakes(capsys: pytest.CaptureFixture[str], mistake: dict[str, bool],
                            hint: str | None) -> None:
    ok, out = run(capsys, "ex12.rnn_eager_batch", lambda *a: rnn_batch(*a, **mistake))
    if hint is None:
        assert ok and "hint" not in out, out
    else:
        assert not ok and "(X (3, 5, 4), lengths (3,), W (3, 3), U (4, 3))" in out
        assert hint in out, out


def test_rnn_batch_replays_match_the_eager_mistakes() -> None:
    """Each hint's NumPy replay gives the loss the mistaken eager program gives."""
    for args in ex12._batch_cases(np.random.default_rng(4), True):
        for mistake in ({"padded": True}, {"one_branch": True}, {"mean": True}):
            want = rnn_batch(*args, **mistake)[0]
            assert np.isclose(ex12._batch_loss(*args, **mistake), want, rtol=1e-10)


def test_rnn_static_must_run_a_session(capsys: pytest.CaptureFixture[str]) -> None:
    """The eager solution gives the right values, but no Session computed them."""
    ok, out = run(capsys, "ex12.rnn_static", solutions()["rnn_eager_batch"])
    assert not ok and "failed: no edu_dl.graph Session ran" in out


def test_rnn_static_right_loss_wrong_gradients(capsys: pytest.CaptureFixture[str]) -> None:
    def wrong(X, lengths, W, U):
        loss, dW, dU = solutions()["rnn_static"](X, lengths, W, U)
        return loss, dW.T, dU

    ok, out = run(capsys, "ex12.rnn_static", wrong)
    assert not ok and "output 1 (dW)" in out and "looks transposed" in out


def rnn_static_variant(X, lengths, W, U, *, masked=True, own_branches=True):
    """One graph for the batch, as a student may write it: without the mask (every sequence
    runs T_max steps) or with one branch for the whole batch."""
    from edu_dl import graph as eg

    B, T_max, D = X.shape
    running = (np.arange(T_max) < lengths[:, None]) if masked else np.ones((B, T_max))
    g = eg.Graph()
    with g.as_default():
        X_ph = eg.placeholder(eg.float64, shape=(T_max, B, D))
        M_ph = eg.placeholder(eg.float64, shape=(T_max, B, 1))
        positive = eg.placeholder(eg.float64, shape=(B,))
        W_v, U_v = eg.Variable(W), eg.Variable(U)
        h = eg.constant(np.zeros((B, W.shape[0])))
        for t in range(T_max):
            h = M_ph[t] * eg.tanh(eg.matmul(h, W_v) + eg.matmul(X_ph[t], U_v)) \
                + (1.0 - M_ph[t]) * h
        sums = eg.reduce_sum(h, axis=1)
        loss = eg.reduce_sum(positive * eg.reduce_sum(h * h, axis=1) - (1.0 - positive) * sums)
        grads = eg.gradients(loss, [W_v, U_v])
        init = eg.global_variables_initializer()
    feed = {X_ph: X.transpose(1, 0, 2), M_ph: running.astype(np.float64).T[:, :, None]}
    with eg.Session(g) as sess:
        sess.run(init)
        signs = sess.run(sums, feed_dict=feed)
        chosen = signs > 0 if own_branches else np.full(B, signs.sum() > 0)
        feed[positive] = chosen.astype(np.float64)
        value, (dW, dU) = sess.run([loss, grads], feed_dict=feed)
    return float(value), dW, dU


@pytest.mark.parametrize(("mistake", "hint"), [
    ({}, None),
    ({"masked": False}, "a sequence's state must stop changing"),
    ({"own_branches": False}, "one branch for the whole batch"),
])
def test_rnn_static_mistakes(capsys: pytest.CaptureFixture[str], mistake: dict[str, bool],
                             hint: str | None) -> None:
    """The static batch's typical mistakes, as a graph: each gets its hint; written right, the
    variant passes (so the hints are the mistakes', not the variant's)."""
    ok, out = run(capsys, "ex12.rnn_static", lambda *a: rnn_static_variant(*a, **mistake))
    if hint is None:
        assert ok and "hint" not in out, out
    else:
        assert not ok and hint in out, out


def test_plan_with_direct_inputs_only(capsys: pytest.CaptureFixture[str]) -> None:
    def direct(parents, fetches):
        return {int(f) for f in fetches} | {int(p) for f in fetches for p in parents[f] if p >= 0}

    ok, out = run(capsys, "ex12.plan", direct)
    assert not ok
    assert "expected nodes [0, 1, 2, 3, 4, 5], got [4, 5]: missing nodes [0, 1, 2, 3]" in out
    assert "only the direct inputs" in out


def test_plan_without_pruning(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex12.plan", lambda parents, fetches: range(len(parents)))
    assert not ok and "nodes not needed [6, 7, 8]" in out and "prune" in out


# --------------------------------------------------------------------------- the fused plan


def _fused_writes(kinds: Any, parents: Any, fetches: Any, **flags: bool) -> list[int]:
    """The oracle with one rule changed: a student's typical mistake, as a function."""
    return ex12._written(np.asarray(kinds), np.asarray(parents), np.asarray(fetches), **flags
                         ).tolist()


def test_fusion_oracle_matches_edu_dls_fused_training_step() -> None:
    """The visible case is the lecture's step: edu_dl's fused program writes those arrays (one
    per matmul, reduction, update and materialized chain) and one scalar more, the seed / N."""
    from edu_dl import graph as eg
    from edu_dl.autograd import fusion

    r = np.random.default_rng(0)
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, 5))
        y = eg.placeholder(eg.float32, shape=(None, 2))
        w1 = eg.Variable(r.standard_normal((5, 4)).astype(np.float32))
        w2 = eg.Variable(r.standard_normal((4, 2)).astype(np.float32))
        y_pred = eg.matmul(eg.nn.relu(eg.matmul(x, w1)), w2)
        loss = eg.reduce_mean(eg.reduce_sum((y_pred - y) ** 2, axis=1))
        train = eg.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = eg.global_variables_initializer()
    sess = eg.Session(g, optimize="numpy")
    sess.run(init)
    feed = {x: np.ones((3, 5), np.float32), y: np.zeros((3, 2), np.float32)}
    for _ in range(2):
        sess.run([loss, train], feed_dict=feed)
    program = sess.plan_for([loss, train], feed).fused.program
    scalars = [s for s in program.statements
               if isinstance(s, fusion.Elementwise) and s.expr.shape == ()]
    expected = ex12._fusion_expected(ex12.STEP_KINDS, ex12.STEP_PARENTS, np.array([10, 17, 19]))
    assert program.passes == len(expected) + len(scalars) and len(scalars) == 1
    assert len(expected) < int((ex12.STEP_KINDS > 0).sum())  # fusion saves passes


@pytest.mark.parametrize(("flags", "hint"), [
    ({"fuse": False}, "every op of the plan is written"),
    ({"prune": False}, "nodes outside the plan are written"),
    ({"inputs_written": True}, "an input (kind 0"),
    ({"fetched_written": False}, "a fetched elementwise value is missing"),
    ({"matmuls_read_arrays": False}, "read by a matmul (kind 2) is missing"),
    ({"fusing_sinks": False}, "read only by a reduction or an update (kind 3) is written"),
    ({"fuse": False, "inputs_written": True}, "that is the whole plan"),
])
def test_fusion_mistakes_get_their_hint(capsys: pytest.CaptureFixture[str], flags: dict[str, bool],
                                        hint: str) -> None:
    ok, out = run(capsys, "ex12.fusion", lambda k, p, f: _fused_writes(k, p, f, **flags))
    assert not ok and hint in out


def test_fusion_readers_outside_the_plan_get_their_hint(
        capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex12.fusion",
                  lambda k, p, f: _fused_writes(k, p, f, readers_in_plan=False), hidden=True)
    assert not ok and "only readers that run (in the plan) count" in out


def test_the_plan_part_retyped_does_not_pass_the_fusion_part(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The nearest code the course prints, the plan (section 3's answer), fails with a hint."""
    plan = solutions()["plan"]
    ok, out = run(capsys, "ex12.fusion", lambda kinds, parents, fetches: plan(parents, fetches))
    assert not ok and "that is the whole plan (section 3's answer)" in out


def test_fusion_hints_stay_quiet_on_the_solution(capsys: pytest.CaptureFixture[str]) -> None:
    for hidden in (False, True):
        ok, out = run(capsys, "ex12.fusion", solutions()["fused_writes"], hidden=hidden)
        assert ok and "hint" not in out.lower()


def test_fusion_cases_separate_the_mistakes() -> None:
    """Every mistake changes the answer on some hidden case: no hint is dead, no mistake passes
    (the visible cases, the lecture's step, have no matmul outside a plan that reads a value)."""
    for flags in ex12.FUSION_MISTAKES:
        visible = [] if "readers_in_plan" in flags else [(False, 0)]
        for hidden, seed in (*visible, *((True, seed) for seed in range(5))):
            cases = ex12._fusion_cases(np.random.default_rng(seed), hidden)
            assert any(not np.array_equal(ex12._written(*c, **flags), ex12._fusion_expected(*c))
                       for c in cases), (flags, hidden)


def test_rnn_eager_in_pytorch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    def rnn_eager_batch(X, lengths, W, U):
        import torch

        Wt = torch.tensor(W, requires_grad=True)
        Ut = torch.tensor(U, requires_grad=True)
        loss = 0
        for b, n in enumerate(lengths):
            h = torch.zeros((1, W.shape[0]), dtype=torch.float64)
            for x_t in torch.tensor(X[b, :n]):
                h = torch.tanh(h @ Wt + x_t[None] @ Ut)
            loss = loss + ((h * h).sum() if h.sum() > 0 else -h.sum())
        loss.backward()
        return loss.item(), Wt.grad.numpy(), Ut.grad.numpy()

    ok, out = run(capsys, "ex12.rnn_eager_batch", rnn_eager_batch)
    assert not ok
    assert out.startswith("✗ ex12.rnn_eager_batch: the values are right, but this part asks you "
                          "to write the RNN with edu_dl's eager engine")


def test_the_solutions_source_passes() -> None:
    part_id = "ex12.rnn_eager_batch"
    part = next(p for p in ex12.PARTS if p.id == part_id)
    notebook = SOLUTIONS / "12_static_vs_dynamic.ipynb"
    found = trusted_source.find_source(nbformat.read(notebook, as_version=4), part_id)
    assert found is not None and part.source_check is not None
    assert part.source_check(found).ok
