"""``edu-dl train NET --solver SOLVER``: Caffe's ``caffe train``, on edu_dl's eager engine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

Subparsers = Any  # argparse's _SubParsersAction is private
# The keys of examples.EXAMPLES, written out: importing edu_dl.caffe here would slow every command.
EXAMPLE_NAMES = ("lenet", "two_layer")


def add_train(subparsers: Subparsers) -> None:
    """Register ``edu-dl train``: a Caffe net and solver (.prototxt), or a shipped --example."""
    parser = subparsers.add_parser(
        "train",
        help="train a network described in a Caffe .prototxt, with no code",
        description="Train the TRAIN phase of a Caffe net (.prototxt) with a Caffe solver file, "
        "as `caffe train --solver=...` does. Supported: layers HDF5Data (HDF5 or .npz source), "
        "Convolution, Pooling (MAX), InnerProduct, ReLU, EuclideanLoss, SoftmaxWithLoss; "
        "solvers SGD and Adam. Prints the "
        "loss every `display` iterations and writes the final weights as .npz "
        "(<layer>/0 = weight, <layer>/1 = bias).",
    )
    parser.add_argument("net", nargs="?", type=Path,
                        help="the net .prototxt (default: the solver's `net:`)")
    parser.add_argument("--solver", type=Path, help="the solver .prototxt")
    parser.add_argument("--example", nargs="?", const="two_layer", choices=EXAMPLE_NAMES,
                        help="train a shipped example: two_layer (the default), the lecture's "
                        "two-layer ReLU net, or lenet, Caffe's LeNet on 8x8 digits")
    parser.add_argument("--weights", type=Path, metavar="NPZ",
                        help="initial weights, as Caffe's -weights (keys <layer>/0, <layer>/1)")
    parser.add_argument("--weights-out", type=Path, metavar="NPZ",
                        help="where to write the final weights (default: "
                        "<snapshot_prefix or net name>_iter_<max_iter>.npz)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="where to train (the solver's solver_mode is ignored; default: cpu)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                        help="floating-point type of data and weights (default: float32, Caffe's)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(handler=run_train)


def _default_out(net: Path | None, solver_path: Path) -> Path:
    from edu_dl.caffe.prototxt import read_solver

    solver = read_solver(solver_path)
    prefix = solver.snapshot_prefix or (net.stem if net is not None else solver_path.stem)
    return Path(f"{prefix}_iter_{solver.max_iter}.npz")


def run_train(args: argparse.Namespace) -> int:
    """``edu-dl train``: train, print the first and last loss and write the weights (.npz); 2 for
    a usage error, 1 when the files, the device or the training fail, else 0."""
    from edu_dl.backend import DeviceError
    from edu_dl.caffe.examples import EXAMPLES
    from edu_dl.caffe.prototxt import CaffeFormatError
    from edu_dl.caffe.solver import train

    net, solver = args.net, args.solver
    if args.example:
        if net is not None or solver is not None:
            print("edu-dl train: --example trains the shipped files; give no NET or --solver",
                  file=sys.stderr)
            return 2
        net, solver = EXAMPLES[args.example]
    if solver is None:
        print("edu-dl train: give --solver SOLVER.prototxt (or --example)", file=sys.stderr)
        return 2
    try:
        out = args.weights_out or _default_out(net, solver)
        history = train(net, solver, weights=args.weights, weights_out=out, dtype=args.dtype,
                        device=args.device, progress=not args.no_progress)
    except (CaffeFormatError, DeviceError, FileNotFoundError, ValueError) as exc:
        print(f"edu-dl train: {exc}", file=sys.stderr)
        return 1
    print(f"{history.solver_type}: {len(history.losses)} iterations in {history.seconds:.2f} s, "
          f"loss {history.losses[0]:.6g} -> {history.losses[-1]:.6g}")
    print(f"wrote {out}", file=sys.stderr)
    return 0
