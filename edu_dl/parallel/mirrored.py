"""TensorFlow's ``MirroredStrategy`` on R logical CPU devices, against one device with the batch.

A MirroredStrategy keeps one copy of every variable per device. Each step, replica r computes
the gradient of ITS share of the global mean loss, loss_r = sum(rows of shard r) / N_global
(``tf.nn.compute_average_loss``), the replicas all-reduce (sum) those gradients, and every copy
applies the same update. sum_r grad(loss_r) = grad(full-batch mean), so the copies track a single
device trained on the whole batch.

Logical devices must be configured before TensorFlow initialises its devices, i.e. before any
other TensorFlow call in the process; so the demo runs in a fresh worker process
(``edu_dl.util.worker``; the arrays travel through .npz files) and never disturbs the caller's
TensorFlow.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.parallel.launch import WorkerError
from edu_dl.parallel.problem import LR, TwoLayerProblem, make_problem
from edu_dl.util.worker import WorkerError as BenchWorkerError
from edu_dl.util.worker import run_in_worker

ARRAYS = ("X", "Y", "w1", "w2")


@dataclass
class MirroredResult:
    """Weights and losses of MirroredStrategy and of the one-device reference, same start."""

    weights: list[np.ndarray]  # [w1, w2] after MirroredStrategy training
    single_weights: list[np.ndarray]  # [w1, w2] after one device, whole batch
    losses: np.ndarray  # (steps,) global mean loss under the strategy
    single_losses: np.ndarray  # (steps,) the reference's loss
    num_replicas_in_sync: int
    rows_per_replica: list[int]  # batch rows each replica received per step
    replicas_agree: bool  # every device's copy of every variable is identical at the end
    devices: list[str]
    dtype: str
    seconds: float  # the strategy's training loop
    single_seconds: float
    wall_seconds: float  # with the subprocess and TensorFlow's start-up
    tf_version: str


def mirrored_strategy_demo(
    problem: TwoLayerProblem | None = None,
    *,
    replicas: int = 2,
    steps: int = 10,
    lr: float = LR,
    timeout_s: float = 180.0,
) -> MirroredResult:
    """Train with MirroredStrategy on ``replicas`` logical CPUs and on one CPU, in a subprocess."""
    problem = problem if problem is not None else make_problem()
    problem.shard(0, replicas)  # the batch must split evenly: fail here, not in the child
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="edu_dl_mirrored_") as task_dir:
        task = Path(task_dir)
        np.savez(task / "input.npz", **{name: getattr(problem, name) for name in ARRAYS})
        (task / "task.json").write_text(
            json.dumps({"replicas": replicas, "steps": steps, "lr": lr})
        )
        try:
            run_in_worker(f"{__name__}:train_in_dir", name="MirroredStrategy",
                          timeout_s=timeout_s, folder=task_dir)
        except BenchWorkerError as exc:
            if exc.kind == "timeout":
                raise TimeoutError(
                    f"the MirroredStrategy subprocess did not finish within {timeout_s:g} s; "
                    "it was killed"
                ) from None
            raise WorkerError(f"the MirroredStrategy subprocess failed: {exc}") from None
        meta = json.loads((task / "output.json").read_text())
        with np.load(task / "output.npz") as out:
            arrays = {name: out[name] for name in out.files}
    return MirroredResult(
        weights=[arrays["w1"], arrays["w2"]],
        single_weights=[arrays["single_w1"], arrays["single_w2"]],
        losses=arrays["losses"],
        single_losses=arrays["single_losses"],
        wall_seconds=time.perf_counter() - start,
        **meta,
    )


# --------------------------------------------------------------------------- the subprocess


def train_in_dir(folder: str) -> None:
    """Worker side: configure R logical CPUs first, then train both ways and save the results."""
    task_dir = Path(folder)
    task = json.loads((task_dir / "task.json").read_text())
    with np.load(task_dir / "input.npz") as data:
        X, Y, w1_0, w2_0 = (data[name] for name in ARRAYS)
    replicas, steps, lr = int(task["replicas"]), int(task["steps"]), float(task["lr"])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
    )
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    # On CPUs there is no NCCL: the gradients are summed on one device and copied back.
    strategy = tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device=devices[0])
    )
    n, rows = X.shape[0], X.shape[0] // replicas

    with strategy.scope():
        # Every replica applies the same all-reduced gradient, so take the first replica's update.
        first = tf.VariableAggregation.ONLY_FIRST_REPLICA
        w1, w2 = tf.Variable(w1_0, aggregation=first), tf.Variable(w2_0, aggregation=first)

    def replica_step(x: Any, y: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            per_row = tf.reduce_sum((tf.nn.relu(x @ w1) @ w2 - y) ** 2, axis=1)
            loss = tf.nn.compute_average_loss(per_row, global_batch_size=n)  # sum / N_global
        grads = tape.gradient(loss, [w1, w2])
        grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        w1.assign_sub(lr * grads[0])
        w2.assign_sub(lr * grads[1])
        return loss, tf.shape(x)[0]

    @tf.function
    def mirrored_step(x: Any, y: Any) -> tuple[Any, Any]:
        loss, seen = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), seen

    def shard(array: np.ndarray) -> Any:
        """Replica r gets rows [r * N/R, (r + 1) * N/R), the same split as the torch workers."""

        def rows_of(ctx: Any) -> Any:
            r = ctx.replica_id_in_sync_group
            return tf.constant(array[r * rows : (r + 1) * rows])

        return strategy.experimental_distribute_values_from_function(rows_of)

    x_dist, y_dist = shard(X), shard(Y)
    losses, seen = [], []
    start = time.perf_counter()
    for _ in range(steps):
        loss, rows_seen = mirrored_step(x_dist, y_dist)
        losses.append(float(loss))
        seen = [int(r) for r in strategy.experimental_local_results(rows_seen)]
    seconds = time.perf_counter() - start
    copies = [strategy.experimental_local_results(w) for w in (w1, w2)]
    agree = all(np.array_equal(c[0].numpy(), c[i].numpy()) for c in copies for i in range(len(c)))

    # The reference: one device, the whole batch, loss = mean of row sums.
    with tf.device(devices[0]):
        v1, v2 = tf.Variable(w1_0), tf.Variable(w2_0)
        x_full, y_full = tf.constant(X), tf.constant(Y)

    @tf.function
    def single_step() -> Any:
        with tf.GradientTape() as tape:
            diff = tf.nn.relu(x_full @ v1) @ v2 - y_full
            loss = tf.reduce_mean(tf.reduce_sum(diff**2, axis=1))
        g1, g2 = tape.gradient(loss, [v1, v2])
        v1.assign_sub(lr * g1)
        v2.assign_sub(lr * g2)
        return loss

    single_losses = []
    start = time.perf_counter()
    for _ in range(steps):
        single_losses.append(float(single_step()))
    single_seconds = time.perf_counter() - start

    np.savez(
        task_dir / "output.npz",
        w1=w1.numpy(),
        w2=w2.numpy(),
        single_w1=v1.numpy(),
        single_w2=v2.numpy(),
        losses=np.array(losses),
        single_losses=np.array(single_losses),
    )
    (task_dir / "output.json").write_text(
        json.dumps(
            {
                "num_replicas_in_sync": int(strategy.num_replicas_in_sync),
                "rows_per_replica": seen,
                "replicas_agree": bool(agree),
                "devices": devices,
                "dtype": str(w1.dtype.name),
                "seconds": seconds,
                "single_seconds": single_seconds,
                "tf_version": tf.__version__,
            }
        )
    )
