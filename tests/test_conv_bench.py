"""The conv2d benchmark runs, checks what it times, and its NumPy reference is right."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from edu_dl import conv_bench


def test_the_reference_is_pytorchs_conv2d() -> None:
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((4, 3, 3, 3)), \
        rng.standard_normal(4)
    grad = rng.standard_normal((2, 4, 5, 4))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out = F.conv2d(tx, tw, tb, padding=1)
    out.backward(torch.tensor(grad))
    np.testing.assert_allclose(conv_bench.numpy_forward(x, w, b, 1), out.detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    for mine, t in zip(conv_bench.numpy_backward(x, w, grad, 1), (tx, tw, tb), strict=True):
        np.testing.assert_allclose(mine, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_one_quick_round_gives_the_whole_table() -> None:
    rows = conv_bench.run(rounds=1, min_block_s=0.0)
    assert [(r.size, r.implementation) for r in rows] == [
        (size, impl) for size, _, _ in conv_bench.SIZES for impl in conv_bench.IMPLEMENTATIONS]
    assert all(r.forward_us > 0 and r.both_us > 0 for r in rows)
    text = conv_bench.table(rows)
    assert text.count("| numpy | ") == len(conv_bench.SIZES) and "| 1.00 |" in text
