"""Scaled dot-product attention, softmax(Q K^T / sqrt(d)) V, three ways, and what each keeps.

- :func:`attention`: on edu_dl's autograd ops (matmul, transpose, softmax), so backward comes
  from the engine; the score matrix, N x N per head, is built and saved for backward.
- :func:`naive_attention`: the same in NumPy, written lean (in place), so its peak memory is the
  score matrix and little more.
- :func:`tiled_attention`: FlashAttention's idea in NumPy. Queries and keys go in blocks; for
  each query block a running row maximum ``m``, a running sum ``l`` of exp(score - m) and an
  unnormalized output are rescaled by exp(m_old - m_new) whenever a new key block raises the
  maximum (the *online softmax*), so no N x N matrix ever exists: the extra memory is one
  block_q x block_k tile and O(N) running statistics.

Plus the counts a lecture prints against the measurements: the score matrix's bytes, the FLOPs,
the bytes a naive and a tiled kernel move through memory (for the roofline), and the peak of the
memory NumPy allocates during a call (``tracemalloc`` sees NumPy's buffers).

Shapes: ``q`` (..., n_q, d), ``k`` (..., n_k, d), ``v`` (..., n_k, d_v); leading axes (batch,
heads) broadcast as in NumPy's matmul. ``causal``: query i sees keys 0..i only (as torch's
``is_causal=True``, aligned top-left).
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.autograd import ops

Array = np.ndarray


def causal_mask(n_q: int, n_k: int) -> Array:
    """Boolean (n_q, n_k): True where query i may see key j, that is j <= i."""
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None]


def _swap_last_two(ndim: int) -> tuple[int, ...]:
    return (*range(ndim - 2), ndim - 1, ndim - 2)


def attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """softmax(q k^T / sqrt(d)) v on edu_dl Tensors (or graph nodes): backward is the engine's."""
    d = q.shape[-1]
    scores = ops.matmul(q, ops.transpose(k, _swap_last_two(len(k.shape)))) * (1.0 / math.sqrt(d))
    if causal:
        # -inf where a key is in the future: softmax gives it probability 0 and gradient 0
        hidden = np.where(causal_mask(q.shape[-2], k.shape[-2]), 0.0, -np.inf)
        scores = scores + hidden.astype(scores.dtype)
    return ops.matmul(ops.softmax(scores, axis=-1), v)


def naive_attention(q: Array, k: Array, v: Array, causal: bool = False) -> Array:
    """The whole score matrix at once, in NumPy; in place, so it exists once (plus its row
    statistics) while the output is computed."""
    scores = q @ np.swapaxes(k, -1, -2)  # (..., n_q, n_k): the N^2 memory
    scores *= 1.0 / math.sqrt(q.shape[-1])
    if causal:
        scores[..., ~causal_mask(q.shape[-2], k.shape[-2])] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores @ v


def tiled_attention(q: Array, k: Array, v: Array, causal: bool = False, block_q: int = 64,
                    block_k: int = 64) -> Array:
    """Attention by blocks with an online softmax: equal to :func:`naive_attention` up to
    rounding, never holding more than one (block_q, block_k) tile of scores."""
    if block_q < 1 or block_k < 1:
        raise ValueError(f"tiled_attention: blocks must be positive, got {block_q}, {block_k}")
    n_q, n_k, scale = q.shape[-2], k.shape[-2], 1.0 / math.sqrt(q.shape[-1])
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    dtype = np.result_type(q, k, v)
    out = np.empty((*lead, n_q, v.shape[-1]), dtype=dtype)
    for q0 in range(0, n_q, block_q):
        q1 = min(q0 + block_q, n_q)
        qi = q[..., q0:q1, :] * scale
        m = np.full((*lead, q1 - q0, 1), -np.inf, dtype=dtype)  # running row maximum
        l = np.zeros((*lead, q1 - q0, 1), dtype=dtype)  # running sum of exp(score - m)
        acc = np.zeros((*lead, q1 - q0, v.shape[-1]), dtype=dtype)  # unnormalized output
        # causal: key blocks that start after this block's last query are all masked
        for k0 in range(0, min(n_k, q1) if causal else n_k, block_k):
            k1 = min(k0 + block_k, n_k)
            s = qi @ np.swapaxes(k[..., k0:k1, :], -1, -2)
            if causal and k1 - 1 > q0:  # the tile crosses the diagonal
                s[..., ~_tile_mask(q0, q1, k0, k1)] = -np.inf
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            # a row with every score so far masked keeps m = -inf: shift it by 0 instead, so
            # exp(-inf - -inf) never makes a NaN (its p and its rescale are 0 and 1 anyway)
            shift = np.where(np.isfinite(m_new), m_new, 0.0)
            p = np.exp(s - shift)
            rescale = np.exp(m - shift)  # how much the old maximum overstated the new one
            l = l * rescale + p.sum(axis=-1, keepdims=True)
            acc = acc * rescale + p @ v[..., k0:k1, :]
            m = m_new
        out[..., q0:q1, :] = acc / l
    return out


def _tile_mask(q0: int, q1: int, k0: int, k1: int) -> Array:
    """causal_mask's tile for queries q0..q1-1 and keys k0..k1-1."""
    return np.arange(k0, k1)[None, :] <= np.arange(q0, q1)[:, None]


# --------------------------------------------------------------------------- counting


def score_matrix_bytes(n_q: int, n_k: int, itemsize: int, heads: int = 1) -> int:
    """Bytes of the score matrix, heads x n_q x n_k entries of ``itemsize`` bytes."""
    return heads * n_q * n_k * itemsize


def attention_flops(n: int, d: int, heads: int = 1) -> int:
    """FLOPs of the two matrix products per head (Q K^T and P V, 2 n^2 d each): the softmax's
    few per score are left out, as FlashAttention's papers count."""
    return heads * 4 * n * n * d


def naive_traffic_bytes(n: int, d: int, itemsize: int, heads: int = 1) -> int:
    """Bytes a kernel-per-step attention moves through GPU memory: Q, K, V read and O written
    (4 n d), the scores written, read and written again by softmax, read by P V (4 n^2)."""
    return heads * itemsize * (4 * n * d + 4 * n * n)


def tiled_traffic_bytes(n: int, d: int, itemsize: int, block_q: int, heads: int = 1) -> int:
    """Bytes a fused tiled kernel moves: Q read and O written once; K and V read once per query
    block (ceil(n / block_q) times); the scores never leave on-chip memory."""
    return heads * itemsize * (2 * n * d + 2 * n * d * math.ceil(n / block_q))


def peak_traced_bytes(fn: Callable[..., Any], *args: Any) -> tuple[Any, int]:
    """(fn(*args), the peak of memory allocated during the call above what was held before),
    as ``tracemalloc`` sees it: NumPy reports its array buffers there. The result counts."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return result, peak - before
