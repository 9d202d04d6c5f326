"""Exercise 14's parts: the oracles agree with PyTorch and with the notebook's eager loop, the
solutions pass, each typical mistake gets its own hint (and no hint fires on a right answer), a
graph break fails the one-graph part and names its line, and no solution is lecture code re-typed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.exercise_helpers import (
    code_lines,
    course_module,
    lecture_outputs,
    longest_shared_run,
    run_check,
    solution_bodies,
    solution_namespace,
)
from fixtures.frameworks import jax, jnp, torch

from edu_dl.grading.authoring import spec

ex14 = course_module("ex14")
ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "14_compiling_dynamic_code.ipynb"
PART_FUNCTIONS = {"ex14.clipped_gradient": "clipped_mean_gradient",
                  "ex14.settle_one_graph": "settle"}


@pytest.fixture(autouse=True, scope="module")
def _jax_float64() -> None:
    """float64 in JAX, as the notebook's set-up cell asks: set when these tests run, not when
    they are collected (collecting imports no framework)."""
    jax.config.update("jax_enable_x64", True)


def solutions() -> dict[str, Any]:
    return solution_namespace(NOTEBOOK.name)


def test_every_part_has_a_solution() -> None:
    assert {p.id for p in ex14.PARTS} == set(PART_FUNCTIONS)


# ----------------------------------------------------------------------------- the oracles


def test_per_example_gradients_are_pytorchs() -> None:
    """The hand-written gradients of the private oracle, against torch.autograd one example at
    a time."""
    w1, w2, X, Y, _ = ex14._clipped_cases(np.random.default_rng(2), True)[0]
    g1, g2 = ex14._per_example(w1, w2, X, Y)
    for i in range(X.shape[0]):
        t1, t2 = (torch.tensor(w, requires_grad=True) for w in (w1, w2))
        loss = ((torch.relu(torch.tensor(X[i]) @ t1) @ t2 - torch.tensor(Y[i])) ** 2).sum()
        loss.backward()
        np.testing.assert_allclose(g1[i], t1.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g2[i], t2.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_the_visible_cases_clip_none_some_and_all() -> None:
    fractions = []
    for w1, w2, X, Y, max_norm in ex14._clipped_cases(np.random.default_rng(0), False):
        norms = ex14._norms(*ex14._per_example(w1, w2, X, Y))
        fractions.append(float(np.mean(norms > max_norm)))
    assert 0.0 in fractions and 1.0 in fractions
    assert any(0.0 < f < 1.0 for f in fractions)


def test_settle_oracle_is_the_notebooks_eager_loop_row_by_row() -> None:
    settle_one = solution_namespace(NOTEBOOK.name, also="def settle_one")["settle_one"]
    for hidden in (False, True):
        for x, W, tol, max_steps in ex14._settle_cases(np.random.default_rng(5), hidden):
            h, steps = ex14._settle_expected(x, W, tol, max_steps)
            for b in range(x.shape[0]):
                h_b, steps_b = settle_one(torch.tensor(x[b]), torch.tensor(W), tol, max_steps)
                np.testing.assert_allclose(h[b], h_b.numpy(), rtol=0, atol=1e-15)
                assert steps[b] == steps_b


def test_settle_cases_stop_rows_at_different_steps() -> None:
    """A batch whose rows all stop together could not tell the per-row mask from a batch-wide
    stop; some rows must also run out of steps."""
    cases = ex14._settle_cases(np.random.default_rng(0), False)
    steps = [ex14._settle_expected(*case)[1] for case in cases]
    assert any(len(set(s.tolist())) > 1 for s in steps)
    assert any((s == case[3]).any() for s, case in zip(steps, cases, strict=True))
    assert any((s < case[3]).any() for s, case in zip(steps, cases, strict=True))


# ----------------------------------------------------------------------------- the solutions


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("part_id", list(PART_FUNCTIONS))
def test_the_solution_passes_visible_and_hidden(part_id: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    fn = solutions()[PART_FUNCTIONS[part_id]]
    for hidden in (False, True):
        ok, out = run_check(capsys, part_id, fn, hidden)
        assert ok, out
        assert "hint" not in out


@pytest.mark.parametrize("part", ex14.PARTS, ids=lambda p: p.id)
def test_no_hint_fires_on_the_right_answer(part: spec.Part) -> None:
    for hidden in (False, True):
        for args in part.cases(np.random.default_rng(11), hidden):
            expected = part.expected(*args)
            for hint in part.hints:
                assert not hint.applies(expected, expected, args), (part.id, hint.message)


# ----------------------------------------------------------------------------- mistakes


def _example_loss(params: Any, x: Any, y: Any) -> Any:
    a, b = params
    return jnp.sum((jnp.maximum(x @ a, 0.0) @ b - y) ** 2)


def _per_example(w1: Any, w2: Any, X: Any, Y: Any) -> tuple[Any, Any]:
    return jax.vmap(jax.grad(_example_loss), in_axes=(None, 0, 0))((w1, w2), X, Y)


def batch_gradient(w1, w2, X, Y, max_norm):
    """Lecture 14's jax.grad of the batch loss, re-typed."""
    def loss_jax(params, X, Y):
        w1, w2 = params
        return jnp.sum((jnp.maximum(X @ w1, 0.0) @ w2 - Y) ** 2)

    return jax.grad(loss_jax)((w1, w2), X, Y)


def mean_unclipped(w1, w2, X, Y, max_norm):
    g1, g2 = _per_example(w1, w2, X, Y)
    return g1.mean(axis=0), g2.mean(axis=0)


def clip_after_mean(w1, w2, X, Y, max_norm):
    m1, m2 = mean_unclipped(w1, w2, X, Y, max_norm)
    scale = jnp.minimum(1.0, max_norm / jnp.sqrt(jnp.sum(m1**2) + jnp.sum(m2**2)))
    return scale * m1, scale * m2


def clip_each_array(w1, w2, X, Y, max_norm):
    g1, g2 = _per_example(w1, w2, X, Y)
    s1 = jnp.minimum(1.0, max_norm / jnp.sqrt(jnp.sum(g1**2, axis=(1, 2))))[:, None, None]
    s2 = jnp.minimum(1.0, max_norm / jnp.sqrt(jnp.sum(g2**2, axis=(1, 2))))[:, None, None]
    return (s1 * g1).mean(axis=0), (s2 * g2).mean(axis=0)


def all_to_max_norm(w1, w2, X, Y, max_norm):
    g1, g2 = _per_example(w1, w2, X, Y)
    norms = jnp.sqrt(jnp.sum(g1**2, axis=(1, 2)) + jnp.sum(g2**2, axis=(1, 2)))
    s = (max_norm / norms)[:, None, None]
    return (s * g1).mean(axis=0), (s * g2).mean(axis=0)


def summed(w1, w2, X, Y, max_norm):
    g1, g2 = _per_example(w1, w2, X, Y)
    norms = jnp.sqrt(jnp.sum(g1**2, axis=(1, 2)) + jnp.sum(g2**2, axis=(1, 2)))
    s = jnp.minimum(1.0, max_norm / norms)[:, None, None]
    return (s * g1).sum(axis=0), (s * g2).sum(axis=0)


def one_array(w1, w2, X, Y, max_norm):
    return summed(w1, w2, X, Y, max_norm)[0]


@pytest.mark.parametrize(("fn", "says"), [
    (batch_gradient, "that is the batch gradient"),
    (mean_unclipped, "the mean of the unclipped gradients"),
    (clip_after_mean, "you clipped the averaged gradient"),
    (clip_each_array, "clipped with their own norms"),
    (all_to_max_norm, "the small ones too"),
    (summed, "N times too large"),
    (one_array, "return a pair (g1, g2)"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_each_clipping_mistake_gets_its_hint(fn: Any, says: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex14.clipped_gradient", fn)
    assert not ok
    assert says in out, out


@pytest.mark.parametrize("line", ["if steps.max() > 3:\n        pass", "while False:\n        pass",
                                  "s = float(steps.sum().item())", "b = bool(steps.any())",
                                  "h = h if tol else -h"])
def test_settle_may_decide_nothing_in_python(line: str) -> None:
    source = ("def settle(x, W, tol, max_steps):\n    h, steps = x, x\n    " + line +
              "\n    return h, steps\n")
    verdict = ex14.NO_PYTHON_DECISIONS(source)
    assert not verdict.ok and verdict.message.startswith("line 3 of the function has"), verdict
    assert ex14.NO_PYTHON_DECISIONS(source.replace(line, "h = torch.where(x > 0, h, x)")).ok


def test_the_clipped_gradient_must_use_vmap() -> None:
    looped = "def clipped_mean_gradient(w1, w2, X, Y, max_norm):\n    return [g for g in X]\n"
    verdict = ex14.VMAP_SOURCE(looped)
    assert not verdict.ok and "vmap" in verdict.message
    assert ex14.VMAP_SOURCE(looped.replace("[g for g in X]", "jax.vmap(f)(X)")).ok


def _masked(x, W, tol, max_steps, together=False, ignore_tol=False, short=False, keep_old=False):
    """The solution's masked loop with one mistake switched on."""
    h = torch.zeros_like(x)
    steps = torch.zeros(x.shape[0], dtype=x.dtype)
    done = torch.zeros(x.shape[0], dtype=torch.bool)
    for _ in range(max_steps):
        h_new = torch.tanh(h @ W + x)
        settled = (h_new - h).abs().amax(dim=1) < tol
        if together:
            settled = settled.all().expand(settled.shape)
        if ignore_tol:
            settled = torch.zeros_like(settled)
        h = torch.where((done | (settled & keep_old))[:, None], h, h_new)
        steps = steps + (~done).to(x.dtype)
        done = done | settled
    return h, steps - 1 if short else steps


def python_if(x, W, tol, max_steps):
    """The eager habit: a Python if on a tensor stops the whole batch."""
    h = torch.zeros_like(x)
    for step in range(1, max_steps + 1):
        h_new = torch.tanh(h @ W + x)
        if (h_new - h).abs().max() < tol:
            return h_new, torch.full((x.shape[0],), float(step))
        h = h_new
    return h, torch.full((x.shape[0],), float(max_steps))


@pytest.mark.parametrize(("flags", "says"), [
    ({"together": True}, "your rows stop together"),
    ({"ignore_tol": True}, "every row ran max_steps steps"),
    ({"short": True}, "one step short"),
    ({"keep_old": True}, "keeps the state of its last step"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else "")
def test_each_settle_mistake_gets_its_hint(flags: dict[str, bool], says: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    def wrong(x, W, tol, max_steps):
        return _masked(x, W, tol, max_steps, **flags)

    ok, out = run_check(capsys, "ex14.settle_one_graph", wrong)
    assert not ok
    assert says in out, out


def test_a_graph_break_fails_and_names_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex14.settle_one_graph", python_if)
    assert not ok
    assert "TorchDynamo breaks the graph: Data-dependent branching" in out, out
    assert "if (h_new - h).abs().max() < tol:" in out, out


# ----------------------------------------------------------------------------- nothing re-typed


def lecture_cells() -> dict[str, list[str]]:
    texts = {}
    for path in sorted((ROOT / "lectures").glob("*.ipynb")):
        for k, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                texts[f"{path.name} cell {k}"] = code_lines("".join(cell["source"]))
        for k, text in lecture_outputs(path).items():  # printed sources are given away too
            texts[f"{path.name} cell {k} output"] = code_lines(text)
    return texts


def test_no_solution_is_lecture_code_retyped() -> None:
    """Issue 25: no two consecutive lines of a solution appear together in a lecture's code or
    printed output."""
    texts = lecture_cells()
    bodies = solution_bodies(NOTEBOOK)
    # the parts, and the predictions asked before a cell measures (answers kept out of the release)
    assert set(bodies) == set(PART_FUNCTIONS.values()) | {"predict_clipping",
                                                         "predict_graphs_and_steps"}
    for name, body in bodies.items():
        where = max(texts, key=lambda w: longest_shared_run(body, texts[w]))
        assert longest_shared_run(body, texts[where]) <= 1, f"{name}: from {where}"


def test_the_retyping_check_finds_a_copy() -> None:
    """The check above can fail: lecture 14's rnn_one_graph, pasted, is a long shared run."""
    lecture = json.loads((ROOT / "lectures" / "14_compiling_dynamic_code.ipynb").read_text())
    pasted = next(code_lines("".join(c["source"])) for c in lecture["cells"]
                  if "def rnn_one_graph" in "".join(c["source"]))
    assert max(longest_shared_run(pasted, lines) for lines in lecture_cells().values()) >= 5
