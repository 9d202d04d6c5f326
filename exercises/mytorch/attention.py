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
    # YOUR CODE HERE
    raise NotImplementedError('attention_backward in mytorch/attention.py is not written yet')


def attention(tape, q, k, v, causal):
    """Record one head of attention, softmax(q k^T / sqrt(d), masked if causal) @ v, on ``tape``
    as **one** op whose inputs are q, k and v and whose vjp is your attention_backward.

    q, k, v: the ids of (n_q, d), (n_k, d) and (n_k, d_v) values; causal: bool (query i sees the
    keys j <= i). Returns the id of the (n_q, d_v) output. E.g. with one query and one key, the
    output is v's value.
    """
    # YOUR CODE HERE
    raise NotImplementedError('attention in mytorch/attention.py is not written yet')
