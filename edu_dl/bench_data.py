"""Benchmarks behind ``edu-dl bench loader`` and ``edu-dl bench transfer``: feeding the GPU.

``bench loader``: a deliberately slow reader (``delay`` seconds per batch, a sleep that releases
the GIL as disk reads do) feeds a real training step of edu_dl (two-layer ReLU net, eager, SGD).
Without prefetching an epoch costs n * (read + compute); with readers working ahead it costs about
n * max(read / readers, compute). Measured for edu_dl.data.DataLoader (0 = no prefetch, 1, 2, 4
threads), PyTorch ``DataLoader(num_workers=0 / 2, prefetch_factor=2)`` and ``tf.data`` (``map``,
``prefetch(AUTOTUNE)``, ``num_parallel_calls=AUTOTUNE``), each framework in its own process.

``bench transfer``: bytes per second of host->device (H2D) and device->host (D2H) copies over
sizes on a CUDA GPU (CuPy, torch.cuda; pageable and pinned host memory), the host memcpy
bandwidth of NumPy as the reference, copy time against matmul time, and the TensorFlow 1.x
lesson: weights fed from NumPy every step (placeholders, ``feed_dict``) against weights kept in
the graph as Variables (``minimize``), in edu_dl.graph and tf.compat.v1, with the bytes each step
copies. Benchmarks never assert a time: they print tables and write CSV, JSON and PNG files.
"""

from __future__ import annotations

import csv
import datetime
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .bench import (
    SIZES,
    format_time,
    limit_threads,
    make_problem,
    median_seconds,
    thread_env,
)
from .progress import progress_disabled

LOADER_FRAMEWORKS: tuple[str, ...] = ("edu_dl", "torch", "tf")
FEED_FRAMEWORKS: tuple[str, ...] = ("edu_dl", "tf")
# The lecture's TF 1.x program: N, D, H, D_out.
LECTURE_SIZE = "lecture_tf"
FEED_LR = 1e-5  # the lecture's rate; a few hundred timed steps cannot blow the weights up
WORKER_TIMEOUT_S = 600


def _now() -> str:
    return datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


# --------------------------------------------------------------------------- worker processes


class WorkerFailed(RuntimeError):
    """A benchmark's worker process failed; the message holds the tail of its stderr."""


def run_worker(task: str, config: dict[str, Any], threads: int | None = 1) -> Any:
    """Run ``task`` in a fresh Python process (one framework per process); return its result.

    The result travels through a JSON file, so whatever a library prints cannot corrupt it.
    """
    with tempfile.TemporaryDirectory(prefix="edu_dl_bench_") as tmp:
        config_path, out_path = Path(tmp) / "config.json", Path(tmp) / "out.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        if threads:  # BLAS or OpenMP threads would fight the reader threads on a small machine
            env.update(thread_env(threads))
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "edu_dl.bench_data", task, str(config_path), str(out_path)],
                capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise WorkerFailed(f"{task} worker ran past {WORKER_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out_path.exists():
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
            raise WorkerFailed(f"{task} worker exited with code {proc.returncode}: {tail}")
        return json.loads(out_path.read_text(encoding="utf-8"))


def _progress(total: int, desc: str, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="task", file=sys.stderr,
                disable=progress_disabled(enabled))


# --------------------------------------------------------------------------- the loader benchmark


@dataclass
class LoaderConfig:
    """The loader benchmark's workload, identical in every worker process."""

    directory: str
    batches: int = 40
    batch_size: int = 64
    features: int = 256
    hidden: int = 256
    outputs: int = 10
    delay_s: float = 0.02
    compute_s: float = 0.01  # target compute per batch, rounded to whole training steps
    compute_steps: int = 0  # training steps per batch; 0: calibrate to compute_s (edu_dl worker)
    repeats: int = 3


@dataclass
class LoaderRow:
    """One way of feeding the training loop, and its epoch time (seconds)."""

    framework: str
    variant: str
    readers: int  # threads or worker processes reading; 0: the consumer reads; -1: AUTOTUNE
    prefetch: str  # how many batches may wait ahead, as the framework says it
    epoch_s: float
    ideal_s: float = math.nan  # read + compute + (n - 1) * max(read / readers, compute)
    hidden_s: float = math.nan  # (read + compute) - epoch: read time hidden behind compute
    hidden_fraction: float = math.nan  # hidden / (sum - ideal): 1 is perfect overlap


@dataclass
class LoaderResult:
    config: LoaderConfig
    read_s: float  # one epoch of reads alone, no compute
    compute_s: float  # one epoch of compute alone, batches already in memory
    rows: list[LoaderRow] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    date: str = ""

    @property
    def serial_s(self) -> float:
        return self.read_s + self.compute_s

    def to_json(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "read_s": self.read_s,
                "compute_s": self.compute_s, "serial_s": self.serial_s, "date": self.date,
                "rows": [asdict(r) for r in self.rows], "errors": self.errors}


def make_loader_data(directory: Path, config: LoaderConfig) -> None:
    """The benchmark's dataset on disk: seeded float32 X (rows, features) and y (rows, outputs)."""
    from .data import write_shards

    rng = np.random.default_rng(0)
    rows = config.batches * config.batch_size
    X = rng.standard_normal((rows, config.features)).astype(np.float32)
    y = rng.standard_normal((rows, config.outputs)).astype(np.float32)
    write_shards(directory, shard_rows=4 * config.batch_size, X=X, y=y)


def make_compute(config: LoaderConfig) -> Callable[[np.ndarray, np.ndarray], float]:
    """``compute_steps`` real SGD steps of edu_dl's two-layer ReLU net on one batch; the loss."""
    from . import nn, optim
    from .autograd.tensor import tensor

    rng = np.random.default_rng(1)
    model = nn.Sequential(nn.Linear(config.features, config.hidden, rng=rng), nn.ReLU(),
                          nn.Linear(config.hidden, config.outputs, rng=rng))
    loss_fn = nn.MSELoss()
    opt = optim.SGD(model.parameters(), lr=1e-3)

    def compute(X: np.ndarray, y: np.ndarray) -> float:
        x_t, y_t = tensor(X), tensor(y)
        loss = None
        for _ in range(config.compute_steps):
            loss = loss_fn(model(x_t), y_t)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float(loss.item()) if loss is not None else 0.0

    return compute


def calibrate_compute(config: LoaderConfig, compute_s: float) -> int:
    """Training steps per batch that make the compute of one batch last about ``compute_s``."""
    one = LoaderConfig(**{**asdict(config), "compute_steps": 1})
    compute = make_compute(one)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((config.batch_size, config.features)).astype(np.float32)
    y = rng.standard_normal((config.batch_size, config.outputs)).astype(np.float32)
    step_s = median_seconds(lambda: compute(X, y), repeats=3, batch_s=0.05)
    return max(1, round(compute_s / step_s))


class BatchReader:
    """Batch k of the on-disk dataset, read slowly; a map-style dataset for PyTorch and tf.data."""

    def __init__(self, config: LoaderConfig) -> None:
        from .data import ShardedDataset, SlowReader

        self.config = config
        self.reader = SlowReader(ShardedDataset(config.directory), config.delay_s)

    def __len__(self) -> int:
        return self.config.batches

    def __getitem__(self, k: int) -> tuple[np.ndarray, ...]:
        if not 0 <= k < len(self):
            raise IndexError(k)
        b = self.config.batch_size
        return self.reader.read(np.arange(k * b, (k + 1) * b))


def _time_epochs(config: LoaderConfig, epoch: Callable[[], Iterable[Any]],
                 compute: Callable[[np.ndarray, np.ndarray], float] | None,
                 to_numpy: Callable[[Any], np.ndarray] = np.asarray) -> float:
    """Median seconds of one epoch: iterate every batch, run ``compute`` on it."""
    def once() -> float:
        start, count = time.perf_counter(), 0
        for X, y in epoch():
            if compute is not None:
                compute(to_numpy(X), to_numpy(y))
            count += 1
        if count != config.batches:
            raise RuntimeError(f"an epoch gave {count} batches, expected {config.batches}")
        return time.perf_counter() - start

    once()  # warm-up: thread and process start, tf.data tracing, first BLAS calls
    return statistics.median(once() for _ in range(config.repeats))


def _edu_dl_loader_rows(config: LoaderConfig) -> dict[str, Any]:
    from .data import DataLoader, ShardedDataset, SlowReader

    compute = make_compute(config)
    slow = SlowReader(ShardedDataset(config.directory), config.delay_s)
    preloaded = list(DataLoader(ShardedDataset(config.directory), config.batch_size, prefetch=0))
    read_s = _time_epochs(config, lambda: DataLoader(slow, config.batch_size, prefetch=0), None)
    compute_s = _time_epochs(config, lambda: iter(preloaded), compute)
    rows = []
    for threads, prefetch in ((0, 0), (1, 2), (2, 4), (4, 8)):
        def epoch(threads: int = threads, prefetch: int = prefetch) -> Iterable[Any]:
            return DataLoader(slow, config.batch_size, prefetch=prefetch,
                              num_threads=max(1, threads))
        variant = ("no prefetch (reads in the loop)" if threads == 0 else
                   f"prefetch={prefetch}, {threads} thread{'s' if threads > 1 else ''}")
        rows.append(LoaderRow("edu_dl", variant, threads, str(prefetch),
                              _time_epochs(config, epoch, compute)))
    return {"read_s": read_s, "compute_s": compute_s, "rows": [asdict(r) for r in rows]}


def _torch_loader_rows(config: LoaderConfig) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    compute = make_compute(config)
    dataset: Any = BatchReader(config)  # map-style: __len__ and __getitem__ are all it needs
    rows = []
    for workers in (0, 2):
        # batch_size=None: each item already is a batch, as our reader returns it. Persistent
        # workers start once, in the warm-up epoch: starting 2 processes costs ~100 ms, a
        # fixed cost that would swamp a short epoch (edu_dl's threads start in microseconds).
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=None, num_workers=workers,
            prefetch_factor=2 if workers else None, persistent_workers=workers > 0)
        epoch: Callable[[], Iterable[Any]] = functools.partial(iter, loader)
        variant = (f"DataLoader(num_workers={workers}" +
                   (", prefetch_factor=2, persistent_workers=True)" if workers else ")"))
        rows.append(LoaderRow("torch", variant, workers, str(2 * workers) if workers else "0",
                              _time_epochs(config, epoch, compute, lambda t: t.numpy())))
        del loader  # stops its worker processes
    return {"rows": [asdict(r) for r in rows]}


def _tf_loader_rows(config: LoaderConfig) -> dict[str, Any]:
    import tensorflow as tf

    compute = make_compute(config)
    dataset = BatchReader(config)

    def read(k: Any) -> tuple[np.ndarray, ...]:
        return dataset[int(k)]

    def pipeline(parallel: int | None, prefetch: bool) -> tf.data.Dataset:
        ds = tf.data.Dataset.range(config.batches).map(
            lambda k: tf.numpy_function(read, [k], (tf.float32, tf.float32)),
            num_parallel_calls=parallel, deterministic=True)
        if prefetch:
            return ds.prefetch(tf.data.AUTOTUNE)
        # Recent tf.data slips a prefetch in by itself; switched off, "no prefetch" means it.
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return ds.with_options(options)

    variants = (
        ("map, no prefetch", 0, "0", None, False),
        ("map + prefetch(AUTOTUNE)", 1, "AUTOTUNE", None, True),
        ("map(num_parallel_calls=AUTOTUNE) + prefetch(AUTOTUNE)", -1, "AUTOTUNE",
         tf.data.AUTOTUNE, True),
    )
    rows = []
    for variant, readers, prefetch_text, parallel, prefetch in variants:
        ds = pipeline(parallel, prefetch)
        epoch: Callable[[], Iterable[Any]] = functools.partial(iter, ds)
        rows.append(LoaderRow("tf", f"tf.data {variant}", readers, prefetch_text,
                              _time_epochs(config, epoch, compute, lambda t: t.numpy())))
    return {"rows": [asdict(r) for r in rows]}


LOADER_TASKS: dict[str, Callable[[LoaderConfig], dict[str, Any]]] = {
    "edu_dl": _edu_dl_loader_rows,
    "torch": _torch_loader_rows,
    "tf": _tf_loader_rows,
}


def finish_rows(result: LoaderResult) -> None:
    """Fill in each row's ideal epoch, the time hidden and the share of the hideable time."""
    n = result.config.batches
    read, compute = result.read_s / n, result.compute_s / n
    for row in result.rows:
        if row.readers == 0:
            row.ideal_s = result.serial_s  # nothing overlaps
        else:  # AUTOTUNE (-1): as many readers as it takes
            per_batch = read / row.readers if row.readers > 0 else 0.0
            # A pipeline: the first read and the last compute cannot be hidden.
            row.ideal_s = read + compute + (n - 1) * max(per_batch, compute)
        row.hidden_s = result.serial_s - row.epoch_s
        hideable = result.serial_s - row.ideal_s
        row.hidden_fraction = row.hidden_s / hideable if hideable > 0 else math.nan


def run_loader(
    frameworks: Sequence[str] = LOADER_FRAMEWORKS,
    batches: int = 40,
    batch_size: int = 64,
    delay_s: float = 0.02,
    compute_s: float = 0.01,
    repeats: int = 3,
    progress: bool = True,
) -> LoaderResult:
    """Run the loader benchmark, each framework in its own process (edu_dl's also measures the
    reference: reads alone and compute alone)."""
    with tempfile.TemporaryDirectory(prefix="edu_dl_loader_") as tmp:
        config = LoaderConfig(str(Path(tmp) / "data"), batches=batches, batch_size=batch_size,
                              delay_s=delay_s, compute_s=compute_s, repeats=repeats)
        make_loader_data(Path(config.directory), config)
        order = ["edu_dl", *(fw for fw in frameworks if fw != "edu_dl")]
        result = LoaderResult(config, math.nan, math.nan, date=_now())
        bar = _progress(len(order), "bench loader", progress)
        try:
            for fw in order:
                bar.set_postfix_str(fw)
                try:
                    answer = run_worker(f"loader-{fw}", asdict(config))
                except WorkerFailed as exc:
                    result.errors[fw] = str(exc)
                    print(f"warning: {fw} could not run: {exc}", file=sys.stderr)
                    bar.update()
                    continue
                config.compute_steps = answer["compute_steps"]  # the first worker calibrates
                if fw == "edu_dl":
                    result.read_s, result.compute_s = answer["read_s"], answer["compute_s"]
                if fw in frameworks:
                    result.rows += [LoaderRow(**row) for row in answer["rows"]]
                bar.update()
        finally:
            bar.close()
    finish_rows(result)
    return result


def loader_table(result: LoaderResult) -> str:
    c = result.config
    n = c.batches
    lines = [
        f"bench loader: {n} batches of {c.batch_size} x {c.features} float32 read from .npy "
        f"shards with a {c.delay_s * 1000:.0f} ms sleep per batch (a slow disk); compute per "
        f"batch: {c.compute_steps} SGD step(s) of edu_dl's two-layer ReLU net "
        f"({c.features}-{c.hidden}-{c.outputs}), BLAS capped at 1 thread. {result.date}. Median "
        f"of {c.repeats} epoch(s) after a warm-up epoch.",
        f"reads alone: {format_time(result.read_s)} per epoch ({format_time(result.read_s / n)} "
        f"per batch); compute alone: {format_time(result.compute_s)} "
        f"({format_time(result.compute_s / n)} per batch); read + compute, nothing "
        f"overlapped: {format_time(result.serial_s)}",
        "",
    ]
    header = ("framework", "loader", "readers", "prefetch", "epoch", "ideal", "hidden",
              "of hideable")
    table = [header]
    for r in result.rows:
        readers = "AUTOTUNE" if r.readers < 0 else str(r.readers)
        fraction = "—" if math.isnan(r.hidden_fraction) else f"{r.hidden_fraction:.0%}"
        hidden = (format_time(r.hidden_s) if r.hidden_s >= 0
                  else "-" + format_time(-r.hidden_s))
        table.append((r.framework, r.variant, readers, r.prefetch, format_time(r.epoch_s),
                      format_time(r.ideal_s), hidden, fraction))
    lines += _align(table)
    lines += ["", "Per batch: ideal = read + compute + (n - 1) * max(read / readers, compute), "
              "the first read and the last compute being the only ones that cannot overlap; "
              "hidden = n * (read + compute) - epoch; 'of hideable' = hidden / (n * (read + "
              "compute) - ideal)."]
    lines += [f"warning: {fw} could not run: {msg}" for fw, msg in result.errors.items()]
    return "\n".join(lines) + "\n"


def _align(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for j, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                             for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def write_loader_outputs(result: LoaderResult, out: Path) -> list[Path]:
    """loader.csv, loader.json and loader.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "loader.csv", out / "loader.json", out / "loader.png"]
    _write_csv(paths[0], [asdict(r) for r in result.rows])
    paths[1].write_text(json.dumps(result.to_json(), indent=1), encoding="utf-8")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(result.rows) + 1.8))
    prefix = {"edu_dl": "edu_dl ", "torch": "torch "}
    labels = [textwrap.fill(prefix.get(r.framework, "") + r.variant, 44)
              for r in result.rows][::-1]
    ax.barh(labels, [r.epoch_s for r in result.rows][::-1], color="tab:blue", label="epoch")
    ax.scatter([r.ideal_s for r in result.rows][::-1], labels, color="black", marker="|",
               s=200, zorder=3, label="ideal pipeline")
    ax.axvline(result.serial_s, color="tab:red", linestyle="--", label="read + compute")
    ax.axvline(result.compute_s, color="tab:green", linestyle=":", label="compute alone")
    ax.set_xlabel("seconds per epoch (lower is better)")
    ax.set_title(f"A slow reader ({result.config.delay_s * 1000:.0f} ms/batch) hidden by "
                 "prefetching")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close(fig)
    return paths


# --------------------------------------------------------------------------- the transfer benchmark

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
    from .backend import require_gpu

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
    from .backend import require_gpu, synchronize, to_numpy

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


def _torch_cuda_task(config: dict[str, Any]) -> dict[str, Any]:
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
    return {"x": p.x, "y": p.y, "w1": p.w1, "w2": p.w2}


def _nbytes(values: Iterable[Any]) -> int:
    return sum(int(np.asarray(v).nbytes) for v in values if v is not None)


def edu_dl_feed_rows(repeats: int, batch_s: float, device: str = "cpu") -> list[FeedRow]:
    """The TF 1.x lesson in edu_dl.graph: feed w1, w2 every step, or keep them as Variables."""
    from . import graph as eg

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


def _tf_feed_task(config: dict[str, Any]) -> dict[str, Any]:
    """The same two programs in tf.compat.v1, inside their own tf.Graph (eager stays on)."""
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
    progress: bool = True,
) -> TransferResult:
    """Host copies, GPU transfers where a GPU exists, copy vs compute, and feed vs Variables."""
    from .backend import gpu_status

    batch_s = 0.01 if quick else 0.1
    sizes = QUICK_HOST_SIZES if quick else HOST_SIZES
    matmul_sizes = QUICK_MATMUL_SIZES if quick else MATMUL_SIZES
    usable, reason = gpu_status()
    result = TransferResult(gpu=None, no_gpu_reason="" if usable else reason, date=_now())
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
        answer = run_worker("transfer-torch",
                            {"sizes": sizes, "repeats": repeats, "batch_s": batch_s}, None)
        result.bandwidth += [BandwidthRow(**r) for r in answer["rows"]]
        result.gpu = result.gpu or answer.get("gpu")
        if answer.get("gpu"):
            result.no_gpu_reason = ""
        elif result.no_gpu_reason:
            result.no_gpu_reason += f"; PyTorch: {answer['reason']}"

    def edu_dl_feed() -> None:
        result.feed += edu_dl_feed_rows(repeats, batch_s, "gpu" if usable else "cpu")

    def tf_feed() -> None:
        answer = run_worker("feed-tf", {"repeats": repeats, "batch_s": batch_s})
        result.feed += [FeedRow(**r) for r in answer["rows"]]

    tasks.append(("numpy host copies", host))
    if usable:
        tasks.append(("cupy", cupy))
    tasks.append(("torch.cuda", torch_cuda))
    if "edu_dl" in feed_frameworks:
        tasks.append(("edu_dl.graph feed vs Variables", edu_dl_feed))
    if "tf" in feed_frameworks:
        tasks.append(("tf.compat.v1 feed vs Variables", tf_feed))
    bar = _progress(len(tasks), "bench transfer", progress)
    try:
        for name, task in tasks:
            bar.set_postfix_str(name)
            try:
                # One BLAS thread, as in the workers: on a small busy machine, BLAS threads
                # spinning idle made a 512 x 512 matmul ten times slower.
                with limit_threads(1):
                    task()
            except Exception as exc:  # one library failing must not hide the others' numbers
                result.errors[name] = f"{type(exc).__name__}: {exc}"
                print(f"warning: {name} could not run: {exc}", file=sys.stderr)
            bar.update()
    finally:
        bar.close()
    return result


def _format_bytes(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def no_gpu_sentence(result: TransferResult) -> str:
    return (f"No CUDA GPU here ({result.no_gpu_reason}), so no PCIe host↔device transfer was "
            "measured: the bandwidths below are NumPy copies within host memory, the reference "
            "a GPU transfer is compared with.")


def transfer_table(result: TransferResult) -> str:
    lines = [f"bench transfer, {result.date}; NumPy's BLAS capped at 1 thread (workers too)."]
    lines.append(f"GPU: {result.gpu}." if result.gpu else no_gpu_sentence(result))
    lines += ["", "Copy bandwidth (bytes copied / seconds; median):"]
    table: list[tuple[str, ...]] = [("library", "direction", "memory", "size", "time", "GB/s")]
    table += [(r.library, r.direction, r.memory, _format_bytes(r.nbytes), format_time(r.seconds),
               f"{r.gb_per_s:.2f}") for r in result.bandwidth]
    lines += _align(table)
    if result.copy_compute:
        lines += ["", "Copy A, B (n x n float32) in and C out, against computing C = A @ B:"]
        table = [("library", "n", "bytes moved", "copy", "matmul", "matmul / copy")]
        table += [(r.library, str(r.n), _format_bytes(r.nbytes), format_time(r.copy_s),
                   format_time(r.matmul_s), f"{r.matmul_s / r.copy_s:.2f}")
                  for r in result.copy_compute]
        lines += _align(table)
    if result.feed:
        n, d, h, out = SIZES[LECTURE_SIZE]
        lines += ["", f"The TF 1.x lesson, N={n}, D={d}, H={h}, D_out={out} float32: weights fed "
                  "from NumPy every step (placeholders) vs kept in the graph (Variables):"]
        table = [("framework", "weights", "device", "step", "bytes in", "bytes out",
                  "bytes/step")]
        table += [(r.framework, "fed every step" if r.variant == "feed" else "Variables",
                   r.device, format_time(r.step_s), f"{r.bytes_in:,}", f"{r.bytes_out:,}",
                   f"{r.bytes_per_step:,}") for r in result.feed]
        lines += _align(table)
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


def write_transfer_outputs(result: TransferResult, out: Path) -> list[Path]:
    """transfer.csv (bandwidth), transfer_feed.csv, transfer.json and transfer.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "transfer.csv", out / "transfer_feed.csv", out / "transfer.json",
             out / "transfer.png"]
    _write_csv(paths[0], [{**asdict(r), "gb_per_s": r.gb_per_s} for r in result.bandwidth])
    _write_csv(paths[1], [{**asdict(r), "bytes_per_step": r.bytes_per_step}
                          for r in result.feed])
    paths[2].write_text(json.dumps(result.to_json(), indent=1), encoding="utf-8")
    plt = _pyplot()
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
        right.annotate(_format_bytes(feed_row.bytes_per_step) + "/step",
                       (patch.get_x() + patch.get_width() / 2, patch.get_height()),
                       ha="center", va="bottom", fontsize="small")
    right.set_ylabel("ms per training step")
    right.set_title("N={}, D={}, H={}, D_out={}: feed_dict vs Variables".format(
        *SIZES[LECTURE_SIZE]))
    fig.tight_layout()
    fig.savefig(paths[3], dpi=110)
    plt.close(fig)
    return paths


# --------------------------------------------------------------------------- the command line


def add_loader(kinds: Any) -> None:
    """``edu-dl bench loader``."""
    from .cli import comma_list, positive_int

    p = kinds.add_parser(
        "loader",
        help="prefetching data loaders against a slow disk (edu_dl, PyTorch, tf.data)",
        description="Epoch time of a training loop fed by a deliberately slow reader, without "
        "and with prefetching: edu_dl.data.DataLoader (0, 1, 2, 4 threads), PyTorch "
        "DataLoader(num_workers=0/2) and tf.data with prefetch(AUTOTUNE); each framework in "
        "its own process.")
    p.add_argument("--frameworks", type=comma_list(LOADER_FRAMEWORKS, "framework"),
                   default=list(LOADER_FRAMEWORKS),
                   help=f"comma-separated (default: {','.join(LOADER_FRAMEWORKS)})")
    p.add_argument("--batches", type=positive_int, default=None,
                   help="batches per epoch (default 40, with --quick 6)")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--delay-ms", type=_non_negative, default=20.0,
                   help="sleep per batch read: the slow disk (default 20)")
    p.add_argument("--compute-ms", type=_non_negative, default=10.0,
                   help="target compute per batch, calibrated to whole SGD steps (default 10)")
    _add_common(p)
    p.set_defaults(handler=run_loader_command)


def add_transfer(kinds: Any) -> None:
    """``edu-dl bench transfer``."""
    from .cli import comma_list

    p = kinds.add_parser(
        "transfer",
        help="host<->device copy bandwidth, copy vs compute, feed_dict vs Variables",
        description="H2D/D2H bandwidth over sizes on a CUDA GPU (host memcpy where there is "
        "none), copy time against matmul time, and the TF 1.x lesson: weights fed every step "
        "vs kept in the graph, in edu_dl.graph and tf.compat.v1.")
    p.add_argument("--frameworks", type=comma_list(FEED_FRAMEWORKS, "framework"),
                   default=list(FEED_FRAMEWORKS),
                   help="for feed vs Variables (default: edu_dl,tf)")
    _add_common(p)
    p.set_defaults(handler=run_transfer_command)


def _non_negative(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds, got {text!r}"
                                         ) from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _add_common(p: Any) -> None:
    from .cli import positive_int

    p.add_argument("--repeats", type=positive_int, default=None,
                   help="timed repeats, median reported (default 3 for loader epochs and 5 for "
                   "transfer; with --quick 1 and 2)")
    p.add_argument("--out", type=Path, metavar="DIR", help="write CSV, JSON and PNG files here")
    p.add_argument("--quick", action="store_true",
                   help="small and short: checks that it runs, not speed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_loader_command(args: Any) -> int:
    repeats = args.repeats or (1 if args.quick else 3)
    batches = args.batches or (6 if args.quick else 40)
    result = run_loader(args.frameworks, batches, args.batch_size, args.delay_ms / 1000,
                        args.compute_ms / 1000, repeats, not args.no_progress)
    sys.stdout.write(loader_table(result))
    if args.out is not None:
        for path in write_loader_outputs(result, args.out):
            print(f"wrote {path}", file=sys.stderr)
    return 0 if result.rows else 1


def run_transfer_command(args: Any) -> int:
    repeats = args.repeats or (2 if args.quick else 5)
    result = run_transfer(args.frameworks, repeats, args.quick, not args.no_progress)
    sys.stdout.write(transfer_table(result))
    if args.out is not None:
        for path in write_transfer_outputs(result, args.out):
            print(f"wrote {path}", file=sys.stderr)
    return 0 if result.bandwidth else 1


# --------------------------------------------------------------------------- files


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        if not rows:
            return
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _worker_main(task: str, config_path: str, out_path: str) -> int:
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    result: dict[str, Any]
    if task.startswith("loader-") and task[len("loader-"):] in LOADER_TASKS:
        loader_config = LoaderConfig(**config)
        if loader_config.compute_steps < 1:  # calibrated in a worker, where it will run
            loader_config.compute_steps = calibrate_compute(loader_config, loader_config.compute_s)
        result = LOADER_TASKS[task[len("loader-"):]](loader_config)
        result["compute_steps"] = loader_config.compute_steps
    elif task == "transfer-torch":
        result = _torch_cuda_task(config)
    elif task == "feed-tf":
        result = _tf_feed_task(config)
    else:
        print(f"unknown task {task!r}", file=sys.stderr)
        return 2
    Path(out_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    # The worker entry point: python -m edu_dl.bench_data TASK CONFIG.json OUT.json
    if len(sys.argv) != 4:
        sys.exit("usage: python -m edu_dl.bench_data TASK CONFIG.json OUT.json "
                 "(use `edu-dl bench loader|transfer` instead)")
    sys.exit(_worker_main(*sys.argv[1:]))
