"""``edu-dl bench loader``: a slow reader feeding a real training step, with and without prefetch.

A deliberately slow reader (``delay`` seconds per batch, a sleep that releases the GIL as disk
reads do) feeds a real training step of edu_dl (two-layer ReLU net from ``edu_dl.models.spec``,
eager, SGD; on the GPU with ``--device gpu``, each batch copied there). Without prefetching an epoch
costs n * (read + compute); with readers working ahead it costs about
n * max(read / readers, compute). Measured for edu_dl.data.DataLoader (0 = no prefetch, 1, 2, 4
threads), PyTorch ``DataLoader(num_workers=0 / 2, prefetch_factor=2)`` and ``tf.data`` (``map``,
``prefetch(AUTOTUNE)``, ``num_parallel_calls=AUTOTUNE``), each framework in a worker process of
its own. Benchmarks never assert a time: they print tables and write CSV, JSON and PNG files.
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.bench.common import each, format_time, now
from edu_dl.bench.device import Device
from edu_dl.bench.report import Benchmark, Csv, Json, Report, pyplot
from edu_dl.gpu.timing import median_seconds
from edu_dl.util.args import comma_list, non_negative, positive_int
from edu_dl.util.tables import table
from edu_dl.util.worker import DEFAULT_TIMEOUT_S, WorkerError, run_in_worker

LOADER_FRAMEWORKS: tuple[str, ...] = ("edu_dl", "torch", "tf")


# --------------------------------------------------------------------------- the workload


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
    device: str = "cpu"  # where the compute runs: 'gpu' copies every batch there (edu_dl, CuPy)


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

    synced: str = ""  # what a timed epoch waited for (the device's sentence)

    def to_json(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "read_s": self.read_s,
                "compute_s": self.compute_s, "serial_s": self.serial_s, "date": self.date,
                "rows": [asdict(r) for r in self.rows], "errors": self.errors,
                "synced": self.synced}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoaderResult:
        return cls(LoaderConfig(**data["config"]), data["read_s"], data["compute_s"],
                   [LoaderRow(**r) for r in data["rows"]], data["errors"], data["date"],
                   data.get("synced", ""))


def make_loader_data(directory: Path, config: LoaderConfig) -> None:
    """The benchmark's dataset on disk: seeded float32 X (rows, features) and y (rows, outputs)."""
    from edu_dl.data import write_shards

    rng = np.random.default_rng(0)
    rows = config.batches * config.batch_size
    X = rng.standard_normal((rows, config.features)).astype(np.float32)
    y = rng.standard_normal((rows, config.outputs)).astype(np.float32)
    write_shards(directory, shard_rows=4 * config.batch_size, X=X, y=y)


def make_compute(config: LoaderConfig) -> Callable[[np.ndarray, np.ndarray], float]:
    """``compute_steps`` real SGD steps of edu_dl's two-layer ReLU net on one batch; the loss.

    The net's starting weights come from ``edu_dl.models.spec`` (seed 1); with ``config.device``
    'gpu' each batch is copied to the GPU and trained there, and the loss copied back (a sync).
    """
    from edu_dl import nn, optim
    from edu_dl.autograd.tensor import tensor
    from edu_dl.models import spec as models

    spec = models.TwoLayerNet(config.batch_size, config.features, config.hidden,
                              config.outputs, "mean_row_sum", seed=1)
    w = spec.init_weights(np.float32)
    model = nn.Sequential(
        nn.Linear(config.features, config.hidden, bias=False, dtype=np.float32, weight=w["w1"]),
        nn.ReLU(),
        nn.Linear(config.hidden, config.outputs, bias=False, dtype=np.float32, weight=w["w2"]),
    ).to(config.device)
    loss_fn = nn.MSELoss()
    opt = optim.SGD(model.parameters(), lr=1e-3)

    def compute(X: np.ndarray, y: np.ndarray) -> float:
        x_t, y_t = tensor(X, device=config.device), tensor(y, device=config.device)
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
        from edu_dl.data import ShardedDataset, SlowReader

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
    from edu_dl.data import DataLoader, ShardedDataset, SlowReader

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


def loader_task(framework: str, config: dict[str, Any]) -> dict[str, Any]:
    """In a worker process: one framework's rows (edu_dl's also reads alone and computes alone).

    The first worker calibrates the compute steps, where they will run; the others reuse them.
    """
    loader_config = LoaderConfig(**config)
    if loader_config.compute_steps < 1:
        loader_config.compute_steps = calibrate_compute(loader_config, loader_config.compute_s)
    result = LOADER_TASKS[framework](loader_config)
    result["compute_steps"] = loader_config.compute_steps
    return result


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
    progress_bar: bool = True,
    device: Device | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> LoaderResult:
    """Run the loader benchmark, each framework in its own process (edu_dl's also measures the
    reference: reads alone and compute alone)."""
    device = device or Device()
    with tempfile.TemporaryDirectory(prefix="edu_dl_loader_") as tmp:
        config = LoaderConfig(str(Path(tmp) / "data"), batches=batches, batch_size=batch_size,
                              delay_s=delay_s, compute_s=compute_s, repeats=repeats,
                              device=device.runs_on)
        make_loader_data(Path(config.directory), config)
        order = ["edu_dl", *(fw for fw in frameworks if fw != "edu_dl")]
        result = LoaderResult(config, math.nan, math.nan, date=now(), synced=_synced(device))
        for fw in each(order, "bench loader", progress_bar):
            try:
                # One BLAS thread: BLAS threads would fight the reader threads.
                answer = run_in_worker(f"{__name__}:loader_task", name=fw, threads=1,
                                       timeout_s=timeout_s, framework=fw, config=asdict(config))
            except WorkerError as exc:
                result.errors[fw] = str(exc)
                print(f"warning: {fw} could not run: {exc}", file=sys.stderr)
                continue
            config.compute_steps = answer["compute_steps"]  # the first worker calibrates
            if fw == "edu_dl":
                result.read_s, result.compute_s = answer["read_s"], answer["compute_s"]
            if fw in frameworks:
                result.rows += [LoaderRow(**row) for row in answer["rows"]]
    finish_rows(result)
    return result


def loader_table(result: LoaderResult) -> str:
    """The printed report of ``bench loader``: the setup, reads and compute alone, then per
    loader the epoch time against the ideal and how much of the hideable time was hidden."""
    c = result.config
    n = c.batches
    lines = [
        f"bench loader: {n} batches of {c.batch_size} x {c.features} float32 read from .npy "
        f"shards with a {c.delay_s * 1000:.0f} ms sleep per batch (a slow disk); compute per "
        f"batch: {c.compute_steps} SGD step(s) of edu_dl's two-layer ReLU net "
        f"({c.features}-{c.hidden}-{c.outputs}) on the {c.device.upper()}, BLAS capped at 1 "
        f"thread. {result.date}. Median of {c.repeats} epoch(s) after a warm-up epoch."
        + (f" {result.synced}." if result.synced else ""),
        f"reads alone: {format_time(result.read_s)} per epoch ({format_time(result.read_s / n)} "
        f"per batch); compute alone: {format_time(result.compute_s)} "
        f"({format_time(result.compute_s / n)} per batch); read + compute, nothing "
        f"overlapped: {format_time(result.serial_s)}",
        "",
    ]
    header = ("framework", "loader", "readers", "prefetch", "epoch", "ideal", "hidden",
              "of hideable")
    rows = []
    for r in result.rows:
        readers = "AUTOTUNE" if r.readers < 0 else str(r.readers)
        fraction = "—" if math.isnan(r.hidden_fraction) else f"{r.hidden_fraction:.0%}"
        hidden = (format_time(r.hidden_s) if r.hidden_s >= 0
                  else "-" + format_time(-r.hidden_s))
        rows.append((r.framework, r.variant, readers, r.prefetch, format_time(r.epoch_s),
                     format_time(r.ideal_s), hidden, fraction))
    lines += table(header, rows, right_from=2).split("\n")
    lines += ["", "Per batch: ideal = read + compute + (n - 1) * max(read / readers, compute), "
              "the first read and the last compute being the only ones that cannot overlap; "
              "hidden = n * (read + compute) - epoch; 'of hideable' = hidden / (n * (read + "
              "compute) - ideal)."]
    lines += [f"warning: {fw} could not run: {msg}" for fw, msg in result.errors.items()]
    return "\n".join(lines) + "\n"


def loader_report(result: LoaderResult) -> Report:
    """The table, loader.csv, loader.json and loader.png."""
    return Report(loader_table(result), csv={"loader.csv": Csv([asdict(r) for r in result.rows])},
                  json={"loader.json": Json(result.to_json())},
                  plots={"loader.png": lambda path: plot_loader(result, path)},
                  status=0 if result.rows else 1)


def plot_loader(result: LoaderResult, path: Path) -> None:
    """Epoch time of each loader against the ideal pipeline, read + compute, compute alone."""
    plt = pyplot()
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _synced(device: Device) -> str:
    if device.runs_on == "gpu":
        return ("Compute on the GPU: each batch's last loss is copied to the host, which waits "
                "for its steps")
    return "Fake GPU: the compute ran on the CPU (a test)" if device.fake else ""


# --------------------------------------------------------------------------- the command


def loader_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench loader``'s own flags: --frameworks, --batches, --batch-size, --delay-ms and
    --compute-ms."""
    p.add_argument("--frameworks", type=comma_list(LOADER_FRAMEWORKS, "framework"),
                   default=list(LOADER_FRAMEWORKS),
                   help=f"comma-separated (default: {','.join(LOADER_FRAMEWORKS)})")
    p.add_argument("--batches", type=positive_int, default=None,
                   help="batches per epoch (default 40, with --quick 6)")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--delay-ms", type=non_negative("milliseconds"), default=20.0,
                   help="sleep per batch read: the slow disk (default 20)")
    p.add_argument("--compute-ms", type=non_negative("milliseconds"), default=10.0,
                   help="target compute per batch, calibrated to whole SGD steps (default 10)")


def measure_loader(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench loader`` as ``args`` ask on ``device``: the report, loader.csv,
    loader.json and loader.png (status 1 when nothing ran)."""
    return loader_report(run_loader(
        args.frameworks, args.batches or (6 if args.quick else 40), args.batch_size,
        args.delay_ms / 1000, args.compute_ms / 1000, args.repeats,
        not args.no_progress, device, args.timeout))


LOADER = Benchmark(
    "loader", "prefetching data loaders against a slow disk (edu_dl, PyTorch, tf.data)",
    "Epoch time of a training loop fed by a deliberately slow reader, without and with "
    "prefetching: edu_dl.data.DataLoader (0, 1, 2, 4 threads), PyTorch "
    "DataLoader(num_workers=0/2) and tf.data with prefetch(AUTOTUNE); each framework in its own "
    "process.",
    measure_loader, flags=loader_flags, files=("loader.csv", "loader.json", "loader.png"),
    repeats=(3, 1), timeout=True, device_help="where the training step runs (default: cpu); "
    "'gpu' without a GPU says so and exits with status 1")
