"""``edu-dl bench twins``: seconds per training step of every twin on one shared model.

Each twin runs in its own process (``python -m edu_dl.twins.bench --worker TWIN ...``), as
``edu_dl.bench``'s workers do: OpenBLAS, OpenMP and TensorFlow thread pools fight when they
share a process on a small machine. The first steps (tracing, XLA compilation, thread start-up)
are warm-up; the median of the rest is reported, with the ratio to NumPy by hand. Benchmarks
never assert a time: they print a table and write CSV, JSON and a PNG.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .. import models
from . import TWINS, get_twin

SPECS: dict[str, models.ModelSpec] = {
    "lecture_torch": models.LECTURE_TORCH,
    "lecture_tf": models.LECTURE_TF,
    "caffe": models.CAFFE_EUCLIDEAN,
    "digits": models.DIGITS,
    "tiny": models.TwoLayerNet(16, 24, 12, 8, "mean_row_sum"),
}
WARMUP_STEPS = 3


def measure(twin: str, spec_name: str, steps: int, optimizer: str, dtype: str) -> dict[str, Any]:
    """Train ``twin`` here; the median seconds per step after warm-up, and first/last loss."""
    spec = SPECS[spec_name]
    X, Y = spec.make_data(np.dtype(dtype))
    h = get_twin(twin)(spec, X, Y, steps + WARMUP_STEPS, spec.lr(optimizer), optimizer,
                       dtype=np.dtype(dtype))
    return {"twin": twin, "seconds": statistics.median(h.seconds[WARMUP_STEPS:]),
            "first_loss": h.losses[0], "last_loss": h.losses[-1]}


def run_worker(twin: str, args: argparse.Namespace) -> dict[str, Any]:
    """One twin in a fresh process; an error becomes {'twin', 'error'}."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "edu_dl.twins.bench", "--worker", twin, args.model,
           str(args.steps), args.optimizer, args.dtype]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return {"twin": twin, "error": f"exit code {proc.returncode}: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def add_twins(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "twins", help="seconds per training step of every twin on one shared model",
        description="Train the shared model with every twin, each in its own process, and "
        "compare seconds per step with NumPy by hand.")
    p.add_argument("--model", choices=list(SPECS), default="lecture_torch")
    p.add_argument("--twins", default=",".join(TWINS),
                   help=f"comma-separated twins (default: all: {','.join(TWINS)})")
    p.add_argument("--steps", type=int, default=20, help="timed steps after 3 warm-up steps")
    p.add_argument("--optimizer", choices=models.OPTIMIZERS, default="sgd")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--out", type=Path, default=Path("benchmarks/twins"),
                   help="folder for twins.csv, twins.json and twins.png")
    p.set_defaults(handler=run_bench_twins)


def run_bench_twins(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    twins = [t.strip() for t in args.twins.split(",") if t.strip()]
    unknown = [t for t in twins if t not in TWINS]
    if unknown or not twins:
        print(f"error: unknown twin(s) {unknown}; choose from {', '.join(TWINS)}",
              file=sys.stderr)
        return 2
    if args.steps < 1:
        print("error: --steps must be at least 1", file=sys.stderr)
        return 2
    results = [run_worker(t, args) for t in tqdm(twins, desc="bench twins", file=sys.stderr)]
    base = next((r["seconds"] for r in results if r["twin"] == "numpy" and "seconds" in r), None)
    spec = SPECS[args.model]
    print(f"## Twins: one training step of {args.model} (N, D_in, H, D_out = {spec.N}, "
          f"{spec.D_in}, {spec.H}, {spec.D_out}; loss {spec.loss}; {args.optimizer}; "
          f"{args.dtype})\n")
    print("| twin | ms / step | / NumPy | first loss | last loss |\n|---|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['twin']} | could not run: {r['error']} | | | |")
            continue
        r["ratio"] = r["seconds"] / base if base else None
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "n/a"
        print(f"| {r['twin']} | {r['seconds'] * 1e3:.3f} | {ratio} | {r['first_loss']:.6g} "
              f"| {r['last_loss']:.6g} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "twins.json").write_text(json.dumps(
        {"model": args.model, "optimizer": args.optimizer, "dtype": args.dtype,
         "steps": args.steps, "results": results}, indent=2))
    with open(args.out / "twins.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["twin", "seconds", "ratio", "first_loss", "last_loss",
                                    "error"])
        writer.writeheader()
        writer.writerows(results)
    _plot([r for r in results if "seconds" in r], args.out / "twins.png", args.model)
    print(f"\nwrote {args.out}/twins.csv, twins.json, twins.png", file=sys.stderr)
    return 0 if all("seconds" in r for r in results) else 1


def _plot(results: list[dict[str, Any]], path: Path, model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh([r["twin"] for r in results], [r["seconds"] * 1e3 for r in results])
    ax.set_xscale("log")
    ax.set_xlabel("ms per training step (median, lower is faster)")
    ax.set_title(f"Twins on {model}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    # python -m edu_dl.twins.bench --worker TWIN MODEL STEPS OPTIMIZER DTYPE
    if len(sys.argv) == 7 and sys.argv[1] == "--worker":
        twin, model, steps, optimizer, dtype = sys.argv[2:]
        out = measure(twin, model, int(steps), optimizer, dtype)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.exit(0)
    sys.exit("usage: edu-dl bench twins (this module's --worker mode is internal)")
