"""The ``edu-dl`` command: one argparse parser, one subcommand per course task.

A subcommand is a function ``add_<name>(subparsers)`` that adds its parser and sets
``handler=`` to a function ``(args) -> int``; add it to ``COMMANDS``. Handlers import their
heavy modules themselves, so ``edu-dl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .bench import DEFAULT_PROCESSES, DEFAULT_REPEATS, FRAMEWORKS, QUICK_REPEATS, SIZES
from .bench_data import add_loader, add_transfer
from .bench_matmul import add_bench_matmul
from .caffe.cli import add_train
from .doctor import add_doctor
from .grading.cli import add_assign, add_validate
from .grading.cluster_bench import add_bench_cluster
from .grading.grade_cli import add_bench_grading, add_grade
from .parallel.cli import add_parallel
from .twins.bench import add_twins

Subparsers = Any  # argparse's _SubParsersAction is private


def comma_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type for 'a,b,c' whose items must come from ``choices``."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"give at least one {what}")
        unknown = [item for item in items if item not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(map(repr, unknown))} (choose from "
                f"{', '.join(choices)})"
            )
        return list(dict.fromkeys(items))  # drop repeats, keep order

    return parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# --------------------------------------------------------------------------- edu-dl bench


def add_bench(subparsers: Subparsers) -> None:
    bench = subparsers.add_parser(
        "bench",
        help="time the engines against NumPy, PyTorch and TensorFlow",
        description="Benchmarks: they print tables and ratios and never assert a time.",
    )
    kinds = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")

    engine = kinds.add_parser(
        "engine",
        help="one training step of the two-layer net, per framework and size",
        description="Time one training step (forward, backward, SGD update; float32) of the "
        "two-layer ReLU net in each framework, each in its own process, and compare with "
        "hand-written NumPy.",
    )
    engine.add_argument(
        "--sizes",
        type=comma_list(tuple(SIZES), "size"),
        default=list(SIZES),
        help=f"comma-separated sizes (default: {','.join(SIZES)})",
    )
    engine.add_argument(
        "--frameworks",
        type=comma_list(FRAMEWORKS, "framework"),
        default=list(FRAMEWORKS),
        help=f"comma-separated frameworks (default: {','.join(FRAMEWORKS)})",
    )
    _add_common(engine)
    engine.add_argument(
        "--threads",
        type=positive_int,
        help="cap every library's thread pool (BLAS, OpenMP, TensorFlow) at N per worker; "
        "default: each library's own choice. 1 keeps a busy shared machine from wrecking "
        "multi-threaded BLAS timings",
    )
    engine.add_argument(
        "--processes",
        type=positive_int,
        default=DEFAULT_PROCESSES,
        help="fresh worker processes per framework, the repeats split among them "
        f"(default: {DEFAULT_PROCESSES}; 1 with --quick); the fastest process's median "
        "counts, so that no single slow process decides a result",
    )
    engine.add_argument(
        "--plot", type=Path, metavar="PNG", help="also draw the ratios to NumPy into this PNG"
    )
    engine.add_argument(
        "--no-plan", action="store_true", help="leave out the static-plan section (bench plan)"
    )
    engine.set_defaults(handler=run_bench_engine)

    plan = kinds.add_parser(
        "plan",
        help="what the static Session's plan buys: pruning and constant folding",
        description="Compare eager code with a static Session on graphs with an unused "
        "expensive branch (pruning) and a constant subgraph (constant folding).",
    )
    _add_common(plan)
    plan.set_defaults(handler=run_bench_plan)
    for add in BENCH_COMMANDS:
        add(kinds)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help=f"timed repeats; the median is reported (default: {DEFAULT_REPEATS}, "
        f"with --quick {QUICK_REPEATS})",
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the Markdown report here (default: print)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="few, short repeats: checks that it runs, not speed"
    )


def _repeats(args: argparse.Namespace) -> int:
    if args.repeats is not None:
        return int(args.repeats)
    return QUICK_REPEATS if args.quick else DEFAULT_REPEATS


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)


def _command_line(args: argparse.Namespace) -> str:
    return "edu-dl " + " ".join(args.argv) if args.argv else "edu-dl"


def run_bench_engine(args: argparse.Namespace) -> int:
    from . import bench

    result = bench.run_engine(
        args.sizes, args.frameworks, _repeats(args), quick=args.quick, threads=args.threads,
        processes=args.processes,
    )
    plan: list[bench.PlanRow] | str | None = None
    breakdown = None
    with bench.limit_threads(args.threads):  # these two run in this process
        if not args.no_plan and "static" in args.frameworks:
            plan = _plan_or_reason(_repeats(args), args.quick)
        if "eager" in args.frameworks and "tiny" in args.sizes:
            breakdown = bench.eager_breakdown("tiny", _repeats(args), quick=args.quick)
    _emit(bench.report(result, plan, _command_line(args), breakdown), args.out)
    if args.plot is not None:
        bench.write_plot(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def run_bench_plan(args: argparse.Namespace) -> int:
    from . import bench

    plan = _plan_or_reason(_repeats(args), args.quick)
    _emit(bench.report(None, plan, _command_line(args)), args.out)
    return 0 if not isinstance(plan, str) else 1


def _plan_or_reason(repeats: int, quick: bool) -> Any:
    """The plan rows, or one sentence on why the static graph could not be measured."""
    from . import bench

    try:
        return bench.run_plan(repeats, quick=quick)
    except ImportError as exc:
        reason = f"not measured: the static graph is not available ({exc})."
    except Exception as exc:
        reason = f"not measured: {type(exc).__name__}: {exc}"
    print(f"warning: static plan {reason}", file=sys.stderr)
    return reason


# --------------------------------------------------------------------------- the parser

# Later commands (doctor, train, assign, grade, validate, ...) go here: each module defines
# `add_<name>(subparsers)` and is listed once. `edu-dl bench <kind>` parsers go in BENCH_COMMANDS.
COMMANDS: list[Callable[[Subparsers], None]] = [add_bench, add_train, add_doctor, add_assign,
                                                 add_validate, add_grade]
BENCH_COMMANDS: list[Callable[[Subparsers], None]] = [
    add_bench_matmul, add_loader, add_transfer, add_twins, add_parallel, add_bench_grading,
    add_bench_cluster]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edu-dl",
        description="The course's command line: computational graphs, autograd and GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"edu-dl {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``edu-dl`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
