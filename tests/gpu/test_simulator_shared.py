"""The simulator's NaN-filled shared memory gives every thread of a block ONE array, even when
the threads reach the allocation together (a race once let some threads write a private copy,
so a tiled transpose read NaN)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

RACE = r"""
import sys, threading
import numpy as np
from numba.cuda.simulator import kernelapi
from edu_dl.gpu.simulator import fill_shared_with_nan

fill_shared_with_nan()
sys.setswitchinterval(1e-6)  # switch threads as often as possible: widen any race
split = 0
for _ in range(50):
    shared = kernelapi.FakeCUDAShared(0)
    start = threading.Barrier(64)
    got = []

    def allocate():
        start.wait()
        got.append(id(shared.array((64, 65), np.float32)))

    threads = [threading.Thread(target=allocate) for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    split += len(set(got)) > 1
print(split)
"""


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_threads_allocating_together_share_one_array() -> None:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", RACE], env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.strip() == "0", done.stdout + done.stderr
