"""Memory transactions of one warp: how many 32-byte segments its 32 loads touch.

A GPU serves a warp's load or store instruction in aligned 32-byte *sectors* (segments): the
32 threads' addresses are collected, and every distinct segment they fall in costs one
transaction, however many threads share it. Consecutive float32 addresses (coalesced) need
32 * 4 / 32 = 4 segments; addresses a row apart (a stride of n floats, n >= 8) need 32.

Numba's CUDA simulator has no memory system, so lecture 05 counts these segments from each
kernel's index mapping instead of timing them. This counts for ONE warp; forming warps from a
launch's blocks is left to the reader (and to exercise 05).
"""

from __future__ import annotations

from collections.abc import Iterable

SEGMENT_BYTES = 32  # the unit a GPU's L1/L2 caches move (a sector), on every NVIDIA GPU since 2012
WARP_SIZE = 32  # threads that issue one instruction together


def segments_touched(byte_addresses: Iterable[int], segment_bytes: int = SEGMENT_BYTES) -> int:
    """Distinct aligned ``segment_bytes`` segments that the byte addresses fall in.

    >>> segments_touched([0, 4, 8, 28])   # one segment
    1
    >>> segments_touched([28, 32])        # neighbours across a segment boundary
    2
    """
    if segment_bytes <= 0:
        raise ValueError(f"segment_bytes must be positive, not {segment_bytes}")
    return len({int(address) // segment_bytes for address in byte_addresses})


def warp_segments(element_indices: Iterable[int], itemsize: int = 4,
                  segment_bytes: int = SEGMENT_BYTES) -> int:
    """Segments one warp's access touches: thread t reads element ``element_indices[t]`` of an
    array of ``itemsize``-byte elements that starts on a segment boundary.

    An element never straddles two segments when ``itemsize`` divides ``segment_bytes`` (1, 2,
    4, 8, 16 or 32 bytes, as CUDA's aligned loads are), so its first byte names its segment.
    """
    if itemsize <= 0 or segment_bytes % itemsize:
        raise ValueError(f"itemsize must divide {segment_bytes} bytes, not {itemsize}")
    indices = list(element_indices)
    if len(indices) > WARP_SIZE:
        raise ValueError(f"a warp has at most {WARP_SIZE} threads, got {len(indices)} indices")
    return segments_touched((index * itemsize for index in indices), segment_bytes)


def ideal_segments(threads: int, itemsize: int = 4, segment_bytes: int = SEGMENT_BYTES) -> int:
    """The fewest segments ``threads`` distinct aligned elements can touch: their bytes / 32,
    rounded up (what a perfectly coalesced access needs)."""
    return -(-threads * itemsize // segment_bytes)


SHARED_BANKS = 32  # shared memory: 32 banks, each 4 bytes wide


def bank_conflict_degree(word_indices: Iterable[int], banks: int = SHARED_BANKS) -> int:
    """How many times one warp's shared-memory access is replayed: the most DISTINCT 4-byte words
    that fall in one bank (word w sits in bank w % banks). Threads reading the same word share
    it (a broadcast), so 1 means conflict-free.

    >>> bank_conflict_degree(range(32))                 # a row of a float tile: 32 banks
    1
    >>> bank_conflict_degree(t * 32 for t in range(32))  # a column of tile[32][32]: one bank
    32
    """
    if banks <= 0:
        raise ValueError(f"banks must be positive, not {banks}")
    words_in_bank: dict[int, set[int]] = {}
    for word in word_indices:
        words_in_bank.setdefault(int(word) % banks, set()).add(int(word))
    return max((len(words) for words in words_in_bank.values()), default=0)
