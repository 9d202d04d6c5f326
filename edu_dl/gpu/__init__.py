"""GPU practice: writing kernels, timing asynchronous work, and what a training step keeps
in memory.

- ``launch``: blocks per grid = ceil(n / threads per block), 1-D and 2-D launch configurations
- ``kernels``: reference kernels (ReLU, SAXPY, naive and tiled matmul) and NumPy-in/NumPy-out
  wrappers; imports ``numba.cuda``, so it is NOT imported here (see ``simulator``)
- ``simulator``: run kernels without a GPU, in a fresh process, with NaN-filled shared memory
- ``mistakes``: ``diagnose`` names the usual mistake (bounds check, swapped indices,
  missing syncthreads)
- ``timing``: timing asynchronous work (synchronize, events; a CPU stand-in for a device), a
  kernel's GFLOP/s and the fraction of the card's FP32 peak
- ``memory``: what one training step keeps in GPU memory, computed without a GPU
- ``zoo``: AlexNet, VGG-16 and ResNet-50 layer for layer, on PyTorch's meta device
"""

from edu_dl.gpu import launch, mistakes, simulator
from edu_dl.gpu.launch import LaunchConfig, blocks_for, launch_1d, launch_2d
from edu_dl.gpu.mistakes import Diagnosis, diagnose
from edu_dl.gpu.simulator import (
    Outcome,
    SimulatorError,
    enable_simulator,
    numba_gpu_works,
    run_in_simulator,
    simulate,
    simulator_active,
)

__all__ = [
    "Diagnosis",
    "LaunchConfig",
    "Outcome",
    "SimulatorError",
    "blocks_for",
    "diagnose",
    "enable_simulator",
    "launch",
    "launch_1d",
    "launch_2d",
    "mistakes",
    "numba_gpu_works",
    "run_in_simulator",
    "simulate",
    "simulator",
    "simulator_active",
]
