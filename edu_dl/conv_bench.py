"""How fast is edu_dl's conv2d? Against a hand-written NumPy im2col, and PyTorch's CPU conv2d.

A benchmark, not a test: it prints a table and never asserts a time. The sizes are the
lecture's LeNet on 8x8 digits (batch 64, 3x3 kernels, pad 1): conv1 (1 -> 8 channels on 8x8),
conv2 (8 -> 16) on 4x4 after pooling, and conv2 on 8x8 for a larger case. For each it times the
forward pass, and forward plus backward (the gradients of x, weight and bias), of

- ``numpy``: the hand-written reference, ``sliding_window_view`` and ``tensordot``;
- ``edu_dl``: ``ops.conv2d`` on eager Tensors;
- ``edu_dl graph``: the same op in a static graph, run by a Session's compiled plan;
- ``torch``: ``torch.nn.functional.conv2d`` on the CPU.

Run it with ``python -m edu_dl.conv_bench`` (``--help`` for the options). Each time is the best
of interleaved rounds, in one thread by default, on the process's CPU clock
(``time.process_time``): on a shared, busy machine the wall clock also counts the time spent
waiting for a core, and other processes only ever add time, so the fastest round of CPU time is
the closest to what the code itself costs. ``--wall`` measures wall-clock time instead.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# (name, input shape (N, C, H, W), output channels): the LeNet's convolutions, 3x3 with pad 1.
SIZES: tuple[tuple[str, tuple[int, int, int, int], int], ...] = (
    ("conv1 1->8, 8x8", (64, 1, 8, 8), 8),
    ("conv2 8->16, 4x4", (64, 8, 4, 4), 16),
    ("conv2 8->16, 8x8", (64, 8, 8, 8), 16),
)
KERNEL, PAD = 3, 1
IMPLEMENTATIONS = ("numpy", "edu_dl", "edu_dl graph", "torch")


# --------------------------------------------------------------------------- the reference


def numpy_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    """out[n, o] = sum_{c,i,j} x_pad[n, c, h+i, w+j] w[o, c, i, j] + b[o], by im2col."""
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(x_pad, w.shape[2:], axis=(2, 3))
    out = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3]))  # (N, OH, OW, O)
    return out.transpose(0, 3, 1, 2) + b[:, None, None]


def numpy_backward(x: np.ndarray, w: np.ndarray, grad: np.ndarray, pad: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gradients of x, w and b for the upstream gradient ``grad`` (N, O, OH, OW)."""
    x_pad = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(x_pad, w.shape[2:], axis=(2, 3))
    gw = np.tensordot(grad, windows, axes=([0, 2, 3], [0, 2, 3]))  # (O, C, kh, kw)
    gb = grad.sum(axis=(0, 2, 3))
    g_windows = np.tensordot(grad, w, axes=([1], [0]))  # (N, OH, OW, C, kh, kw)
    g_pad = np.zeros_like(x_pad)
    oh, ow = grad.shape[2:]
    for i in range(w.shape[2]):  # col2im: each kernel offset adds one shifted slice
        for j in range(w.shape[3]):
            g_pad[:, :, i : i + oh, j : j + ow] += g_windows[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return g_pad[:, :, pad : pad + x.shape[2], pad : pad + x.shape[3]], gw, gb


# --------------------------------------------------------------------------- the contenders

Case = tuple[Callable[[], Any], Callable[[], Any]]  # (forward, forward and backward)


def cases(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray
          ) -> dict[str, Case]:
    """Each implementation's forward, and forward plus backward, as functions of nothing."""
    import torch
    import torch.nn.functional as F

    from . import graph as tf
    from . import ops, tensor

    def np_both() -> Any:
        return numpy_forward(x, w, b, PAD), numpy_backward(x, w, grad, PAD)

    X, W, B = (tensor(a, requires_grad=True) for a in (x, w, b))

    def ed_forward() -> Any:
        return ops.conv2d(X, W, B, padding=PAD)

    def ed_both() -> Any:
        out = ops.conv2d(X, W, B, padding=PAD)
        out.backward(grad)
        X.grad = W.grad = B.grad = None  # no accumulation across calls

    g = tf.Graph()
    with g.as_default():
        x_in = tf.placeholder(x.dtype, x.shape)
        w_var, b_var = tf.Variable(w), tf.Variable(b)
        out = ops.conv2d(x_in, w_var, b_var, padding=PAD)
        grad_in = tf.placeholder(grad.dtype, grad.shape)
        grads = tf.gradients(out, [x_in, w_var, b_var], grad_ys=grad_in)
        sess = tf.Session()
        sess.run(tf.global_variables_initializer())
    feed = {x_in: x, grad_in: grad}

    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    tgrad = torch.from_numpy(grad)

    def torch_forward() -> Any:
        return F.conv2d(tx, tw, tb, padding=PAD)

    def torch_both() -> Any:
        F.conv2d(tx, tw, tb, padding=PAD).backward(tgrad)
        tx.grad = tw.grad = tb.grad = None

    return {
        "numpy": (lambda: numpy_forward(x, w, b, PAD), np_both),
        "edu_dl": (ed_forward, ed_both),
        "edu_dl graph": (lambda: sess.run(out, feed_dict={x_in: x}),
                         lambda: sess.run([out, *grads], feed_dict=feed)),
        "torch": (torch_forward, torch_both),
    }


def check(x: np.ndarray, w: np.ndarray, b: np.ndarray, grad: np.ndarray) -> None:
    """Time only what is right: edu_dl's values and gradients against the reference's."""
    from . import ops, tensor

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


def seconds_per_call(fn: Callable[[], Any], number: int, clock: str = "cpu") -> float:
    now = CLOCKS[clock]
    start = now()
    for _ in range(number):
        fn()
    return (now() - start) / number


def run(rounds: int = 30, min_block_s: float = 0.01, threads: int = 1, seed: int = 0,
        clock: str = "cpu") -> list[Row]:
    """Microseconds per call (best round) on ``clock``, for every size and implementation, in
    ``threads`` threads (BLAS and PyTorch; PyTorch's own setting is restored after)."""
    import torch
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(seed)
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            return [row for size in SIZES
                    for row in time_size(*size, rng, rounds, min_block_s, clock)]
    finally:
        torch.set_num_threads(torch_threads)


def time_size(name: str, shape: tuple[int, int, int, int], out_channels: int,
              rng: np.random.Generator, rounds: int, min_block_s: float, clock: str = "cpu"
              ) -> list[Row]:
    """One size, ``rounds`` rounds in which every implementation runs one block of calls in
    turn (interleaved, so a noisy moment hits them all alike)."""
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((out_channels, shape[1], KERNEL, KERNEL)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32)
    grad = rng.standard_normal((shape[0], out_channels, *shape[2:])).astype(np.float32)
    check(x, w, b, grad)
    fns = {(impl, k): fn for impl, pair in cases(x, w, b, grad).items()
           for k, fn in enumerate(pair)}
    numbers = {}
    for key, fn in fns.items():  # warm up, and size a block to last min_block_s
        fn()
        numbers[key] = max(1, int(min_block_s / max(seconds_per_call(fn, 3, clock), 1e-7)))
    times: dict[Any, list[float]] = {key: [] for key in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(seconds_per_call(fn, numbers[key], clock))
    best = {key: min(t) * 1e6 for key, t in times.items()}
    return [Row(name, impl, best[(impl, 0)], best[(impl, 1)]) for impl in IMPLEMENTATIONS]


def table(rows: list[Row]) -> str:
    """A Markdown table, with each time also as a ratio to the NumPy reference's."""
    ref = {(r.size, "f"): r.forward_us for r in rows if r.implementation == "numpy"}
    ref |= {(r.size, "b"): r.both_us for r in rows if r.implementation == "numpy"}
    lines = ["| size | implementation | forward µs | x numpy | forward+backward µs | x numpy |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.size} | {r.implementation} | {r.forward_us:.1f} | "
                     f"{r.forward_us / ref[(r.size, 'f')]:.2f} | {r.both_us:.1f} | "
                     f"{r.both_us / ref[(r.size, 'b')]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m edu_dl.conv_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds (default: 30)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS/torch threads (default: 1)")
    parser.add_argument("--wall", action="store_true",
                        help="time on the wall clock instead of the process's CPU clock")
    args = parser.parse_args(argv)
    rows = run(rounds=args.rounds, threads=args.threads, clock="wall" if args.wall else "cpu")
    print(table(rows))


if __name__ == "__main__":
    main()
