"""Timing work that runs asynchronously, on a GPU or on a CPU stand-in for one.

A CUDA call from Python *launches* a kernel: it puts the work in the GPU's queue (a stream) and
returns at once, while the GPU works through the queue on its own. A host timer around the call
therefore measures the launch (microseconds), not the work. Two fixes: wait for the queue to drain
(``torch.cuda.synchronize()``) before reading the clock, or let the device stamp the time itself
(CUDA events, recorded into the same queue).

:class:`FakeAsyncDevice` is a CPU analogy that runs everywhere: a background thread (the "device")
works through a queue of kernels; ``launch`` returns at once, ``synchronize`` waits for the queue,
and :class:`FakeEvent` stamps the time when the device reaches it, as ``torch.cuda.Event`` does.
It really waits, so what a host timer reads around it includes the machine's scheduling delays.
:class:`SimulatedAsyncDevice` is the same queue with a clock of its own and no thread: a launch
advances simulated time instead of sleeping, and ``clock()`` reads that time, so a timer run
against it measures exactly what the simulation says, on a quiet or a loaded machine (what
check() and the grader use). The timers below take the clock they read (``time.perf_counter``
by default).

On a real GPU, :func:`synchronize` waits for every library this process uses (Numba, CuPy,
PyTorch); :func:`time_it` is the synchronized timer's median, and :func:`gpu_peak` the card's FP32
peak (SMs x FP32 lanes per SM x 2 x clock) that a kernel's GFLOP/s is a fraction of. For work
shorter than the clock's resolution, :func:`batch_seconds` times batches of calls, each batch
ending with a synchronize (the benchmarks' timer).
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from edu_dl import backend

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


class SimulatedAsyncDevice:
    """A device queue on a simulated clock: kernels are seconds of work, nothing sleeps.

    The host's time is ``clock()``; the host spends time only in :meth:`host_work` (what a
    launch or Python costs it) and in waiting (``synchronize``, an event's ``synchronize``). A
    kernel starts when it is launched or when the kernel before it ends, whichever is later, as
    on one CUDA stream. Everything is a number, so every timer gives the same reading on any
    machine.
    """

    def __init__(self, name: str = "simulated-gpu") -> None:
        self.name = name
        self.launches = 0  # kernels launched (events not counted)
        self.syncs = 0  # synchronize() calls
        self.clock_reads = 0  # clock() calls
        self._now = 0.0  # the host's time
        self._ends: list[float] = []  # when each kernel launched so far ends, in order

    def clock(self) -> float:
        """The host's time in seconds on the simulated clock (``time.perf_counter``'s role)."""
        self.clock_reads += 1
        return self._now

    def host_work(self, seconds: float) -> None:
        """The host is busy for ``seconds`` (a launch's cost in Python and the driver)."""
        self._now += _seconds("SimulatedAsyncDevice.host_work", seconds)

    def _idle_at(self) -> float:
        """When the device will have finished everything queued so far."""
        return max(self._now, self._ends[-1]) if self._ends else self._now

    def launch(self, kernel: float) -> None:
        """Queue ``kernel`` seconds of work behind the queue; returns at once (no host time)."""
        seconds = _seconds("SimulatedAsyncDevice.launch", kernel)
        self._ends.append(self._idle_at() + seconds)
        self.launches += 1

    def synchronize(self) -> None:
        """Wait (on the simulated clock) until every kernel launched so far has finished."""
        self.syncs += 1
        self._now = self._idle_at()

    def pending(self) -> int:
        """Kernels queued or running at the host's time."""
        return sum(end > self._now for end in self._ends)

    def event(self) -> SimulatedEvent:
        """A new timing event on this device (``torch.cuda.Event(enable_timing=True)``)."""
        return SimulatedEvent(self)

    def close(self) -> None:
        """Nothing to stop: the simulation has no thread (kept for FakeAsyncDevice's API)."""

    def __enter__(self) -> SimulatedAsyncDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SimulatedEvent:
    """A time stamp on the simulated clock: when the device reaches it in its queue."""

    def __init__(self, device: SimulatedAsyncDevice) -> None:
        self.device = device
        self.time: float | None = None

    def record(self) -> None:
        """Stamp the time the device will reach this point of its queue; returns at once."""
        self.time = self.device._idle_at()

    def synchronize(self) -> None:
        """Wait (on the simulated clock) until the device has reached this event."""
        if self.time is None:
            raise RuntimeError("SimulatedEvent.synchronize: the event was never recorded")
        self.device._now = max(self.device._now, self.time)

    def elapsed_time(self, end: SimulatedEvent) -> float:
        """Milliseconds between this event and ``end`` (both recorded), as CUDA."""
        self.synchronize()
        end.synchronize()
        assert self.time is not None and end.time is not None
        return (end.time - self.time) * 1e3


def _seconds(where: str, value: Any) -> float:
    """A duration as a float, refused (naming ``where``) unless finite and >= 0."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: a duration is a number of seconds, got a "
                        f"{type(value).__name__}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{where}: a duration is finite and >= 0 seconds, got {seconds}")
    return seconds


class Event(Protocol):
    """What torch.cuda.Event and FakeEvent share."""

    def record(self) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: Any) -> float: ...


Clock = Callable[[], float]  # seconds: time.perf_counter, or a simulated device's clock


def time_launch_only(fn: Callable[[], Any], repeats: int = 5,
                     clock: Clock = time.perf_counter) -> list[float]:
    """The WRONG timer for asynchronous work: seconds until fn returns, i.e. the launch."""
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def time_synchronized(fn: Callable[[], Any], synchronize: Callable[[], Any], warmup: int = 1,
                      repeats: int = 5, clock: Clock = time.perf_counter) -> list[float]:
    """Seconds per call of fn, host clock: warm up, then synchronize; start; fn(); synchronize;
    stop. The first synchronize keeps earlier work out of the measurement."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize()
        start = clock()
        fn()
        synchronize()
        times.append(clock() - start)
    return times


# --------------------------------------------------------------------------- batch timing


def batch_seconds(fn: Callable[[], Any], repeats: int, batch_s: float,
                  sync: Callable[[], None] = lambda: None,
                  max_calls: int = 1_000_000) -> list[float]:
    """Seconds per call, one figure per timed batch of calls lasting about ``batch_s``.

    Each batch ends with ``sync()`` inside the timed span: on a GPU, the queued work counts.
    """
    fn()  # warm-up: a Session plans (and folds), kernels compile, arrays get allocated
    sync()
    start, calls = time.perf_counter(), 0
    while calls < 2 or time.perf_counter() - start < batch_s / 4:
        fn()
        calls += 1
    sync()
    n = max(1, min(max_calls, round(batch_s / ((time.perf_counter() - start) / calls))))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / n)
    return samples


def median_seconds(fn: Callable[[], Any], repeats: int, batch_s: float,
                   sync: Callable[[], None] = lambda: None) -> float:
    """The median of ``batch_seconds``."""
    return statistics.median(batch_seconds(fn, repeats, batch_s, sync))


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


# --------------------------------------------------------------------------- real GPUs


def synchronize() -> None:
    """Wait for queued GPU work in Numba, CuPy and PyTorch (no-op without a GPU)."""
    cuda = sys.modules.get("numba.cuda")  # only a library already in use can have work queued
    if cuda is not None and backend.gpu_status("numba")[0]:
        with contextlib.suppress(Exception):  # the simulator: nothing queued to wait for
            cuda.synchronize()
    backend.synchronize()
    if "torch" in sys.modules and backend.gpu_status("torch")[0]:
        sys.modules["torch"].cuda.synchronize()


def time_it(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1,
            sync: Callable[[], None] = synchronize, clock: Clock = time.perf_counter) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs of :func:`time_synchronized`."""
    if repeats < 1:
        raise ValueError(f"time_it: repeats must be >= 1, got {repeats}")
    return statistics.median(time_synchronized(fn, sync, warmup, repeats, clock))


def cuda_timers(fn: Callable[[], Any], warmup: int = 3, repeats: int = 10,
                clock: Clock = time.perf_counter) -> dict[str, float]:
    """Median seconds of fn on the GPU by the three timers: launch only, synchronize, events
    (the host timers read ``clock``)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    result = {"launch_only": statistics.median(time_launch_only(fn, repeats, clock))}
    torch.cuda.synchronize()
    result["synchronize"] = time_it(fn, repeats, 0, torch.cuda.synchronize, clock)
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

    cuda = backend.gpu_status("torch")[0] if cuda is None else cuda
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with quiet_native_stderr(), profile(activities=activities) as prof:
        step()
        if cuda:
            import torch

            torch.cuda.synchronize()
    return prof


# --------------------------------------------------------------------------- GFLOP/s and peaks

# FP32 lanes per streaming multiprocessor by compute capability (CUDA C Programming Guide,
# "Arithmetic Instructions" throughput table); a major version alone is the fallback.
FP32_LANES_PER_SM: dict[tuple[int, int] | int, int] = {
    (6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64,
    3: 192, 5: 128, 6: 128, 7: 64, 8: 128, 9: 128, 10: 128, 12: 128,
}


def gflops(flops: float, seconds: float) -> float:
    """GFLOP/s = FLOPs / seconds / 1e9."""
    if seconds <= 0:
        raise ValueError(f"gflops: seconds must be > 0, got {seconds}")
    return flops / seconds / 1e9


def fp32_lanes(major: int, minor: int) -> int | None:
    """FP32 lanes per SM for compute capability major.minor, or None if unknown."""
    return FP32_LANES_PER_SM.get((major, minor), FP32_LANES_PER_SM.get(major))


def peak_fp32_gflops(sm_count: int, clock_khz: float, major: int, minor: int) -> float | None:
    """Peak = SMs x FP32 lanes per SM x 2 (a fused multiply-add is 2 FLOPs) x clock."""
    lanes = fp32_lanes(major, minor)
    if lanes is None:
        return None
    return sm_count * lanes * 2 * clock_khz * 1e3 / 1e9


def gpu_peak() -> tuple[float | None, str]:
    """(peak FP32 GFLOP/s of the current Numba CUDA device, how it was computed) or (None, why)."""
    usable, why_not = backend.gpu_status("numba")
    if not usable:
        return None, why_not
    try:
        from numba import cuda

        dev = cuda.get_current_device()
        sms, clock_khz = int(dev.MULTIPROCESSOR_COUNT), float(dev.CLOCK_RATE)
        major, minor = dev.compute_capability
    except Exception as exc:  # a driver without these attributes: say so, do not guess
        return None, f"peak unknown ({type(exc).__name__}: {exc})"
    peak = peak_fp32_gflops(sms, clock_khz, major, minor)
    if peak is None:
        return None, f"peak unknown for compute capability {major}.{minor}"
    return peak, (f"{sms} SMs x {fp32_lanes(major, minor)} FP32 lanes x 2 x "
                  f"{clock_khz / 1e6:.2f} GHz (boost clock)")


def fraction_of_peak(measured_gflops: float, peak_gflops: float | None) -> float | None:
    """measured / peak, or None when the peak is unknown."""
    return None if not peak_gflops else measured_gflops / peak_gflops
