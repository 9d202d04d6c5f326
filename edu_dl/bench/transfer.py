"""``edu-dl bench transfer``: what crossing the bus costs, and the TF 1.x ``feed_dict`` lesson.

Bytes per second of host->device (H2D) and device->host (D2H) copies over sizes on a CUDA GPU
(CuPy, torch.cuda; pageable and pinned host memory), the host memcpy bandwidth of NumPy as the
reference, copy time against matmul time, and the TensorFlow 1.x lesson: weights fed from NumPy
every step (placeholders, ``feed_dict``) against weights kept in the graph as Variables
(``minimize``), in edu_dl.graph and tf.compat.v1, with the bytes each step copies. Every GPU copy
and matmul is timed up to a device synchronize. The GPU is used where there is one (``--device
gpu`` insists, ``--device cpu`` measures the host only). Benchmarks never assert a time.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.bench.common import each, format_time, limit_threads, now
from edu_dl.bench.device import Device
from edu_dl.bench.problems import SIZES, make_problem
from edu_dl.bench.report import Benchmark, Csv, Json, Report, pyplot
from edu_dl.gpu.timing import median_seconds
from edu_dl.util.args import comma_list
from edu_dl.util.tables import table
from edu_dl.util.units import format_bytes
from edu_dl.util.worker import DEFAULT_TIMEOUT_S, run_in_worker

FEED_FRAMEWORKS: tuple[str, ...] = ("edu_dl", "tf")
# The lecture's TF 1.x program: N, D, H, D_out.
LECTURE_SIZE = "lecture_tf"
FEED_LR = 1e-5  # the lecture's rate; a few hundred timed steps cannot blow the weights up
SYNCED = ("Every GPU copy and matmul is timed up to a device synchronize (CuPy's device, "
          "torch.cuda.synchronize).")


# --------------------------------------------------------------------------- measurements

HOST_SIZES = [2**k for k in range(12, 29, 2)]  # 4 KiB ... 256 MiB
QUICK_HOST_SIZES = [2**k for k in range(12, 23, 2)]  # 4 KiB ... 4 MiB
MATMUL_SIZES = [128, 512, 2048]
QUICK_MATMUL_SIZES = [128, 512]


@dataclass
class BandwidthRow:
    """One copy of ``nbytes`` bytes: where from, where to, and how fast."""

    library: str  # numpy, cupy, torch.cuda
    direction: str  # host→host, H2D, D2H
    memory: str  # pageable or pinned host memory
    nbytes: int
    seconds: float

    @property
    def gb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e9


@dataclass
class CopyComputeRow:
    """Moving A, B (n x n float32) to the device and C back, against computing C = A @ B."""

    library: str
    n: int
    nbytes: int  # 3 n^2 * 4
    copy_s: float
    matmul_s: float


@dataclass
class FeedRow:
    """One training step of the lecture's net: weights fed each step, or kept in the graph."""

    framework: str  # edu_dl.graph or tf.compat.v1
    variant: str  # feed or variables
    device: str
    step_s: float
    bytes_in: int  # arrays fed into the graph per step
    bytes_out: int  # arrays fetched out of it per step

    @property
    def bytes_per_step(self) -> int:
        return self.bytes_in + self.bytes_out


@dataclass
class TransferResult:
    gpu: str | None  # what GPU was measured, or None
    no_gpu_reason: str
    bandwidth: list[BandwidthRow] = field(default_factory=list)
    copy_compute: list[CopyComputeRow] = field(default_factory=list)
    feed: list[FeedRow] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    date: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "date": self.date, "gpu": self.gpu, "no_gpu_reason": self.no_gpu_reason,
            "bandwidth": [{**asdict(r), "gb_per_s": r.gb_per_s} for r in self.bandwidth],
            "copy_compute": [asdict(r) for r in self.copy_compute],
            "feed": [{**asdict(r), "bytes_per_step": r.bytes_per_step} for r in self.feed],
            "errors": self.errors,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransferResult:
        def rows(kind: type, key: str, derived: str) -> list[Any]:
            return [kind(**{k: v for k, v in r.items() if k != derived}) for r in data[key]]

        return cls(data["gpu"], data["no_gpu_reason"],
                   rows(BandwidthRow, "bandwidth", "gb_per_s"),
                   [CopyComputeRow(**r) for r in data["copy_compute"]],
                   rows(FeedRow, "feed", "bytes_per_step"), data["errors"], data["date"])


def host_copy_rows(sizes: Sequence[int], repeats: int, batch_s: float) -> list[BandwidthRow]:
    """NumPy memcpy (np.copyto) bandwidth: the host-side reference for any transfer."""
    rows = []
    for nbytes in sizes:
        src = np.ones(nbytes, dtype=np.uint8)
        dst = np.empty_like(src)
        seconds = median_seconds(functools.partial(np.copyto, dst, src), repeats, batch_s)
        rows.append(BandwidthRow("numpy", "host→host", "pageable", nbytes, seconds))
    return rows


def cupy_rows(sizes: Sequence[int], repeats: int, batch_s: float) -> list[BandwidthRow]:
    """H2D and D2H through CuPy, from pageable and from pinned host memory."""
    from edu_dl.backend import require_gpu

    cp = require_gpu()
    import cupyx

    sync = cp.cuda.Device().synchronize
    rows = []
    for nbytes in sizes:
        device = cp.empty(nbytes, dtype=np.uint8)
        for memory in ("pageable", "pinned"):
            host = (np.ones(nbytes, dtype=np.uint8) if memory == "pageable"
                    else cupyx.empty_pinned((nbytes,), dtype=np.uint8))
            host[...] = 1
            h2d, d2h = _cupy_copies(host, device, sync)
            rows.append(BandwidthRow("cupy", "H2D", memory, nbytes,
                                     median_seconds(h2d, repeats, batch_s)))
            rows.append(BandwidthRow("cupy", "D2H", memory, nbytes,
                                     median_seconds(d2h, repeats, batch_s)))
    return rows


def _cupy_copies(host: Any, device: Any, sync: Callable[[], None]
                 ) -> tuple[Callable[[], None], Callable[[], None]]:
    def h2d() -> None:
        device.set(host)
        sync()

    def d2h() -> None:
        device.get(out=host)
        sync()

    return h2d, d2h


def copy_compute_rows(library: str, sizes: Sequence[int], repeats: int,
                      batch_s: float) -> list[CopyComputeRow]:
    """Copy A, B in and C out, against C = A @ B, through ``xp`` (NumPy: a host copy)."""
    from edu_dl.backend import require_gpu, synchronize, to_numpy

    xp: Any = np if library == "numpy" else require_gpu()
    rows = []
    for n in sizes:
        rng = np.random.default_rng(0)
        A, B = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        dA, dB = xp.asarray(A), xp.asarray(B)
        C = np.empty_like(A)
        if xp is np:  # the host reference: the same bytes copied within RAM
            def copy(A: Any = A, B: Any = B, C: Any = C, dA: Any = dA, dB: Any = dB) -> None:
                np.copyto(dA, A)
                np.copyto(dB, B)
                np.copyto(C, dA)
        else:
            def copy(A: Any = A, B: Any = B, C: Any = C, dA: Any = dA, dB: Any = dB) -> None:
                dA.set(A)
                dB.set(B)
                C[...] = to_numpy(dA)
                synchronize()

        def matmul(dA: Any = dA, dB: Any = dB) -> None:
            xp.matmul(dA, dB)
            synchronize()

        rows.append(CopyComputeRow(library, n, 3 * A.nbytes,
                                   median_seconds(copy, repeats, batch_s),
                                   median_seconds(matmul, repeats, batch_s)))
    return rows


def torch_cuda_task(config: dict[str, Any]) -> dict[str, Any]:
    """In a worker process: H2D and D2H through torch.cuda, pageable and pinned."""
    import torch

    if not torch.cuda.is_available():
        return {"rows": [], "reason": "torch.cuda.is_available() is False"}
    rows = []
    for nbytes in config["sizes"]:
        device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        for memory in ("pageable", "pinned"):
            host = torch.ones(nbytes, dtype=torch.uint8)
            if memory == "pinned":
                host = host.pin_memory()

            def h2d(host: Any = host, device: Any = device) -> None:
                device.copy_(host)
                torch.cuda.synchronize()

            def d2h(host: Any = host, device: Any = device) -> None:
                host.copy_(device)
                torch.cuda.synchronize()

            for direction, fn in (("H2D", h2d), ("D2H", d2h)):
                seconds = median_seconds(fn, config["repeats"], config["batch_s"])
                rows.append(asdict(BandwidthRow("torch.cuda", direction, memory, nbytes,
                                                seconds)))
    return {"rows": rows, "gpu": torch.cuda.get_device_name(0)}


def lecture_arrays() -> dict[str, np.ndarray]:
    """The lecture's x (N, D), y (N, D_out), w1 (D, H), w2 (H, D_out): seeded float32."""
    p = make_problem(LECTURE_SIZE)
    return {"x": p.X, "y": p.Y, "w1": p.w1, "w2": p.w2}


def _nbytes(values: Iterable[Any]) -> int:
    return sum(int(np.asarray(v).nbytes) for v in values if v is not None)


def edu_dl_feed_rows(repeats: int, batch_s: float, device: str = "cpu") -> list[FeedRow]:
    """The TF 1.x lesson in edu_dl.graph: feed w1, w2 every step, or keep them as Variables."""
    from edu_dl import graph as eg

    a = lecture_arrays()
    d, out = a["x"].shape[1], a["y"].shape[1]
    rows = []
    g = eg.Graph()
    with g.as_default():  # the lecture's first program: weights are placeholders
        x, y = eg.placeholder(eg.float32, (None, d)), eg.placeholder(eg.float32, (None, out))
        w1 = eg.placeholder(eg.float32, a["w1"].shape)
        w2 = eg.placeholder(eg.float32, a["w2"].shape)
        loss = eg.reduce_mean(eg.reduce_sum((eg.matmul(eg.maximum(eg.matmul(x, w1), 0), w2)
                                             - y) ** 2, axis=1))
        grad_w1, grad_w2 = eg.gradients(loss, [w1, w2])
        sess = eg.Session(device=device)
    values = {x: a["x"], y: a["y"], w1: a["w1"].copy(), w2: a["w2"].copy()}
    moved = {"in": 0, "out": 0}

    def feed_step() -> None:
        fetched = sess.run([loss, grad_w1, grad_w2], feed_dict=values)
        values[w1] -= FEED_LR * fetched[1]
        values[w2] -= FEED_LR * fetched[2]
        moved["in"], moved["out"] = _nbytes(values.values()), _nbytes(fetched)

    rows.append(FeedRow("edu_dl.graph", "feed", device,
                        median_seconds(feed_step, repeats, batch_s), 0, 0))
    rows[-1].bytes_in, rows[-1].bytes_out = moved["in"], moved["out"]

    g = eg.Graph()
    with g.as_default():  # the fix: Variables live in the graph, minimize() updates them there
        x, y = eg.placeholder(eg.float32, (None, d)), eg.placeholder(eg.float32, (None, out))
        v1, v2 = eg.Variable(a["w1"].copy()), eg.Variable(a["w2"].copy())
        loss = eg.reduce_mean(eg.reduce_sum((eg.matmul(eg.maximum(eg.matmul(x, v1), 0), v2)
                                             - y) ** 2, axis=1))
        train = eg.GradientDescentOptimizer(FEED_LR).minimize(loss)
        sess = eg.Session(device=device)
        sess.run(eg.global_variables_initializer())
    feed = {x: a["x"], y: a["y"]}

    def variable_step() -> None:
        fetched = sess.run([loss, train], feed_dict=feed)
        moved["in"], moved["out"] = _nbytes(feed.values()), _nbytes(fetched)

    rows.append(FeedRow("edu_dl.graph", "variables", device,
                        median_seconds(variable_step, repeats, batch_s), 0, 0))
    rows[-1].bytes_in, rows[-1].bytes_out = moved["in"], moved["out"]
    return rows


def tf_feed_task(config: dict[str, Any]) -> dict[str, Any]:
    """In a worker process: the same two programs in tf.compat.v1, each in its own tf.Graph."""
    import tensorflow as tf

    v1 = tf.compat.v1
    a = lecture_arrays()
    d, out = a["x"].shape[1], a["y"].shape[1]
    repeats, batch_s = config["repeats"], config["batch_s"]
    device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    rows = []
    moved = {"in": 0, "out": 0}
    with tf.Graph().as_default():
        x, y = v1.placeholder(tf.float32, (None, d)), v1.placeholder(tf.float32, (None, out))
        w1 = v1.placeholder(tf.float32, a["w1"].shape)
        w2 = v1.placeholder(tf.float32, a["w2"].shape)
        loss = tf.reduce_mean(tf.reduce_sum((tf.matmul(tf.maximum(tf.matmul(x, w1), 0.0), w2)
                                             - y) ** 2, axis=1))
        grad_w1, grad_w2 = tf.gradients(loss, [w1, w2])
        with v1.Session() as sess:
            values = {x: a["x"], y: a["y"], w1: a["w1"].copy(), w2: a["w2"].copy()}

            def feed_step() -> None:
                fetched = sess.run([loss, grad_w1, grad_w2], feed_dict=values)
                values[w1] -= FEED_LR * fetched[1]
                values[w2] -= FEED_LR * fetched[2]
                moved["in"], moved["out"] = _nbytes(values.values()), _nbytes(fetched)

            seconds = median_seconds(feed_step, repeats, batch_s)
            rows.append(FeedRow("tf.compat.v1", "feed", device, seconds, moved["in"],
                                moved["out"]))
    with tf.Graph().as_default():
        x, y = v1.placeholder(tf.float32, (None, d)), v1.placeholder(tf.float32, (None, out))
        w1, w2 = tf.Variable(a["w1"]), tf.Variable(a["w2"])
        loss = tf.reduce_mean(tf.reduce_sum((tf.matmul(tf.maximum(tf.matmul(x, w1), 0.0), w2)
                                             - y) ** 2, axis=1))
        train = v1.train.GradientDescentOptimizer(FEED_LR).minimize(loss)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            feed = {x: a["x"], y: a["y"]}

            def variable_step() -> None:
                fetched = sess.run([loss, train], feed_dict=feed)
                moved["in"], moved["out"] = _nbytes(feed.values()), _nbytes(fetched)

            seconds = median_seconds(variable_step, repeats, batch_s)
            rows.append(FeedRow("tf.compat.v1", "variables", device, seconds, moved["in"],
                                moved["out"]))
    return {"rows": [asdict(r) for r in rows]}


def run_transfer(
    feed_frameworks: Sequence[str] = FEED_FRAMEWORKS,
    repeats: int = 5,
    quick: bool = False,
    progress_bar: bool = True,
    host_only: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> TransferResult:
    """Host copies, GPU transfers where a GPU exists, copy vs compute, and feed vs Variables.

    ``host_only`` (``--device cpu``): no GPU is used even where there is one.
    """
    from edu_dl.backend import gpu_status

    batch_s = 0.01 if quick else 0.1
    sizes = QUICK_HOST_SIZES if quick else HOST_SIZES
    matmul_sizes = QUICK_MATMUL_SIZES if quick else MATMUL_SIZES
    usable, reason = (False, "--device cpu asked for the host only") if host_only else gpu_status()
    result = TransferResult(gpu=None, no_gpu_reason="" if usable else reason, date=now())
    tasks: list[tuple[str, Callable[[], None]]] = []

    def host() -> None:
        result.bandwidth += host_copy_rows(sizes, repeats, batch_s)
        result.copy_compute += copy_compute_rows("numpy", matmul_sizes, repeats, batch_s)

    def cupy() -> None:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        result.gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        result.bandwidth += cupy_rows(sizes, repeats, batch_s)
        result.copy_compute += copy_compute_rows("cupy", matmul_sizes, repeats, batch_s)

    def torch_cuda() -> None:
        answer = run_in_worker(f"{__name__}:torch_cuda_task", name="torch.cuda",
                               timeout_s=timeout_s,
                               config={"sizes": sizes, "repeats": repeats, "batch_s": batch_s})
        result.bandwidth += [BandwidthRow(**r) for r in answer["rows"]]
        result.gpu = result.gpu or answer.get("gpu")
        if answer.get("gpu"):
            result.no_gpu_reason = ""
        elif result.no_gpu_reason:
            result.no_gpu_reason += f"; PyTorch: {answer['reason']}"

    def edu_dl_feed() -> None:
        result.feed += edu_dl_feed_rows(repeats, batch_s, "gpu" if usable else "cpu")

    def tf_feed() -> None:
        answer = run_in_worker(f"{__name__}:tf_feed_task", name="tf.compat.v1", threads=1,
                               timeout_s=timeout_s, config={"repeats": repeats, "batch_s": batch_s})
        result.feed += [FeedRow(**r) for r in answer["rows"]]

    tasks.append(("numpy host copies", host))
    if usable:
        tasks.append(("cupy", cupy))
    if not host_only:
        tasks.append(("torch.cuda", torch_cuda))
    if "edu_dl" in feed_frameworks:
        tasks.append(("edu_dl.graph feed vs Variables", edu_dl_feed))
    if "tf" in feed_frameworks:
        tasks.append(("tf.compat.v1 feed vs Variables", tf_feed))
    for name, task in each(tasks, "bench transfer", progress_bar, lambda t: t[0]):
        try:
            # One BLAS thread, as in the workers: on a small busy machine, BLAS threads
            # spinning idle made a 512 x 512 matmul ten times slower.
            with limit_threads(1):
                task()
        except Exception as exc:  # one library failing must not hide the others' numbers
            result.errors[name] = f"{type(exc).__name__}: {exc}"
            print(f"warning: {name} could not run: {exc}", file=sys.stderr)
    return result


def text_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of an aligned table whose first row is its header."""
    return table(rows[0], rows[1:], right_from=2).split("\n")


def no_gpu_sentence(result: TransferResult) -> str:
    """Why no GPU transfer was measured, and that the bandwidths shown are host-memory copies."""
    return (f"No CUDA GPU here ({result.no_gpu_reason}), so no PCIe host↔device transfer was "
            "measured: the bandwidths below are NumPy copies within host memory, the reference "
            "a GPU transfer is compared with.")


def transfer_table(result: TransferResult) -> str:
    """The printed report of ``bench transfer``: copy bandwidths, then (where measured) copy
    against matmul and the TF 1.x feed lesson, then each failure."""
    lines = [f"bench transfer, {result.date}; NumPy's BLAS capped at 1 thread (workers too)."]
    lines.append(f"GPU: {result.gpu}. {SYNCED}" if result.gpu else no_gpu_sentence(result))
    lines += ["", "Copy bandwidth (bytes copied / seconds; median):"]
    cells: list[tuple[str, ...]] = [("library", "direction", "memory", "size", "time", "GB/s")]
    cells += [(r.library, r.direction, r.memory, format_bytes(r.nbytes, ".3g"),
               format_time(r.seconds), f"{r.gb_per_s:.2f}") for r in result.bandwidth]
    lines += text_table(cells)
    if result.copy_compute:
        lines += ["", "Copy A, B (n x n float32) in and C out, against computing C = A @ B:"]
        cells = [("library", "n", "bytes moved", "copy", "matmul", "matmul / copy")]
        cells += [(r.library, str(r.n), format_bytes(r.nbytes, ".3g"), format_time(r.copy_s),
                   format_time(r.matmul_s), f"{r.matmul_s / r.copy_s:.2f}")
                  for r in result.copy_compute]
        lines += text_table(cells)
    if result.feed:
        n, d, h, out = SIZES[LECTURE_SIZE]
        lines += ["", f"The TF 1.x lesson, N={n}, D={d}, H={h}, D_out={out} float32: weights fed "
                  "from NumPy every step (placeholders) vs kept in the graph (Variables):"]
        cells = [("framework", "weights", "device", "step", "bytes in", "bytes out",
                  "bytes/step")]
        cells += [(r.framework, "fed every step" if r.variant == "feed" else "Variables",
                   r.device, format_time(r.step_s), f"{r.bytes_in:,}", f"{r.bytes_out:,}",
                   f"{r.bytes_per_step:,}") for r in result.feed]
        lines += text_table(cells)
        lines.append("Fed weights travel NumPy → graph → NumPy every step (on a GPU: across "
                     "PCIe both ways); Variables stay where the graph runs.")
        lines.append(feed_cost_sentence(result))
    lines += [f"warning: {name} could not run: {msg}" for name, msg in result.errors.items()]
    return "\n".join(lines) + "\n"


def feed_cost_sentence(result: TransferResult) -> str:
    """What feeding the weights costs in copies: at the measured GPU bandwidth, or why not."""
    feed = next((r for r in result.feed if r.variant == "feed"), None)
    variables = next((r for r in result.feed if r.variant == "variables"), None)
    extra = feed.bytes_per_step - variables.bytes_per_step if feed and variables else 0

    def rate(direction: str) -> float | None:
        rows = [r for r in result.bandwidth if r.direction == direction and r.memory == "pageable"]
        # The copy size closest to one fed weight matrix (D x H float32, 400 kB).
        best = min(rows, key=lambda r: abs(math.log(r.nbytes / 400_000)), default=None)
        return best.gb_per_s * 1e9 if best else None

    h2d, d2h = rate("H2D"), rate("D2H")
    if feed is None or h2d is None or d2h is None:
        return ("Here the graphs ran on the CPU, so 'fed' arrays crossed no bus and the step "
                "times above differ by bookkeeping only; on a GPU each fed step also copies "
                f"{extra:,} more bytes across PCIe than the Variables step.")
    copy_s = feed.bytes_in / h2d + feed.bytes_out / d2h
    return (f"At the pageable bandwidth measured above, copying the fed step's "
            f"{feed.bytes_per_step:,} bytes costs about {format_time(copy_s)} per step.")


def transfer_report(result: TransferResult) -> Report:
    """The table, transfer.csv (bandwidth), transfer_feed.csv, transfer.json and transfer.png."""
    return Report(
        transfer_table(result),
        csv={"transfer.csv": Csv([{**asdict(r), "gb_per_s": r.gb_per_s}
                                  for r in result.bandwidth]),
             "transfer_feed.csv": Csv([{**asdict(r), "bytes_per_step": r.bytes_per_step}
                                       for r in result.feed])},
        json={"transfer.json": Json(result.to_json())},
        plots={"transfer.png": lambda path: plot_transfer(result, path)},
        status=0 if result.bandwidth else 1)


def plot_transfer(result: TransferResult, path: Path) -> None:
    """Copy bandwidth against size; the feed_dict and Variables steps with their bytes."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    series: dict[str, list[BandwidthRow]] = {}
    for r in result.bandwidth:
        series.setdefault(f"{r.library} {r.direction} ({r.memory})", []).append(r)
    for label, rows in series.items():
        left.plot([r.nbytes for r in rows], [r.gb_per_s for r in rows], marker="o", label=label)
    left.set_xscale("log", base=2)
    left.set_xlabel("bytes per copy")
    left.set_ylabel("GB/s")
    left.set_title("Copy bandwidth" + ("" if result.gpu else " (no GPU: host copies only)"))
    left.legend(fontsize="small")
    labels = [f"{r.framework}\n{'fed' if r.variant == 'feed' else 'Variables'}"
              for r in result.feed]
    bars = right.bar(labels, [r.step_s * 1000 for r in result.feed],
                     color=["tab:red" if r.variant == "feed" else "tab:green"
                            for r in result.feed])
    for patch, feed_row in zip(bars, result.feed):
        right.annotate(format_bytes(feed_row.bytes_per_step, ".3g") + "/step",
                       (patch.get_x() + patch.get_width() / 2, patch.get_height()),
                       ha="center", va="bottom", fontsize="small")
    right.set_ylabel("ms per training step")
    right.set_title("N={}, D={}, H={}, D_out={}: feed_dict vs Variables".format(
        *SIZES[LECTURE_SIZE]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- the command


def measure_transfer(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench transfer``; under --device gpu with no GPU transfer measured, it says
    why on stderr and the status is 1."""
    result = run_transfer(args.frameworks, args.repeats, args.quick,
                          not args.no_progress, args.device == "cpu", args.timeout)
    report = transfer_report(result)
    if args.device == "gpu" and result.gpu is None:
        print(f"bench transfer --device gpu: no GPU transfer could be measured "
              f"({result.no_gpu_reason}).", file=sys.stderr)
        report.status = 1
    return report


TRANSFER = Benchmark(
    "transfer", "host<->device copy bandwidth, copy vs compute, feed_dict vs Variables",
    "H2D/D2H bandwidth over sizes on a CUDA GPU (host memcpy where there is none), copy time "
    "against matmul time, and the TF 1.x lesson: weights fed every step vs kept in the graph, "
    "in edu_dl.graph and tf.compat.v1.",
    measure_transfer, files=("transfer.csv", "transfer_feed.csv", "transfer.json",
                             "transfer.png"),
    flags=lambda p: p.add_argument(
        "--frameworks", type=comma_list(FEED_FRAMEWORKS, "framework"),
        default=list(FEED_FRAMEWORKS), help="for feed vs Variables (default: edu_dl,tf)"),
    repeats=(5, 2), device=None, timeout=True,
    device_help="cpu: host copies only; gpu: insist on a GPU (one sentence and status 1 without "
    "one); default: the GPU where there is one")
