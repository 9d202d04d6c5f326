"""Timing asynchronous work: the fake device's launches return at once, synchronize and events
measure the work, errors surface at the next synchronize; the simulated device's clock gives every
timer its exact reading; on CUDA when there is one.

Nothing here rests on how busy the machine is: the thread-backed device is gated (a kernel that
waits for the test's signal) or bounded from below only (a sleep never ends early), and every
figure with an upper bound is read on the simulated clock."""

from __future__ import annotations

import re
import sys
import threading
import types

import pytest

from edu_dl import backend
from edu_dl.gpu import timing as gpu_timing
from edu_dl.gpu.timing import FakeAsyncDevice, SimulatedAsyncDevice

KERNEL_S = 0.03  # a sleep never ends early: every lower bound below is exact


@pytest.fixture
def device():
    with FakeAsyncDevice() as dev:
        yield dev


def test_a_launch_returns_before_the_work_is_done(device: FakeAsyncDevice) -> None:
    gate = threading.Event()  # the first kernel runs until the test opens the gate
    device.launch(gate.wait)
    for _ in range(2):
        device.launch(KERNEL_S)
    assert device.pending() == 3 and device.launches == 3  # all three returned, none ran
    gate.set()
    device.synchronize()
    assert device.pending() == 0 and device.syncs == 1


def test_the_simulated_launch_costs_no_time_and_synchronize_waits() -> None:
    sim = SimulatedAsyncDevice()
    times = gpu_timing.time_launch_only(lambda: sim.launch(0.1), repeats=3, clock=sim.clock)
    assert times == [0.0, 0.0, 0.0] and sim.pending() == 3 and sim.launches == 3
    sim.synchronize()
    assert sim.clock() == pytest.approx(0.3, abs=1e-15) and sim.pending() == 0


@pytest.mark.timing
def test_synchronized_timer_measures_the_work(device: FakeAsyncDevice) -> None:
    times = gpu_timing.time_synchronized(lambda: device.launch(KERNEL_S), device.synchronize,
                                         warmup=1, repeats=3)
    assert len(times) == 3 and min(times) >= KERNEL_S  # a lower bound: load only adds
    assert device.launches == 4 and device.syncs == 6


def test_synchronized_timer_on_the_simulated_clock_is_exact() -> None:
    sim = SimulatedAsyncDevice()

    def launch() -> None:
        sim.host_work(0.01)  # the host's cost of a launch, counted by a per-launch timer
        sim.launch(KERNEL_S)

    times = gpu_timing.time_synchronized(launch, sim.synchronize, warmup=1, repeats=3,
                                         clock=sim.clock)
    assert times == pytest.approx([0.01 + KERNEL_S] * 3, rel=1e-12)
    assert sim.launches == 4 and sim.syncs == 6


@pytest.mark.timing
def test_events_measure_the_work_on_the_device_clock(device: FakeAsyncDevice) -> None:
    times = gpu_timing.time_events(lambda: device.launch(KERNEL_S), device.event, repeats=3)
    assert min(times) >= KERNEL_S


def test_simulated_events_stamp_the_device_not_the_host() -> None:
    sim = SimulatedAsyncDevice()
    sim.launch(0.5)  # earlier work: the start event is reached when it ends
    start, end = sim.event(), sim.event()
    start.record()
    sim.host_work(0.2)  # the host's time between the events is not the device's
    sim.launch(KERNEL_S)
    end.record()
    assert sim.clock() == pytest.approx(0.2) and start.elapsed_time(end) == pytest.approx(30.0)
    assert sim.clock() == pytest.approx(0.5 + KERNEL_S)  # elapsed_time waited for the events
    with pytest.raises(RuntimeError, match="never recorded"):
        sim.event().synchronize()


def test_earlier_work_is_kept_out() -> None:
    sim = SimulatedAsyncDevice()
    sim.launch(0.3)  # still running when the timer starts
    (synced,) = gpu_timing.time_synchronized(lambda: sim.launch(0.01), sim.synchronize,
                                             warmup=0, repeats=1, clock=sim.clock)
    assert synced == pytest.approx(0.01, rel=1e-12)


@pytest.mark.parametrize(("call", "message"), [
    (lambda sim: sim.launch(-1.0), "SimulatedAsyncDevice.launch: a duration is finite and >= 0"),
    (lambda sim: sim.launch(float("nan")), "finite and >= 0 seconds, got nan"),
    (lambda sim: sim.host_work("soon"), "host_work: a duration is a number of seconds, got a str"),
    (lambda sim: sim.launch(lambda: None), "a number of seconds, got a function"),
])
def test_the_simulated_device_refuses_what_is_not_a_duration(call, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(message)):
        call(SimulatedAsyncDevice())


def test_kernels_run_in_order_and_functions_too(device: FakeAsyncDevice) -> None:
    order: list[int] = []
    for k in range(5):
        device.launch(lambda k=k: order.append(k))
    device.synchronize()
    assert order == [0, 1, 2, 3, 4]


def test_an_error_surfaces_at_the_next_synchronize(device: FakeAsyncDevice) -> None:
    ran: list[str] = []
    device.launch(lambda: 1 / 0)
    device.launch(lambda: ran.append("after the error"))  # skipped, as CUDA would
    end = device.event()
    end.record()  # an event still stamps: waiting on it cannot hang
    end.synchronize()
    with pytest.raises(ZeroDivisionError):
        device.synchronize()
    assert ran == []
    device.launch(lambda: ran.append("fresh"))
    device.synchronize()  # the error was reported once; the device works again
    assert ran == ["fresh"]


def test_close_finishes_the_queue() -> None:
    dev = FakeAsyncDevice()
    done: list[int] = []
    dev.launch(0.01)
    dev.launch(lambda: done.append(1))
    dev.close()
    assert done == [1] and not dev._thread.is_alive()


def test_cuda_timers_logic_on_a_fake_torch_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """test_cuda_timers' logic without a GPU: torch.cuda's synchronize and Event are the simulated
    device's, and so is the clock, so the three timers read exactly a launch (no time) and the
    work (KERNEL_S)."""
    sim = SimulatedAsyncDevice()
    cuda = types.SimpleNamespace(synchronize=sim.synchronize,
                                 Event=lambda enable_timing: sim.event())
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    result = gpu_timing.cuda_timers(lambda: sim.launch(KERNEL_S), warmup=1, repeats=3,
                                    clock=sim.clock)
    assert result == pytest.approx({"launch_only": 0.0, "synchronize": KERNEL_S,
                                    "cuda_events": KERNEL_S}, rel=1e-12, abs=1e-15)


@pytest.mark.gpu
@pytest.mark.timing
def test_cuda_timers() -> None:  # pragma: no cover - needs a GPU
    if not backend.gpu_status("torch")[0]:  # asks torch: when the test runs, not at collection
        pytest.skip("No CUDA GPU")
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    result = gpu_timing.cuda_timers(lambda: a @ a, warmup=2, repeats=5)
    assert result["launch_only"] < result["synchronize"]
    assert result["cuda_events"] <= result["synchronize"] * 1.5


def test_torchs_gpu_status_is_false_without_torch_and_a_bool_from_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PyTorch there is no CUDA to time (not an ImportError); with it, torch's answer as
    a bool, whatever truthy value it gives (an isinstance check of it alone could not fail)."""
    backend.gpu_status.cache_clear()  # the backend asks each framework once; here, every time
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    try:
        assert backend.gpu_status("torch")[0] is False
        for answer, want in ((1, True), (0, False)):
            backend.gpu_status.cache_clear()
            cuda = types.SimpleNamespace(is_available=lambda answer=answer: answer,
                                         device_count=lambda answer=answer: answer)
            fake = types.SimpleNamespace(cuda=cuda, __version__="9.9")
            monkeypatch.setitem(sys.modules, "torch", fake)
            assert backend.gpu_status("torch")[0] is want
    finally:
        backend.gpu_status.cache_clear()


def test_profile_step_is_quiet_and_sees_the_ops(capfd: pytest.CaptureFixture[str]) -> None:
    import torch

    x = torch.randn(16, 16)
    prof = gpu_timing.profile_step(lambda: (x @ x).relu(), cuda=False)
    names = {event.key for event in prof.key_averages()}
    assert {"aten::mm", "aten::relu"} <= names or "aten::matmul" in names
    assert "profiler_start" not in capfd.readouterr().err
    print("still", file=__import__("sys").stderr)
    assert "still" in capfd.readouterr().err  # stderr is back


# --------------------------------------------------------------------------- real GPUs, faked


def test_synchronize_waits_only_for_libraries_in_use_with_a_gpu(monkeypatch) -> None:
    import sys
    import types

    from edu_dl import backend

    waited: list[str] = []
    numba_cuda = types.SimpleNamespace(synchronize=lambda: waited.append("numba"))
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        synchronize=lambda: waited.append("torch")))
    monkeypatch.setitem(sys.modules, "numba.cuda", numba_cuda)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(backend, "synchronize", lambda: waited.append("cupy"))
    gpus = {"numba": True, "torch": False}
    monkeypatch.setattr(backend, "gpu_status", lambda name="cupy": (gpus[name], "faked"))
    gpu_timing.synchronize()
    assert waited == ["numba", "cupy"]  # PyTorch has no GPU here: nothing of it to wait for
    waited.clear()
    gpus.update(numba=False, torch=True)
    gpu_timing.synchronize()
    assert waited == ["cupy", "torch"]


def test_gpu_peak_without_a_gpu_gives_the_backends_reason(monkeypatch) -> None:

    monkeypatch.setattr(backend, "gpu_status",
                        lambda name="cupy": (False, f"{name} finds no CUDA device"))
    assert gpu_timing.gpu_peak() == (None, "numba finds no CUDA device")
