"""Segments one warp touches: coalesced, strided, misaligned and wide accesses counted."""

from __future__ import annotations

import pytest

from edu_dl.gpu.transactions import (
    SEGMENT_BYTES,
    WARP_SIZE,
    bank_conflict_degree,
    ideal_segments,
    segments_touched,
    warp_segments,
)


def test_a_coalesced_float32_warp_load_is_4_segments() -> None:
    assert warp_segments(range(WARP_SIZE), itemsize=4) == 4 == ideal_segments(WARP_SIZE, 4)


@pytest.mark.parametrize("stride", [8, 9, 100, 2048])
def test_a_stride_n_float32_load_is_32_segments(stride: int) -> None:
    # From a stride of 8 floats (32 bytes) up, no two threads share a segment.
    assert warp_segments([t * stride for t in range(WARP_SIZE)], itemsize=4) == 32


@pytest.mark.parametrize(("stride", "segments"), [(1, 4), (2, 8), (4, 16), (8, 32)])
def test_small_strides_scale_the_segments(stride: int, segments: int) -> None:
    assert warp_segments([t * stride for t in range(WARP_SIZE)], itemsize=4) == segments


def test_a_misaligned_run_touches_one_more_segment() -> None:
    # 32 floats starting 3 elements (12 bytes) into a segment spill into a fifth one.
    assert warp_segments(range(3, 3 + WARP_SIZE), itemsize=4) == 5


def test_wider_elements_need_more_segments() -> None:
    assert warp_segments(range(WARP_SIZE), itemsize=8) == 8  # float64
    assert warp_segments(range(WARP_SIZE), itemsize=2) == 2  # float16


def test_threads_reading_one_element_share_one_segment() -> None:
    assert warp_segments([7] * WARP_SIZE) == 1  # a broadcast: one transaction


def test_a_partial_warp_counts_its_threads_only() -> None:
    assert warp_segments(range(10), itemsize=4) == 2  # 40 bytes from 0: segments 0 and 1


def test_segments_are_aligned_to_their_size() -> None:
    assert segments_touched([0, SEGMENT_BYTES - 1]) == 1
    assert segments_touched([SEGMENT_BYTES - 1, SEGMENT_BYTES]) == 2
    assert segments_touched([0, 64], segment_bytes=128) == 1


@pytest.mark.parametrize("itemsize", [0, 3, 12, 64])
def test_an_element_that_could_straddle_segments_is_refused(itemsize: int) -> None:
    with pytest.raises(ValueError, match="itemsize"):
        warp_segments(range(4), itemsize=itemsize)


def test_more_than_a_warp_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 32"):
        warp_segments(range(WARP_SIZE + 1))


def test_a_tile_column_hits_one_bank_and_padding_spreads_it() -> None:
    assert bank_conflict_degree(t * 32 for t in range(WARP_SIZE)) == 32  # tile[32][32]
    assert bank_conflict_degree(t * 33 for t in range(WARP_SIZE)) == 1  # tile[32][33]
    assert bank_conflict_degree(range(WARP_SIZE)) == 1  # a row
    assert bank_conflict_degree(t * 2 for t in range(WARP_SIZE)) == 2  # stride 2: two-way
    assert bank_conflict_degree([5] * WARP_SIZE) == 1  # one word, broadcast
