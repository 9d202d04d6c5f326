"""Moved: timing and peaks live in :mod:`edu_dl.gpu.timing`, ``matmul_flops`` in
:mod:`edu_dl.machine.hardware`. Only ``edu_dl/bench`` still imports this name; delete the file once
bench imports ``edu_dl.gpu.timing`` (issue 27 item 2)."""

from edu_dl.gpu.timing import gpu_peak, synchronize

__all__ = ["gpu_peak", "synchronize"]
