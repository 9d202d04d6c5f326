"""The engine benchmark's training steps: the twins' own steps, and their timing in a worker.

Every framework trains the same ``models.TwoLayerProblem`` (float32, ``problems.make_problem``)
with the step its twin in ``edu_dl.twins`` trains with (``make_step``): NumPy by hand, edu_dl
eager and static, PyTorch, and TF 2's step in a ``tf.function``. The GPU mode runs the same
code: the twins put the arrays on the device ('gpu': CuPy, CUDA), and a timed batch ends with
the device synchronized.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable

from edu_dl.bench.device import Device
from edu_dl.bench.problems import make_problem
from edu_dl.models.spec import TwoLayerProblem
from edu_dl.twins import Stepper, edu_eager, edu_static, numpy_twin, torch_nn
from edu_dl.util.worker import THREADS_ENV

MakeStep = Callable[..., Stepper]  # a twin's make_step(spec, X, Y, init, lr, optimizer, device)


def _twin_step(make_step: MakeStep) -> Callable[[TwoLayerProblem, Device], Stepper]:
    """A twin's ``make_step`` on the problem with SGD, its sync() waiting for ``device``."""

    def make(p: TwoLayerProblem, device: Device) -> Stepper:
        trainer = make_step(p.spec, p.X, p.Y, p.weights, p.spec.lr("sgd"), "sgd", device.runs_on)
        trainer.sync = device.synchronize
        return trainer

    return make


def _tf_function_trainer(p: TwoLayerProblem, device: Device) -> Stepper:
    import tensorflow as tf

    from edu_dl.twins import tf_device
    from edu_dl.twins.tf2_eager import make_step

    threads = int(os.environ.get(THREADS_ENV, "0"))
    if threads and tf.config.threading.get_intra_op_parallelism_threads() != threads:
        # TensorFlow's thread pool ignores OMP_NUM_THREADS; set before its first op runs.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    with tf.device(tf_device(device.runs_on)):
        trainer = make_step(p.spec, p.X, p.Y, p.weights, p.spec.lr("sgd"), "sgd")
        trainer.step = tf.function(trainer.step)
    trainer.sync = device.synchronize
    if device.runs_on == "gpu":
        trainer.sync = tf.test.experimental.sync_devices  # TensorFlow's own queue on the GPU
    return trainer


def _static_trainer(optimize: str, update: str = "minimize"
                    ) -> Callable[[TwoLayerProblem, Device], Stepper]:
    """edu_dl's static step with the Session's ``optimize`` ('numba': fused and compiled at
    the first run, which the worker's warm-up does; 'off': the plan unfused), its update
    ``minimize``'s assign_sub or, with ``update='assign'``, the lecture's w.assign(w - lr * g)."""
    return _twin_step(functools.partial(edu_static.make_step, optimize=optimize, update=update))


TRAINERS: dict[str, Callable[[TwoLayerProblem, Device], Stepper]] = {
    "numpy": _twin_step(numpy_twin.make_step),
    "eager": _twin_step(edu_eager.make_step),
    # The plan fused, its NumPy code (no Numba): the default Session's 'auto' would switch to
    # Numba once a worker has run for seconds, in the middle of the timed batches.
    "static": _static_trainer("numpy"),
    "torch": _twin_step(torch_nn.make_step),
    "tf_function": _tf_function_trainer,
    "host": lambda p, _: _twin_step(numpy_twin.make_step)(p, Device("cpu")),
    # bench plan's: the same static step unfused, and fused (compiled with Numba on a CPU).
    "static_unfused": _static_trainer("off"),
    "planned": _static_trainer("numba"),
    "planned_assign": _static_trainer("numba", update="assign"),
}


def make_trainer(framework: str, size: str, device: Device | None = None) -> Stepper:
    """The training step of ``framework`` on the seeded problem of ``size``."""
    return TRAINERS[framework](make_problem(size), device or Device())


def time_steps(trainer: Stepper, steps: int) -> float:
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


def calibrate(trainer: Stepper, target_s: float) -> int:
    """How many steps make one timed batch last about ``target_s`` seconds."""
    steps = 1
    while True:
        total = time_steps(trainer, steps) * steps
        if total >= target_s / 2 or steps >= 1_000_000:
            return max(1, round(steps * target_s / max(total, 1e-9)))
        steps *= min(10, max(2, math.ceil(target_s / max(total, 1e-9))))


# --------------------------------------------------------------------------- in the worker

_TRAINER: list[Stepper] = []  # the worker's one trainer, set by setup()


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


def _the_trainer() -> Stepper:
    if not _TRAINER:
        raise RuntimeError("this worker has no trainer: call setup() first")
    return _TRAINER[0]
