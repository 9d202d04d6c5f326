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
    # YOUR CODE HERE
    raise NotImplementedError('unbroadcast in mytorch/tape.py is not written yet')


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
        # YOUR CODE HERE
        raise NotImplementedError('Tape.add in mytorch/tape.py is not written yet')

    def mul(self, a, b):
        """values[a] * values[b] (elementwise, broadcasting); vjp(dout) -> (da, db)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.mul in mytorch/tape.py is not written yet')

    def matmul(self, a, b):
        """values[a] @ values[b], shapes (N, D) and (D, M) -> (N, M); vjp(dout) -> (da, db)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.matmul in mytorch/tape.py is not written yet')

    def exp(self, a):
        """e ** values[a] elementwise; vjp(dout) -> (da,)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.exp in mytorch/tape.py is not written yet')

    def log(self, a):
        """The natural logarithm of values[a] (all > 0) elementwise; vjp(dout) -> (da,)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.log in mytorch/tape.py is not written yet')

    def relu(self, a):
        """max(values[a], 0) elementwise, derivative 0 at 0; vjp(dout) -> (da,)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.relu in mytorch/tape.py is not written yet')

    def sum(self, a):
        """The sum of all elements of values[a], a number; vjp(dout) -> (da,)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.sum in mytorch/tape.py is not written yet')

    def mean(self, a):
        """The mean of all elements of values[a], a number; vjp(dout) -> (da,)."""
        # YOUR CODE HERE
        raise NotImplementedError('Tape.mean in mytorch/tape.py is not written yet')


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
    # YOUR CODE HERE
    raise NotImplementedError('backward in mytorch/tape.py is not written yet')
