"""Exercise 23's parts: the solution kernels pass in Triton's interpreter, each typical mistake of
a masked kernel gets its own hint (an unmasked store is counted outside the output, padded lanes
in the variance, the wrong stride), and a function that is no Triton kernel is told so.

Triton imports torch: nothing here imports it while the tests are collected. The kernels are
defined inside the ``kernels`` fixture, after TRITON_INTERPRET=1 is set, and looked up by name.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from fixtures.exercise_helpers import checked, course_part, solution_namespace

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def kernels() -> dict[str, Any]:
    os.environ["TRITON_INTERPRET"] = "1"  # before any @triton.jit: the interpreter, on the CPU
    pytest.importorskip("triton")
    return {**_mistakes(), **solution_namespace("23_triton.ipynb")}


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize(("part", "name"), [("ex23.leaky_relu_kernel", "leaky_relu_kernel"),
                                            ("ex23.layer_norm_kernel", "layer_norm_kernel")])
def test_the_solution_passes(kernels: dict[str, Any], part: str, name: str,
                             hidden: bool) -> None:
    ok, out = checked(part, kernels[name], hidden=hidden)
    assert ok, out


def _mistakes() -> dict[str, Any]:
    """One kernel per typical mistake (and the stub), decorated in the interpreter."""
    import triton
    import triton.language as tl

    @triton.jit
    def leaky_unmasked_store(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.store(out_ptr + offsets, tl.where(x > 0, x, slope * x))

    @triton.jit
    def leaky_unmasked_load(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets)
        tl.store(out_ptr + offsets, tl.where(x > 0, x, slope * x))

    @triton.jit
    def leaky_wrong_offsets(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) + tl.arange(0, BLOCK)  # pid, not pid * BLOCK
        x = tl.load(x_ptr + offsets, mask=offsets < n)
        tl.store(out_ptr + offsets, tl.where(x > 0, x, slope * x), mask=offsets < n)

    @triton.jit
    def leaky_slope_swapped(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n)
        tl.store(out_ptr + offsets, tl.where(x > 0, slope * x, x), mask=offsets < n)

    @triton.jit
    def norm_padded_variance(x_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + tl.program_id(0) * stride + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        centred = x - mean  # the masked lanes hold -mean
        var = tl.sum(centred * centred, axis=0) / n_cols
        tl.store(out_ptr + tl.program_id(0) * stride + cols, centred / tl.sqrt(var + eps),
                 mask=mask)

    @triton.jit
    def norm_by_block(x_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + tl.program_id(0) * stride + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / BLOCK
        centred = tl.where(mask, x - mean, 0.0)
        var = tl.sum(centred * centred, axis=0) / BLOCK
        tl.store(out_ptr + tl.program_id(0) * stride + cols, centred / tl.sqrt(var + eps),
                 mask=mask)

    @triton.jit
    def norm_wrong_stride(x_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + tl.program_id(0) * n_cols + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        centred = tl.where(mask, x - mean, 0.0)
        var = tl.sum(centred * centred, axis=0) / n_cols
        tl.store(out_ptr + tl.program_id(0) * n_cols + cols, centred / tl.sqrt(var + eps),
                 mask=mask)

    @triton.jit
    def norm_eps_outside(x_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + tl.program_id(0) * stride + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        centred = tl.where(mask, x - mean, 0.0)
        var = tl.sum(centred * centred, axis=0) / n_cols
        tl.store(out_ptr + tl.program_id(0) * stride + cols, centred / (tl.sqrt(var) + eps),
                 mask=mask)

    @triton.jit
    def stub(x_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        raise NotImplementedError

    return {name: kernel for name, kernel in locals().items()
            if name not in ("triton", "tl")}


# --------------------------------------------------------------------------- leaky ReLU


@pytest.mark.parametrize(("kernel", "hint"), [
    ("leaky_unmasked_store", "mask tl.store (and tl.load)"),
    ("leaky_unmasked_load", "mask tl.store (and tl.load)"),
    ("leaky_wrong_offsets", "pid * BLOCK + tl.arange(0, BLOCK)"),
    ("leaky_slope_swapped", "the slope scales the negative inputs"),
])
def test_leaky_mistakes_get_their_hints(kernels: dict[str, Any], kernel: str, hint: str) -> None:
    ok, out = checked("ex23.leaky_relu_kernel", kernels[kernel])
    assert not ok and hint in out, out


def test_a_numpy_function_is_no_kernel() -> None:
    def leaky_relu_kernel(x_ptr, out_ptr, n, slope, BLOCK):
        out_ptr[:] = x_ptr

    ok, out = checked("ex23.leaky_relu_kernel", leaky_relu_kernel)
    assert not ok and "decorate the function with @triton.jit" in out, out


# --------------------------------------------------------------------------- layer norm


@pytest.mark.parametrize(("kernel", "hint"), [
    ("norm_padded_variance", "the masked lanes count in the variance"),
    ("norm_by_block", "divided by BLOCK"),
    ("norm_wrong_stride", "rows are stride elements apart"),
    ("norm_eps_outside", "eps goes inside the square root"),
])
def test_norm_mistakes_get_their_hints(kernels: dict[str, Any], kernel: str, hint: str) -> None:
    ok, out = checked("ex23.layer_norm_kernel", kernels[kernel])
    assert not ok and hint in out, out


def test_the_stub_is_not_implemented_yet(kernels: dict[str, Any]) -> None:
    ok, out = checked("ex23.layer_norm_kernel", kernels["stub"])
    assert not ok and "not implemented yet" in out, out


def test_the_layer_norm_oracle_is_torchs() -> None:
    from fixtures.frameworks import torch

    part = course_part("ex23.layer_norm_kernel")
    for x, eps, block, stride in part.cases(np.random.default_rng(5), True):
        want = torch.nn.functional.layer_norm(torch.tensor(x, dtype=torch.float64),
                                              (x.shape[1],), eps=eps).numpy()
        assert np.allclose(part.expected(x, eps, block, stride)[0], want, atol=1e-12)


def test_the_grading_sandbox_interprets_triton_kernels() -> None:
    """A notebook graded in the sandbox gets TRITON_INTERPRET=1 before any cell runs, so its
    kernels run in the interpreter whatever its first cell does (there is no GPU there)."""
    from edu_dl.grading.stages.run import sandbox_env

    assert sandbox_env()["TRITON_INTERPRET"] == "1"
