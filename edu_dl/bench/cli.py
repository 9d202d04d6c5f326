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

from edu_dl.bench.conv import CONV
from edu_dl.bench.engine import ENGINE
from edu_dl.bench.fused import PLAN
from edu_dl.bench.kernels import KERNELS_BENCH
from edu_dl.bench.loader import LOADER
from edu_dl.bench.matmul import MATMUL
from edu_dl.bench.parallel import PARALLEL
from edu_dl.bench.record import add_gpu, add_results
from edu_dl.bench.transfer import TRANSFER
from edu_dl.bench.twins import TWINS_BENCH

BENCHMARKS: list[Callable[[Any], Any]] = [
    ENGINE.add, PLAN.add, MATMUL.add, LOADER.add, TRANSFER.add, TWINS_BENCH.add, PARALLEL.add,
    KERNELS_BENCH.add, CONV.add, add_gpu, add_results]


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
