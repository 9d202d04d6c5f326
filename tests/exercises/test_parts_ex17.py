"""Exercise 17's parts: the solutions notebook passes every case; typical mistakes get their
hint."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    assert_solution_passes,
    course_module,
    run_check,
    solution_namespace,
)

from edu_dl.grading import checking
from edu_dl.grading.trust import source as trusted_source

ex17 = course_module("ex17")
NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "17_gpu_practice.ipynb"

SOLUTIONS = solution_namespace("17_gpu_practice.ipynb")
run = run_check
memory_budget = SOLUTIONS["memory_budget"]


def test_the_solution_passes_check(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex17.memory_budget", memory_budget)
    assert ok and out.strip() == "✓ ex17.memory_budget: 4 cases passed"


# --------------------------------------------------------------------------- the budget


def with_activations(extra):
    def budget(sizes, batch_size, itemsize, optimizer):
        p, g, s, a = memory_budget(sizes, batch_size, itemsize, optimizer)
        return p, g, s, a + extra(sizes, batch_size) * itemsize
    return budget


@pytest.mark.parametrize(("mistake", "hint"), [
    (lambda sizes, n: n * sum(sizes[1:-1]), "the Linear outputs before each ReLU are not saved"),
    (lambda sizes, n: n * sizes[-1], "the network's output is not saved by the network"),
    (lambda sizes, n: -n * sizes[0], "the input batch is saved too"),
])
def test_budget_activation_mistakes(capsys: pytest.CaptureFixture[str], mistake: Any,
                                    hint: str) -> None:
    ok, out = run(capsys, "ex17.memory_budget", with_activations(mistake))
    assert not ok and "output 3 (activations)" in out and f"hint: {hint}" in out


def test_budget_without_biases(capsys: pytest.CaptureFixture[str]) -> None:
    def no_bias(sizes, batch_size, itemsize, optimizer):
        _, _, _, a = memory_budget(sizes, batch_size, itemsize, optimizer)
        p = sum(x * y for x, y in itertools.pairwise(sizes)) * itemsize
        return p, p, {"sgd": 0, "sgd_momentum": 1, "adam": 2}[optimizer] * p, a

    ok, out = run(capsys, "ex17.memory_budget", no_bias)
    assert not ok and "case 1 of 4" in out and "output 0 (parameters): expected 172, got 140" in out
    assert "hint: the biases are parameters too" in out


def test_budget_in_values_not_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex17.memory_budget",
                  lambda s, n, size, o: tuple(v // size for v in memory_budget(s, n, size, o)))
    assert not ok and "hint: count bytes, not values" in out


def test_budget_with_one_adam_buffer(capsys: pytest.CaptureFixture[str]) -> None:
    def one_buffer(sizes, batch_size, itemsize, optimizer):
        p, g, s, a = memory_budget(sizes, batch_size, itemsize, optimizer)
        return p, g, (p if optimizer == "adam" else s), a

    ok, out = run(capsys, "ex17.memory_budget", one_buffer)
    assert not ok and "output 2 (optimizer_state): expected 344, got 172" in out
    assert "hint: Adam keeps two buffers per parameter" in out


def test_asking_the_oracle_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {}
    exec(compile('''
import torch
from edu_dl.gpu import memory
from edu_dl.gpu import zoo as models_zoo

def memory_budget(sizes, batch_size, itemsize, optimizer):
    dtype = {2: torch.float16, 4: torch.float32, 8: torch.float64}[itemsize]
    b = memory.budget(models_zoo.mlp(sizes), (sizes[0],), batch_size, optimizer, dtype)
    return b.params, b.grads, b.optimizer_state, b.activations
''', "<cell>", "exec"), namespace)
    fn = namespace["memory_budget"]
    rng = np.random.default_rng(checking.VISIBLE_SEED)
    part = next(p for p in ex17.PARTS if p.id == "ex17.memory_budget")
    assert_solution_passes(part, fn, False, rng)  # right values ...
    assert part.source_check is not None
    verdict = part.source_check('''
def memory_budget(sizes, batch_size, itemsize, optimizer):
    b = memory.budget(models_zoo.mlp(sizes), (sizes[0],), batch_size, optimizer)
    return b.params, b.grads, b.optimizer_state, b.activations
''')
    assert not verdict.ok and "asks edu_dl.gpu.memory" in verdict.message  # ... asked for
    assert part.source_check('''
def memory_budget(sizes, batch_size, itemsize, optimizer):
    budget_bytes = sum(sizes) * itemsize
    return budget_bytes, 0, 0, 0
''').ok  # a local that happens to be called budget-something is fine


# --------------------------------------------------------------------------- the largest batch


max_batch = SOLUTIONS["max_batch"]


def test_asking_the_oracle_for_the_largest_batch_is_refused() -> None:
    text = '''
def max_batch(sizes, itemsize, optimizer, budget_bytes):
    dtype = {2: torch.float16, 4: torch.float32, 8: torch.float64}[itemsize]
    return memory.max_batch(models_zoo.mlp(sizes), (sizes[0],), budget_bytes, optimizer, dtype)
'''
    namespace: dict[str, Any] = {}
    imports = "import torch\nfrom edu_dl.gpu import memory, zoo as models_zoo\n"
    exec(compile(imports + text, "<cell>", "exec"), namespace)
    part = next(p for p in ex17.PARTS if p.id == "ex17.max_batch")
    rng = np.random.default_rng(checking.VISIBLE_SEED)
    assert_solution_passes(part, namespace["max_batch"], False, rng)  # right values ...
    assert part.source_check is not None
    verdict = part.source_check(text)
    assert not verdict.ok and "asks edu_dl.gpu.memory" in verdict.message  # ... asked for
    nb = nbformat.read(NOTEBOOK, as_version=4)
    found = trusted_source.find_source(nb, "ex17.max_batch")
    assert found is not None and part.source_check(found).ok  # the solution counts itself


@pytest.mark.parametrize(("wrong", "hint"), [
    (lambda *a: max_batch(*a) + 1, "one too many"),
    (lambda *a: max(0, max_batch(*a) - 1) if max_batch(*a) else 0, "one too few"),
])
def test_max_batch_off_by_one(capsys: pytest.CaptureFixture[str], wrong: Any, hint: str) -> None:
    ok, out = run(capsys, "ex17.max_batch", wrong)
    assert not ok and f"hint: {hint}" in out


def test_max_batch_negative_and_without_the_fixed_part(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    def raw(sizes, itemsize, optimizer, budget_bytes):
        p, g, s, per = memory_budget(sizes, 1, itemsize, optimizer)
        return (budget_bytes - p - g - s) // per

    ok, out = run(capsys, "ex17.max_batch", raw)
    assert not ok and "hint: when not even one example fits, return 0" in out

    def no_fixed(sizes, itemsize, optimizer, budget_bytes):
        return budget_bytes // memory_budget(sizes, 1, itemsize, optimizer)[3]

    ok, out = run(capsys, "ex17.max_batch", no_fixed)
    assert not ok and "hint: parameters, gradients and optimizer state take their share" in out
