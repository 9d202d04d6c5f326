"""Exercise 20, serving a model: appending a decode step's keys and values to a KV cache, a paged
KV cache's block allocator (block tables, freeing, reuse of freed blocks), and a continuous
batching scheduler's next batch under a token budget.

The cases are shaped to make the usual slips visible: caches whose sequence length equals the
new tokens' (an append along the wrong axis keeps a plausible shape there) and an empty cache (a
prefill); sequence lengths at exact multiples of the block size (ceil vs floor, the off-by-one),
sequences that finish and free blocks that a later sequence must reuse; waiting queues with a
request that would fit only if a later one could jump ahead, prompts that fill the budget
exactly, and a seat limit reached before the token budget. The oracles follow vLLM's design
(Kwon et al., SOSP 2023: blocks of a fixed number of tokens, a per-sequence block table, blocks
freed when a sequence finishes) and its first-come-first-served admission.

Judged outside the sandbox: every output against the oracle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, close
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex20 import call_allocate, call_append, call_next_batch

Array = np.ndarray
Case = tuple[Any, ...]
EXACT = tolerance(rtol=0.0, atol=0.0)
CLOSE = tolerance(rtol=1e-12, atol=1e-12)


def _mistake(output: int | None, replay: Any, message: str) -> Mistake:
    """A replayed mistake (on ``output``, or the whole result), where it differs from the right
    answer: a slip that gives the right value on a case gets no hint there."""
    def run(e: Any, a: Case) -> Any:
        with np.errstate(all="ignore"):
            value = replay(e, a)
        if value is None:
            return None
        right = e if output is None else e[output]
        if isinstance(value, tuple) and isinstance(right, tuple):
            same = len(value) == len(right) and all(
                np.shape(v) == np.shape(r) and close(v, r, 0.0, 0.0)
                for v, r in zip(value, right))
        else:
            same = np.shape(value) == np.shape(right) and close(value, right, 0.0, 0.0)
        return None if same else value
    return Mistake(run, message, output=output, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- the KV cache


def _append_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(k_cache, v_cache, k_new, v_new) of shapes (batch, heads, n, head_dim) and (batch, heads,
    t, head_dim): n == t first (a concatenation along the wrong axis does not raise there, and
    check() shows the first failure's hint), a decode step, a prefill into an empty cache,
    several new tokens."""
    # (batch, heads, n, t, head_dim)
    specs = [(2, 2, 3, 3, 3), (1, 2, 5, 1, 4), (2, 3, 0, 4, 2), (1, 4, 6, 2, 8)]
    if hidden:  # n == t first: check() shows the first failure's hint
        specs = [(3, 3, 3, 3, 3)] + [
            (int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(0, 12)),
             int(rng.integers(1, 4)), int(rng.integers(1, 9))) for _ in range(3)]
        specs += [(1, 1, 9, 1, 5)]
    cases = []
    for b, h, n, t, d in specs:
        cases.append(tuple(rng.standard_normal(shape) for shape in
                           ((b, h, n, d), (b, h, n, d), (b, h, t, d), (b, h, t, d))))
    return cases


def _append(k_cache: Array, v_cache: Array, k_new: Array, v_new: Array) -> tuple[Array, Array]:
    return (np.concatenate([k_cache, k_new], axis=2), np.concatenate([v_cache, v_new], axis=2))


def _along(a: Case, axis: int) -> Any:
    k_cache, v_cache, k_new, v_new = a
    try:
        return (np.concatenate([k_cache, k_new], axis=axis),
                np.concatenate([v_cache, v_new], axis=axis))
    except ValueError:
        return None


def _window(e: Any, a: Case) -> Any:
    t = a[2].shape[2]
    if a[0].shape[2] == 0:
        return None
    return e[0][:, :, t:], e[1][:, :, t:]


AXIS = ("the sequence axis is axis 2 of (batch, heads, n, head_dim): append along it, "
        "np.concatenate([k_cache, k_new], axis=2), so the result is (batch, heads, n + t, "
        "head_dim)")
APPEND_HINTS = (
    _mistake(None, lambda e, a: _along(a, 0), "appended along the batch axis (0): " + AXIS),
    _mistake(None, lambda e, a: _along(a, 1), "appended along the heads axis (1): " + AXIS),
    _mistake(None, lambda e, a: _along(a, 3), "appended along head_dim (axis 3): " + AXIS),
    _mistake(None, lambda e, a: (np.concatenate([a[2], a[0]], axis=2),
                                 np.concatenate([a[3], a[1]], axis=2)),
             "the new positions went first: position i of the cache is token i of the "
             "sequence, so the old positions stay at 0..n-1 and the new ones follow"),
    _mistake(None, lambda e, a: (e[1], e[0]),
             "keys and values swapped: return (k, v), the keys first"),
    _mistake(None, lambda e, a: (e[0], np.concatenate([a[1], a[2]], axis=2)),
             "the value cache got the new keys: append v_new to v_cache"),
    _mistake(None, lambda e, a: (a[2].copy(), a[3].copy()),
             "only the new step's keys and values: the cache keeps every earlier position "
             "too, since the next query attends to all of them"),
    _mistake(None, _window,
             "the oldest positions were dropped (the cache kept its length): nothing leaves "
             "the cache, the next query attends to every position so far"),
)


# --------------------------------------------------------------------------- the block allocator


def _blocks(events: Array, num_blocks: int, block_size: int, max_blocks: int,
            count: str = "ceil", free: bool = True, reuse: bool = True, clear: bool = True,
            incremental: bool = True) -> tuple[Array, int]:
    """The block manager, and (with its options) the usual slips of one."""
    n_seqs = int(events[:, 0].max()) + 1
    tables: list[list[int]] = [[] for _ in range(n_seqs)]
    available = list(range(num_blocks))
    fresh = 0  # reuse=False: the next never-used block
    stale: dict[int, list[int]] = {}
    for seq, length in events.tolist():
        if length == 0:
            if free:
                available = sorted(available + tables[seq])
            if not clear:
                stale[seq] = tables[seq]
            tables[seq] = []
            continue
        stale.pop(seq, None)
        need = {"ceil": -(-length // block_size), "floor": length // block_size,
                "plus1": length // block_size + 1}[count]
        if not incremental:  # a new table each step: the old blocks lost
            tables[seq] = []
        while len(tables[seq]) < need:
            if reuse:
                if not available:
                    raise MemoryError("out of blocks")
                tables[seq].append(available.pop(0))
            else:
                if fresh >= num_blocks:
                    raise MemoryError("out of blocks")
                tables[seq].append(fresh)
                available.remove(fresh)
                fresh += 1
    out = np.full((n_seqs, max_blocks), -1, dtype=np.int64)
    for seq in range(n_seqs):
        row = tables[seq] or stale.get(seq, [])
        if len(row) > max_blocks:
            raise ValueError("more blocks than max_blocks")
        out[seq, :len(row)] = row
    return out, len(available)


def _allocate(events: Array, num_blocks: int, block_size: int, max_blocks: int
              ) -> tuple[Array, int]:
    return _blocks(np.asarray(events), int(num_blocks), int(block_size), int(max_blocks))


def _stream(rng: np.random.Generator, n_seqs: int, steps: int, block_size: int,
            exact: bool) -> Array:
    """Events of a few sequences that start with a prompt, grow by a token or a few, finish
    (length 0) and start again; ``exact``: prompts at multiples of the block size."""
    lengths = [0] * n_seqs
    events = []
    for _ in range(steps):
        seq = int(rng.integers(0, n_seqs))
        if lengths[seq] == 0:
            lengths[seq] = block_size * int(rng.integers(1, 4)) if exact else \
                int(rng.integers(1, 4 * block_size))
        elif rng.random() < 0.2:
            lengths[seq] = 0
        else:
            lengths[seq] += int(rng.integers(1, block_size + 2))
        events.append((seq, lengths[seq]))
    for seq in range(n_seqs):  # every sequence named at least once
        if all(s != seq for s, _ in events):
            events.append((seq, block_size))
    return np.array(events, dtype=np.int64)


def _fitted(events: Array, block_size: int) -> Case:
    """The case with room for the right answer and for every slip below (as many blocks as
    all the events together could ask for), so that each slip shows as wrong ids rather than
    an error; tables one block wider than the longest sequence needs."""
    longest = int(events[:, 1].max()) // block_size + 1
    total = int(sum(int(n) // block_size + 1 for n in events[:, 1]))
    return events, total, block_size, longest


def _allocate_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """The contract's example; lengths at exact multiples of the block size; a sequence that
    finishes and one that starts after it (freed blocks reused); a longer stream."""
    example = np.array([[0, 3], [1, 5], [0, 4], [0, 5], [1, 0], [0, 9]])
    exact = np.array([[0, 4], [1, 8], [0, 5], [2, 12], [1, 0], [2, 13], [0, 8], [3, 4]])
    reuse = np.array([[0, 6], [1, 2], [0, 0], [2, 7], [1, 3], [1, 0], [3, 1], [2, 8]])
    cases = [(example, 8, 4, 3), _fitted(exact, 4), _fitted(reuse, 2)]
    cases.append(_fitted(_stream(rng, 4, 30, 4, exact=False), 4))
    if hidden:
        cases = [_fitted(_stream(rng, int(rng.integers(2, 6)), int(rng.integers(10, 40)), b,
                                 exact=j % 2 == 0), b)
                 for j, b in enumerate((2, 4, 8, 16, 4, 3))]
    for events, num_blocks, b, width in cases:  # the oracle has room on every case
        _blocks(np.asarray(events), num_blocks, b, width)
    return cases


def _slip(**options: Any) -> Any:
    def replay(e: Any, a: Case) -> Any:
        events, num_blocks, block_size, _ = a
        return _blocks(np.asarray(events), int(num_blocks), int(block_size), 10**6, **options)
    return replay


def _wide(replay: Any) -> Any:
    """The slip's tables cut or padded to the case's width, where it fits in it."""
    def run(e: Any, a: Case) -> Any:
        tables, free = replay(e, a)
        width = e[0].shape[1]
        if (tables[:, width:] != -1).any():
            return None
        return tables[:, :width], free
    return run


ALLOCATE_HINTS = (
    _mistake(None, _wide(_slip(count="floor")),
             "too few blocks: n tokens need ceil(n / block_size) blocks, -(-n // block_size); "
             "n // block_size rounds down, and the last partial block holds real tokens"),
    _mistake(None, _wide(_slip(count="plus1")),
             "one block too many when n is a multiple of block_size: n // block_size + 1 is "
             "not ceil(n / block_size) (8 tokens in blocks of 4 fill exactly 2)"),
    _mistake(None, _wide(_slip(free=False)),
             "a finished sequence's blocks were never freed: length 0 returns all its blocks "
             "to the free list, and the next allocation takes the lowest free id"),
    _mistake(None, _wide(_slip(reuse=False)),
             "freed blocks must be reused: take the lowest-numbered free block, not the next "
             "never-used one (memory is finite; reuse is the point of freeing)"),
    _mistake(None, _wide(_slip(clear=False)),
             "a finished sequence's row must be all -1: its blocks went back to the free list"),
    _mistake(None, _wide(_slip(incremental=False)),
             "a sequence keeps the blocks it holds (its keys and values are stored in them): "
             "add blocks at the end of its table only when it needs more, never reallocate"),
)


# --------------------------------------------------------------------------- the scheduler


def _next_batch(running: int, waiting: Array, token_budget: int, max_seqs: int) -> Array:
    left, seats = int(token_budget) - int(running), int(max_seqs) - int(running)
    joined = []
    for i, prompt in enumerate(np.asarray(waiting).tolist()):
        if prompt > left or seats < 1:
            break
        joined.append(i)
        left -= prompt
        seats -= 1
    return np.array(joined, dtype=np.int64)


def _batch_slip(a: Case, decode: bool = True, skip: bool = False, strict: bool = False,
                seats_running: bool = True, seats: bool = True, budget: bool = True) -> Array:
    running, waiting, token_budget, max_seqs = (int(a[0]), np.asarray(a[1]), int(a[2]),
                                                int(a[3]))
    left = token_budget - (running if decode else 0)
    free = max_seqs - (running if seats_running else 0) if seats else 10**9
    joined = []
    for i, prompt in enumerate(waiting.tolist()):
        fits = (prompt < left if strict else prompt <= left) or not budget
        if not fits or free < 1:
            if skip and free >= 1:
                continue
            break
        joined.append(i)
        left -= prompt
        free -= 1
    return np.array(joined, dtype=np.int64)


def _batch_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(running, waiting, token_budget, max_seqs): the contract's example; a head request too
    long for what is left while a later one would fit; a prompt that fills the budget exactly;
    seats, not tokens, the limit; nothing running; a long queue."""
    cases = [(3, np.array([5, 8, 2]), 16, 8), (2, np.array([20, 3, 1]), 16, 8),
             (4, np.array([6, 6, 1]), 16, 8), (2, np.array([1, 1, 1, 1, 1, 1]), 64, 4),
             (0, np.array([7, 9, 4, 4]), 16, 4), (6, np.array([], dtype=np.int64), 32, 8)]
    if hidden:
        cases = []
        for _ in range(6):
            max_seqs = int(rng.integers(2, 12))
            running = int(rng.integers(0, max_seqs))
            budget = running + int(rng.integers(0, 40))
            cases.append((running, rng.integers(1, 16, int(rng.integers(0, 9))), budget,
                          max_seqs))
        cases += [(3, np.array([10, 2, 2]), 12, 8), (2, np.array([3, 4, 5]), 9, 8),
                  (7, np.array([1, 1, 1]), 100, 9)]
    return [(r, np.asarray(w, dtype=np.int64), b, m) for r, w, b, m in cases]


BATCH_HINTS = (
    _mistake(None, lambda e, a: _batch_slip(a, decode=False),
             "the running sequences use the budget too: each decodes one token this step, so "
             "token_budget - running tokens are left for the prompts"),
    _mistake(None, lambda e, a: _batch_slip(a, skip=True),
             "first come, first served: when the oldest waiting request does not fit, admission "
             "stops; a later, shorter one must not jump ahead (it would starve long prompts)"),
    _mistake(None, lambda e, a: _batch_slip(a, strict=True),
             "a prompt that exactly uses the tokens left still fits: prompt <= left, not <"),
    _mistake(None, lambda e, a: _batch_slip(a, seats_running=False),
             "max_seqs counts the running sequences too: max_seqs - running seats are left"),
    _mistake(None, lambda e, a: _batch_slip(a, seats=False),
             "max_seqs was ignored: a batch holds at most max_seqs sequences, running included"),
    _mistake(None, lambda e, a: _batch_slip(a, budget=False),
             "the token budget was ignored: the prompts that join must fit in token_budget - "
             "running tokens, together"),
)


PARTS = [
    Part(
        id="ex20.kv_cache_append", points=2, cases=_append_cases, expected=_append,
        compare=CLOSE, call=call_append, hints=APPEND_HINTS,
        arg_names=("k_cache", "v_cache", "k_new", "v_new"), output_names=("k", "v"),
    ),
    Part(
        id="ex20.allocate_blocks", points=4, cases=_allocate_cases, expected=_allocate,
        compare=EXACT, call=call_allocate, hints=ALLOCATE_HINTS,
        arg_names=("events", "num_blocks", "block_size", "max_blocks"),
        output_names=("tables", "free"),
    ),
    Part(
        id="ex20.next_batch", points=3, cases=_batch_cases, expected=_next_batch,
        compare=EXACT, call=call_next_batch, hints=BATCH_HINTS,
        arg_names=("running", "waiting", "token_budget", "max_seqs"),
        output_names=("joined",),
    ),
]
