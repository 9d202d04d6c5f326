"""Exercise 22's parts (the two-layer net's PartitionSpecs, a tensor-parallel forward body and a
data-parallel gradient body for shard_map): the oracles agree with JAX on one device, the
solution passes (test_parts_trusted.py runs every part's), each typical mistake gets its own hint
and a correct answer none, and no solution is lecture 22's (or edu_dl's) code re-typed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_every_hint_asked_for,
    assert_no_hint_for,
    assert_nothing_retyped,
    checked,
    course_module,
    solution_namespace,
)
from fixtures.frameworks import jax, jnp

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ex22 = course_module("ex22")
NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "22_jax_sharding.ipynb"
FUNCTIONS = {"ex22.partition_specs": "partition_specs", "ex22.tp_forward": "tp_forward",
             "ex22.dp_grads": "dp_grads"}


@pytest.fixture(autouse=True, scope="module")
def _jax_float64() -> None:
    """float64 in JAX, as the notebook's set-up cell asks: set when these tests run."""
    jax.config.update("jax_enable_x64", True)


def solution(name: str) -> Any:
    return solution_namespace(NOTEBOOK.name)[name]


def assert_hint(part_id: str, fn: Any, hint: str) -> None:
    ok, out = checked(part_id, fn)
    if not ok and hint not in out:  # a mistake the visible cases miss is the hidden cases' job
        ok, out = checked(part_id, fn, hidden=True)
    assert not ok and hint in out, out


def test_every_part_has_a_solution() -> None:
    assert {p.id for p in ex22.PARTS} == set(FUNCTIONS)


# --------------------------------------------------------------------------- the oracles


def test_the_gradient_oracle_is_jaxs() -> None:
    for w1, w2, x, y, _k in ex22._dp_cases(np.random.default_rng(3), True):
        def loss(a: Any, b: Any, x: Any = x, y: Any = y) -> Any:
            return jnp.sum((jax.nn.relu(x @ a) @ b - y) ** 2) / x.shape[0]
        for mine, theirs in zip(ex22._loss_grads(w1, w2, x, y),
                                jax.grad(loss, argnums=(0, 1))(w1, w2), strict=True):
            np.testing.assert_allclose(mine, np.asarray(theirs), rtol=1e-12, atol=1e-12)


def test_the_specs_run_sharded_equal_to_one_device() -> None:
    """Every strategy's specs, run with jit on a mesh of the devices there are (one device here:
    a mesh of 1 x 1 accepts any spec), give one device's forward pass; the spec table's rows
    are x, w1, w2, y."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
    rng = np.random.default_rng(0)
    x, w1 = rng.standard_normal((8, 4)), rng.standard_normal((4, 8))
    w2 = rng.standard_normal((8, 2))
    for strategy in ("data", "tensor", "both"):
        table = ex22._specs(strategy, "data", "model")
        put = [NamedSharding(mesh, P(*(None if e == "-" else e for e in row))) for row in table]
        out = jax.jit(lambda x, a, b: jax.nn.relu(x @ a) @ b, in_shardings=tuple(put[:3]))(
            x, w1, w2)
        np.testing.assert_allclose(np.asarray(out), ex22._forward(x, w1, w2), rtol=1e-12)


# --------------------------------------------------------------------------- 1. the specs


def specs(x: Any, w1: Any, w2: Any, y: Any, data_too: Any = None) -> Any:
    """A student's partition_specs from a table of lambdas (batch, model) -> entries (JAX is
    imported when it is called, not when the tests are collected)."""
    def fn(strategy: str, batch: str, model: str) -> dict[str, Any]:
        from jax.sharding import PartitionSpec as P

        if strategy == "data" and data_too is not None:
            return data_too(batch, model)
        rows = (batch, None) if strategy in ("data", "both") else (None, None)
        tensor = strategy != "data"
        return {"x": P(*x(rows, batch, model, tensor)), "w1": P(*w1(batch, model, tensor)),
                "w2": P(*w2(batch, model, tensor)), "y": P(*y(rows, batch, model, tensor))}
    return fn


def _rows(rows: Any, b: str, m: str, t: bool) -> Any:
    return rows


def _w1(b: str, m: str, t: bool) -> Any:
    return (None, m) if t else ()


def _w2(b: str, m: str, t: bool) -> Any:
    return (m, None) if t else ()


@pytest.mark.parametrize(("fn", "hint"), [
    (specs(_rows, lambda b, m, t: (m, None) if t else (), lambda b, m, t: (None, m) if t else (),
           _rows), "w1 and w2 are split the other way round"),
    (lambda s, b, m: solution("partition_specs")(s, m, b), "the axis names are swapped"),
    (specs(_rows, _w1, _w2, _rows, data_too=lambda b, m: {
        n: __import__("jax").sharding.PartitionSpec(b, None) for n in ("x", "w1", "w2", "y")}),
     "every device keeps ALL the weights"),
    (specs(_rows, _w1, _w2, lambda rows, b, m, t: ()), "y is not split like x"),
    (lambda s, b, m: solution("partition_specs")("both" if s == "tensor" else s, b, m),
     "in tensor parallelism alone every device sees the whole batch"),
    (specs(lambda rows, b, m, t: (rows[0], m) if t else rows, _w1, _w2, _rows),
     "x's columns (its input features) are not split"),
])
def test_spec_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex22.partition_specs", fn, hint)


def test_specs_as_tuples_and_a_wrong_type() -> None:
    ok, _ = checked("ex22.partition_specs", lambda s, b, m: {
        k: tuple(v) for k, v in solution("partition_specs")(s, b, m).items()})
    assert ok
    ok, out = checked("ex22.partition_specs", lambda s, b, m: {"x": "data"})
    assert not ok and "the dict has no" in out
    ok, out = checked("ex22.partition_specs", lambda s, b, m: {
        k: 3 for k in ("x", "w1", "w2", "y")})
    assert not ok and "return a jax.sharding.PartitionSpec" in out


# --------------------------------------------------------------------------- 2. the bodies


@pytest.mark.parametrize(("fn", "hint"), [
    (lambda x, a, b: jax.nn.relu(x @ a) @ b, "add them over the 'model' axis with jax.lax.psum"),
    (lambda x, a, b: jax.lax.pmean(jax.nn.relu(x @ a) @ b, "model"),
     "that is the mean of the devices' partial outputs"),
    (lambda x, a, b: jax.nn.relu(jax.lax.psum(x @ a @ b, "model")),
     "the ReLU came after the sum"),
])
def test_tp_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex22.tp_forward", fn, hint)


def test_a_wrong_axis_name_says_which_axis() -> None:
    ok, out = checked("ex22.tp_forward",
                      lambda x, a, b: jax.lax.psum(jax.nn.relu(x @ a) @ b, "devices"))
    assert not ok and "'model'" in out


def dp_body(reduce: str, summed: bool = False) -> Any:
    def fn(w1: Any, w2: Any, xs: Any, ys: Any) -> Any:
        def loss(a: Any, b: Any) -> Any:
            total = jnp.sum((jax.nn.relu(xs @ a) @ b - ys) ** 2)
            return total if summed else total / xs.shape[0]
        g = jax.grad(loss, argnums=(0, 1))(w1, w2)
        if reduce == "none":
            return g
        collective = {"psum": jax.lax.psum, "pmean": jax.lax.pmean}[reduce]
        return collective(g[0], "data"), collective(g[1], "data")
    return fn


@pytest.mark.parametrize(("fn", "hint"), [
    (dp_body("none"),
     "each device returned its own shard's gradient"),
    (dp_body("psum"),
     "that is the SUM of the shards' gradients"),
    (dp_body("pmean", summed=True),
     "the loss is a MEAN over the rows"),
])
def test_dp_mistakes_get_their_hints(fn: Any, hint: str) -> None:
    assert_hint("ex22.dp_grads", fn, hint)


# --------------------------------------------------------------------------- every part


@pytest.mark.parametrize("part_id", list(FUNCTIONS))
def test_a_correct_answer_gets_no_hint(part_id: str) -> None:
    assert_no_hint_for(part_id, solution(FUNCTIONS[part_id]))


def test_every_hint_is_asked_for_here() -> None:
    """No hint is dead text: a test above asks for a fragment of each one's message."""
    assert_every_hint_asked_for(__file__, FUNCTIONS)


# --------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_code_retyped() -> None:
    """No two consecutive lines of a solution appear together in a lecture (22's own shardings
    and shard_map bodies included) or in edu_dl."""
    assert_nothing_retyped(NOTEBOOK, {"partition_specs", "tp_forward", "dp_grads",
                                      "predict_collectives"}, lecture="22_jax_sharding")
