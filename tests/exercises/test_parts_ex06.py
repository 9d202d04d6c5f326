"""Exercise 6's parts: the solutions notebook passes every case; typical mistakes get their hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    course_module,
    run_check,
    solution_namespace,
)

from edu_dl.grading.authoring import source
from edu_dl.grading.trust.source import find_source
from edu_dl.harness import ex06 as harness

ex06 = course_module("ex06")
SOLUTIONS_DIR = Path(__file__).resolve().parents[2] / "solutions"


def solutions() -> dict[str, Any]:
    """The reference answers, executed when a test first asks."""
    return solution_namespace("06_feeding_the_gpu.ipynb")


run = run_check


def test_ideal_epoch_steady_state_only(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex06.ideal_epoch",
                  lambda r, c, n, k: n * (r + c) if k == 0 else n * max(r / k, c))
    assert not ok
    assert "case 2 of 4 (read_s=0.015, compute_s=0.01, n=20, readers=1)" in out
    assert "expected 0.3, got 0.3" not in out  # the message shows the numbers that differ
    assert "hint: n * max(read / readers, compute) is the steady state" in out


def plain_generator(batches, depth):
    yield from batches  # no thread at all


def unbounded(batches, depth):
    import queue
    import threading

    slots: queue.Queue = queue.Queue()  # no maxsize: reads everything at once
    done = object()

    def reader():
        for b in batches:
            slots.put(b)
        slots.put(done)

    threading.Thread(target=reader, daemon=True).start()
    while (item := slots.get()) is not done:
        yield item


def swallows_errors(batches, depth):
    import queue
    import threading

    slots: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def reader():
        try:
            for b in batches:
                slots.put(b)
        except Exception:
            pass
        slots.put(done)

    threading.Thread(target=reader, daemon=True).start()
    while (item := slots.get()) is not done:
        yield item


def test_prefetch_without_a_thread(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex06.prefetch", plain_generator)
    assert not ok and "every batch was read in the consumer's own thread" in out


@pytest.mark.timing
def test_prefetch_with_an_unbounded_queue(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex06.prefetch", unbounded)
    assert not ok and "with depth=1: bound the queue (queue.Queue(maxsize=depth))" in out


@pytest.mark.timing
def test_a_slow_unbounded_reader_is_caught_all_the_same(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """A reader slower than the consumer, as a starved thread on a loaded machine is, never got
    ahead of a consumer that kept consuming (the check once failed this way under load): the
    consumer now holds its first batch until the reader has shown its bound or passed it."""
    import queue
    import threading
    import time

    def slow_unbounded(batches, depth):
        slots: queue.Queue = queue.Queue()
        done = object()

        def reader():
            for b in batches:
                time.sleep(0.02)  # ten of the consumer's 2 ms steps per read
                slots.put(b)
            slots.put(done)

        threading.Thread(target=reader, daemon=True).start()
        while (item := slots.get()) is not done:
            yield item

    ok, out = run(capsys, "ex06.prefetch", slow_unbounded)
    assert not ok and "with depth=1: bound the queue (queue.Queue(maxsize=depth))" in out


def test_a_reader_on_a_full_queue_is_seen_waiting() -> None:
    """What ends the consumer's hold for a bounded reader: its thread waits on the full queue,
    read from its frame (no clock)."""
    import queue
    import threading
    import time

    slots: queue.Queue = queue.Queue(maxsize=1)
    slots.put(0)
    reader = threading.Thread(target=lambda: slots.put(1), daemon=True)
    assert not harness._blocked(reader)  # not started
    reader.start()
    deadline = time.monotonic() + 30  # generous: only a broken _blocked waits this long
    while not harness._blocked(reader):
        assert time.monotonic() < deadline, "the reader was never seen waiting"
        time.sleep(0.001)
    assert not harness._blocked(threading.current_thread())  # running, not waiting
    slots.get()
    reader.join(30)
    assert not reader.is_alive() and not harness._blocked(reader)


def test_prefetch_that_loses_the_last_batch(capsys: pytest.CaptureFixture[str]) -> None:
    prefetch = solutions()["prefetch"]  # executed before check() times a call
    def drops_last(batches, depth):
        previous, first = None, True
        for item in prefetch(batches, depth):
            if not first:
                yield previous
            previous, first = item, False

    ok, out = run(capsys, "ex06.prefetch", drops_last)
    assert not ok
    # the hint is about the count (output 1), so the report names the count
    assert "output 1 (count): expected 8, got 7" in out and "hint: batches are missing" in out


def test_prefetch_that_swallows_errors(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex06.prefetch_errors", swallows_errors)
    assert not ok
    assert "output 1 (error type): expected 'ValueError', got 'no error'" in out
    assert "hint: the source raised, but your generator ended quietly" in out


@pytest.mark.timing
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_prefetch_that_hangs_on_an_error_is_stopped(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import queue
    import threading

    monkeypatch.setattr(harness, "WAIT_S", 0.3)  # the call waits in the public half

    def dies(batches, depth):
        slots: queue.Queue = queue.Queue(maxsize=depth)
        done = object()

        def reader():  # an exception kills the thread before it puts the marker
            for b in batches:
                slots.put(b)
            slots.put(done)

        threading.Thread(target=reader, daemon=True).start()
        while (item := slots.get()) is not done:
            yield item

    ok, out = run(capsys, "ex06.prefetch_errors", dies)
    assert not ok and "the generator is stuck" in out


def test_prefetch_that_raises_another_error(capsys: pytest.CaptureFixture[str]) -> None:
    prefetch = solutions()["prefetch"]  # executed before check() times a call
    def wraps(batches, depth):
        try:
            yield from prefetch(batches, depth)
        except Exception as exc:
            raise RuntimeError("reader failed") from exc

    ok, out = run(capsys, "ex06.prefetch_errors", wraps)
    assert not ok and "hint: re-raise the reader's own exception" in out


def simulated_epoch(read_s: Any, compute_s: float, slots: int | None) -> float:
    """The pipeline as events in time order (not the oracle's recurrence): a reader that reads,
    then waits for a free slot (None: unbounded), and a loop that takes batches in turn."""
    import heapq

    reads, n = list(read_s), len(read_s)
    waiting: list[int] = []  # batches in the queue
    events = [(reads[0], 0, "read done", 0)]  # (time, order, what, batch)
    blocked: int | None = None  # a batch read but not yet put
    next_take, busy_until, seq, end = 0, 0.0, 1, 0.0

    def push(t: float, what: str, k: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, what, k))
        seq += 1

    def try_take(t: float) -> None:
        nonlocal next_take, busy_until
        if waiting and waiting[0] == next_take and t >= busy_until:
            waiting.pop(0)
            busy_until = t + compute_s
            push(busy_until, "step done", next_take)
            next_take += 1
            unblock(t)

    def unblock(t: float) -> None:
        nonlocal blocked
        if blocked is not None and (slots is None or len(waiting) < slots):
            waiting.append(blocked)
            if blocked + 1 < n:
                push(t + reads[blocked + 1], "read done", blocked + 1)
            blocked = None
            try_take(t)

    while events:
        t, _, what, k = heapq.heappop(events)
        if what == "read done":
            blocked = k
            unblock(t)
        else:
            end = t
            try_take(t)
    return end


@pytest.mark.parametrize("hidden", [False, True])
def test_pipeline_oracle_agrees_with_an_event_simulation(hidden: bool) -> None:
    for seed in range(5):
        for read_s, compute_s, depth in ex06._pipeline_cases(np.random.default_rng(seed), hidden):
            assert ex06._pipeline_epoch(read_s, compute_s, depth) == pytest.approx(
                simulated_epoch(read_s, compute_s, depth), rel=1e-12)
            assert ex06._pipeline_epoch(read_s, compute_s, depth, slots=0) == pytest.approx(
                simulated_epoch(read_s, compute_s, None), rel=1e-12)


def test_pipeline_depth_hides_a_slow_read() -> None:
    reads = np.full(8, 0.005)
    reads[5] = 0.060
    epochs = [ex06._pipeline_epoch(reads, 0.020, d) for d in (1, 2, 3, 4)]
    assert epochs[0] > epochs[1] == epochs[2] == epochs[3] == pytest.approx(8 * 0.020 + 0.005)


@pytest.mark.parametrize(("variant", "hint"), [
    ({"slots": None}, "your queue never fills"),
    ({"delta": 1}, "one slot too many"),
    ({"delta": -1}, "one slot too few"),
    ({"serial": True}, "nothing overlaps in your epoch"),
])
def test_pipeline_mistakes_get_their_hints(capsys: pytest.CaptureFixture[str],
                                           variant: dict[str, Any], hint: str) -> None:
    def wrong(read_s: Any, compute_s: float, depth: int) -> float:
        if variant.get("serial"):
            return float(np.sum(read_s) + len(read_s) * compute_s)
        if "slots" in variant:
            return simulated_epoch(read_s, compute_s, None)
        return simulated_epoch(read_s, compute_s, max(depth + variant["delta"], 1))

    ok, out = run(capsys, "ex06.pipeline_epoch", wrong)
    assert not ok and f"hint: {hint}" in out, out


def test_pipeline_hints_stay_quiet_on_noise(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex06.pipeline_epoch",
                  lambda r, c, d: simulated_epoch(r, c, d) + 0.0123)
    assert not ok and "hint:" not in out, out


# --------------------------------------------------------------------------- the library oracles


def ideal_from_the_benchmark(read_s, compute_s, n, readers):
    from edu_dl.bench.loader import LoaderConfig, LoaderResult, LoaderRow, finish_rows

    row = LoaderRow("mine", "ideal", readers, "", epoch_s=0.0)
    finish_rows(LoaderResult(LoaderConfig("", batches=n), read_s=n * read_s,
                             compute_s=n * compute_s, rows=[row]))
    return row.ideal_s


@pytest.mark.parametrize(("part_id", "notebook", "fn", "message"), [
    ("ex06.ideal_epoch", "06_feeding_the_gpu.ipynb", ideal_from_the_benchmark,
     "this part asks you to write the formula yourself (do not call "
     "edu_dl.bench.loader.finish_rows)"),
])
def test_calling_the_library_oracle_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                               notebook: str, fn: Any, message: str) -> None:
    """The oracle is the course's own code: a function that calls it gets the values right, and
    the source check (check()'s and the grader's) refuses it; the solution's source passes."""
    ok, out = run(capsys, part_id, fn)
    assert not ok and out == f"✗ {part_id}: the values are right, but {message}\n"
    part = next(p for p in ex06.PARTS if p.id == part_id)
    found = find_source(nbformat.read(SOLUTIONS_DIR / notebook, as_version=4), part_id)
    assert found is not None and source.judge_source(part, found).ok
