"""Functions of your framework that work on arrays alone (exercise 08, section 4); the layers
of exercise 10 record them on a tape as one op each."""

import numpy as np


def softmax_cross_entropy(logits, y):
    """The mean softmax cross-entropy of a batch, and its gradient.

    Inputs:
    - logits: an (N, C) array of class scores
    - y: N integer labels in 0..C-1

    Returns (loss, dlogits): loss is a number, the batch's mean of -log(probability of the
    right class) under softmax(logits_i); dlogits is dloss/dlogits, of logits' shape.
    Logits can be large (near 800): the result must still be finite.
    Example: softmax_cross_entropy(np.zeros((2, 2)), np.array([0, 1]))[0] is log 2 = 0.693...
    """
    ### BEGIN SOLUTION
    n = logits.shape[0]
    shifted = logits - logits.max(axis=1, keepdims=True)  # exp cannot overflow now
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_probs[np.arange(n), y].mean()
    dlogits = np.exp(log_probs)
    dlogits[np.arange(n), y] -= 1.0
    return loss, dlogits / n
    ### END SOLUTION
