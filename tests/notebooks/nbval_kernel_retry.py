"""A pytest plugin for `make test-notebooks`: start an nbval kernel again when it dies starting.

Two xdist workers start kernels side by side. jupyter_client picks each kernel's five TCP ports by
binding and releasing them, so the other worker's kernel can take one in between; the new kernel
then exits with "Address already in use" and nbval errors every cell of that notebook ("Kernel died
before replying to kernel_info": lecture 17, once, in CI). Fresh ports on a second start cure it.
nbval sends the kernel's stderr to /dev/null; here each start keeps it, and a retry is reported
as a warning quoting the dead kernel's last words, so a cause other than the port race shows.

Loaded with `-p nbval_kernel_retry` and this folder on PYTHONPATH (see the Makefile).
"""

from __future__ import annotations

import tempfile
import warnings
from typing import IO, Any

import nbval.kernel
import pytest

ATTEMPTS = 3
STDERR_SHOWN = 2_000  # characters of a dead kernel's stderr quoted in the warning

_start_new_kernel = nbval.kernel.start_new_kernel


def _tail(stream: IO[bytes]) -> str:
    stream.seek(0)
    text = stream.read().decode("utf-8", "replace").strip()
    return text[-STDERR_SHOWN:] or "(nothing on stderr)"


def start_new_kernel_retrying(startup_timeout: float = 60, kernel_name: str = "python",
                              **kwargs: Any) -> tuple[Any, Any]:
    """nbval's start_new_kernel, tried up to ATTEMPTS times; raises the last failure."""
    devnull = kwargs.pop("stderr", None)
    if devnull is not None:
        devnull.close()
    for attempt in range(1, ATTEMPTS + 1):
        # The running kernel keeps its own descriptor of this (unlinked) file.
        with tempfile.TemporaryFile() as stderr:
            try:
                return _start_new_kernel(startup_timeout=startup_timeout,
                                         kernel_name=kernel_name, stderr=stderr, **kwargs)
            except RuntimeError as died:
                said = _tail(stderr)
                if attempt == ATTEMPTS:
                    raise RuntimeError(f"{died} ({ATTEMPTS} starts; the kernel's stderr the last "
                                       f"time: {said})") from died
                warnings.warn(f"nbval kernel start {attempt} of {ATTEMPTS} failed ({died}); "
                              f"starting again. The kernel's stderr: {said}",
                              pytest.PytestWarning, stacklevel=1)
    raise AssertionError("unreachable")


nbval.kernel.start_new_kernel = start_new_kernel_retrying
