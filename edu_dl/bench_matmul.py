"""Moved to ``edu_dl.bench.matmul``; kept for the notebooks that import ``bench_matmul``."""

from edu_dl.bench.matmul import (
    CPU_TARGETS,
    GPU_TARGETS,
    TARGETS,
    TITLES,
    MatmulResult,
    Row,
    crossover,
    make_matmul,
    make_row,
    render,
    roof,
    run_matmul,
    summary,
    time_matmul,
)

__all__ = ["CPU_TARGETS", "GPU_TARGETS", "TARGETS", "TITLES", "MatmulResult", "Row", "crossover",
           "make_matmul", "make_row", "render", "roof", "run_matmul", "summary", "time_matmul"]
