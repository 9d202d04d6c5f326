"""Your framework's layers, loss and optimizer (exercise 10, section 5), in PyTorch's design.

A layer holds its parameters as NumPy arrays and records its forward pass on the tape it is
given; after the pass, its ``ids`` are the tape ids of its parameters, in the order of
``parameters()``, so that ``backward``'s gradients can be matched to them. An optimizer updates
the parameters in place, so every layer sees the new values on the next tape. Write the bodies
that raise NotImplementedError; exercise 10 checks them, exercise 24 trains with them.
"""

import numpy as np

from mytorch.functional import softmax_cross_entropy
from mytorch.tape import Tape, backward


class Module:
    """What every layer has: its parameters, and their ids on the last tape it ran on."""

    def __init__(self):
        self.ids = []

    def parameters(self):
        """The layer's parameters (NumPy arrays, updated in place by an optimizer)."""
        return []


class Linear(Module):
    """A fully connected layer, y = x @ weight + bias, initialised as torch.nn.Linear is.

    weight has shape (n_in, n_out) (the transpose of PyTorch's), bias (n_out,); both are drawn
    uniformly from [-1/sqrt(n_in), 1/sqrt(n_in)] by ``rng`` (a np.random.Generator).
    """

    def __init__(self, n_in, n_out, rng):
        super().__init__()
        bound = 1.0 / np.sqrt(n_in)
        self.weight = rng.uniform(-bound, bound, (n_in, n_out))
        self.bias = rng.uniform(-bound, bound, n_out)

    def parameters(self):
        return [self.weight, self.bias]

    def __call__(self, tape, x):
        """Record x @ weight + bias on ``tape``; ``x`` is the id of an (N, n_in) value.

        Puts weight and bias on the tape as inputs (their ids in ``self.ids``, weight first)
        and returns the id of the (N, n_out) result. E.g. with weight = [[2.], [3.]],
        bias = [1.] and x's value [[1., 1.]], the result's value is [[6.]].
        """
        ### BEGIN SOLUTION
        weight, bias = tape.input(self.weight), tape.input(self.bias)
        self.ids = [weight, bias]
        return tape.add(tape.matmul(x, weight), bias)
        ### END SOLUTION


class ReLU(Module):
    """max(x, 0), elementwise: no parameters."""

    def __call__(self, tape, x):
        return tape.relu(x)


class Sequential(Module):
    """Layers applied one after the other; its parameters (and ids) are theirs, in order."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = layers

    def parameters(self):
        return [p for layer in self.layers for p in layer.parameters()]

    def __call__(self, tape, x):
        for layer in self.layers:
            x = layer(tape, x)
        self.ids = [i for layer in self.layers for i in layer.ids]
        return x


def cross_entropy(tape, logits, y):
    """Record the batch's mean softmax cross-entropy as one op on ``tape``.

    ``logits``: the id of an (N, C) value; ``y``: (N,) integer labels (an array, not on the
    tape: nothing is differentiated with respect to them). Returns the id of the loss, a
    number; its record's vjp(dout) gives the gradient with respect to the logits for an
    upstream gradient ``dout`` (a number). Use softmax_cross_entropy from mytorch.functional.
    """
    ### BEGIN SOLUTION
    loss, dlogits = softmax_cross_entropy(tape.values[logits], y)
    return tape.record(np.asarray(loss), (logits,), lambda dout: (dout * dlogits,))
    ### END SOLUTION


class SGD:
    """Stochastic gradient descent with momentum, as torch.optim.SGD computes it.

    ``params``: the arrays to update in place (a model's parameters()); ``lr``: the learning
    rate; ``momentum``: 0 for plain SGD. Each parameter keeps a velocity buffer, zero at first.
    """

    def __init__(self, params, lr, momentum=0.0):
        self.params = list(params)
        self.lr = lr
        self.momentum = momentum
        self.velocity = [np.zeros_like(p) for p in self.params]

    def step(self, grads):
        """One update of every parameter, in place, from ``grads`` (one array per parameter,
        in the order of params), with torch.optim.SGD's rule: velocity = momentum * velocity
        + grad, then param -= lr * velocity. Returns nothing."""
        ### BEGIN SOLUTION
        for param, velocity, grad in zip(self.params, self.velocity, grads):
            velocity *= self.momentum
            velocity += grad
            param -= self.lr * velocity
        ### END SOLUTION


def train_step(model, optimizer, x, y):
    """One step of training: the model's forward pass on a new tape, the mean cross-entropy
    against ``y``, the backward pass, the optimizer's step.

    ``model``: a layer (say a Sequential); ``optimizer``: an SGD over model.parameters();
    ``x``: an (N, D) float64 array; ``y``: (N,) integer labels. Updates the parameters in
    place and returns the loss before the update, a float.
    """
    ### BEGIN SOLUTION
    tape = Tape()
    loss = cross_entropy(tape, model(tape, tape.input(x)), y)
    grads = backward(tape, loss, np.array(1.0))
    optimizer.step([grads[i] for i in model.ids])
    return float(tape.values[loss])
    ### END SOLUTION
