"""Moved to ``edu_dl.bench.loader`` and ``edu_dl.bench.transfer``; kept for the notebooks."""

from edu_dl.bench.loader import (
    LOADER_FRAMEWORKS,
    BatchReader,
    LoaderConfig,
    LoaderResult,
    LoaderRow,
    calibrate_compute,
    finish_rows,
    loader_table,
    make_compute,
    make_loader_data,
    run_loader,
)
from edu_dl.bench.transfer import (
    FEED_FRAMEWORKS,
    LECTURE_SIZE,
    SIZES,
    TransferResult,
    run_transfer,
    transfer_table,
)

__all__ = ["FEED_FRAMEWORKS", "LECTURE_SIZE", "LOADER_FRAMEWORKS", "SIZES", "BatchReader",
           "LoaderConfig", "LoaderResult", "LoaderRow", "TransferResult", "calibrate_compute",
           "finish_rows", "loader_table", "make_compute", "make_loader_data", "run_loader",
           "run_transfer", "transfer_table"]
