"""``edu-dl bench twins``: seconds per training step of every twin on one shared model.

Each twin runs in a worker process of its own (``worker.Worker``): OpenBLAS, OpenMP and
TensorFlow thread pools fight when they share a process on a small machine, and each framework
loads its own CUDA libraries. The first steps (tracing, XLA compilation, thread start-up) are
warm-up; the median of the rest is reported, with the ratio to NumPy by hand (CuPy by hand with
``--device gpu``, where every twin trains on the GPU). A twin times each step up to its loss on
the host, which on a GPU waits for the step. Benchmarks never assert a time: they print a table
and write CSV, JSON and a PNG.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.bench.common import each
from edu_dl.bench.device import Device
from edu_dl.bench.report import Benchmark, Csv, Json, Refused, Report, pyplot
from edu_dl.models import spec as models
from edu_dl.twins import TWINS, get_twin
from edu_dl.util.worker import WorkerError, run_in_worker

SPECS: dict[str, models.ModelSpec] = {
    "lecture_torch": models.LECTURE_TORCH,
    "lecture_tf": models.LECTURE_TF,
    "caffe": models.CAFFE_EUCLIDEAN,
    "digits": models.DIGITS,
    "tiny": models.TwoLayerNet(*models.SIZES["tiny"], "mean_row_sum"),
}
WARMUP_STEPS = 3
DEFAULT_STEPS, QUICK_STEPS = 20, 3
COLUMNS = ("twin", "seconds", "ratio", "first_loss", "last_loss", "error")  # of twins.csv
SYNCED = ("each step is timed up to its loss copied to the host (a twin's own step timer), "
          "which on a GPU waits for the step's kernels")


def measure(twin: str, spec_name: str, steps: int, optimizer: str, dtype: str,
            device: str = "cpu") -> dict[str, Any]:
    """In a worker: train ``twin``; the median seconds per step after warm-up, first/last loss."""
    spec = SPECS[spec_name]
    X, Y = spec.make_data(np.dtype(dtype))
    h = get_twin(twin)(spec, X, Y, steps + WARMUP_STEPS, spec.lr(optimizer), optimizer,
                       device=device, dtype=np.dtype(dtype))
    return {"twin": twin, "seconds": statistics.median(h.seconds[WARMUP_STEPS:]),
            "first_loss": h.losses[0], "last_loss": h.losses[-1]}


def run_worker(twin: str, args: argparse.Namespace, device: Device | None = None
               ) -> dict[str, Any]:
    """One twin in a fresh process; an error becomes {'twin', 'error'}."""
    device = device or Device()
    try:
        result: dict[str, Any] = run_in_worker(
            f"{__name__}:measure", name=twin, timeout_s=getattr(args, "timeout", None),
            twin=twin, spec_name=args.model, steps=args.steps, optimizer=args.optimizer,
            dtype=args.dtype, device=device.runs_on)
    except WorkerError as exc:
        return {"twin": twin, "error": str(exc).split(" worker: ", 1)[-1]}
    return result


def twins_table(results: list[dict[str, Any]], args: argparse.Namespace,
                device: Device) -> str:
    """The printed Markdown table of ``bench twins``: ms per step and the ratio to the NumPy twin
    (CuPy on a GPU); sets each result's ``ratio``."""
    spec = SPECS[args.model]
    base = next((r["seconds"] for r in results if r["twin"] == "numpy" and "seconds" in r), None)
    lines = [f"## Twins: one training step of {args.model} (N, D_in, H, D_out = {spec.N}, "
             f"{spec.D_in}, {spec.H}, {spec.D_out}; loss {spec.loss}; {args.optimizer}; "
             f"{args.dtype})", "",
             f"Device: {device.label}; {SYNCED if device.kind == 'gpu' else device.synced}.",
             "",
             f"| twin | ms / step | / {'CuPy' if device.kind == 'gpu' else 'NumPy'} "
             "| first loss | last loss |", "|---|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['twin']} | could not run: {r['error']} | | | |")
            continue
        r["ratio"] = r["seconds"] / base if base else None
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "n/a"
        lines.append(f"| {r['twin']} | {r['seconds'] * 1e3:.3f} | {ratio} | "
                     f"{r['first_loss']:.6g} | {r['last_loss']:.6g} |")
    return "\n".join(lines) + "\n"


def twins_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench twins``'s own flags: --model, --twins, --steps, --optimizer and --dtype."""
    p.add_argument("--model", choices=list(SPECS), default="lecture_torch")
    p.add_argument("--twins", default=",".join(TWINS),
                   help=f"comma-separated twins (default: all: {','.join(TWINS)})")
    p.add_argument("--steps", type=int, default=None,
                   help=f"timed steps after {WARMUP_STEPS} warm-up steps (default "
                   f"{DEFAULT_STEPS}, with --quick {QUICK_STEPS})")
    p.add_argument("--optimizer", choices=models.OPTIMIZERS, default="sgd")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")


def measure_twins(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench twins``, one worker per twin; Refused for an unknown twin or --steps
    below 1; status 1 when a twin could not run."""
    twins = [t.strip() for t in args.twins.split(",") if t.strip()]
    unknown = [t for t in twins if t not in TWINS]
    if unknown or not twins:
        raise Refused(f"error: unknown twin(s) {unknown}; choose from {', '.join(TWINS)}")
    args.steps = args.steps if args.steps is not None else (
        QUICK_STEPS if args.quick else DEFAULT_STEPS)
    if args.steps < 1:
        raise Refused("error: --steps must be at least 1")
    results = [run_worker(twin, args, device)
               for twin in each(twins, "bench twins", not args.no_progress)]
    text = twins_table(results, args, device)  # adds each result's ratio
    data = {"model": args.model, "optimizer": args.optimizer, "dtype": args.dtype,
            "steps": args.steps, "device": device.kind, "fake": device.fake, "results": results}
    return Report(text, json={"twins.json": Json(data, indent=2)},
                  csv={"twins.csv": Csv(results, COLUMNS)},
                  plots={"twins.png": lambda path: _plot([r for r in results if "seconds" in r],
                                                         path, args.model)},
                  status=0 if all("seconds" in r for r in results) else 1)


TWINS_BENCH = Benchmark(
    "twins", "seconds per training step of every twin on one shared model",
    "Train the shared model with every twin, each in its own process, and compare seconds per "
    "step with NumPy by hand.",
    measure_twins, flags=twins_flags, files=("twins.csv", "twins.json", "twins.png"),
    timeout=True, out_default=Path("benchmarks/twins"), quick=f"{QUICK_STEPS} timed steps")


def _plot(results: list[dict[str, Any]], path: Path, model: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh([r["twin"] for r in results], [r["seconds"] * 1e3 for r in results])
    ax.set_xscale("log")
    ax.set_xlabel("ms per training step (median, lower is faster)")
    ax.set_title(f"Twins on {model}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
