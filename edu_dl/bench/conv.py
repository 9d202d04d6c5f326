"""``edu-dl bench conv``: edu_dl's conv2d against a hand-written NumPy im2col and PyTorch.

A benchmark, not a test: it prints a table and never asserts a time. The sizes are lecture 11's
CNN on 8x8 digits (batch 64, 3x3 kernels, pad 1): conv1 (1 -> 8 channels on 8x8), conv2
(8 -> 16) on 4x4 after pooling, and conv2 on 8x8 for a larger case. For each it times the
forward pass, and forward plus backward (the gradients of x, weight and bias), of

- ``numpy``: the hand-written reference, ``sliding_window_view`` and ``tensordot``;
- ``edu_dl``: ``ops.conv2d`` on eager Tensors;
- ``edu_dl graph``: the same op in a static graph, run by a Session's compiled plan;
- ``torch``: ``torch.nn.functional.conv2d`` on the CPU (on the GPU with ``--device gpu``).

Each time is the best of interleaved rounds, in one thread by default, on the process's CPU clock
(``time.process_time``): on a shared, busy machine the wall clock also counts the time spent
waiting for a core, and other processes only ever add time, so the fastest round of CPU time is
the closest to what the code itself costs. ``--wall`` measures wall-clock time instead, and
``--device gpu`` always does (the work runs on the GPU, not in the process), each block of calls
ending with a device synchronize; there ``numpy`` and ``edu_dl`` run on CuPy. Before timing, each
size checks edu_dl's values and gradients against the reference in float64.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from edu_dl.bench.common import busy_note, load_average, machine_lines, now
from edu_dl.bench.device import Device
from edu_dl.bench.report import Benchmark, Csv, Json, Report, pyplot
from edu_dl.util.args import positive_int
from edu_dl.util.tables import markdown_table

# (name, input shape (N, C, H, W), output channels): the lecture's convolutions, 3x3 with pad 1.
SIZES: tuple[tuple[str, tuple[int, int, int, int], int], ...] = (
    ("conv1 1->8, 8x8", (64, 1, 8, 8), 8),
    ("conv2 8->16, 4x4", (64, 8, 4, 4), 16),
    ("conv2 8->16, 8x8", (64, 8, 8, 8), 16),
)
QUICK_BATCH = 2  # --quick: the same layers on 2 images, one round (checks that it runs)
KERNEL, PAD = 3, 1
IMPLEMENTATIONS = ("numpy", "edu_dl", "edu_dl graph", "torch")
TARGET = 1.5  # edu_dl within 1.5x of the NumPy reference, forward and backward


# --------------------------------------------------------------------------- the reference


def _xp(x: Any) -> ModuleType:
    from edu_dl.backend import get_xp

    return get_xp(x)


def numpy_forward(x: Any, w: Any, b: Any, pad: int) -> Any:
    """out[n, o] = sum_{c,i,j} x_pad[n, c, h+i, w+j] w[o, c, i, j] + b[o], by im2col."""
    xp = _xp(x)
    x_pad = xp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = xp.lib.stride_tricks.sliding_window_view(x_pad, w.shape[2:], axis=(2, 3))
    out = xp.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (N, OH, OW, O)
    return out.transpose(0, 3, 1, 2) + b[:, None, None]


def numpy_backward(x: Any, w: Any, grad: Any, pad: int) -> tuple[Any, Any, Any]:
    """The gradients of x, w and b for the upstream gradient ``grad`` (N, O, OH, OW)."""
    xp = _xp(x)
    x_pad = xp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = xp.lib.stride_tricks.sliding_window_view(x_pad, w.shape[2:], axis=(2, 3))
    gw = xp.tensordot(grad, windows, axes=([0, 2, 3], [0, 2, 3]))  # (O, C, kh, kw)
    gb = grad.sum(axis=(0, 2, 3))
    g_windows = xp.tensordot(grad, w, axes=([1], [0]))  # (N, OH, OW, C, kh, kw)
    g_pad = xp.zeros_like(x_pad)
    oh, ow = grad.shape[2:]
    for i in range(w.shape[2]):  # col2im: each kernel offset adds one shifted slice
        for j in range(w.shape[3]):
            g_pad[:, :, i : i + oh, j : j + ow] += g_windows[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return g_pad[:, :, pad : pad + x.shape[2], pad : pad + x.shape[3]], gw, gb


# --------------------------------------------------------------------------- the contenders

Case = tuple[Callable[[], Any], Callable[[], Any]]  # (forward, forward and backward)


def cases(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray,
          device: Device | None = None) -> dict[str, Case]:
    """Each implementation's forward, and forward plus backward, as functions of nothing; the
    host arrays are copied to ``device`` first."""
    import torch
    import torch.nn.functional as F

    from edu_dl import graph as tf
    from edu_dl import ops, tensor

    device = device or Device()
    xp = device.xp()
    dx, dw, db, dgrad = (xp.asarray(a) for a in (x, w, b, grad))

    def np_both() -> Any:
        return numpy_forward(dx, dw, db, PAD), numpy_backward(dx, dw, dgrad, PAD)

    X, W, B = (tensor(a, requires_grad=True, device=device.runs_on) for a in (dx, dw, db))

    def ed_forward() -> Any:
        return ops.conv2d(X, W, B, padding=PAD)

    def ed_both() -> Any:
        out = ops.conv2d(X, W, B, padding=PAD)
        out.backward(dgrad)
        X.grad = W.grad = B.grad = None  # no accumulation across calls

    g = tf.Graph()
    with g.as_default():
        x_in = tf.placeholder(x.dtype, x.shape)
        w_var, b_var = tf.Variable(w), tf.Variable(b)
        out = ops.conv2d(x_in, w_var, b_var, padding=PAD)
        grad_in = tf.placeholder(grad.dtype, grad.shape)
        grads = tf.gradients(out, [x_in, w_var, b_var], grad_ys=grad_in)
        sess = tf.Session(device=device.runs_on)
        sess.run(tf.global_variables_initializer())
    feed = {x_in: dx, grad_in: dgrad}

    tx, tw, tb = (torch.tensor(a, requires_grad=True, device=device.torch) for a in (x, w, b))
    tgrad = torch.tensor(grad, device=device.torch)

    def torch_forward() -> Any:
        return F.conv2d(tx, tw, tb, padding=PAD)

    def torch_both() -> Any:
        F.conv2d(tx, tw, tb, padding=PAD).backward(tgrad)
        tx.grad = tw.grad = tb.grad = None

    return {
        "numpy": (lambda: numpy_forward(dx, dw, db, PAD), np_both),
        "edu_dl": (ed_forward, ed_both),
        "edu_dl graph": (lambda: sess.run(out, feed_dict={x_in: dx}),
                         lambda: sess.run([out, *grads], feed_dict=feed)),
        "torch": (torch_forward, torch_both),
    }


def check(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray) -> None:
    """Time only what is right: edu_dl's values and gradients against the reference's."""
    from edu_dl import ops, tensor

    X, W, B = (tensor(a.astype(np.float64), requires_grad=True) for a in (x, w, b))
    out = ops.conv2d(X, W, B, padding=PAD)
    out.backward(grad.astype(np.float64))
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    expected = [numpy_forward(x64, w64, b.astype(np.float64), PAD),
                *numpy_backward(x64, w64, grad.astype(np.float64), PAD)]
    got = [out.numpy(), *(t.grad.numpy() for t in (X, W, B) if t.grad is not None)]
    for a, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- timing


@dataclass
class Row:
    size: str
    implementation: str
    forward_us: float
    both_us: float


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def seconds_per_call(fn: Callable[[], Any], number: int, clock: str = "cpu",
                     sync: Callable[[], None] = lambda: None) -> float:
    """Seconds per call of a block of ``number`` calls, ending with ``sync()``."""
    read = CLOCKS[clock]
    start = read()
    for _ in range(number):
        fn()
    sync()
    return (read() - start) / number


def run(rounds: int = 30, min_block_s: float = 0.01, threads: int = 1, seed: int = 0,
        clock: str = "cpu", batch: int | None = None, device: Device | None = None
        ) -> list[Row]:
    """Microseconds per call (best round) on ``clock``, for every size and implementation, in
    ``threads`` threads (BLAS and PyTorch; PyTorch's own setting is restored after);
    ``batch`` replaces the sizes' batch of 64."""
    import torch
    from threadpoolctl import threadpool_limits

    device = device or Device()
    if device.kind == "gpu":
        clock = "wall"  # the GPU works outside the process: its CPU clock barely moves
    rng = np.random.default_rng(seed)
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            return [row for name, shape, out_channels in SIZES
                    for row in time_size(name, (batch or shape[0], *shape[1:]), out_channels,
                                         rng, rounds, min_block_s, clock, device)]
    finally:
        torch.set_num_threads(torch_threads)


def time_size(name: str, shape: tuple[int, int, int, int], out_channels: int,
              rng: np.random.Generator, rounds: int, min_block_s: float, clock: str = "cpu",
              device: Device | None = None) -> list[Row]:
    """One size, ``rounds`` rounds in which every implementation runs one block of calls in
    turn (interleaved, so a noisy moment hits them all alike)."""
    device = device or Device()
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((out_channels, shape[1], KERNEL, KERNEL)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32)
    grad = rng.standard_normal((shape[0], out_channels, *shape[2:])).astype(np.float32)
    check(x, w, b, grad)
    fns = {(impl, k): fn for impl, pair in cases(x, w, b, grad, device).items()
           for k, fn in enumerate(pair)}
    sync = device.synchronize
    numbers = {}
    for key, fn in fns.items():  # warm up, and size a block to last min_block_s
        fn()
        per_call = seconds_per_call(fn, 3, clock, sync)
        numbers[key] = max(1, int(min_block_s / max(per_call, 1e-7)))
    times: dict[Any, list[float]] = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(seconds_per_call(fn, numbers[key], clock, sync))
    best = {key: min(t) * 1e6 for key, t in times.items()}
    return [Row(name, impl, best[(impl, 0)], best[(impl, 1)]) for impl in IMPLEMENTATIONS]


# --------------------------------------------------------------------------- reports


def table(rows: list[Row]) -> str:
    """A Markdown table, with each time also as a ratio to the NumPy reference's."""
    ref = {(r.size, "f"): r.forward_us for r in rows if r.implementation == "numpy"}
    ref |= {(r.size, "b"): r.both_us for r in rows if r.implementation == "numpy"}
    cells = [[r.size, r.implementation, f"{r.forward_us:.1f}",
              f"{r.forward_us / ref[(r.size, 'f')]:.2f}", f"{r.both_us:.1f}",
              f"{r.both_us / ref[(r.size, 'b')]:.2f}"] for r in rows]
    return "\n".join(markdown_table(
        ["size", "implementation", "forward µs", "x numpy", "forward+backward µs", "x numpy"],
        cells, [False, False, True, True, True, True]))


def target_line(rows: list[Row]) -> str:
    """Whether edu_dl (eager) stayed within TARGET x the NumPy reference, forward and both."""
    ref = {r.size: r for r in rows if r.implementation == "numpy"}
    ratios = [(r.forward_us / ref[r.size].forward_us, r.both_us / ref[r.size].both_us)
              for r in rows if r.implementation == "edu_dl"]
    worst = max(max(pair) for pair in ratios)
    verdict = "met" if worst <= TARGET else "NOT met"
    return (f"Target: edu_dl's conv2d within {TARGET}x of the NumPy reference, forward "
            f"and forward+backward, at every size: {verdict} (worst ratio {worst:.2f}).")


@dataclass
class ConvResult:
    rows: list[Row]
    device: Device
    clock: str
    threads: int
    rounds: int
    batch: int
    date: str
    load: tuple[float, float]

    def to_json(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "device": self.device.kind,
                "fake": self.device.fake, "clock": self.clock, "threads": self.threads,
                "rounds": self.rounds, "batch": self.batch, "date": self.date,
                "load": list(self.load)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConvResult:
        return cls([Row(**r) for r in data["rows"]], Device(data["device"], data["fake"]),
                   data["clock"], data["threads"], data["rounds"], data["batch"], data["date"],
                   (data["load"][0], data["load"][1]))


def report(result: ConvResult, command: str = "edu-dl bench conv") -> str:
    """The Markdown report: how it was measured, the machine, the table, the target."""
    clock = ("wall clock, every block of calls ending with a device synchronize"
             if result.clock == "wall" and result.device.kind == "gpu" else
             "wall clock" if result.clock == "wall" else
             "the process's CPU time (time.process_time): a busy machine's waits are not counted")
    lines = [
        "## conv2d: edu_dl against a hand-written NumPy im2col and PyTorch", "",
        f"Made by `{command}` on {result.date}: best of {result.rounds} interleaved rounds, "
        f"{result.threads} thread(s), on {clock}. Device: {result.device.label}.", "",
        *machine_lines(result.device), "",
        f"The lecture's CNN on 8x8 digits: batch {result.batch}, float32, 3x3 kernels with pad 1, "
        "stride 1. \"forward+backward\" is the forward pass and the gradients of x, weight and "
        "bias. `numpy` is the hand-written reference (`sliding_window_view`, `tensordot`, col2im "
        "by kernel offsets); `edu_dl` is `ops.conv2d` on eager Tensors, `edu_dl graph` the same "
        "op in a Session's compiled plan; `torch` is `torch.nn.functional.conv2d`. Ratios are to "
        "the NumPy reference. Benchmarks are measurements, never tests: nothing asserts a time.",
        "", table(result.rows), "", target_line(result.rows)]
    busy = busy_note(*result.load)
    lines += ["", f"Note: {busy}." if busy else
              f"The 1-minute load average was {result.load[0]:.1f} before and "
              f"{result.load[1]:.1f} after the run."]
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: Path) -> Path:
    """Grouped bars: forward+backward time of each implementation, per size."""
    plt = pyplot()
    sizes = list(dict.fromkeys(r.size for r in rows))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(IMPLEMENTATIONS)
    for k, impl in enumerate(IMPLEMENTATIONS):
        values = [next(r.both_us for r in rows if r.size == s and r.implementation == impl)
                  for s in sizes]
        ax.bar([i + k * width for i in range(len(sizes))], values, width, label=impl)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], sizes)
    ax.set_ylabel("µs per forward+backward (best round)")
    ax.set_title("conv2d, 3x3, pad 1, float32")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- the command


def conv_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench conv``'s own flags: --rounds, --threads, --batch and --wall."""
    p.add_argument("--rounds", type=positive_int, default=None,
                   help="timed rounds; the best is reported (default: 30, with --quick 1)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="BLAS/torch threads (default: 1)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help=f"images per batch (default: 64, with --quick {QUICK_BATCH})")
    p.add_argument("--wall", action="store_true",
                   help="time on the wall clock instead of the process's CPU clock")


def measure_conv(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench conv`` as ``args`` ask on ``device`` (best of interleaved rounds; the
    CPU clock unless --wall or a GPU): the report, conv.csv, conv.json and conv.png."""
    rounds = args.rounds or (1 if args.quick else 30)
    batch = args.batch or (QUICK_BATCH if args.quick else SIZES[0][1][0])
    clock = "wall" if args.wall or device.kind == "gpu" else "cpu"
    before = load_average()
    rows = run(rounds=rounds, min_block_s=0.0 if args.quick else 0.01, threads=args.threads,
               clock=clock, batch=batch, device=device)
    result = ConvResult(rows, device, clock, args.threads, rounds, batch, now(),
                        (before, load_average()))
    command = "edu-dl bench conv" + "".join(
        f" {flag}" for flag, on in (("--quick", args.quick), ("--wall", args.wall),
                                    ("--device gpu", device.kind == "gpu")) if on)
    return Report(report(result, command), csv={"conv.csv": Csv([asdict(r) for r in rows])},
                  json={"conv.json": Json(result.to_json())},
                  plots={"conv.png": lambda path: plot(rows, path)})


CONV = Benchmark(
    "conv", "edu_dl's conv2d against a NumPy im2col and PyTorch, at lecture 11's sizes",
    "Time conv2d forward, and forward plus backward, at lecture 11's CNN sizes: edu_dl (eager "
    "and static), a hand-written NumPy im2col (sliding_window_view and tensordot) and PyTorch; "
    "best of interleaved rounds, on the process's CPU time unless --wall (a GPU is always timed "
    "on the wall clock, synchronized).",
    measure_conv, flags=conv_flags, files=("conv.json", "conv.csv", "conv.png"),
    quick=f"batch {QUICK_BATCH}, one round of single calls: checks that it runs")
