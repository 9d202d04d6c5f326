"""Timing work that runs asynchronously, on a GPU or on a CPU stand-in for one.

A CUDA call from Python *launches* a kernel: it puts the work in the GPU's queue (a stream) and
returns at once, while the GPU works through the queue on its own. A host timer around the call
therefore measures the launch (microseconds), not the work. Two fixes: wait for the queue to drain
(``torch.cuda.synchronize()``) before reading the clock, or let the device stamp the time itself
(CUDA events, recorded into the same queue).

:class:`FakeAsyncDevice` is a CPU analogy that runs everywhere: a background thread (the "device")
works through a queue of kernels; ``launch`` returns at once, ``synchronize`` waits for the queue,
and :class:`FakeEvent` stamps the time when the device reaches it, as ``torch.cuda.Event`` does.
"""

from __future__ import annotations

import contextlib
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

Kernel = Callable[[], Any] | float  # a function the device runs, or seconds of "work"


class FakeAsyncDevice:
    """A queue worked through in order by one background thread; launches return at once.

    A kernel that raises does not stop the launcher: its error is raised by the next
    ``synchronize()``, as a CUDA error surfaces at the next synchronizing call.
    """

    def __init__(self, name: str = "fake-gpu") -> None:
        self.name = name
        self.launches = 0  # kernels launched (events not counted)
        self.syncs = 0  # synchronize() calls
        self._queue: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            try:
                if work is None:
                    return
                # after an error the device skips the kernels (events still stamp: no one hangs)
                if self._error is None or isinstance(work, _Stamp):
                    work()
            except BaseException as exc:  # kept for synchronize()
                self._error = exc
            finally:
                self._queue.task_done()

    def launch(self, kernel: Kernel) -> None:
        """Queue ``kernel`` (a function, or a number of seconds to be busy) and return at once."""
        if not callable(kernel):
            seconds = float(kernel)

            def kernel() -> None:
                time.sleep(seconds)

        self.launches += 1
        self._queue.put(kernel)

    def synchronize(self) -> None:
        """Block until every kernel launched so far has finished; raise a kernel's error."""
        self.syncs += 1
        self._queue.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def pending(self) -> int:
        """Kernels queued or running: the host is this far ahead of the device."""
        return self._queue.unfinished_tasks

    def event(self) -> FakeEvent:
        """A new timing event on this device (``torch.cuda.Event(enable_timing=True)``)."""
        return FakeEvent(self)

    def close(self) -> None:
        """Finish the queued work and stop the device's thread."""
        self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> FakeAsyncDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FakeEvent:
    """A time stamp the device writes when it reaches the event in its queue."""

    def __init__(self, device: FakeAsyncDevice) -> None:
        self.device = device
        self.time: float | None = None
        self._done = threading.Event()

    def record(self) -> None:
        """Queue the stamp behind the work launched so far; returns at once."""
        self._done.clear()
        self.device._queue.put(_Stamp(self))

    def synchronize(self) -> None:
        """Wait until the device has reached this event."""
        self._done.wait()

    def elapsed_time(self, end: FakeEvent) -> float:
        """Milliseconds between this event and ``end`` (both recorded and reached), as CUDA."""
        self.synchronize()
        end.synchronize()
        assert self.time is not None and end.time is not None
        return (end.time - self.time) * 1e3


class _Stamp:
    """The device's side of an event: write the time, tell whoever waits."""

    def __init__(self, event: FakeEvent) -> None:
        self.event = event

    def __call__(self) -> None:
        self.event.time = time.perf_counter()
        self.event._done.set()


class Event(Protocol):
    """What torch.cuda.Event and FakeEvent share."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...


def time_launch_only(fn: Callable[[], Any], repeats: int = 5) -> list[float]:
    """The WRONG timer for asynchronous work: seconds until fn returns, i.e. the launch."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def time_synchronized(fn: Callable[[], Any], synchronize: Callable[[], Any], warmup: int = 1,
                      repeats: int = 5) -> list[float]:
    """Seconds per call of fn, host clock: warm up, then synchronize; start; fn(); synchronize;
    stop. The first synchronize keeps earlier work out of the measurement."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - start)
    return times


def time_events(fn: Callable[[], Any], make_event: Callable[[], Event], warmup: int = 1,
                repeats: int = 5) -> list[float]:
    """Seconds per call of fn measured by the device's own clock: two events around each call
    (``make_event``: ``lambda: torch.cuda.Event(enable_timing=True)`` or ``device.event``)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = make_event(), make_event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def cuda_available() -> bool:
    """Whether PyTorch sees a CUDA GPU here."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def cuda_timers(fn: Callable[[], Any], warmup: int = 3, repeats: int = 10
                ) -> dict[str, float]:
    """Median seconds of fn on the GPU by the three timers: launch only, synchronize, events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    result = {"launch_only": statistics.median(time_launch_only(fn, repeats))}
    torch.cuda.synchronize()
    result["synchronize"] = statistics.median(
        time_synchronized(fn, torch.cuda.synchronize, 0, repeats))
    result["cuda_events"] = statistics.median(
        time_events(fn, lambda: torch.cuda.Event(enable_timing=True), 0, repeats))
    return result


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence what C++ code writes to file descriptor 2 (the profiler's start/stop log lines);
    Python's own exceptions and warnings are untouched."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_step(step: Callable[[], Any], cuda: bool | None = None) -> Any:
    """One call of ``step`` under torch.profiler (CPU, and CUDA kernels when ``cuda`` or when a
    GPU is there), synchronized at the end; returns the profiler (``.key_averages().table()``)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = cuda_available() if cuda is None else cuda
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with quiet_native_stderr(), profile(activities=activities) as prof:
        step()
        if cuda:
            import torch

            torch.cuda.synchronize()
    return prof
