"""Exercise 3's parts: the solutions notebook passes every case; typical mistakes get their hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from exercise_helpers import assert_solution_passes, course_module, run_check, solution_namespace

from edu_dl.grading import checking, source, spec
from edu_dl.grading.trust.source import find_source
from edu_dl.harness import ex03 as harness

ex03 = course_module("ex03")
SOLUTIONS_DIR = Path(__file__).resolve().parents[1] / "solutions"

# ex03.feed_bytes moved with the feed_dict lesson to exercise 6b and kept its id (gradebooks).
SOLUTIONS = {**solution_namespace("03_feeding_the_gpu.ipynb"),
             **solution_namespace("06b_feeding_a_graph.ipynb")}
FUNCTIONS = {"ex03.feed_bytes": "feed_bytes", "ex03.ideal_epoch": "ideal_epoch",
             "ex03.prefetch": "prefetch", "ex03.prefetch_errors": "prefetch",
             "ex03.epoch_batches": "epoch_batches"}


run = run_check


@pytest.mark.parametrize("part", ex03.PARTS, ids=lambda p: p.id)
@pytest.mark.parametrize("hidden", [False, True])
def test_oracle_agrees_with_the_solution(part: spec.Part, hidden: bool) -> None:
    rng = np.random.default_rng(12345 if hidden else checking.VISIBLE_SEED)
    assert_solution_passes(part, SOLUTIONS[FUNCTIONS[part.id]], hidden, rng)


@pytest.mark.parametrize("part_id", FUNCTIONS)
def test_stub_is_not_implemented_yet(capsys: pytest.CaptureFixture[str], part_id: str) -> None:
    def stub(*args: Any) -> Any:
        raise NotImplementedError()

    ok, out = run(capsys, part_id, stub)
    assert not ok and out.strip() == f"✗ {part_id}: not implemented yet"


def test_feed_bytes_without_the_loss(capsys: pytest.CaptureFixture[str]) -> None:
    def no_loss(n, d, h, d_out, size):
        fed_in, fed_out, kept_in, _ = SOLUTIONS["feed_bytes"](n, d, h, d_out, size)
        return fed_in, fed_out - size, kept_in, 0

    ok, out = run(capsys, "ex03.feed_bytes", no_loss)
    assert not ok
    assert "output 1 (feed_out): expected 800004, got 800000" in out
    assert "hint: the loss is fetched too" in out


def test_feed_bytes_in_elements(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex03.feed_bytes",
                  lambda n, d, h, o, s: (n * d + n * o + d * h + h * o, 1 + d * h + h * o,
                                         n * d + n * o, 1))
    assert not ok and "hint: count bytes, not elements" in out


def test_ideal_epoch_steady_state_only(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex03.ideal_epoch",
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
    ok, out = run(capsys, "ex03.prefetch", plain_generator)
    assert not ok and "every batch was read in the consumer's own thread" in out


def test_prefetch_with_an_unbounded_queue(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex03.prefetch", unbounded)
    assert not ok and "with depth=1: bound the queue (queue.Queue(maxsize=depth))" in out


def test_prefetch_that_loses_the_last_batch(capsys: pytest.CaptureFixture[str]) -> None:
    def drops_last(batches, depth):
        previous, first = None, True
        for item in SOLUTIONS["prefetch"](batches, depth):
            if not first:
                yield previous
            previous, first = item, False

    ok, out = run(capsys, "ex03.prefetch", drops_last)
    assert not ok
    # the hint is about the count (output 1), so the report names the count
    assert "output 1 (count): expected 8, got 7" in out and "hint: batches are missing" in out


def test_prefetch_that_swallows_errors(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex03.prefetch_errors", swallows_errors)
    assert not ok
    assert "output 1 (error type): expected 'ValueError', got 'no error'" in out
    assert "hint: the source raised, but your generator ended quietly" in out


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

    ok, out = run(capsys, "ex03.prefetch_errors", dies)
    assert not ok and "the generator is stuck" in out


def test_prefetch_that_raises_another_error(capsys: pytest.CaptureFixture[str]) -> None:
    def wraps(batches, depth):
        try:
            yield from SOLUTIONS["prefetch"](batches, depth)
        except Exception as exc:
            raise RuntimeError("reader failed") from exc

    ok, out = run(capsys, "ex03.prefetch_errors", wraps)
    assert not ok and "hint: re-raise the reader's own exception" in out


def test_epoch_batches_ignoring_drop_last_and_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    def keeps_last(n, size, seed, drop_last, epoch):
        return SOLUTIONS["epoch_batches"](n, size, seed, False, epoch)

    ok, out = run(capsys, "ex03.epoch_batches", keeps_last)
    assert not ok
    assert "case 2 of 4 (n_rows=10, batch_size=4, seed=0, drop_last=True, epoch=0)" in out
    assert "hint: drop_last=True drops the last batch only when it is short" in out

    def first_epoch(n, size, seed, drop_last, epoch):
        return SOLUTIONS["epoch_batches"](n, size, seed, drop_last, 0)

    ok, out = run(capsys, "ex03.epoch_batches", first_epoch)
    assert not ok and "hint: that is epoch 0's order" in out


def test_epoch_batches_with_the_legacy_generator(capsys: pytest.CaptureFixture[str]) -> None:
    def legacy(n, size, seed, drop_last, epoch):
        rng = np.random.RandomState(seed)
        for _ in range(epoch + 1):
            order = rng.permutation(n)
        count = n // size if drop_last else -(-n // size)
        return [order[k * size:(k + 1) * size] for k in range(count)]

    ok, out = run(capsys, "ex03.epoch_batches", legacy)
    assert not ok and "hint: use the new generator, np.random.default_rng(seed)" in out


# --------------------------------------------------------------------------- the library oracles


def ideal_from_the_benchmark(read_s, compute_s, n, readers):
    from edu_dl.bench.loader import LoaderConfig, LoaderResult, LoaderRow, finish_rows

    row = LoaderRow("mine", "ideal", readers, "", epoch_s=0.0)
    finish_rows(LoaderResult(LoaderConfig("", batches=n), read_s=n * read_s,
                             compute_s=n * compute_s, rows=[row]))
    return row.ideal_s


def batches_from_the_loader(n_rows, batch_size, seed, drop_last, epoch):
    from edu_dl.data import ArrayDataset, DataLoader

    loader = DataLoader(ArrayDataset(np.arange(n_rows)), batch_size, shuffle=True, seed=seed,
                        drop_last=drop_last, prefetch=0)
    for _ in range(epoch + 1):
        batches = loader.batch_indices()
    return batches


@pytest.mark.parametrize(("part_id", "notebook", "fn", "message"), [
    ("ex03.ideal_epoch", "03_feeding_the_gpu.ipynb", ideal_from_the_benchmark,
     "this part asks you to write the formula yourself (do not call "
     "edu_dl.bench.loader.finish_rows)"),
    ("ex03.epoch_batches", "03_feeding_the_gpu.ipynb", batches_from_the_loader,
     "this part asks you to shuffle and cut the batches yourself (do not call "
     "edu_dl.data.DataLoader or its batch_indices)"),
])
def test_calling_the_library_oracle_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                               notebook: str, fn: Any, message: str) -> None:
    """The oracle is the course's own code: a function that calls it gets the values right, and
    the source check (check()'s and the grader's) refuses it; the solution's source passes."""
    ok, out = run(capsys, part_id, fn)
    assert not ok and out == f"✗ {part_id}: the values are right, but {message}\n"
    part = next(p for p in ex03.PARTS if p.id == part_id)
    found = find_source(nbformat.read(SOLUTIONS_DIR / notebook, as_version=4), part_id)
    assert found is not None and source.judge_source(part, found).ok
