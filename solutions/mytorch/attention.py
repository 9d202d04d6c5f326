"""Your framework's attention (exercise 18): its backward pass by hand, and the op that records
attention on your tape with it. Write the bodies that raise NotImplementedError; exercise 18
checks them.
"""

import math

import numpy as np


def attention_backward(q, k, v, dout, causal):
    """Gradients of L through out = softmax(q k^T / sqrt(d), masked if causal) @ v.

    q: (n_q, d), k: (n_k, d), v: (n_k, d_v), dout = dL/dout: (n_q, d_v); causal: bool.
    Returns (dq, dk, dv) with the shapes of q, k and v.
    Example: n_q = n_k = 1: the one probability is 1, so dv = dout and dq = dk = 0.
    """
    ### BEGIN SOLUTION
    scale = 1.0 / math.sqrt(q.shape[1])
    scores = scale * q @ k.T
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    d_weights = dout @ v.T
    # each row's softmax: d_scores_i = P_i * (dP_i - <dP_i, P_i>); masked entries have P = 0
    d_scores = weights * (d_weights - np.einsum("ij,ij->i", d_weights, weights)[:, None])
    return scale * d_scores @ k, scale * d_scores.T @ q, weights.T @ dout
    ### END SOLUTION


def attention(tape, q, k, v, causal):
    """Record one head of attention, softmax(q k^T / sqrt(d), masked if causal) @ v, on ``tape``
    as **one** op whose inputs are q, k and v and whose vjp is your attention_backward.

    q, k, v: the ids of (n_q, d), (n_k, d) and (n_k, d_v) values; causal: bool (query i sees the
    keys j <= i). Returns the id of the (n_q, d_v) output. E.g. with one query and one key, the
    output is v's value.
    """
    ### BEGIN SOLUTION
    queries, keys, values = tape.values[q], tape.values[k], tape.values[v]
    scores = queries @ keys.T / math.sqrt(queries.shape[1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return tape.record(weights @ values, (q, k, v),
                       lambda dout: attention_backward(queries, keys, values, dout, causal))
    ### END SOLUTION
