"""Launch configurations: how many blocks of how many threads cover n outputs.

blocks per grid = ceil(n / threads per block), so the last block may hang past the end of the
data: that is why every kernel needs its bounds check ``if i < n``.
"""

from __future__ import annotations

from dataclasses import dataclass

# 128 threads (4 warps of 32) per block for 1-D work, 16 x 16 = 256 for 2-D: common defaults.
THREADS_1D = 128
BLOCK_2D = (16, 16)
MAX_THREADS_PER_BLOCK = 1024  # every NVIDIA GPU since 2010 (compute capability 2.0)


def blocks_for(n: int, threads: int) -> int:
    """Blocks giving each of n items a thread: ceil(n / threads) = (n + threads - 1) // threads."""
    if n < 0 or threads <= 0:
        raise ValueError(f"blocks_for: need n >= 0 and threads > 0, got n={n}, threads={threads}")
    return (n + threads - 1) // threads


@dataclass(frozen=True)
class LaunchConfig:
    """A kernel launch ``kernel[grid, block](...)``: grid in blocks, block in threads."""

    grid: tuple[int, ...]
    block: tuple[int, ...]

    def __post_init__(self) -> None:
        threads = 1
        for b in self.block:
            threads *= b
        if threads > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"a block of {self.block} has {threads} threads; CUDA allows at most "
                             f"{MAX_THREADS_PER_BLOCK} per block")

    @property
    def threads_per_block(self) -> int:
        """Threads in one block = product of the block dimensions."""
        out = 1
        for b in self.block:
            out *= b
        return out

    @property
    def total_threads(self) -> int:
        """Threads launched = blocks x threads per block (some may fall past the data)."""
        out = self.threads_per_block
        for g in self.grid:
            out *= g
        return out


def launch_1d(n: int, threads_per_block: int = THREADS_1D) -> LaunchConfig:
    """One thread per item of n: grid = (ceil(n / threads),), block = (threads,)."""
    return LaunchConfig((blocks_for(n, threads_per_block),), (threads_per_block,))


def launch_2d(rows: int, cols: int, block: tuple[int, int] = BLOCK_2D) -> LaunchConfig:
    """One thread per element of a rows x cols matrix, x along the columns (CUDA's convention).

    The kernel reads ``col, row = cuda.grid(2)``, as CUDA C's ``col = blockIdx.x * blockDim.x +
    threadIdx.x``: threads of a warp have consecutive x, so in a row-major (C-order) matrix they
    touch consecutive addresses of one row, which the GPU serves in few memory transactions
    (coalesced). ``block`` is (threads along x = columns, threads along y = rows), and the grid is
    (ceil(cols / block[0]), ceil(rows / block[1])).
    """
    return LaunchConfig((blocks_for(cols, block[0]), blocks_for(rows, block[1])), tuple(block))
