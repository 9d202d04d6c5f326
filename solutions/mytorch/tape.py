"""Your framework's engine: a tape (exercise 08, sections 2 and 3).

The forward pass appends one record per op to a tape, in the order the ops run; the backward
pass replays the records from the last to the first (exercise 08 says why that order is
already a topological one). Write the functions whose bodies raise NotImplementedError;
exercise 08 checks them, and exercises 10 and 24 build on them.
"""

import numpy as np


def unbroadcast(grad, shape):
    """The gradient of an input of shape `shape` that broadcasting stretched to grad.shape.

    Inputs:
    - grad: dL/d(broadcast value), an array whose shape `shape` broadcasts to
    - shape: a tuple of ints, the input's shape (maybe fewer axes, maybe axes of size 1)

    Returns an array of exactly `shape`; grad is left unchanged.
    Example: unbroadcast(np.ones((4, 3)), (3,)) gives array([4., 4., 4.]);
    unbroadcast(np.ones((4, 3)), (4, 1)) gives an array of shape (4, 1) full of 3.
    """
    ### BEGIN SOLUTION
    # Broadcasting aligns shapes on the right, so the axes it added are the leading ones.
    extra = grad.ndim - len(shape)
    folded = grad.sum(axis=tuple(range(extra))) if extra else grad
    stretched = tuple(axis for axis, size in enumerate(shape) if size == 1)
    return folded.sum(axis=stretched, keepdims=True) if stretched else folded
    ### END SOLUTION


class Tape:
    """A tape of variables and records: ops append to it in the order they run."""

    def __init__(self):
        self.values = []   # values[i]: variable i's value
        self.records = []  # (output id, input ids, vjp), in the order the ops ran

    def input(self, value):
        """Put a leaf value on the tape; returns its id."""
        self.values.append(np.asarray(value, dtype=np.float64))
        return len(self.values) - 1

    def record(self, value, inputs, vjp):
        """Put an op's result on the tape with the record that differentiates it; its id."""
        out = self.input(value)
        self.records.append((out, tuple(inputs), vjp))
        return out

    def add(self, a, b):
        """values[a] + values[b] (broadcasting); vjp(dout) -> (da, db) of the inputs' shapes."""
        ### BEGIN SOLUTION
        x, y = self.values[a], self.values[b]
        return self.record(x + y, (a, b),
                           lambda g: (unbroadcast(g, x.shape), unbroadcast(g, y.shape)))
        ### END SOLUTION

    def mul(self, a, b):
        """values[a] * values[b] (elementwise, broadcasting); vjp(dout) -> (da, db)."""
        ### BEGIN SOLUTION
        x, y = self.values[a], self.values[b]
        return self.record(x * y, (a, b),
                           lambda g: (unbroadcast(g * y, x.shape), unbroadcast(g * x, y.shape)))
        ### END SOLUTION

    def matmul(self, a, b):
        """values[a] @ values[b], shapes (N, D) and (D, M) -> (N, M); vjp(dout) -> (da, db)."""
        ### BEGIN SOLUTION
        x, w = self.values[a], self.values[b]
        return self.record(x @ w, (a, b), lambda g: (g @ w.T, x.T @ g))
        ### END SOLUTION

    def exp(self, a):
        """e ** values[a] elementwise; vjp(dout) -> (da,)."""
        ### BEGIN SOLUTION
        value = np.exp(self.values[a])
        return self.record(value, (a,), lambda g: (g * value,))
        ### END SOLUTION

    def log(self, a):
        """The natural logarithm of values[a] (all > 0) elementwise; vjp(dout) -> (da,)."""
        ### BEGIN SOLUTION
        x = self.values[a]
        return self.record(np.log(x), (a,), lambda g: (g / x,))
        ### END SOLUTION

    def relu(self, a):
        """max(values[a], 0) elementwise, derivative 0 at 0; vjp(dout) -> (da,)."""
        ### BEGIN SOLUTION
        passes = self.values[a] > 0
        return self.record(np.where(passes, self.values[a], 0.0), (a,),
                           lambda g: (np.where(passes, g, 0.0),))
        ### END SOLUTION

    def sum(self, a):
        """The sum of all elements of values[a], a number; vjp(dout) -> (da,)."""
        ### BEGIN SOLUTION
        shape = self.values[a].shape
        return self.record(self.values[a].sum(), (a,), lambda g: (np.full(shape, g),))
        ### END SOLUTION

    def mean(self, a):
        """The mean of all elements of values[a], a number; vjp(dout) -> (da,)."""
        ### BEGIN SOLUTION
        shape, count = self.values[a].shape, self.values[a].size
        return self.record(self.values[a].mean(), (a,), lambda g: (np.full(shape, g / count),))
        ### END SOLUTION


def backward(tape, output, dout):
    """Reverse-mode differentiation of variable `output` over everything the tape recorded.

    Inputs:
    - tape: a Tape (values and records as above)
    - output: the id of the variable to differentiate
    - dout: dL/d(values[output]), an array of that value's shape

    Returns a list with one gradient per variable of the tape (grads[i] of values[i]'s shape:
    dL/d values[i], zeros where the output does not depend on it); dout is left unchanged.
    Example: with x = tape.input(np.array([3.0])) and y = tape.add(x, x),
    backward(tape, y, np.array([1.0]))[x] is array([2.]).
    """
    ### BEGIN SOLUTION
    grads = [np.zeros(np.shape(value)) for value in tape.values]
    grads[output] = grads[output] + dout
    for out, inputs, vjp in reversed(tape.records):
        for i, contribution in zip(inputs, vjp(grads[out])):
            grads[i] = grads[i] + contribution  # a value used twice gets both
    return grads
    ### END SOLUTION
