"""Exercise 9, TensorFlow: the lecture's two-layer net, each part one step past the lecture:
TF 1.x minibatches through one graph whose batch size is a run-time dimension, TF 1.x Variables
whose run returns the loss at the weights it just updated (the read ordered after the assign:
TF 1.x's dataflow), TF 2 with ``GradientTape`` and momentum (state kept across steps), and
``tf.function`` under a decaying learning rate (what a trace freezes); and the bytes a TF 1.x
training step feeds and fetches, with the weights fed every step and as Variables (its oracle: the
bytes of real arrays of those shapes, ``ndarray.nbytes``, as ``edu_dl.bench.transfer`` counts them).

Every part trains the net ``loss = mean_i sum_j (relu(x w1) w2 - y)_ij²`` by gradient descent and
returns the losses: the minibatch part takes one step per batch of ``batch_size`` rows, in order,
the last batch shorter, for ``num_epochs`` epochs, each loss its batch's before the update; the
Variables part returns each step's loss at the updated weights; the tape part steps with momentum
(``v = momentum v + grad; w -= lr v``, v from 0), the ``tf.function`` part's step t (from 0) uses
the rate ``lr / (1 + decay t)``. The oracle is edu_dl's eager engine in float64 (with
``edu_dl.optim.SGD`` for momentum)
(its autograd, not TensorFlow's); the hints replay typical mistakes with a NumPy copy of the loop.

Each part's ``call`` (public: ``edu_dl.harness.ex09``, with the generic rules about losses) also
watches how the function ran, and says so in check()'s result:
- TF 1.x parts spy on ``Session.run`` (which every session, ``Tensor.eval`` and ``Operation.run``
  go through): no run at all means the function was not written in graph mode; the minibatch part
  returns the number of graphs its training runs used as a second output, expected 1 (a graph
  rebuilt per batch, or grown, counts again); the Variables part returns the training runs that
  updated nothing and those whose loss read a Variable unordered with its update, expected 0 and 0;
- the TF 2 part counts ``GradientTape.gradient`` calls (at least one, or it is not the tape);
- the ``tf.function`` part returns the function's tracing count as a second output, expected 1.

Those observations happen in the student's process, so they are check()'s feedback only: the
grader ignores the observed outputs (``feedback_outputs``) and judges, outside the sandbox, the
losses against the oracle and the submitted source of the function (``source_check``): a TF 1.x
part runs a ``Session`` (the minibatch part feeds ``placeholder``s, the Variables part builds
``Variable``s and updates them in the graph with ``assign``/``minimize``), the tape part calls
``GradientTape`` and ``gradient``, the ``tf.function`` part wraps its step with ``tf.function`` and
a ``GradientTape``. "Built once", "one ordered run per step" and "traced exactly once" cannot be
verified outside: they carry no points alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Equals, EqualsArgument, Greater, Mistake, Rule
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex09 import (
    NO_SESSION,
    Imprecise,
    ObservedMore,
    Stuck,
    call_tape,
    call_tf1_loss_after_update,
    call_tf1_minibatch,
    call_tf_function,
    losses_of,
)

Array = np.ndarray
Case = tuple[Any, ...]
# float64 engines agree to ~1e-14 here; a float32 learning rate (GradientDescentOptimizer(0.01)
# with a Python lr) moves the losses by ~1e-8 relative, a float32 computation by more: both fail,
# each with its own hint, as the lecture compares its engines to 1e-9.
COMPARE = tolerance(rtol=1e-9, atol=1e-12)
ARG_NAMES = ("X", "y", "w1", "w2", "lr", "num_steps")
MINIBATCH_ARG_NAMES = ("X", "y", "w1", "w2", "lr", "batch_size", "num_epochs")


# --------------------------------------------------------------------------- cases


def two_layer_case(rng: np.random.Generator, n: int, d_in: int, h: int, d_out: int,
                   steps: int) -> Case:
    """Data, weights scaled by 1/sqrt(fan_in), and a learning rate safe for this data.

    The rate is 0.1 / (a bound on the loss's curvature), rounded to two digits, so that gradient
    descent neither diverges nor stalls whatever the sizes.
    """
    x = rng.standard_normal((n, d_in))
    y = rng.standard_normal((n, d_out))
    w1 = rng.standard_normal((d_in, h)) / np.sqrt(d_in)
    w2 = rng.standard_normal((h, d_out)) / np.sqrt(h)
    lr = float(f"{0.1 / max(_curvature(x, w1, w2), 1e-3):.2g}")
    return x, y, w1, w2, lr, steps


def _curvature(x: Array, w1: Array, w2: Array) -> float:
    """A bound on the curvature of the batch mean loss on the rows x, at these weights."""
    h_relu = np.maximum(x @ w1, 0)
    return 2.0 * float(np.linalg.norm(x, 2) ** 2 * np.linalg.norm(w2, 2) ** 2
                       + np.linalg.norm(h_relu, 2) ** 2) / len(x)


def batches(n: int, batch_size: int) -> list[slice]:
    """The rows of one epoch's batches, in order: [0, B), [B, 2B), ..., the last one shorter."""
    return [slice(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]


def minibatch_case(rng: np.random.Generator, n: int, d_in: int, h: int, d_out: int,
                   batch_size: int, epochs: int) -> Case:
    """A two-layer problem whose rate is safe for its most curved batch (a batch of one row is
    far more curved than the whole batch's mean)."""
    x, y, w1, w2, _, _ = two_layer_case(rng, n, d_in, h, d_out, 0)
    curvature = max(_curvature(x[rows], w1, w2) for rows in batches(n, batch_size))
    return x, y, w1, w2, float(f"{0.1 / max(curvature, 1e-3):.2g}"), batch_size, epochs


def two_layer_sizes(rng: np.random.Generator,
                    hidden: bool) -> list[tuple[int, int, int, int, int]]:
    """(N, D_in, H, D_out, num_steps). N != H, so no data array has a weight's shape (the
    Variables part tells weights from data by their shapes)."""
    if not hidden:
        return [(4, 6, 5, 3, 5), (8, 10, 3, 10, 5), (3, 7, 6, 2, 4)]
    sizes = [(1, 1, 2, 1, 1)]  # one example, one input, one output, one step
    while len(sizes) < 4:
        n, d_in, h, d_out = (int(v) for v in rng.integers(1, 13, size=4))
        if n != h:
            sizes.append((n, d_in, h, min(d_out, 6), int(rng.integers(2, 9))))
    return sizes


def _cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [two_layer_case(rng, *size) for size in two_layer_sizes(rng, hidden)]


def _minibatch_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(N, D_in, H, D_out, batch_size, num_epochs): the visible cases end each epoch with a
    short batch, but one whose batch size divides N; the hidden ones start with a batch of one
    row and a batch larger than X, then draw sizes with a short last batch."""
    if not hidden:
        sizes = [(5, 6, 4, 3, 2, 2), (8, 10, 3, 4, 3, 2), (6, 3, 5, 2, 3, 2)]
    else:
        sizes = [(3, 2, 3, 1, 1, 2), (4, 3, 2, 2, 6, 2)]
        while len(sizes) < 4:
            n, d_in, h, d_out = (int(v) for v in rng.integers(2, 13, size=4))
            batch_size = int(rng.integers(1, n))
            if n % batch_size:
                sizes.append((n, d_in, h, min(d_out, 6), batch_size, int(rng.integers(1, 4))))
    return [minibatch_case(rng, *size) for size in sizes]


def _decay_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """The same problems, each with a decay: a rate that halves by step 2 on the visible ones."""
    cases = _cases(rng, hidden)
    decays = [0.5] * len(cases) if not hidden else [
        float(f"{d:.2g}") for d in rng.uniform(0.1, 1.0, size=len(cases))]
    return [(*case, decay) for case, decay in zip(cases, decays)]


def _momentum_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """The same problems, each with a momentum: 0.9 on the visible ones."""
    cases = _cases(rng, hidden)
    momenta = [0.9] * len(cases) if not hidden else [
        float(f"{m:.2g}") for m in rng.uniform(0.5, 0.95, size=len(cases))]
    return [(*case, momentum) for case, momentum in zip(cases, momenta)]


# --------------------------------------------------------------------------- the oracle


def _edu_dl_step(x: Array, y: Array, w1: Array, w2: Array) -> tuple[float, Array, Array]:
    """edu_dl's eager engine on one batch: (the batch mean loss, dL/dw1, dL/dw2)."""
    import edu_dl as ed

    xt, yt = ed.tensor(np.asarray(x, np.float64)), ed.tensor(np.asarray(y, np.float64))
    w1t = ed.tensor(np.array(w1, np.float64), requires_grad=True)
    w2t = ed.tensor(np.array(w2, np.float64), requires_grad=True)
    loss = ((ed.ops.relu(xt @ w1t) @ w2t - yt) ** 2).sum(axis=1).mean()
    loss.backward()
    assert w1t.grad is not None and w2t.grad is not None
    return loss.item(), w1t.grad.numpy(), w2t.grad.numpy()


def _edu_dl_losses(x: Array, y: Array, w1: Array, w2: Array, lr: float,
                   num_steps: int, decay: float = 0.0) -> Array:
    """edu_dl's eager engine: forward, backward, w -= lr_t * grad with lr_t = lr / (1 + decay t);
    the loss before each update."""
    w1, w2 = np.array(w1, np.float64), np.array(w2, np.float64)
    losses = []
    for t in range(int(num_steps)):
        rate = lr / (1 + decay * t)
        loss, grad_w1, grad_w2 = _edu_dl_step(x, y, w1, w2)
        losses.append(loss)
        w1 = w1 - rate * grad_w1
        w2 = w2 - rate * grad_w2
    return np.array(losses)


def _edu_dl_minibatch_losses(x: Array, y: Array, w1: Array, w2: Array, lr: float,
                             batch_size: int, num_epochs: int) -> Array:
    """edu_dl's eager engine, one step per batch (in order, the last one shorter), each loss its
    batch's before the update."""
    w1, w2 = np.array(w1, np.float64), np.array(w2, np.float64)
    losses = []
    for _ in range(int(num_epochs)):
        for rows in batches(len(x), int(batch_size)):
            loss, grad_w1, grad_w2 = _edu_dl_step(x[rows], y[rows], w1, w2)
            losses.append(loss)
            w1 = w1 - lr * grad_w1
            w2 = w2 - lr * grad_w2
    return np.array(losses)


def _edu_dl_momentum_losses(x: Array, y: Array, w1: Array, w2: Array, lr: float,
                            num_steps: int, momentum: float) -> Array:
    """edu_dl's eager engine stepped by edu_dl.optim.SGD with momentum; the loss before each
    update."""
    import edu_dl as ed
    from edu_dl.optim import SGD

    xt, yt = ed.tensor(np.asarray(x, np.float64)), ed.tensor(np.asarray(y, np.float64))
    w1t = ed.tensor(np.array(w1, np.float64), requires_grad=True)
    w2t = ed.tensor(np.array(w2, np.float64), requires_grad=True)
    optimizer = SGD([w1t, w2t], lr=lr, momentum=momentum)
    losses = []
    for _ in range(int(num_steps)):
        optimizer.zero_grad()
        loss = ((ed.ops.relu(xt @ w1t) @ w2t - yt) ** 2).sum(axis=1).mean()
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    return np.array(losses)


def _expected_built_once(*args: Any) -> tuple[Array, int]:
    return _edu_dl_minibatch_losses(*args), 1


def _expected_after_update(x: Array, y: Array, w1: Array, w2: Array, lr: float,
                           num_steps: int) -> tuple[Array, int, int]:
    """Each step's loss at the weights it produced (one step more, its first loss dropped); no
    training run without an update, none with an unordered read."""
    return _edu_dl_losses(x, y, w1, w2, lr, int(num_steps) + 1)[1:], 0, 0


def _expected_one_trace(*args: Any) -> tuple[Array, int]:
    return _edu_dl_losses(*args), 1


# --------------------------------------------------------------------------- hints


def numpy_step(x: Array, y: Array, w1: Array, w2: Array, scale: float,
               relu: bool = True) -> tuple[float, Array, Array]:
    """(scale * the summed squared error, its gradients for w1 and w2), with or without ReLU."""
    pre = x @ w1
    h = np.maximum(pre, 0) if relu else pre
    diff = h @ w2 - y
    grad_out = 2 * scale * diff
    grad_pre = grad_out @ w2.T
    if relu:
        grad_pre = grad_pre * (pre > 0)
    return scale * float(np.sum(diff ** 2)), x.T @ grad_pre, h.T @ grad_out


def _scale(reduce: str, rows: int, entries: int) -> float:
    """What the summed squared error is multiplied by: the batch mean of row sums ('batch_mean'),
    nothing ('sum'), the mean over every entry ('mean')."""
    return {"batch_mean": 1.0 / rows, "sum": 1.0, "mean": 1.0 / entries}[reduce]


def numpy_losses(x: Array, y: Array, w1: Array, w2: Array, lr: float, num_steps: int,
                 decay: float = 0.0, *, reduce: str = "batch_mean", relu: bool = True,
                 sign: float = 1.0, first_t: int = 0, momentum: float = 0.0,
                 velocity: str = "heavy_ball", after: bool = False) -> Array:
    """The same loop in NumPy (step t's rate lr / (1 + decay t); with a momentum, the step
    w -= rate v after v = momentum v + grad) with a mistake switched on: reduce 'sum' (over
    everything) or 'mean' (over every entry) instead of the batch mean of row sums, no ReLU,
    sign=-1 (ascent), the steps counted from first_t instead of 0, or a velocity 'dampened'
    (v = momentum v + (1 - momentum) grad) or 'stale' (the step taken with v before its update).
    after=True: each step's loss at the weights it produced instead of before its update."""
    w1, w2 = np.array(w1, np.float64), np.array(w2, np.float64)
    scale = _scale(reduce, len(x), np.size(y))
    velocities = [np.zeros_like(w1), np.zeros_like(w2)]
    losses = []
    for t in range(first_t, first_t + int(num_steps)):
        rate = lr / (1 + decay * t)
        loss, grad_w1, grad_w2 = numpy_step(x, y, w1, w2, scale, relu)
        losses.append(loss)
        if momentum:
            steps = [v if velocity == "stale" else None for v in velocities]
            gain = 1.0 - momentum if velocity == "dampened" else 1.0
            velocities = [momentum * v + gain * g for v, g in zip(velocities, (grad_w1, grad_w2))]
            grad_w1, grad_w2 = (new if old is None else old
                                for old, new in zip(steps, velocities))
        w1 = w1 - sign * rate * grad_w1
        w2 = w2 - sign * rate * grad_w2
        if after:
            losses[-1] = numpy_step(x, y, w1, w2, scale, relu)[0]
    return np.array(losses)


def numpy_minibatch_losses(x: Array, y: Array, w1: Array, w2: Array, lr: float,
                           batch_size: int, num_epochs: int, *, reduce: str = "batch_mean",
                           relu: bool = True, sign: float = 1.0, drop_last: bool = False,
                           divide_by_batch_size: bool = False, whole_batch: bool = False
                           ) -> Array:
    """The minibatch loop in NumPy with a mistake switched on: the reduction, ReLU and sign as
    numpy_losses', the last short batch dropped, every batch's error divided by batch_size (the
    short one's too), or one step per epoch on the whole X."""
    w1, w2 = np.array(w1, np.float64), np.array(w2, np.float64)
    n = len(x)
    epoch = [slice(0, n)] if whole_batch else batches(n, int(batch_size))
    if drop_last:
        epoch = [rows for rows in epoch if rows.stop - rows.start == batch_size]
    losses = []
    for _ in range(int(num_epochs)):
        for rows in epoch:
            xb, yb = x[rows], y[rows]
            scale = 1.0 / batch_size if divide_by_batch_size else _scale(reduce, len(xb),
                                                                          np.size(yb))
            loss, grad_w1, grad_w2 = numpy_step(xb, yb, w1, w2, scale, relu)
            losses.append(loss)
            w1 = w1 - sign * lr * grad_w1
            w2 = w2 - sign * lr * grad_w2
    return np.array(losses)


def _replay_minibatch(case: tuple[Any, ...], steps: int | None = None, **mistake: Any) -> Array:
    """numpy_minibatch_losses on a minibatch case (``steps``: unused, for loss_hints' sake)."""
    return numpy_minibatch_losses(*case, **mistake)


def _if_short_batch(case: tuple[Any, ...], **mistake: Any) -> Array | None:
    """A mistake about the short batch, replayed where an epoch ends with one (else None)."""
    return None if len(case[0]) % case[5] == 0 else _replay_minibatch(case, **mistake)


def _replay_after(case: tuple[Any, ...], steps: int | None = None, **mistake: Any) -> Array:
    """_replay with each step's loss taken at the weights it produced."""
    return _replay(case, steps, after=True, **mistake)


def _replay_momentum(case: tuple[Any, ...], steps: int | None = None, **mistake: Any) -> Array:
    """numpy_losses on a momentum case, with its momentum unless the mistake sets it, optionally
    for another number of steps."""
    x, y, w1, w2, lr, num_steps, momentum = case
    return numpy_losses(x, y, w1, w2, lr, num_steps if steps is None else steps,
                        **{"momentum": momentum, **mistake})


def _replay(case: tuple[Any, ...], steps: int | None = None, **mistake: Any) -> Array:
    """numpy_losses on a case (with its decay, if it has one), optionally for another number of
    steps."""
    x, y, w1, w2, lr, num_steps, *decay = case
    return numpy_losses(x, y, w1, w2, lr, num_steps if steps is None else steps, *decay,
                        **mistake)


def _float32_lr(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The case with its learning rate rounded to float32, as TF does to a Python lr."""
    return (*args[:4], float(np.float32(args[4])), *args[5:])


Hints = tuple[Mistake | Rule, ...]


def _losses_mistake(replay: Any, message: str, rtol: float = 1e-9) -> Mistake:
    """A mistake replayed on the losses of a result (the result itself or its first output)."""
    return Mistake(replay, message, rtol=rtol, atol=1e-12, view=losses_of)


def loss_hints(reduction: str, replay: Callable[..., Array] = _replay,
               before: bool = True) -> Hints:
    """Hints for a list of losses, shared with exercise 10 (whose loss is the plain sum); replay
    (by default _replay) runs a case with a mistake, as _replay does. ``before``: the losses are
    taken before each update, so a loss taken after it gets a hint (parts that count steps
    otherwise, or take the loss after the update, leave it out)."""
    if reduction == "batch_mean":
        what = ("the lecture's loss is the batch MEAN of each row's summed squared error: "
                "tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))")
        reduce_hints: Hints = (
            _losses_mistake(lambda e, a: replay(a, reduce="sum"),
                            "you summed over the whole batch: " + what),
            _losses_mistake(lambda e, a: replay(a, reduce="mean"),
                            "you averaged over every entry (outputs too): " + what),
            _losses_mistake(lambda e, a: replay(_float32_lr(a)),
                            "your learning rate became float32: GradientDescentOptimizer turns a "
                            "Python lr into a float32 tensor. Pass tf.constant(lr, tf.float64), "
                            "or update with assign", rtol=1e-11),
        )
    else:
        what = ("the lecture's PyTorch loss is the SUM of the squared errors: "
                "(y_hat - y).pow(2).sum()")
        reduce_hints = (
            _losses_mistake(lambda e, a: replay(a, reduce="batch_mean"),
                            "you averaged over the batch: " + what
                            + " (so grad_y_hat = 2.0 * (y_hat - y))"),
            _losses_mistake(lambda e, a: replay(a, reduce="mean"),
                            "you averaged over every entry: " + what),
        )
    return (
        *reduce_hints,
        _losses_mistake(lambda e, a: replay(a, reduce=reduction, relu=False),
                        "apply the ReLU to the hidden layer: h = max(x @ w1, 0), and mask its "
                        "gradient where x @ w1 <= 0"),
        Stuck("every loss equals the first: the weights never change. Update them each step "
              "(w -= lr * grad)", rtol=1e-9, atol=1e-12),
        _losses_mistake(lambda e, a: replay(a, reduce=reduction, sign=-1.0),
                        "the loss grows: step AGAINST the gradient, w -= lr * grad"),
        *([_losses_mistake(lambda e, a: replay(a, a[5] + 1, reduce=reduction)[1:],
                           "record each step's loss BEFORE its update: the first loss is the "
                           "initial weights' loss")] if before else []),
        Imprecise("close, but only to float32 precision: compute in float64 (tf.float64 "
                  "placeholders and Variables, torch.float64 tensors)", rtol=1e-9,
                  loose_rtol=1e-4, atol=1e-12),
    )


# --------------------------------------------------------------------------- the parts

MINIBATCH_HINTS = (
    Greater("your training runs used more than one graph: the graph was rebuilt (or grew new "
            "ops) between steps. Build it once, before the loop, with the batch size left for "
            "each run to decide, and only run it in the loop", output=1),
    _losses_mistake(lambda e, a: _if_short_batch(a, drop_last=True),
                    "the last, shorter batch of each epoch is missing: an epoch's batches cover "
                    "every row of X, and the last one holds what is left"),
    _losses_mistake(lambda e, a: _if_short_batch(a, divide_by_batch_size=True),
                    "the short batch's loss was divided by batch_size: each batch's loss is the "
                    "mean over the rows it actually holds"),
    _losses_mistake(lambda e, a: _replay_minibatch(a, whole_batch=True),
                    "one step per epoch on all of X is the lecture's full-batch loop: take one "
                    "step per batch of batch_size rows"),
    _losses_mistake(lambda e, a: _replay_minibatch(a)[1:],
                    "record each step's loss BEFORE its update: the first loss is the first "
                    "batch's at the initial weights"),
)

AFTER_UPDATE_HINTS = (
    ObservedMore("in some runs the loss read w1 or w2 with nothing ordering that read after the "
                 "Variable's update in the same run: TensorFlow may run them in either order, "
                 "so the loss mixes old and new weights (and may change from run to run). Make "
                 "the reads the new loss depends on wait for the update", index=2),
    _losses_mistake(lambda e, a: _replay(a),
                    "these are the losses BEFORE each update (the lecture's): return the loss at "
                    "the weights the step has just written: compute the loss again from reads "
                    "of the Variables that wait for the update (an ordering applies only to the "
                    "ops created under it, not to the loss the gradients came from)"),
    Greater("some runs fetched a value without updating any Variable: a run that only reads "
            "the loss after another run updated the weights is two runs per step. Each step is "
            "ONE Session.run that updates the weights and returns the new loss", output=1),
)

TRACE_HINTS = (
    Equals("the returned tf.function was never called: train with it, then return it",
           output=1, value=0),
    Greater("traced more than once: every call with a new Python number (the step t, the "
            "step's rate) or a new shape traces anew. Pass only tensors of fixed shape, and keep "
            "the changing rate in a tf.Variable the step reads", output=1),
)
DECAY_HINTS = (
    _losses_mistake(lambda e, a: _replay(a[:6]),
                    "the rate never decayed: a Python number the step reads is frozen into the "
                    "graph when it is traced. Keep the rate in a tf.Variable and assign it before "
                    "each step (or pass it as a tensor)"),
    _losses_mistake(lambda e, a: _replay(a, first_t=1),
                    "the first step is step t = 0, at the full rate lr: count the steps from 0"),
)

MOMENTUM_HINTS = (
    _losses_mistake(lambda e, a: _replay_momentum(a, momentum=0.0),
                    "these are plain gradient descent's losses: the velocity must carry over "
                    "from step to step (a tf.Variable, or a tensor kept outside the loop, "
                    "starting at zero), and the weights move by lr times the velocity"),
    _losses_mistake(lambda e, a: _replay_momentum(a, velocity="dampened"),
                    "the velocity adds the whole gradient, not (1 - momentum) of it: this is "
                    "PyTorch's and Keras's momentum, not an exponential moving average"),
    _losses_mistake(lambda e, a: _replay_momentum(a, velocity="stale"),
                    "the weights moved with the velocity from before this step's gradient: "
                    "update the velocity first, then step with the new one"),
)

SESSION = (("Session", "InteractiveSession"), NO_SESSION)
MINIBATCH_SOURCE = names_check(required=[
    SESSION,
    (("placeholder",), "the batches are not fed: each run feeds its batch's rows into "
                       "tf.compat.v1.placeholder tensors of the graph"),
])
VARIABLES_SOURCE = names_check(required=[
    SESSION,
    (("Variable", "get_variable"), "the weights are not Variables: keep w1 and w2 in "
                                   "tf.compat.v1.Variable(w1_init) inside the graph"),
    (("assign", "assign_sub", "assign_add", "minimize", "apply_gradients"),
     "the Variables are never updated in the graph: the update (assign, or an optimizer's "
     "minimize) belongs to the graph the session runs"),
])
TAPE_NOTE = ("record the forward pass in `with tf.GradientTape() as tape:` and take "
             "tape.gradient(loss, [w1, w2])")
TAPE_SOURCE = names_check(required=[
    (("GradientTape",), "the function never opens a tf.GradientTape: " + TAPE_NOTE),
    (("gradient",), "the function never calls tape.gradient: " + TAPE_NOTE),
])
FUNCTION_SOURCE = names_check(required=[
    (("function",), "the training step is not a tf.function: decorate it with @tf.function "
                    "(or wrap it, tf.function(step)), train with it and return it"),
    (("GradientTape",), "the function never opens a tf.GradientTape: " + TAPE_NOTE),
])

FLOATS = {2: np.float16, 4: np.float32, 8: np.float64}


# --------------------------------------------------------------------------- bytes per step


def _feed_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (N, D, H, D_out, itemsize): the lecture's network in float32 first
    cases: list[Case] = [(64, 1000, 100, 1000, 4), (32, 784, 128, 10, 8), (8, 3, 5, 2, 2)]
    if hidden:
        cases = [(int(rng.integers(1, 300)), int(rng.integers(1, 3000)), int(rng.integers(1, 500)),
                  int(rng.integers(1, 1000)), int(rng.choice([2, 4, 8]))) for _ in range(4)]
    return cases


def _feed_expected(n: int, d: int, h: int, d_out: int, itemsize: int) -> tuple[int, ...]:
    """Bytes of the arrays themselves: fed x, y, w1, w2 / fetched loss, grad_w1, grad_w2."""
    def arrays(*shapes: tuple[int, ...]) -> list[np.ndarray]:
        return [np.empty(s, dtype=FLOATS[itemsize]) for s in shapes]

    def nbytes(values: list[np.ndarray]) -> int:
        return sum(int(a.nbytes) for a in values)

    x, y, w1, w2 = arrays((n, d), (n, d_out), (d, h), (h, d_out))
    loss, grad_w1, grad_w2 = arrays((), (d, h), (h, d_out))
    return (nbytes([x, y, w1, w2]), nbytes([loss, grad_w1, grad_w2]),
            nbytes([x, y]), nbytes([loss]))


def _exact(replay: Callable[[Any, Case], Any], message: str, output: int) -> Mistake:
    """The mistake's output ``output``, exactly (byte counts are integers)."""
    return Mistake(replay, message, output=output, rtol=0.0, atol=0.0)


ELEMENTS = "count bytes, not elements: multiply by itemsize"
NO_LOSS = "the loss is fetched too: one number of itemsize bytes"


PARTS = [
    Part(
        id="ex09.tf1_minibatch", points=2, cases=_minibatch_cases,
        expected=_expected_built_once, compare=COMPARE, call=call_tf1_minibatch,
        source_check=MINIBATCH_SOURCE, feedback_outputs=(1,), arg_names=MINIBATCH_ARG_NAMES,
        timeout_s=30.0, output_names=("losses", "graphs built"),
        hints=(*MINIBATCH_HINTS, *loss_hints("batch_mean", _replay_minibatch, before=False)),
    ),
    Part(
        id="ex09.tf1_loss_after_update", points=2, cases=_cases,
        expected=_expected_after_update, compare=COMPARE, call=call_tf1_loss_after_update,
        source_check=VARIABLES_SOURCE, feedback_outputs=(1, 2), arg_names=ARG_NAMES,
        timeout_s=30.0,
        output_names=("losses", "runs that updated nothing",
                      "runs whose loss read a Variable unordered with its update"),
        hints=(*AFTER_UPDATE_HINTS, *loss_hints("batch_mean", _replay_after, before=False)),
    ),
    Part(
        id="ex09.tape_momentum", points=2, cases=_momentum_cases,
        expected=_edu_dl_momentum_losses, compare=COMPARE, call=call_tape,
        source_check=TAPE_SOURCE, arg_names=(*ARG_NAMES, "momentum"), timeout_s=30.0,
        hints=(*MOMENTUM_HINTS, *loss_hints("batch_mean", _replay_momentum)),
    ),
    Part(
        id="ex09.tf_function_decay", points=2, cases=_decay_cases,
        expected=_expected_one_trace, compare=COMPARE, call=call_tf_function,
        source_check=FUNCTION_SOURCE, feedback_outputs=(1,), arg_names=(*ARG_NAMES, "decay"),
        timeout_s=30.0, output_names=("losses", "tracing count"),
        hints=(*TRACE_HINTS, *DECAY_HINTS, *loss_hints("batch_mean")),
    ),
    Part(
        id="ex09.feed_bytes", points=1, cases=_feed_cases, expected=_feed_expected,
        arg_names=("N", "D", "H", "D_out", "itemsize"),
        output_names=("feed_in", "feed_out", "variables_in", "variables_out"),
        hints=(
            _exact(lambda e, a: e[0] // a[4], ELEMENTS, output=0),
            _exact(lambda e, a: e[2] // a[4], ELEMENTS, output=2),
            _exact(lambda e, a: e[1] - a[4], NO_LOSS, output=1),
            Equals(NO_LOSS, output=3, value=0),
            EqualsArgument("feeding the weights also fetches their gradients every step (to "
                           "update the NumPy weights): out = loss + grad_w1 + grad_w2",
                           output=1, argument=4),
            _exact(lambda e, a: e[0], "with Variables the weights stay in the graph: only x and "
                                      "y are fed", output=2),
        ),
    ),
]
