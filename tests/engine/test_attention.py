"""edu_dl.attention: the autograd version against torch (values and gradients), the tiled online
softmax equal to the naive version over drawn shapes and blocks, and the memory each keeps."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.frameworks import F, torch
from hypothesis import given, settings
from hypothesis import strategies as st

import edu_dl as ed
from edu_dl import attention as att


def qkv(rng: np.random.Generator, lead: tuple[int, ...], n_q: int, n_k: int, d: int, d_v: int,
        scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (scale * rng.standard_normal((*lead, n_q, d)),
            scale * rng.standard_normal((*lead, n_k, d)), rng.standard_normal((*lead, n_k, d_v)))


def torch_sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    t = [torch.from_numpy(a) for a in (q, k, v)]
    return F.scaled_dot_product_attention(*t, is_causal=causal).numpy()


@st.composite
def problems(draw: st.DrawFn) -> tuple[tuple[int, ...], int, int, int, int, bool]:
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    causal = draw(st.booleans())
    n_k = draw(st.integers(1, 40))
    # causal with more queries than keys leaves rows that see nothing (NaN, as in torch)
    n_q = draw(st.integers(1, n_k if causal else 40))
    return lead, n_q, n_k, draw(st.integers(1, 9)), draw(st.integers(1, 6)), causal


@settings(max_examples=60, deadline=None)
@given(problem=problems(), block_q=st.integers(1, 17), block_k=st.integers(1, 17),
       seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1.0, 30.0]))
def test_tiled_equals_naive_equals_torch(problem: tuple[tuple[int, ...], int, int, int, int, bool],
                                         block_q: int, block_k: int, seed: int,
                                         scale: float) -> None:
    """scale 30: scores of several hundred, where an exp without the running maximum overflows."""
    lead, n_q, n_k, d, d_v, causal = problem
    q, k, v = qkv(np.random.default_rng(seed), lead, n_q, n_k, d, d_v, scale)
    expected = torch_sdpa(q, k, v, causal)
    naive = att.naive_attention(q, k, v, causal)
    tiled = att.tiled_attention(q, k, v, causal, block_q=block_q, block_k=block_k)
    assert naive.shape == tiled.shape == expected.shape
    np.testing.assert_allclose(naive, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tiled, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_keeps_float32(causal: bool) -> None:
    q, k, v = (a.astype(np.float32) for a in qkv(np.random.default_rng(1), (2,), 33, 33, 8, 8))
    tiled = att.tiled_attention(q, k, v, causal, block_q=8, block_k=16)
    assert tiled.dtype == np.float32
    np.testing.assert_allclose(tiled, torch_sdpa(q, k, v, causal), rtol=1e-5, atol=1e-6)


def test_tiled_rejects_empty_blocks() -> None:
    q = np.zeros((2, 2))
    with pytest.raises(ValueError, match="blocks must be positive"):
        att.tiled_attention(q, q, q, block_q=0)


@settings(max_examples=25, deadline=None)
@given(problem=problems(), seed=st.integers(0, 2**32 - 1))
def test_autograd_attention_matches_torch(
        problem: tuple[tuple[int, ...], int, int, int, int, bool], seed: int) -> None:
    lead, n_q, n_k, d, d_v, causal = problem
    rng = np.random.default_rng(seed)
    arrays = qkv(rng, lead, n_q, n_k, d, d_v)
    mine = [ed.tensor(a.copy(), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = att.attention(*mine, causal=causal)
    tout = F.scaled_dot_product_attention(*theirs, is_causal=causal)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    dout = rng.standard_normal(out.shape)
    (out * dout).sum().backward()
    (tout * torch.from_numpy(dout)).sum().backward()
    for name, x, t in zip("qkv", mine, theirs, strict=True):
        assert x.grad is not None and t.grad is not None
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=f"d{name}")


@pytest.mark.parametrize("causal", [False, True])
def test_autograd_attention_passes_gradcheck(causal: bool) -> None:
    arrays = qkv(np.random.default_rng(3), (2,), 5, 5, 3, 4)
    report = ed.gradcheck(lambda q, k, v: att.attention(q, k, v, causal=causal),
                          *[ed.tensor(a, requires_grad=True) for a in arrays], tolerance=1e-5)
    assert report.passed, str(report)


def test_causal_mask_sees_the_past_only() -> None:
    np.testing.assert_array_equal(att.causal_mask(3, 3), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


# --------------------------------------------------------------------------- memory


def _extra_bytes(fn, n: int, d: int = 16) -> int:
    q, k, v = (a.astype(np.float32) for a in qkv(np.random.default_rng(0), (), n, n, d, d))
    out, peak = att.peak_traced_bytes(fn, q, k, v)
    return peak - out.nbytes


def test_naive_peak_is_the_score_matrix() -> None:
    """Beyond its output, the naive version holds the n x n scores, plus O(n) (row statistics,
    BLAS's copies of an operand: a few n x d arrays)."""
    d = 16
    for n in (128, 512):
        scores = att.score_matrix_bytes(n, n, 4)
        assert scores <= _extra_bytes(att.naive_attention, n, d) <= scores + 4 * (n * d + n) * 4


def test_tiled_extra_memory_does_not_grow_with_n() -> None:
    """The tiled version's extra memory is a few tiles: the same at n = 128 and n = 1024,
    a small fraction of the 4 MiB score matrix at 1024."""
    small, large = (_extra_bytes(att.tiled_attention, n) for n in (128, 1024))
    assert large <= small + 4096
    assert large < att.score_matrix_bytes(1024, 1024, 4) / 20


def test_peak_traced_bytes_sees_an_allocation() -> None:
    result, peak = att.peak_traced_bytes(np.ones, 1_000_000)
    assert result.nbytes == 8_000_000 <= peak < 8_100_000


def test_counts() -> None:
    assert att.score_matrix_bytes(4, 5, 2, heads=3) == 120
    assert att.attention_flops(8, 2) == 4 * 64 * 2
    assert att.naive_traffic_bytes(8, 2, 2) == 2 * (4 * 16 + 4 * 64)
    assert att.tiled_traffic_bytes(8, 2, 2, block_q=4) == 2 * (32 + 2 * 16 * 2)
    # the naive intensity is about d / itemsize; tiling raises it about block_q / d-fold
    n, d = 4096, 64
    naive = att.attention_flops(n, d) / att.naive_traffic_bytes(n, d, 2)
    tiled = att.attention_flops(n, d) / att.tiled_traffic_bytes(n, d, 2, block_q=128)
    assert 30 < naive < 32 and 120 < tiled < 128


@pytest.mark.parametrize("causal", [False, True])
def test_the_static_graph_runs_the_same_attention(causal: bool) -> None:
    """attention() on graph nodes: Session.run gives the eager values and gradients."""
    from edu_dl import graph as tf

    q, k, v = qkv(np.random.default_rng(4), (2,), 4, 4 if causal else 6, 3, 2)
    dout = np.random.default_rng(5).standard_normal((2, 4, 2))
    eager = [ed.tensor(a, requires_grad=True) for a in (q, k, v)]
    out = att.attention(*eager, causal=causal)
    (out * dout).sum().backward()
    with tf.Graph().as_default():
        nodes = [tf.placeholder(tf.float64, a.shape) for a in (q, k, v)]
        graph_out = att.attention(*nodes, causal=causal)
        grads = tf.gradients(tf.reduce_sum(graph_out * dout), nodes)
        with tf.Session() as session:
            got = session.run([graph_out, *grads], dict(zip(nodes, (q, k, v), strict=True)))
    np.testing.assert_allclose(got[0], out.numpy(), rtol=1e-12, atol=1e-14)
    for x, g in zip(eager, got[1:], strict=True):
        assert x.grad is not None
        np.testing.assert_allclose(g, x.grad.numpy(), rtol=1e-12, atol=1e-14)
