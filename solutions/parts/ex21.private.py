"""Exercise 21, pipeline parallelism and fully sharded training: the order of forward and backward
micro-batch steps on each stage under GPipe and 1F1B, the timeline those orders give when every
step takes its time and waits for its neighbour stage, the most micro-batches whose activations a
stage holds at once, and the rows of a parameter each rank keeps under FSDP.

Orders are int arrays (stages, 2 * microbatches): +i is the forward of micro-batch i, -i its
backward, micro-batches numbered 1..m. The schedule oracles give what torch.distributed.pipelining
ran in lecture 21 (ScheduleGPipe: every forward, then every backward, both in micro-batch order;
Schedule1F1B: stage s warms up with min(m, p - s - 1) forwards, then alternates one forward and one
backward, then drains the backwards; PipeDream-Flush, Narayanan et al. 2021); the shard oracle is
FSDP2's dim-0 sharding (torch.chunk's sizes: ceil(rows / R) rows per rank, the last ranks short or
empty), padded with zero rows to equal shards as FSDP2 stores them.

The cases are shaped to make the usual slips visible: more stages than micro-batches (a warm-up
not capped at m), one stage (no pipeline), orders that are not GPipe's or 1F1B's (a later stretch
of forwards holds more micro-batches than the first), backward times unlike forward times, and row
counts that do not divide by the world size (np.array_split's sizes differ from torch.chunk's).

Judged outside the sandbox: every output against the oracle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, close
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex21 import call_in_flight, call_schedule, call_shard, call_timeline

Array = np.ndarray
Case = tuple[Any, ...]
EXACT = tolerance(rtol=0.0, atol=0.0)
CLOSE = tolerance(rtol=1e-12, atol=1e-12)


def _mistake(replay: Any, message: str) -> Mistake:
    """A replayed mistake, where it differs from the right answer: a slip that gives the right
    value on a case gets no hint there."""
    def run(e: Any, a: Case) -> Any:
        with np.errstate(all="ignore"):
            value = replay(e, a)
        if value is None:
            return None
        same = np.shape(value) == np.shape(e) and close(value, e, 0.0, 0.0)
        return None if same else value
    return Mistake(run, message, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- the schedules


def _gpipe(stages: int, microbatches: int, reverse: bool = False) -> Array:
    forwards = list(range(1, microbatches + 1))
    backwards = [-i for i in (forwards[::-1] if reverse else forwards)]
    return np.array([forwards + backwards] * stages, dtype=np.int64)


def _one_f_one_b(stages: int, microbatches: int, warmup: Any = None,
                 backward_first: bool = False) -> Array:
    """1F1B; ``warmup(s, p)`` and the other options replay the usual slips."""
    rows = []
    for s in range(stages):
        warm = min(microbatches, stages - s - 1 if warmup is None else warmup(s, stages))
        row = list(range(1, warm + 1))
        forward, backward = warm, 0
        while forward < microbatches:
            forward += 1
            pair = [forward, -(backward + 1)]
            row += pair[::-1] if backward_first else pair
            backward += 1
        row += [-i for i in range(backward + 1, microbatches + 1)]
        rows.append(row)
    return np.array(rows, dtype=np.int64)


def _schedule_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(stages, microbatches): the lecture's run (2, 8), the contract's example, more stages
    than micro-batches, one stage, a long pipeline."""
    cases = [(2, 8), (4, 6), (4, 2), (1, 3), (3, 3)]
    if hidden:
        cases = [(int(rng.integers(2, 7)), int(rng.integers(1, 12))) for _ in range(5)]
        cases += [(5, 2), (6, 10), (1, 1), (2, 1)]
    return cases


def _zero_based(e: Any, a: Case) -> Any:
    return np.sign(e) * (np.abs(e) - 1)


GPIPE_HINTS = (
    _mistake(lambda e, a: _gpipe(a[0], a[1], reverse=True),
             "GPipe's backwards run in micro-batch order, 1..m, as torch's ScheduleGPipe runs "
             "them (each stage can start the backward of micro-batch 1 as soon as the forwards "
             "are done): -1, -2, ..., -m"),
    _mistake(lambda e, a: _one_f_one_b(*a),
             "that is 1F1B's order: GPipe runs every forward (1..m), then every backward"),
    _mistake(_zero_based, "micro-batches are numbered 1..m (+i forward, -i backward): a "
                          "micro-batch 0 would have no sign"),
)

WARMUP = ("stage s (0-based) of p warms up with p - s - 1 forwards before its first backward "
          "(the first stage p - 1, the last none: its backward can start as soon as its "
          "forward ends)")
ONE_F_ONE_B_HINTS = (
    _mistake(lambda e, a: _gpipe(*a),
             "that is GPipe's order: 1F1B starts each micro-batch's backward as soon as it can, "
             "so that a stage holds few micro-batches' activations"),
    _mistake(lambda e, a: _one_f_one_b(a[0], a[1], warmup=lambda s, p: p - s),
             "one forward too many in the warm-up: " + WARMUP),
    _mistake(lambda e, a: _one_f_one_b(a[0], a[1], warmup=lambda s, p: p - 1),
             "every stage warmed up as long as the first: " + WARMUP),
    _mistake(lambda e, a: _one_f_one_b(a[0], a[1], warmup=lambda s, p: s),
             "the warm-up runs the wrong way along the pipeline: " + WARMUP),
    _mistake(lambda e, a: _one_f_one_b(a[0], a[1], backward_first=True),
             "after the warm-up each pair is a forward THEN a backward (the forward of the next "
             "micro-batch, then the backward of the oldest one held)"),
    _mistake(_zero_based, "micro-batches are numbered 1..m (+i forward, -i backward): a "
                          "micro-batch 0 would have no sign"),
)


# --------------------------------------------------------------------------- the timeline


def _timeline(order: Array, t_forward: float, t_backward: float, wait_forward: bool = True,
              wait_backward: bool = True, backward_from: int = 1, one_at_a_time: bool = True,
              ends: bool = False) -> Array | None:
    """Start times; the options replay the usual slips (None if the slip deadlocks)."""
    order = np.asarray(order)
    p, n = order.shape
    start = np.zeros((p, n))
    done: dict[tuple[int, int], float] = {}  # (stage, signed micro-batch) -> end time
    position, free = [0] * p, [0.0] * p
    moved = True
    while moved:
        moved = False
        for s in range(p):
            while position[s] < n:
                op = int(order[s, position[s]])
                ready = 0.0
                if op > 0 and s > 0 and wait_forward:
                    dep: tuple[int, int] | None = (s - 1, op)
                elif op < 0 and 0 <= s + backward_from < p and wait_backward:
                    dep = (s + backward_from, op)
                else:
                    dep = None
                if dep is not None:
                    if dep not in done:
                        break
                    ready = done[dep]
                begin = max(free[s], ready) if one_at_a_time else ready
                end = begin + (t_forward if op > 0 else t_backward)
                start[s, position[s]] = end if ends else begin
                done[(s, op)] = end
                free[s] = end
                position[s] += 1
                moved = True
    if any(pos < n for pos in position):
        return None
    return start


def _expected_timeline(order: Array, t_forward: float, t_backward: float) -> Array:
    out = _timeline(order, t_forward, t_backward)
    assert out is not None, "a case whose order deadlocks"
    return out


def _random_order(rng: np.random.Generator, stages: int, m: int) -> Array:
    """A valid order that is neither GPipe's nor 1F1B's: each stage interleaves at random, its
    backwards never ahead of the next stage's in number (so nothing deadlocks)."""
    warm = [m] * stages
    for s in range(stages - 1, -1, -1):  # from the last stage: it needs nothing after it
        warm[s] = int(rng.integers(1, m + 1)) if s == stages - 1 else \
            min(m, warm[s + 1] + int(rng.integers(0, 3)))
    return np.array([_one_f_one_b(1, m, warmup=lambda _s, _p, w=w: w)[0] for w in warm])


def _timeline_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(order, t_forward, t_backward): the contract's example (GPipe, p = 2, m = 2), 1F1B and
    GPipe with backward twice the forward, an order of neither kind, one stage."""
    cases: list[Case] = [(_gpipe(2, 2), 1.0, 2.0), (_one_f_one_b(4, 6), 1.0, 2.0),
                         (_gpipe(3, 4), 1.5, 1.0), (_random_order(rng, 3, 5), 1.0, 3.0),
                         (_one_f_one_b(1, 3), 2.0, 1.0)]
    if hidden:
        cases = [(_one_f_one_b(3, 3), 2.0, 1.0)]
        for _ in range(5):
            p, m = int(rng.integers(2, 6)), int(rng.integers(1, 9))
            makers: list[Callable[[int, int], Array]] = [
                _gpipe, _one_f_one_b, lambda p, m: _random_order(rng, p, m)]
            maker = makers[int(rng.integers(0, 3))]
            cases.append((maker(p, m), float(rng.integers(1, 5)) / 2,
                          float(rng.integers(1, 9)) / 2))
    return cases


def _timeline_slip(**options: Any) -> Any:
    return lambda e, a: _timeline(*a, **options)


TIMELINE_HINTS = (
    _mistake(_timeline_slip(wait_forward=False, wait_backward=False),
             "a stage waits for its neighbours: the forward of micro-batch i on stage s starts "
             "only after stage s - 1 finished that forward (its input), the backward only after "
             "stage s + 1 finished that backward (its gradient)"),
    _mistake(_timeline_slip(wait_backward=False),
             "a backward waits for its gradient: the backward of micro-batch i on stage s starts "
             "only after stage s + 1 finished the backward of i (the last stage waits for its "
             "own forward only)"),
    _mistake(_timeline_slip(backward_from=-1),
             "gradients flow from the last stage to the first: the backward of i on stage s "
             "waits for stage s + 1's backward of i, not stage s - 1's"),
    _mistake(_timeline_slip(one_at_a_time=False),
             "a stage runs one step at a time, in its order: a step starts at the later of the "
             "moment its stage is free and the moment its input (or gradient) is ready"),
    _mistake(lambda e, a: _timeline(a[0], a[2], a[1]),
             "forward and backward times swapped: +i takes t_forward, -i takes t_backward"),
    _mistake(_timeline_slip(ends=True),
             "those are the times the steps END: return when each one starts"),
)


# --------------------------------------------------------------------------- activations held


def _in_flight(order: Array, count: str = "peak") -> Array:
    order = np.asarray(order)
    out = []
    for row in order.tolist():
        held = peak = 0
        for j, op in enumerate(row):
            held += 1 if op > 0 else -1
            if count == "first" and op < 0:
                peak = max(peak, j)
                break
            peak = max(peak, held) if count != "all" else sum(o > 0 for o in row)
        out.append(0 if count == "end" else peak)
    return np.array(out, dtype=np.int64)


def _in_flight_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(order,): 1F1B and GPipe (the lecture's two schedules), more stages than micro-batches,
    orders whose first stretch of forwards is not the longest."""
    late = np.array([[1, -1, 2, 3, 4, -2, -3, -4], [1, 2, -1, -2, 3, 4, -3, -4]])
    cases = [(_one_f_one_b(2, 8),), (_gpipe(3, 4),), (_one_f_one_b(4, 2),), (late,),
             (_random_order(rng, 4, 6),)]
    if hidden:
        cases = [(np.array([[1, -1, 2, 3, -2, -3]]),)]
        cases += [(_random_order(rng, int(rng.integers(1, 6)), int(rng.integers(1, 10))),)
                  for _ in range(5)]
        cases += [(_one_f_one_b(5, 7),), (_gpipe(2, 5),)]
    return cases


IN_FLIGHT_HINTS = (
    _mistake(lambda e, a: _in_flight(a[0], "all"),
             "every forward counted: a backward frees its micro-batch's activations, so a stage "
             "holds the forwards done minus the backwards done, and the answer is the largest "
             "that count gets"),
    _mistake(lambda e, a: _in_flight(a[0], "first"),
             "only the forwards before the first backward were counted: a later stretch of "
             "forwards can hold more micro-batches at once; follow the count over the whole order"),
    _mistake(lambda e, a: _in_flight(a[0], "end"),
             "the count at the end is always 0 (every backward ran): return its peak"),
    _mistake(lambda e, a: np.full(len(e), e.max()),
             "one answer per stage: under 1F1B the first stage holds the most, the last the "
             "fewest"),
)


# --------------------------------------------------------------------------- FSDP's shards


def _shard(param: Array, world_size: int) -> Array:
    param = np.asarray(param, dtype=np.float64)
    rows = -(-param.shape[0] // world_size)
    padded = np.zeros((rows * world_size, *param.shape[1:]))
    padded[:param.shape[0]] = param
    return padded.reshape(world_size, rows, *param.shape[1:])


def _array_split(e: Any, a: Case) -> Any:
    param, world_size = np.asarray(a[0]), int(a[1])
    out = np.zeros_like(e)
    for r, piece in enumerate(np.array_split(param, world_size)):
        out[r, :len(piece)] = piece
    return out


def _interleaved(e: Any, a: Case) -> Any:
    param, world_size = np.asarray(a[0]), int(a[1])
    out = np.zeros_like(e)
    for r in range(world_size):
        piece = param[r::world_size]
        out[r, :len(piece)] = piece
    return out


def _flat(e: Any, a: Case) -> Any:
    param, world_size = np.asarray(a[0]), int(a[1])
    if param.ndim < 2:
        return None
    flat = param.reshape(-1)
    size = -(-flat.size // world_size)
    padded = np.zeros(size * world_size)
    padded[:flat.size] = flat
    return padded.reshape(world_size, size)


def _shard_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(param, world_size): rows that divide evenly, 10 rows on 4 ranks (torch.chunk: 3, 3, 3, 1;
    np.array_split: 3, 3, 2, 2), fewer rows than ranks (an empty shard), a bias vector, one
    rank."""
    shapes = [((8, 3), 2), ((10, 2), 4), ((3, 4), 4), ((5,), 2), ((4, 2, 2), 1)]
    if hidden:
        shapes = [((7, 3), 3)] + [
            ((int(rng.integers(1, 14)), *([int(rng.integers(1, 4))] * int(rng.integers(0, 3)))),
             int(rng.integers(1, 6))) for _ in range(5)] + [((2,), 3), ((11, 1), 4)]
    return [(rng.standard_normal(shape), r) for shape, r in shapes]


SHARD_HINTS = (
    _mistake(_array_split,
             "np.array_split spreads the remainder over the first ranks (10 rows on 4: 3, 3, 2, "
             "2); FSDP cuts dim 0 as torch.chunk does, ceil(rows / R) rows to each rank in turn "
             "(3, 3, 3, 1), so the last ranks are short or empty"),
    _mistake(_interleaved,
             "each rank holds one contiguous block of rows (rank r rows r * c .. (r + 1) * c - 1 "
             "with c = ceil(rows / R)), not every R-th row: the all-gather then rebuilds the "
             "parameter by concatenating the shards in rank order"),
    _mistake(_flat,
             "FSDP2 shards each parameter along dim 0, keeping its other dims: shards of shape "
             "(ceil(rows / R), *param.shape[1:]), not pieces of the flattened parameter"),
)


PARTS = [
    Part(
        id="ex21.gpipe_schedule", points=1, cases=_schedule_cases, expected=_gpipe,
        compare=EXACT, call=call_schedule, hints=GPIPE_HINTS,
        arg_names=("stages", "microbatches"), output_names=("order",),
    ),
    Part(
        id="ex21.one_f_one_b_schedule", points=3, cases=_schedule_cases,
        expected=_one_f_one_b, compare=EXACT, call=call_schedule, hints=ONE_F_ONE_B_HINTS,
        arg_names=("stages", "microbatches"), output_names=("order",),
    ),
    Part(
        id="ex21.pipeline_timeline", points=3, cases=_timeline_cases,
        expected=_expected_timeline, compare=CLOSE, call=call_timeline, hints=TIMELINE_HINTS,
        arg_names=("order", "t_forward", "t_backward"), output_names=("start",),
    ),
    Part(
        id="ex21.peak_in_flight", points=2, cases=_in_flight_cases, expected=_in_flight,
        compare=EXACT, call=call_in_flight, hints=IN_FLIGHT_HINTS,
        arg_names=("order",), output_names=("peak",),
    ),
    Part(
        id="ex21.fsdp_shard", points=2, cases=_shard_cases, expected=_shard,
        compare=CLOSE, call=call_shard, hints=SHARD_HINTS,
        arg_names=("param", "world_size"), output_names=("shards",),
    ),
]
