"""Exercise 6 (feeding the GPU), public half: how its parts run a student's prefetching generator,
the source checks, and generic hints. Nothing here computes an answer.

The prefetch calls feed the generator a source it can watch (:class:`Watched`: which thread
reads, how far ahead of the consumer) and return what arrived; what the source observes is
check()'s feedback only, the grader judges the submitted source (:func:`prefetch_source`: a
thread, and a bound on how far it reads ahead). How far a reader runs ahead does not rest on
how busy the machine is: after the first batch the consumer holds still until the reader has
shown its bound (it waits on a full queue) or passed it (:func:`hold_first`). The oracles
(``ndarray.nbytes``, the benchmark's ``finish_rows``), the hidden cases and the mistake replays
stay in the private part file; the source checks here keep a student from calling those helpers.
"""

from __future__ import annotations

import ast
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule, output_of
from edu_dl.grading.authoring.source import NamesCheck, code_names, definition_node, names_check
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

Case = tuple[Any, ...]
WAIT_S = 3.0  # a prefetcher that delivers nothing for this long is stuck
# Where a thread blocked on a full queue.Queue (or a Semaphore, an Event) sits: it reads no
# further until the consumer takes a batch.
_WAITING = threading.Condition.wait.__code__


# --------------------------------------------------------------------------- a watched source


class Watched:
    """A source of batches that records who reads it, and how far ahead of the consumer."""

    def __init__(self, data: np.ndarray, fail_at: int | None = None,
                 error: BaseException | None = None) -> None:
        self.data, self.fail_at, self.error = data, fail_at, error
        self.produced = self.consumed = self.lead = 0
        self.off_thread = False
        self.consumer: threading.Thread | None = None
        self.reader: threading.Thread | None = None  # the last thread other than the consumer's
        self.lock = threading.Lock()

    def __iter__(self) -> Iterator[np.ndarray]:
        for k in range(len(self.data)):
            if k == self.fail_at and self.error is not None:
                raise self.error
            time.sleep(0.0005)  # a read takes a little time (and lets the consumer run)
            with self.lock:
                self.produced += 1
                self.lead = max(self.lead, self.produced - self.consumed)
                if threading.current_thread() is not self.consumer:
                    self.off_thread, self.reader = True, threading.current_thread()
            yield self.data[k].copy()
        if self.fail_at == len(self.data) and self.error is not None:
            raise self.error


def _blocked(thread: threading.Thread | None) -> bool:
    """Whether ``thread`` waits on a condition (a full queue's put): it reads nothing more until
    the consumer acts. Read from the thread's current frame, not from a clock."""
    if thread is None or thread.ident is None:
        return False
    frame = sys._current_frames().get(thread.ident)
    return frame is not None and frame.f_code is _WAITING


def hold_first(source: Watched, depth: int, progress: threading.Event) -> None:
    """The consumer, holding its first batch, waits until the reader has passed depth + 2
    batches ahead (unbounded), waits on a full queue (bounded), has read everything or has
    died (or there is no reader thread); WAIT_S at most (a reader that blocks some other way).
    Whatever the machine's load, an unbounded reader then shows its lead and a bounded one
    never does."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with source.lock:
            ahead = source.produced - source.consumed
            done = source.produced >= len(source.data)
            reader = source.reader
        # no reader: the consumer's own thread read the batch it holds, and nothing reads ahead
        if reader is None or ahead > depth + 2 or done or _blocked(reader) or \
                not reader.is_alive():
            return
        progress.set()  # holding still on purpose: not stuck
        time.sleep(0.001)


def consume(fn: Callable[..., Any], source: Watched, depth: int,
            ) -> tuple[list[np.ndarray], BaseException | None]:
    """Iterate fn(source, depth) in a thread of its own, slowly (holding still after the first
    batch: :func:`hold_first`); give up after WAIT_S idle."""
    received: list[np.ndarray] = []
    box: dict[str, BaseException | None] = {"error": None}
    progress = threading.Event()

    def run() -> None:
        try:
            for batch in fn(iter(source), depth):
                received.append(np.asarray(batch))
                with source.lock:
                    source.consumed += 1
                progress.set()
                if len(received) == 1:
                    hold_first(source, depth, progress)
                time.sleep(0.002)  # a training step
        except BaseException as exc:  # handed to the caller
            box["error"] = exc
        progress.set()

    consumer = threading.Thread(target=run, name="edu_dl-check-consumer", daemon=True)
    source.consumer = consumer
    consumer.start()
    while consumer.is_alive():
        progress.clear()
        if not progress.wait(WAIT_S) and consumer.is_alive():
            raise CheckFailure(
                f"no batch arrived for {WAIT_S:g} s after {len(received)} batches: the "
                "generator is stuck (does the reader put a marker in the queue when the source "
                "ends, or when it raises? does the consumer wait for it?)")
    consumer.join()
    return received, box["error"]


def stacked(received: list[np.ndarray], data: np.ndarray) -> np.ndarray:
    """The batches received, stacked on a new axis 0 (none: an empty stack of data's rows)."""
    return np.stack(received) if received else np.zeros((0, *data.shape[1:]), data.dtype)


# --------------------------------------------------------------------------- prefetch


def call_prefetch(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, int]:
    """(the batches fn(source, depth) delivered, stacked; how many); check()'s feedback if the
    reading never left the consumer's thread or ran more than depth (+2) ahead."""
    data, depth = args
    source = Watched(np.asarray(data))
    received, error = consume(fn, source, int(depth))
    if error is not None:
        raise error
    if len(data) and not source.off_thread:
        raise CheckFailure("every batch was read in the consumer's own thread: start a "
                           "threading.Thread that reads the source and puts the batches in a "
                           "queue.Queue, and have the generator take them from there")
    if source.lead > int(depth) + 2:
        raise CheckFailure(f"the reader ran {source.lead} batches ahead of the consumer with "
                           f"depth={depth}: bound the queue (queue.Queue(maxsize=depth)) so "
                           "at most depth batches wait")
    return stacked(received, np.asarray(data)), len(received)


THREADS = {"Thread", "ThreadPoolExecutor", "start_new_thread"}
BOUNDS = {"Semaphore", "BoundedSemaphore", "Condition", "ThreadPoolExecutor"}
QUEUES = {"Queue", "LifoQueue", "PriorityQueue"}


def _sized_queue(node: ast.AST) -> bool:
    """A call Queue(n) or Queue(maxsize=n) (queue.Queue, q.Queue, Queue, ...)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in QUEUES and (bool(node.args) or any(k.arg == "maxsize" for k in node.keywords))


def prefetch_source(source: str) -> Verdict:
    """The generator starts a reader thread and bounds how far it reads ahead."""
    names = code_names(source)
    if not names & THREADS:
        return Verdict(False, "the generator starts no thread: start a threading.Thread that "
                              "reads the source and puts the batches in a queue.Queue, and "
                              "have the generator take them from there")
    if not (names & BOUNDS or any(_sized_queue(n) for n in ast.walk(definition_node(source)))):
        return Verdict(False, "nothing bounds how far the reader runs ahead: "
                              "queue.Queue(maxsize=depth) keeps at most depth batches waiting")
    return Verdict(True)


# --------------------------------------------------------------------------- errors


ERRORS: dict[str, type[Exception]] = {"ValueError": ValueError, "OSError": OSError,
                                      "EOFError": EOFError, "KeyError": KeyError}


def error_message(fail_at: int) -> str:
    """What the watched source's error says when it fails at batch ``fail_at``."""
    return f"cannot read batch {fail_at}"


def call_error(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, str, str]:
    """(the batches delivered before the error, stacked; the error's type name, its message)."""
    data, depth, fail_at, name = args
    data = np.asarray(data)
    source = Watched(data, int(fail_at), ERRORS[name](error_message(int(fail_at))))
    received, error = consume(fn, source, int(depth))
    if isinstance(error, NotImplementedError):
        raise error
    for k, batch in enumerate(received[:len(data)]):
        if batch.shape != data[k].shape or not np.array_equal(batch, data[k]):
            raise CheckFailure(f"batch {k} is not the source's batch {k}: keep the order")
    try:
        batches = stacked(received, data)
    except ValueError:
        raise CheckFailure("the generator yielded more items than the source's batches, of "
                           "other shapes: yield exactly the batches the source yields") from None
    if error is None:
        return batches, "no error", ""
    return batches, type(error).__name__, str(error)


# --------------------------------------------------------------------------- library oracles

CALLS_FINISH_ROWS = ("this part asks you to write the formula yourself (do not call "
                     "edu_dl.bench.loader.finish_rows)")
IDEAL_SOURCE: NamesCheck = names_check(forbidden=[(("finish_rows",), CALLS_FINISH_ROWS)])


# --------------------------------------------------------------------------- generic hints


@dataclass(frozen=True)
class AnyAnswer(Rule):
    """Any wrong answer: a hint about the case itself (its ``when`` says which cases)."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return True


@dataclass(frozen=True)
class ShorterWhereSame(Rule):
    """Output ``output`` holds fewer items than expected while output ``same`` is right (the
    right error, say, but batches lost before it)."""

    same: int = 0

    def judge(self, expected: Any, got: Any, args: Case) -> bool:
        if not bool(output_of(got, self.same) == output_of(expected, self.same)):
            return False
        return len(np.asarray(output_of(got, self.output))) < len(
            output_of(expected, self.output))


@dataclass(frozen=True)
class Differs(Rule):
    """The output is not the expected one (``!=``: a label, a type name)."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return bool(got != expected)
