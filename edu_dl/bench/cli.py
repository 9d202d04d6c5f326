"""``edu-dl bench <benchmark>``: one parser per benchmark, each defined in its own module.

A benchmark module declares a ``report.Benchmark`` (its flags, its measure function and its
files), whose ``add(kinds)`` adds its parser with the shared flags of ``common.add_flags``; a
command that is not a benchmark (``gpu``, ``results``) defines ``add_<name>(kinds)``. List each
once in ``BENCHMARKS``. Heavy modules are imported when a benchmark runs, so ``edu-dl --help``
stays instant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..grading.cluster_bench import add_bench_cluster
from .conv import CONV
from .engine import ENGINE
from .grading import add_bench_grading
from .kernels import KERNELS_BENCH
from .loader import LOADER
from .matmul import MATMUL
from .parallel import PARALLEL
from .plan import PLAN
from .record import add_gpu, add_results
from .transfer import TRANSFER
from .twins import TWINS_BENCH

BENCHMARKS: list[Callable[[Any], Any]] = [
    ENGINE.add, PLAN.add, MATMUL.add, LOADER.add, TRANSFER.add, TWINS_BENCH.add, PARALLEL.add,
    KERNELS_BENCH.add, CONV.add, add_bench_grading, add_bench_cluster, add_gpu, add_results]


def add_bench(subparsers: Any) -> None:
    """``edu-dl bench``."""
    bench = subparsers.add_parser(
        "bench",
        help="time the engines against NumPy, PyTorch and TensorFlow, on a CPU or a GPU",
        description="Benchmarks: they print tables and ratios and never assert a time. Every "
        "benchmark takes --out DIR (a folder for its report and data files), --quick and, "
        "where it has a GPU side, --device gpu.")
    kinds = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    for add in BENCHMARKS:
        add(kinds)
