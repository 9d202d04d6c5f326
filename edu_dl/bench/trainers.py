"""The engine benchmark's training steps, one per framework, and their timing in a worker.

Every framework trains the same ``problems.Problem`` (float32, from ``edu_dl.models.spec``). The GPU
mode runs the same code: the arrays come from ``device.xp()`` (CuPy for NumPy) and the
frameworks get their own device names; a timed batch ends with the device synchronized.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edu_dl.bench.device import Device
from edu_dl.bench.problems import Problem, make_problem
from edu_dl.util.worker import THREADS_ENV

# --------------------------------------------------------------------------- the trainers


@dataclass
class Trainer:
    """One framework's training step on a Problem.

    ``step()`` runs one SGD step and returns the loss in the framework's own type (converting
    it would add a sync or a copy to every step); ``loss_of`` turns it into a float; ``reset()``
    puts the initial weights back; ``sync()`` waits for the device's queued work.
    """

    step: Callable[[], Any]
    reset: Callable[[], None]
    loss_of: Callable[[Any], float]
    sync: Callable[[], None] = lambda: None


def _numpy_trainer(p: Problem, device: Device) -> Trainer:
    from edu_dl import backend

    xp = device.xp()
    where = device.runs_on
    x, y = backend.to_device(p.x, where), backend.to_device(p.y, where)
    w1_0, w2_0 = backend.to_device(p.w1, where), backend.to_device(p.w2, where)
    w1, w2 = w1_0.copy(), w2_0.copy()
    lr, scale = p.lr, xp.float32(2.0 / p.x.shape[0])

    def step() -> Any:
        nonlocal w1, w2  # updated in place below
        h = x @ w1
        h_relu = xp.maximum(h, 0)
        y_pred = h_relu @ w2
        diff = y_pred - y
        loss = xp.square(diff).sum(axis=1).mean()
        grad_y_pred = scale * diff
        grad_w2 = h_relu.T @ grad_y_pred
        grad_h = grad_y_pred @ w2.T
        grad_h[h < 0] = 0
        grad_w1 = x.T @ grad_h
        w1 -= lr * grad_w1
        w2 -= lr * grad_w2
        return loss

    def reset() -> None:
        w1[...] = w1_0
        w2[...] = w2_0

    return Trainer(step, reset, float, device.synchronize)


def _eager_trainer(p: Problem, device: Device) -> Trainer:
    import edu_dl as ed
    from edu_dl import backend, optim

    where = device.runs_on
    x, y = ed.tensor(p.x, device=where), ed.tensor(p.y, device=where)
    w1 = ed.tensor(p.w1, requires_grad=True, device=where)
    w2 = ed.tensor(p.w2, requires_grad=True, device=where)
    w1_0, w2_0 = backend.to_device(p.w1, where), backend.to_device(p.w2, where)
    opt = optim.SGD([w1, w2], lr=p.lr)

    def step() -> Any:
        loss = (((x @ w1).relu() @ w2 - y) ** 2).sum(axis=1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def reset() -> None:
        # In place: the optimizer updates these very arrays.
        w1.data[...] = w1_0
        w2.data[...] = w2_0

    return Trainer(step, reset, lambda loss: float(loss.item()), device.synchronize)


def _static_trainer(p: Problem, device: Device) -> Trainer:
    from edu_dl import backend
    from edu_dl import graph as eg

    d, out = p.x.shape[1], p.y.shape[1]
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, d))
        y = eg.placeholder(eg.float32, shape=(None, out))
        w1 = eg.Variable(p.w1.copy())
        w2 = eg.Variable(p.w2.copy())
        # relu, as the eager trainer: both engines then run the very same ops.
        h = eg.nn.relu(eg.matmul(x, w1))
        y_pred = eg.matmul(h, w2)
        diff = y_pred - y
        loss = eg.reduce_mean(eg.reduce_sum(diff**2, axis=1))
        train = eg.GradientDescentOptimizer(p.lr).minimize(loss)
        init = eg.global_variables_initializer()
        sess = eg.Session(device=device.runs_on)
        sess.run(init)
    feed = {x: backend.to_device(p.x, device.runs_on), y: backend.to_device(p.y, device.runs_on)}

    def step() -> Any:
        loss_val, _ = sess.run([loss, train], feed_dict=feed)
        return loss_val

    def reset() -> None:
        sess.run(init)  # assigns every Variable its initial value again

    return Trainer(step, reset, float, device.synchronize)


def _torch_trainer(p: Problem, device: Device) -> Trainer:
    import torch

    from edu_dl.twins import torch_device

    dev = torch_device(device.runs_on)  # a clear DeviceError where PyTorch sees no GPU
    x, y = torch.from_numpy(p.x).to(dev), torch.from_numpy(p.y).to(dev)
    w1 = torch.tensor(p.w1, device=dev, requires_grad=True)
    w2 = torch.tensor(p.w2, device=dev, requires_grad=True)
    opt = torch.optim.SGD([w1, w2], lr=p.lr)

    def step() -> Any:
        loss = ((torch.relu(x @ w1) @ w2 - y) ** 2).sum(dim=1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def reset() -> None:
        with torch.no_grad():
            w1.copy_(torch.from_numpy(p.w1))
            w2.copy_(torch.from_numpy(p.w2))

    return Trainer(step, reset, lambda loss: float(loss.item()), device.synchronize)


def _tf_function_trainer(p: Problem, device: Device) -> Trainer:
    import tensorflow as tf

    from edu_dl.twins import tf_device
    from edu_dl.twins.tf2_eager import make_step

    threads = int(os.environ.get(THREADS_ENV, "0"))
    if threads and tf.config.threading.get_intra_op_parallelism_threads() != threads:
        # TensorFlow's thread pool ignores OMP_NUM_THREADS; set before its first op runs.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    with tf.device(tf_device(device.runs_on)):
        eager_step, params = make_step(p.spec, p.x, p.y, {"w1": p.w1, "w2": p.w2}, p.lr, "sgd")
        step = tf.function(eager_step)

    def reset() -> None:
        params[0].assign(p.w1)
        params[1].assign(p.w2)

    sync: Callable[[], None] = device.synchronize
    if device.runs_on == "gpu":
        sync = tf.test.experimental.sync_devices  # TensorFlow's own queue on the GPU
    return Trainer(step, reset, lambda loss: float(loss.numpy()), sync)


TRAINERS: dict[str, Callable[[Problem, Device], Trainer]] = {
    "numpy": _numpy_trainer,
    "eager": _eager_trainer,
    "static": _static_trainer,
    "torch": _torch_trainer,
    "tf_function": _tf_function_trainer,
    "host": lambda p, _: _numpy_trainer(p, Device("cpu")),
}


def make_trainer(framework: str, size: str, device: Device | None = None) -> Trainer:
    """The training step of ``framework`` on the seeded problem of ``size``."""
    return TRAINERS[framework](make_problem(size), device or Device())


def time_steps(trainer: Trainer, steps: int) -> float:
    """Seconds per step over ``steps`` steps from the initial weights, the device synchronized."""
    trainer.reset()
    trainer.sync()
    start = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = trainer.step()
    trainer.loss_of(loss)  # the loss on the host: waits for the steps it depends on
    trainer.sync()  # and for anything still queued (the last update)
    return (time.perf_counter() - start) / steps


def calibrate(trainer: Trainer, target_s: float) -> int:
    """How many steps make one timed batch last about ``target_s`` seconds."""
    steps = 1
    while True:
        total = time_steps(trainer, steps) * steps
        if total >= target_s / 2 or steps >= 1_000_000:
            return max(1, round(steps * target_s / max(total, 1e-9)))
        steps *= min(10, max(2, math.ceil(target_s / max(total, 1e-9))))


# --------------------------------------------------------------------------- in the worker

_TRAINER: list[Trainer] = []  # the worker's one trainer, set by setup()


def setup(framework: str, size: str, warmup_s: float, device: str = "cpu",
          fake: bool = False) -> dict[str, float]:
    """Worker side: build the trainer, take one step (its loss) and warm up."""
    trainer = make_trainer(framework, size, Device(device, fake))
    _TRAINER[:] = [trainer]
    trainer.reset()
    first_loss = trainer.loss_of(trainer.step())
    # Warm up: tf.function traces, caches, BLAS thread pools and CUDA kernels start.
    start, warm = time.perf_counter(), 0
    while warm < 3 or time.perf_counter() - start < warmup_s:
        trainer.step()
        warm += 1
    trainer.sync()
    return {"first_loss": first_loss}


def calibrate_steps(target_s: float) -> int:
    """Worker side: steps per timed batch."""
    return calibrate(_the_trainer(), target_s)


def time_batch(steps: int) -> float:
    """Worker side: seconds per step of one timed batch."""
    return time_steps(_the_trainer(), steps)


def _the_trainer() -> Trainer:
    if not _TRAINER:
        raise RuntimeError("this worker has no trainer: call setup() first")
    return _TRAINER[0]
