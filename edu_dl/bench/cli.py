"""``edu-dl bench <benchmark>``: one parser per benchmark, each defined in its own module.

A benchmark module defines ``add_<name>(kinds)``, which adds its parser (with the shared flags
of ``common.add_flags``) and sets ``handler=``; list it once in ``BENCHMARKS``. Handlers import
their heavy modules themselves, so ``edu-dl --help`` stays instant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edu_dl.bench.conv import add_conv
from edu_dl.bench.engine import add_engine
from edu_dl.bench.kernels import add_kernels
from edu_dl.bench.loader import add_loader
from edu_dl.bench.matmul import add_bench_matmul
from edu_dl.bench.parallel import add_parallel
from edu_dl.bench.plan import add_plan
from edu_dl.bench.record import add_gpu, add_results
from edu_dl.bench.transfer import add_transfer
from edu_dl.bench.twins import add_twins

BENCHMARKS: list[Callable[[Any], None]] = [
    add_engine, add_plan, add_bench_matmul, add_loader, add_transfer, add_twins, add_parallel,
    add_kernels, add_conv, add_gpu, add_results]


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
