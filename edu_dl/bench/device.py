"""``--device cpu|gpu``: where a benchmark runs, and how its timer waits for the work.

A GPU works asynchronously: a call returns once its kernels are queued, so a timer read right
after measures the launch, not the work. Every timed batch of the GPU mode therefore ends with
``Device.synchronize()`` (CuPy's stream, PyTorch's ``torch.cuda.synchronize``, Numba's), and
each table says what was synchronized (``Device.synced``).

The GPU mode runs the CPU mode's code: only the array namespace (``xp``: CuPy for NumPy) and the
frameworks' device names change. So its logic can be tested without a GPU:
``EDU_DL_BENCH_FAKE_GPU=1`` makes ``--device gpu`` run on the CPU, NumPy standing in for CuPy,
and every table says so ("fake GPU").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType

FAKE_GPU_ENV = "EDU_DL_BENCH_FAKE_GPU"
DEVICES: tuple[str, ...] = ("cpu", "gpu")


@dataclass(frozen=True)
class Device:
    """A benchmark's device: 'cpu' or 'gpu'; a fake GPU runs the GPU mode's code on the CPU."""

    kind: str = "cpu"
    fake: bool = False

    @property
    def runs_on(self) -> str:
        """The device the arrays live on: 'gpu' only for a real GPU (edu_dl's names)."""
        return "gpu" if self.kind == "gpu" and not self.fake else "cpu"

    @property
    def label(self) -> str:
        if self.kind == "cpu":
            return "CPU"
        return "fake GPU (NumPy on the CPU standing in)" if self.fake else "GPU"

    @property
    def torch(self) -> str:
        return "cuda" if self.runs_on == "gpu" else "cpu"

    @property
    def tf(self) -> str:
        return "/GPU:0" if self.runs_on == "gpu" else "/CPU:0"

    def xp(self) -> ModuleType:
        from edu_dl import backend

        return backend.xp_for(self.runs_on)

    def synchronize(self) -> None:
        """Wait for every queued kernel of this process (CuPy, PyTorch, Numba); no-op on a CPU."""
        if self.runs_on == "gpu":
            from edu_dl.gpu.timing import synchronize

            synchronize()

    @property
    def synced(self) -> str:
        """What a timed batch waited for, for the tables."""
        if self.runs_on == "gpu":
            return ("synchronized: every timed batch ends with a device synchronize (CuPy's "
                    "stream, torch.cuda.synchronize, TensorFlow's result copied to the host), so "
                    "the time counts the queued kernels, not only their launch")
        if self.fake:
            return ("fake GPU: the GPU mode's code ran on the CPU with NumPy standing in for "
                    "CuPy, for tests; these are not GPU times")
        return "CPU: every call returns when its work is done, so nothing needs synchronizing"


def get_device(kind: str) -> Device:
    """The Device for --device ``kind``; 'gpu' is fake when EDU_DL_BENCH_FAKE_GPU=1."""
    if kind not in DEVICES:
        raise ValueError(f"unknown device {kind!r}: choose 'cpu' or 'gpu'")
    return Device(kind, fake=kind == "gpu" and os.environ.get(FAKE_GPU_ENV) == "1")


def why_no_gpu_mode() -> str | None:
    """Why there is no GPU for --device gpu, as a clause; None when there is one (or a fake).

    The GPU mode runs its arrays on CuPy, so ``backend.gpu_status`` answers."""
    if os.environ.get(FAKE_GPU_ENV) == "1":
        return None
    from edu_dl import backend

    usable, reason = backend.gpu_status()
    return None if usable else f"there is no NVIDIA GPU here that edu_dl can use ({reason})"


def gpu_name() -> str:
    """The first GPU's name and the driver, from nvidia-smi (no framework imported)."""
    from edu_dl.machine.probes import nvidia_driver

    driver = nvidia_driver()
    names = [g["name"] for g in driver.get("gpus", [])]
    return (f"{', '.join(names) or 'an NVIDIA GPU'} (driver {driver.get('version') or '?'}, "
            f"CUDA up to {driver.get('max_cuda') or '?'})")
