"""Benchmarks behind ``edu-dl bench``: how fast is one training step in each framework?

``bench engine`` times one SGD step (forward, backward, update; float32) of the lecture's two-layer
ReLU net, y_pred = relu(x @ w1) @ w2 with loss = mean(sum((y_pred - y)**2, axis=1)), in:

- ``numpy``: hand-written NumPy with manual gradients, as the lecture writes it (the baseline
  every ratio refers to);
- ``eager``: edu_dl's eager Tensors and ``optim.SGD``;
- ``static``: edu_dl's static graph (``Session.run([loss, train])``), with the same ops as eager
  (``nn.relu``, not the lecture's ``maximum(h, 0)``, whose gradient also finds ties), so the two
  engines are compared on equal work;
- ``torch``: PyTorch eager with ``torch.optim.SGD``;
- ``tf_function``: a TensorFlow 2 ``tf.function`` with ``GradientTape``.

Each framework runs in its own long-lived worker process (NumPy's OpenBLAS threads and PyTorch's
OpenMP threads fight over 2 cores when they share one; TensorFlow is imported only in its worker).
The parent interleaves the repeats across workers, so all see the same machine conditions, splits
them among a few rounds of fresh workers, and reports the median of the fastest round (a slow
process says nothing about the code it runs). ``bench plan`` measures what a static Session's
plan buys: pruning of unused nodes and folding of constant subgraphs. Benchmarks never assert a
time: they print tables.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import numpy as np

from .progress import progress_disabled

# (N, D, H, out): batch, input, hidden and output sizes.
SIZES: dict[str, tuple[int, int, int, int]] = {
    "tiny": (8, 16, 16, 10),
    "lecture": (64, 1000, 100, 10),
    "lecture_tf": (64, 1000, 100, 1000),
    "large": (512, 4096, 1024, 10),
}
# Weights are reset to their initial values before every timed batch, so these only need to
# keep a batch of steps (thousands at tiny) from blowing up.
LEARNING_RATES: dict[str, float] = {
    "tiny": 1e-3, "lecture": 1e-4, "lecture_tf": 1e-4, "large": 1e-5
}

FRAMEWORKS: tuple[str, ...] = ("numpy", "eager", "static", "torch", "tf_function")
FRAMEWORK_TITLES: dict[str, str] = {
    "numpy": "NumPy by hand",
    "eager": "edu_dl eager",
    "static": "edu_dl static",
    "torch": "PyTorch eager",
    "tf_function": "TF tf.function",
}
BASELINE = "numpy"
TIMES = "\u00d7"  # the multiplication sign of ratios, spelled out for linters

DEFAULT_REPEATS = 11
QUICK_REPEATS = 2
# Fresh worker processes per framework, the repeats split among them; the fastest process's median
# counts. On the shared 2-core VM of benchmarks/RESULTS.md, 2-3 of 10 fresh workers ran the very
# same steps about 1.5x slower, throughout (10 NumPy workers, one after another: 14.0, 14.1, 14.1,
# 22.2, 22.0, 13.9, 13.8, 14.5 us), which interleaving within one process cannot even out.
DEFAULT_PROCESSES = 3
# Seconds one timed batch of steps should last: long enough to swamp timer and pipe overhead,
# short enough for many interleaved repeats.
BATCH_SECONDS = 0.1
QUICK_BATCH_SECONDS = 0.01
# Pause between batches: OpenBLAS and OpenMP helper threads keep spinning for a while after
# their last call, and would steal a core from the next worker's batch.
SETTLE_SECONDS = 0.05
# Tells the TensorFlow worker how many threads --threads asked for.
THREADS_ENV = "EDU_DL_BENCH_THREADS"
# First losses of two frameworks that differ more than this (relative) earn a warning.
LOSS_RTOL = 1e-4


# --------------------------------------------------------------------------- the problem


@dataclass(frozen=True)
class Problem:
    """Data and initial weights, identical in every worker: np.random.default_rng(0), float32."""

    size: str
    x: np.ndarray
    y: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    lr: float


def make_problem(size: str) -> Problem:
    """The seeded data and initial weights for one size; weights scaled by 1/sqrt(fan_in)."""
    n, d, h, out = SIZES[size]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.standard_normal((n, out)).astype(np.float32)
    # Scaled so activations stay O(1) at every size: float32 losses then agree to ~1e-6.
    w1 = (rng.standard_normal((d, h)) / math.sqrt(d)).astype(np.float32)
    w2 = (rng.standard_normal((h, out)) / math.sqrt(h)).astype(np.float32)
    return Problem(size, x, y, w1, w2, LEARNING_RATES[size])


@dataclass
class Trainer:
    """One framework's training step on a Problem.

    ``step()`` runs one SGD step and returns the loss in the framework's own type (converting
    it would add a sync or a copy to every step); ``loss_of`` turns it into a float;
    ``reset()`` puts the initial weights back.
    """

    step: Callable[[], Any]
    reset: Callable[[], None]
    loss_of: Callable[[Any], float]


def _numpy_trainer(p: Problem) -> Trainer:
    x, y, lr = p.x, p.y, p.lr
    w1, w2 = p.w1.copy(), p.w2.copy()
    scale = np.float32(2.0 / x.shape[0])

    def step() -> Any:
        nonlocal w1, w2  # updated in place below
        h = x @ w1
        h_relu = np.maximum(h, 0)
        y_pred = h_relu @ w2
        diff = y_pred - y
        loss = np.square(diff).sum(axis=1).mean()
        grad_y_pred = scale * diff
        grad_w2 = h_relu.T @ grad_y_pred
        grad_h = grad_y_pred @ w2.T
        grad_h[h < 0] = 0
        grad_w1 = x.T @ grad_h
        w1 -= lr * grad_w1
        w2 -= lr * grad_w2
        return loss

    def reset() -> None:
        w1[...] = p.w1
        w2[...] = p.w2

    return Trainer(step, reset, float)


def _eager_trainer(p: Problem) -> Trainer:
    import edu_dl as ed
    from edu_dl import optim

    x, y = ed.tensor(p.x), ed.tensor(p.y)
    w1 = ed.tensor(p.w1.copy(), requires_grad=True)
    w2 = ed.tensor(p.w2.copy(), requires_grad=True)
    opt = optim.SGD([w1, w2], lr=p.lr)

    def step() -> Any:
        loss = (((x @ w1).relu() @ w2 - y) ** 2).sum(axis=1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    def reset() -> None:
        # In place: the optimizer updates these very arrays.
        w1.data[...] = p.w1
        w2.data[...] = p.w2

    return Trainer(step, reset, lambda loss: float(loss.item()))


def _static_trainer(p: Problem) -> Trainer:
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
        sess = eg.Session()
        sess.run(init)
    feed = {x: p.x, y: p.y}

    def step() -> Any:
        loss_val, _ = sess.run([loss, train], feed_dict=feed)
        return loss_val

    def reset() -> None:
        sess.run(init)  # assigns every Variable its initial value again

    return Trainer(step, reset, float)


def _torch_trainer(p: Problem) -> Trainer:
    import torch

    x, y = torch.from_numpy(p.x), torch.from_numpy(p.y)
    w1 = torch.tensor(p.w1, requires_grad=True)
    w2 = torch.tensor(p.w2, requires_grad=True)
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

    return Trainer(step, reset, lambda loss: float(loss.item()))


def _tf_function_trainer(p: Problem) -> Trainer:
    import tensorflow as tf

    threads = int(os.environ.get(THREADS_ENV, "0"))
    if threads and tf.config.threading.get_intra_op_parallelism_threads() != threads:
        # TensorFlow's thread pool ignores OMP_NUM_THREADS; set before its first op runs.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    x, y = tf.constant(p.x), tf.constant(p.y)
    w1, w2 = tf.Variable(p.w1), tf.Variable(p.w2)
    lr = p.lr

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            y_pred = tf.matmul(tf.maximum(tf.matmul(x, w1), 0.0), w2)
            loss = tf.reduce_mean(tf.reduce_sum((y_pred - y) ** 2, axis=1))
        grad_w1, grad_w2 = tape.gradient(loss, [w1, w2])
        w1.assign_sub(lr * grad_w1)
        w2.assign_sub(lr * grad_w2)
        return loss

    def reset() -> None:
        w1.assign(p.w1)
        w2.assign(p.w2)

    return Trainer(step, reset, lambda loss: float(loss.numpy()))


TRAINERS: dict[str, Callable[[Problem], Trainer]] = {
    "numpy": _numpy_trainer,
    "eager": _eager_trainer,
    "static": _static_trainer,
    "torch": _torch_trainer,
    "tf_function": _tf_function_trainer,
}


def make_trainer(framework: str, size: str) -> Trainer:
    """The training step of ``framework`` on the seeded problem of ``size``."""
    return TRAINERS[framework](make_problem(size))


def time_steps(trainer: Trainer, steps: int) -> float:
    """Seconds per step over ``steps`` steps, starting from the initial weights."""
    trainer.reset()
    start = time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = trainer.step()
    trainer.loss_of(loss)  # waits for any asynchronous work inside the timed span
    return (time.perf_counter() - start) / steps


def calibrate(trainer: Trainer, target_s: float) -> int:
    """How many steps make one timed batch last about ``target_s`` seconds."""
    steps = 1
    while True:
        total = time_steps(trainer, steps) * steps
        if total >= target_s / 2 or steps >= 1_000_000:
            return max(1, round(steps * target_s / max(total, 1e-9)))
        steps *= min(10, max(2, math.ceil(target_s / max(total, 1e-9))))


def framework_version(framework: str) -> str:
    """The library's version, read from package metadata (so TensorFlow is never imported)."""
    packages = {
        "numpy": ("numpy",),
        "eager": ("edu-dl",),
        "static": ("edu-dl",),
        "torch": ("torch",),
        "tf_function": ("tensorflow-cpu", "tensorflow"),
    }[framework]
    for name in packages:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return f"{packages[0]} (not installed)"


# --------------------------------------------------------------------------- worker process


def _worker_loop(framework: str) -> int:
    """Serve JSON requests, one per line on stdin, for one framework; answer on stdout."""
    # Keep the protocol on a private copy of stdout: whatever a library prints goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    trainer: Trainer | None = None
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        command = request["cmd"]
        try:
            if command == "quit":
                protocol.write(json.dumps({"ok": True}) + "\n")
                return 0
            if command == "setup":
                trainer = make_trainer(framework, request["size"])
                trainer.reset()
                first_loss = trainer.loss_of(trainer.step())
                # Warm up: tf.function traces, caches and BLAS thread pools start.
                start, warm = time.perf_counter(), 0
                while warm < 3 or time.perf_counter() - start < request["warmup_s"]:
                    trainer.step()
                    warm += 1
                reply: dict[str, Any] = {"first_loss": first_loss}
            elif trainer is None:
                raise RuntimeError(f"'{command}' before 'setup'")
            elif command == "calibrate":
                reply = {"steps": calibrate(trainer, request["target_s"])}
            elif command == "time":
                reply = {"seconds": time_steps(trainer, request["steps"])}
            else:
                raise ValueError(f"unknown command {command!r}")
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        protocol.write(json.dumps(reply) + "\n")


def thread_env(threads: int) -> dict[str, str]:
    """Environment that caps OpenBLAS, MKL, OpenMP (PyTorch) and TensorFlow at ``threads``."""
    n = str(threads)
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", THREADS_ENV)
    return dict.fromkeys(names, n)


def limit_threads(threads: int | None) -> contextlib.AbstractContextManager[Any]:
    """In this process, cap BLAS/OpenMP pools at ``threads`` (needs threadpoolctl)."""
    if not threads:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)


class WorkerError(RuntimeError):
    """A worker answered with an error or died."""


class Worker:
    """The parent's handle on one framework's worker process."""

    def __init__(self, framework: str, threads: int | None = None) -> None:
        self.framework = framework
        # A file, not a pipe: a chatty worker (TensorFlow) can never block on a full pipe.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        if threads:
            env.update(thread_env(threads))
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "edu_dl.bench", "--worker", framework],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env=env,
        )

    def send(self, command: str, **args: Any) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"cmd": command, **args}) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerError(self._died()) from None

    def receive(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise WorkerError(self._died())
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise WorkerError(f"{self.framework} worker: {reply['error']}")
        return reply

    def ask(self, command: str, **args: Any) -> dict[str, Any]:
        self.send(command, **args)
        return self.receive()

    def _died(self) -> str:
        code = self._proc.wait(timeout=10)
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-5:]
        return f"{self.framework} worker exited with code {code}: " + " | ".join(tail)

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self.ask("quit")
            except (WorkerError, OSError, ValueError):
                pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()


# --------------------------------------------------------------------------- the engine benchmark


@dataclass
class EngineResult:
    """Median seconds per step for each (size, framework); None where it could not run."""

    sizes: list[str]
    frameworks: list[str]
    repeats: int
    processes: int = 1  # fresh worker processes per framework, the repeats split among them
    seconds: dict[tuple[str, str], float | None] = field(default_factory=dict)
    first_losses: dict[tuple[str, str], float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    date: str = ""
    # 1-minute load averages before and after: other processes on the machine skew every number.
    load: tuple[float, float] = (0.0, 0.0)
    threads: int | None = None  # None: each library's default thread count

    def ratio(self, size: str, framework: str, to: str = BASELINE) -> float | None:
        a, b = self.seconds.get((size, framework)), self.seconds.get((size, to))
        return a / b if a and b else None


def run_engine(
    sizes: Sequence[str] = tuple(SIZES),
    frameworks: Sequence[str] = FRAMEWORKS,
    repeats: int = DEFAULT_REPEATS,
    quick: bool = False,
    progress: bool = True,
    threads: int | None = None,
    processes: int = DEFAULT_PROCESSES,
) -> EngineResult:
    """Time every framework at every size, interleaving repeats across the worker processes.

    The repeats are split among ``processes`` rounds, each with fresh workers. Each round gives
    the median of its batches; the result is the fastest round, the same for every framework
    (best of N, as timeit's minimum): a slow process says nothing about the code it runs.
    Batches keep the length calibrated in the first round.
    """
    from tqdm import tqdm

    processes = 1 if quick else max(1, min(processes, repeats))
    result = EngineResult(list(sizes), list(frameworks), repeats, processes, threads=threads)
    result.date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load_before = _load_average()
    batch_s = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
    warmup_s = 0.02 if quick else 0.3
    per_round = [repeats // processes + (i < repeats % processes) for i in range(processes)]
    samples: dict[tuple[str, str], list[list[float]]] = {}  # one list per round
    steps: dict[tuple[str, str], int] = {}
    bar = tqdm(
        total=len(sizes) * len(frameworks) * repeats,
        desc="bench engine",
        unit="batch",
        file=sys.stderr,
        disable=progress_disabled(progress),
    )
    try:
        for round_repeats in per_round:
            alive = [fw for fw in frameworks if fw not in result.errors]
            workers = {fw: Worker(fw, threads) for fw in alive}
            for size in sizes:
                for fw in alive:
                    samples.setdefault((size, fw), []).append([])
            try:
                for size in sizes:
                    bar.set_postfix_str(size)
                    _time_size(result, size, workers, round_repeats, batch_s, warmup_s,
                               samples, steps, bar, settle_s=0.0 if quick else SETTLE_SECONDS)
            finally:
                for worker in workers.values():
                    worker.close()
        for size in sizes:
            for fw in frameworks:
                rounds = [statistics.median(r) for r in samples.get((size, fw), []) if r]
                result.seconds[size, fw] = min(rounds) if rounds else None
    finally:
        bar.close()
    result.load = (load_before, _load_average())
    for fw, message in result.errors.items():
        print(f"warning: {fw} could not run: {message}", file=sys.stderr)
    return result


def _time_size(
    result: EngineResult,
    size: str,
    workers: dict[str, Worker],
    repeats: int,
    batch_s: float,
    warmup_s: float,
    samples: dict[tuple[str, str], list[list[float]]],
    steps: dict[tuple[str, str], int],
    bar: Any,
    settle_s: float,
) -> None:
    """One round at one size: set up, calibrate (first round only), then interleaved batches."""
    alive = [fw for fw in workers if fw not in result.errors]
    # Set-up and warm-up are not timed, so the workers may do them side by side.
    for fw in alive:
        workers[fw].send("setup", size=size, warmup_s=warmup_s)
    for fw in alive:
        try:
            result.first_losses[size, fw] = workers[fw].receive()["first_loss"]
        except WorkerError as exc:
            result.errors[fw] = str(exc)
    alive = [fw for fw in alive if fw not in result.errors]
    _check_losses(result, size, alive)
    for fw in alive:  # one at a time: calibration is timing
        if (size, fw) not in steps:
            steps[size, fw] = workers[fw].ask("calibrate", target_s=batch_s)["steps"]
    for _ in range(repeats):
        for fw in alive:
            seconds = workers[fw].ask("time", steps=steps[size, fw])["seconds"]
            samples[size, fw][-1].append(seconds)
            time.sleep(settle_s)
            bar.update()


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return float("nan")


def _check_losses(result: EngineResult, size: str, frameworks: list[str]) -> None:
    """Warn when a framework's first loss (initial weights) disagrees with the others'."""
    if not frameworks:
        return
    reference = BASELINE if BASELINE in frameworks else frameworks[0]
    ref = result.first_losses[size, reference]
    for fw in frameworks:
        loss = result.first_losses[size, fw]
        if not abs(loss - ref) <= LOSS_RTOL * abs(ref):
            message = (
                f"{size}: the first loss of {fw} ({loss:.7g}) differs from {reference}'s "
                f"({ref:.7g}) by more than float32 tolerance (rtol {LOSS_RTOL:g})"
            )
            if message not in result.warnings:  # each round of processes checks again
                result.warnings.append(message)
                print(f"warning: {message}", file=sys.stderr)


# ------------------------------------------------------------------ targets (issues 2 and 12)


@dataclass(frozen=True)
class Target:
    """At ``size``, time(framework) / time(other) must be <= ``limit`` (>= when not upper)."""

    text: str
    size: str
    framework: str
    other: str
    limit: float
    upper: bool = True

    def measure(self, result: EngineResult) -> float | None:
        return result.ratio(self.size, self.framework, to=self.other)


TARGETS: tuple[Target, ...] = (
    Target(f"eager ≤ 1.05{TIMES} NumPy at large", "large", "eager", "numpy", 1.05),
    Target(f"eager ≤ 1.10{TIMES} NumPy at lecture", "lecture", "eager", "numpy", 1.10),
    Target(f"eager ≤ 1.10{TIMES} NumPy at lecture_tf", "lecture_tf", "eager", "numpy", 1.10),
    Target(f"eager ≤ 2.0{TIMES} NumPy at tiny", "tiny", "eager", "numpy", 2.0),
    Target(f"eager ≥ 4{TIMES} faster than PyTorch eager at tiny", "tiny", "torch", "eager", 4.0,
           upper=False),
    Target("static no slower than eager at tiny", "tiny", "static", "eager", 1.0),
)


def check_targets(result: EngineResult) -> list[tuple[Target, float | None, bool | None]]:
    """(target, measured ratio, met); ratio and met are None where it was not measured."""
    rows: list[tuple[Target, float | None, bool | None]] = []
    for target in TARGETS:
        ratio = target.measure(result)
        met = None if ratio is None else (ratio <= target.limit if target.upper
                                          else ratio >= target.limit)
        rows.append((target, ratio, met))
    return rows


# --------------------------------------------------------------------------- the plan benchmark


@dataclass
class PlanRow:
    name: str
    eager_s: float
    static_s: float
    note: str


def median_seconds(fn: Callable[[], Any], repeats: int, batch_s: float) -> float:
    """Median seconds per call over ``repeats`` batches of calls lasting about ``batch_s`` each."""
    fn()  # warm-up: a Session plans (and folds), tf.function traces, arrays get allocated
    start, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < batch_s / 4:
        fn()
        calls += 1
    n = max(1, round(batch_s / ((time.perf_counter() - start) / calls)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - start) / n)
    return statistics.median(samples)


def run_plan(repeats: int = DEFAULT_REPEATS, quick: bool = False) -> list[PlanRow]:
    """What the static plan buys: pruning unused nodes, folding constant subgraphs once."""
    import edu_dl as ed
    from edu_dl import graph as eg

    batch_s = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
    n, d, chain = 64, 512, 4
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d)).astype(np.float32)
    W = (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
    A = (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
    B = (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)

    # (a) Pruning: the fetch needs only the cheap sum, but the graph also holds a matmul chain.
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, d))
        cheap = eg.reduce_sum(x)
        h = x
        for _ in range(chain):
            h = eg.matmul(h, eg.constant(W))
        expensive = eg.reduce_sum(h)
        sess = eg.Session()
    feed = {x: X}
    xe, we = ed.tensor(X), ed.tensor(W)

    def eager_as_written() -> Any:
        # Eager runs every line of the program, needed or not.
        cheap_value = xe.sum()
        h = xe
        for _ in range(chain):
            h = h @ we
        h.sum()
        return cheap_value

    prune_eager = median_seconds(eager_as_written, repeats, batch_s)
    prune_static = median_seconds(lambda: sess.run(cheap, feed_dict=feed), repeats, batch_s)
    all_static = median_seconds(lambda: sess.run([cheap, expensive], feed_dict=feed), repeats,
                              batch_s)

    # (b) Constant folding: A @ B depends on no placeholder; the Session computes it once.
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, d))
        out = eg.reduce_sum(eg.matmul(x, eg.matmul(eg.constant(A), eg.constant(B))))
        sess_fold = eg.Session()
    feed = {x: X}
    ae, be = ed.tensor(A), ed.tensor(B)
    fold_eager = median_seconds(lambda: (xe @ (ae @ be)).sum(), repeats, batch_s)
    fold_static = median_seconds(lambda: sess_fold.run(out, feed_dict=feed), repeats, batch_s)

    return [
        PlanRow(
            "pruning: fetch a cheap sum from a graph that also holds an unused chain of "
            f"{chain} ({n}, {d}) @ ({d}, {d}) matmuls",
            prune_eager,
            prune_static,
            f"static fetching both branches: {format_time(all_static)}",
        ),
        PlanRow(
            f"constant folding: x @ (A @ B) with constant ({d}, {d}) A, B and x of ({n}, {d})",
            fold_eager,
            fold_static,
            "eager recomputes A @ B every run; the Session folds it once at plan time",
        ),
    ]


# --------------------------------------------------------------------------- eager's time at tiny


def eager_breakdown(
    size: str = "tiny", repeats: int = DEFAULT_REPEATS, quick: bool = False
) -> list[tuple[str, float]]:
    """Seconds per part of eager's step (forward, backward, optimizer), in this process.

    At tiny sizes the arrays are so small that almost all of it is Python overhead per op.
    """
    import edu_dl as ed
    from edu_dl import optim

    batch_s = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
    p = make_problem(size)
    x, y = ed.tensor(p.x), ed.tensor(p.y)
    w1 = ed.tensor(p.w1.copy(), requires_grad=True)
    w2 = ed.tensor(p.w2.copy(), requires_grad=True)
    opt = optim.SGD([w1, w2], lr=p.lr)

    def forward() -> Any:
        return (((x @ w1).relu() @ w2 - y) ** 2).sum(axis=1).mean()

    def timed_parts(steps: int) -> tuple[float, float, float]:
        # One clock read between parts costs ~0.1 µs: small next to each part.
        clock = time.perf_counter
        forward_s = backward_s = update_s = 0.0
        for _ in range(steps):
            t0 = clock()
            loss = forward()
            t1 = clock()
            opt.zero_grad()
            loss.backward()
            t2 = clock()
            opt.step()
            t3 = clock()
            forward_s += t1 - t0
            backward_s += t2 - t1
            update_s += t3 - t2
        return forward_s / steps, backward_s / steps, update_s / steps

    t_numpy = median_seconds(make_trainer("numpy", size).step, repeats, batch_s)
    steps = max(1, round(batch_s / max(sum(timed_parts(50)), 1e-9)))
    samples = [timed_parts(steps) for _ in range(repeats)]
    parts = zip(*samples, strict=True)
    t_forward, t_backward, t_update = (statistics.median(part) for part in parts)
    return [
        ("forward: 7 ops (matmul, relu, matmul, sub, pow, sum, mean)", t_forward),
        ("backward: zero_grad, graph walk, 7 VJPs, leaf gradients", t_backward),
        ("optimizer: SGD step", t_update),
        ("eager step, in all", t_forward + t_backward + t_update),
        ("hand-written NumPy step, for comparison", t_numpy),
    ]


def breakdown_markdown(rows: list[tuple[str, float]], size: str = "tiny") -> str:
    total = rows[-2][1]
    out = [
        f"## Where edu_dl eager's time goes at {size}",
        "",
        "Measured in one process: each part timed inside the step, median over batches.",
        "",
        "| part | time | share of eager's step |",
        "|---|---:|---:|",
    ]
    for name, seconds in rows[:-1]:
        out.append(f"| {name} | {format_time(seconds)} | {seconds / total:.0%} |")
    name, seconds = rows[-1]
    out.append(f"| {name} | {format_time(seconds)} | |")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- reports


def format_time(seconds: float) -> str:
    """3 significant figures in a readable unit: 37.2 µs, 1.52 ms, 2.10 s."""
    for unit, scale in (("µs", 1e-6), ("ms", 1e-3)):
        if seconds < scale * 1000:
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{seconds:.3g} s"


def _format_ratio(ratio: float) -> str:
    return f"{ratio:.2f}{TIMES}" if ratio < 10 else f"{ratio:.1f}{TIMES}"


def machine_lines() -> list[str]:
    """CPU, cores, library versions and BLAS, as Markdown list items."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lines = [
        f"- CPU: {cpu}, {_usable_cores()} usable cores ({os.cpu_count()} online)",
        f"- OS: {platform.platform()}; Python {platform.python_version()}",
        "- " + ", ".join(map(framework_version, ("numpy", "eager", "torch", "tf_function"))),
        f"- BLAS (NumPy): {_blas_description()}",
    ]
    return lines


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _blas_description() -> str:
    try:
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if blas:
            b = blas[0]
            return (f"{b.get('internal_api')} {b.get('version')} ({b.get('architecture')}, "
                    f"{b.get('num_threads')} threads, {b.get('threading_layer')})")
    except ImportError:
        pass
    try:
        config: Any = np.show_config(mode="dicts")
        blas_info = config["Build Dependencies"]["blas"]
        return f"{blas_info.get('name')} {blas_info.get('version')}"
    except Exception:
        return "unknown"


def engine_markdown(result: EngineResult) -> str:
    """The table (time per step and ratio to NumPy by hand), the targets, and any warnings."""
    fws = result.frameworks
    out = [
        "## Engine: one training step of the two-layer ReLU net",
        "",
        "One SGD step (forward, backward, update; float32) of y_pred = relu(x @ w1) @ w2, with "
        "the lecture's loss: the mean over the batch of each row's summed squared error, "
        "loss = mean(sum((y_pred - y)**2, axis=1)). Each framework runs in its own process; "
        f"{result.repeats} interleaved repeats of ~{BATCH_SECONDS * 1000:.0f} ms batches are "
        f"split among {result.processes} fresh process"
        f"{'es' if result.processes != 1 else ''} per framework, and the fastest process's "
        "median is shown (on this shared VM 2-3 of 10 fresh processes ran the same code about "
        "1.5x slower, throughout; best of N, as timeit's minimum), with the ratio to "
        "hand-written NumPy in parentheses (lower is faster). edu_dl eager and static run the "
        "same ops (relu, matmul, sub, pow, sum, mean); edu_dl's matmul calls `ndarray.dot` for "
        "2-D operands, the same BLAS product as `@` for half the call overhead on tiny "
        "matrices, while the NumPy baseline is written as the lecture writes it, with `@`. "
        "Threads: "
        + ("each library's default." if result.threads is None else
           f"capped at {result.threads} per worker (`--threads {result.threads}`: OpenBLAS, "
           "OpenMP and TensorFlow's pools)."),
        "",
        "| size | N, D, H, out | " + " | ".join(FRAMEWORK_TITLES[fw] for fw in fws) + " |",
        "|---|---|" + "---:|" * len(fws),
    ]
    for size in result.sizes:
        cells = []
        for fw in fws:
            seconds = result.seconds.get((size, fw))
            if seconds is None:
                cells.append("n/a")
                continue
            ratio = result.ratio(size, fw)
            cells.append(format_time(seconds) + (f" ({_format_ratio(ratio)})" if ratio else ""))
        dims = ", ".join(map(str, SIZES[size]))
        out.append(f"| {size} | {dims} | " + " | ".join(cells) + " |")
    out += ["", "### Targets (issues 2 and 12)", "", "| target | measured | met |",
            "|---|---:|---|"]
    for target, ratio, met in check_targets(result):
        measured = "not measured" if ratio is None else _format_ratio(ratio)
        verdict = "—" if met is None else ("yes" if met else "**no**")
        what = f"{target.framework} / {target.other}"
        out.append(f"| {target.text} | {what} = {measured} | {verdict} |")
    notes = [f"- {fw} could not run: {message}" for fw, message in result.errors.items()]
    notes += [f"- {w}" for w in result.warnings]
    before, after = result.load
    cores = _usable_cores()
    if max(before, after) > cores:
        notes.append(
            f"- the machine was busy: 1-minute load average {before:.1f} before and {after:.1f} "
            f"after the run on {cores} cores, so absolute times are inflated and noisier; "
            "interleaving keeps the ratios fairer than the times"
        )
    if notes:
        out += ["", "### Warnings", "", *notes]
    else:
        out += ["", "All frameworks' first losses (at the shared initial weights) agree to "
                f"rtol {LOSS_RTOL:g}."]
    return "\n".join(out) + "\n"


def plan_markdown(rows: list[PlanRow]) -> str:
    out = [
        "## Static plan: what planning once buys",
        "",
        "The same computation written eagerly (every line runs) and as a static graph "
        "(`Session.run` executes its plan). Median per run.",
        "",
        "| optimization | eager | static Session | speed-up | note |",
        "|---|---:|---:|---:|---|",
    ]
    for row in rows:
        speedup = _format_ratio(row.eager_s / row.static_s)
        out.append(f"| {row.name} | {format_time(row.eager_s)} | {format_time(row.static_s)} "
                   f"| {speedup} | {row.note} |")
    return "\n".join(out) + "\n"


def report(
    engine: EngineResult | None,
    plan: list[PlanRow] | str | None,
    command: str,
    breakdown: list[tuple[str, float]] | None = None,
) -> str:
    """The whole Markdown document: title, machine, date, then the sections."""
    date = engine.date if engine else datetime.datetime.now().astimezone().strftime(
        "%Y-%m-%d %H:%M %Z")
    parts = [
        "# edu_dl benchmarks",
        "",
        f"Made by `{command}` on {date}. Benchmarks are measurements, never tests: nothing "
        "here asserts a time.",
        "",
        "### Machine",
        "",
        *machine_lines(),
        "",
    ]
    text = "\n".join(parts) + "\n"
    if engine is not None:
        text += engine_markdown(engine) + "\n"
    if breakdown is not None:
        text += breakdown_markdown(breakdown) + "\n"
    if isinstance(plan, str):
        text += "## Static plan\n\n" + plan + "\n"
    elif plan is not None:
        text += plan_markdown(plan)
    return text.rstrip("\n") + "\n"


def write_plot(result: EngineResult, path: Path) -> None:
    """Bar chart of the ratios to NumPy by hand, one group per size (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(result.frameworks)
    for i, fw in enumerate(result.frameworks):
        ratios = [result.ratio(size, fw) or 0.0 for size in result.sizes]
        xs = [j + i * width for j in range(len(result.sizes))]
        ax.bar(xs, ratios, width, label=FRAMEWORK_TITLES[fw])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(result.sizes))], result.sizes)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("time per step / NumPy by hand")
    ax.set_title("One training step of the two-layer ReLU net (lower is faster)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    # The worker entry point: python -m edu_dl.bench --worker FRAMEWORK
    if len(sys.argv) == 3 and sys.argv[1] == "--worker" and sys.argv[2] in TRAINERS:
        sys.exit(_worker_loop(sys.argv[2]))
    sys.exit("usage: python -m edu_dl.bench --worker {" + ",".join(TRAINERS) + "}"
             " (use `edu-dl bench` instead)")
