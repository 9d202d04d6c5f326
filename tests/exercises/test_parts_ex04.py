"""Exercise 04's part: the solutions notebook passes every case; a timer that forgets to
synchronize measures the launch and fails, and the lecture's timer (a synchronize after every
launch) counts each launch's host cost and fails the stream timer."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, run_check, solution_namespace

from edu_dl.gpu import timing as gpu_timing
from edu_dl.grading import protocol
from edu_dl.grading.authoring import spec
from edu_dl.grading.trust import source as trusted_source
from edu_dl.harness import ex04 as ex04_harness

ex04 = course_module("ex04")
TIMER_NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "04_timing_the_gpu.ipynb"
SOLUTIONS = solution_namespace("04_timing_the_gpu.ipynb")
run = run_check

# --------------------------------------------------------------------------- the timer
# The timer runs on the simulated device's clock: every figure below is exact, on any machine.

timing = pytest.mark.timing
time_kernel = SOLUTIONS["time_kernel"]


def naive(launch, synchronize, clock, warmup, repeats):
    times = []
    for _ in range(repeats):
        start = clock()
        launch()
        times.append(clock() - start)
    return statistics.median(times)


def timer_part() -> spec.Part:
    return next(p for p in ex04.PARTS if p.id == "ex04.stream_timer")


@timing
def test_the_stream_timer_is_graded_in_its_notebook(capsys: pytest.CaptureFixture[str]) -> None:
    part = timer_part()
    found = trusted_source.find_source(nbformat.read(TIMER_NOTEBOOK, as_version=4), part.id)
    assert found is not None and "def time_kernel(" in found and part.source_check is not None
    assert part.source_check(found).ok
    ok, out = run(capsys, part.id, time_kernel)
    assert ok and out.strip() == "✓ ex04.stream_timer: 4 cases passed"


@timing
@pytest.mark.parametrize("hidden", [False, True])
def test_every_case_measures_exactly_what_the_simulation_says(hidden: bool) -> None:
    """The right timer reads kernel_s (1 + LAUNCH_SHARE / repeats), the lecture's kernel_s (1 +
    LAUNCH_SHARE), the naive one a launch's host cost: to the last bits, whatever the load."""
    part = timer_part()
    for args in part.cases(np.random.default_rng(11), hidden):
        kernel_s, repeats = float(args[0]), int(args[2])
        assert repeats >= ex04_harness.MIN_REPEATS, args
        share = ex04_harness.LAUNCH_SHARE
        right = part.call(time_kernel, args)
        assert right == pytest.approx(kernel_s * (1 + share / repeats), rel=1e-12, abs=0)
        assert part.compare(part.expected(*args), right).ok
        lecture = part.call(lecture_timer, args)
        assert lecture == pytest.approx(kernel_s * (1 + share), rel=1e-12, abs=0)
        assert part.call(time_kernel, args) == right  # again: the same bits


@timing
def test_the_check_never_sleeps(monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """No real waiting anywhere in the check: time.sleep raising changes nothing, and the four
    cases (3 s of simulated work and launches, once slept for real) take a blink of the
    machine's time."""
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"the timer's check slept {seconds} s")

    monkeypatch.setattr(time, "sleep", no_sleep)
    begin = time.perf_counter()
    ok, out = run(capsys, "ex04.stream_timer", time_kernel)
    assert ok, out
    assert time.perf_counter() - begin < 30.0  # the check's own work only (loaded: still < 1 s)


@timing
def test_a_timer_without_synchronize_fails(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex04.stream_timer", naive)
    assert not ok and "never called synchronize()" in out


@timing
def test_a_timer_on_the_machines_clock_is_told_to_read_its_own(
        capsys: pytest.CaptureFixture[str]) -> None:
    """time.perf_counter cannot see the simulated time: the check names the clock to read."""
    def perf_counter_timer(launch, synchronize, clock, warmup, repeats):
        for _ in range(warmup):
            launch()
        synchronize()
        begin = time.perf_counter()
        for _ in range(repeats):
            launch()
        synchronize()
        return (time.perf_counter() - begin) / repeats

    ok, out = run(capsys, "ex04.stream_timer", perf_counter_timer)
    assert not ok and "never called clock()" in out and "time.perf_counter" in out


def test_the_grader_judges_the_time_per_kernel() -> None:
    # Outside the sandbox only the returned number counts.
    part = timer_part()
    args = (0.04, 1, 10, 0.0, 0.0)
    verdict = spec.judge_case(part, 0, 4, args, 0.04, 3e-6)
    assert not verdict.ok and "measured 3e-06 s for a kernel that takes 0.04 s" in verdict.message
    assert "hint: the clock stopped while the device was still working" in verdict.message
    assert spec.judge_case(part, 0, 4, args, 0.04, 0.04).ok
    assert spec.judge_case(part, 0, 4, args, 0.04, 0.0424).ok  # what the simulation gives
    assert spec.judge_case(part, 0, 4, args, 0.04, 0.053).ok  # the window's room (1.35)
    assert not spec.judge_case(part, 0, 4, args, 0.04, 0.0541).ok
    per_launch = spec.judge_case(part, 0, 4, args, 0.04, 0.064)  # a launch + a kernel
    assert not per_launch.ok and "hint: that is a launch plus its kernel" in per_launch.message
    assert not spec.judge_case(part, 0, 4, args, 0.04, 0.4).ok  # the 10 repeats' total
    # the simulated clock cannot report less than the kernel's work to a correct timer
    assert not spec.judge_case(part, 0, 4, args, 0.04, 0.0399).ok


@pytest.mark.parametrize("hidden", [False, True])
def test_no_timer_hint_fires_on_a_right_answer(hidden: bool) -> None:
    part = timer_part()
    for args in part.cases(np.random.default_rng(5), hidden):
        e = part.expected(*args)
        # right, what the simulation gives a right timer, the window's top
        for got in (e, part.call(time_kernel, args), ex04_harness.UPPER * e):
            assert part.compare(e, got).ok
            assert not [h.message for h in part.hints if h.applies(e, got, args)], (args, got)


def lecture_timer(launch, synchronize, clock, warmup, repeats):
    """edu_dl.gpu.timing.time_synchronized, the lecture's timer: a synchronize per launch."""
    return statistics.median(gpu_timing.time_synchronized(launch, synchronize, warmup, repeats,
                                                          clock))


@timing
def test_the_lectures_timer_counts_every_launch(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex04.stream_timer", lecture_timer)
    assert not ok and "case 1 of 4" in out and "hint: that is a launch plus its kernel" in out


@timing
def test_a_stream_without_the_last_synchronize(capsys: pytest.CaptureFixture[str]) -> None:
    def host_only(launch, synchronize, clock, warmup, repeats):
        for _ in range(warmup):
            launch()
        synchronize()
        begin = clock()
        for _ in range(repeats):
            launch()
        return (clock() - begin) / repeats  # the host's launches, not the kernels

    ok, out = run(capsys, "ex04.stream_timer", host_only)
    assert not ok and "case 1 of 4" in out
    assert "hint: the clock stopped while the device was still working" in out


@timing
def test_a_stream_that_counts_earlier_work(capsys: pytest.CaptureFixture[str]) -> None:
    def no_first_sync(launch, synchronize, clock, warmup, repeats):
        for _ in range(warmup):
            launch()
        begin = clock()
        for _ in range(repeats):
            launch()
        synchronize()
        return (clock() - begin) / repeats

    ok, out = run(capsys, "ex04.stream_timer", no_first_sync)
    assert not ok and "case 2 of 4" in out
    assert "hint: work queued before your clock started was still running" in out


@timing
def test_a_stream_that_returns_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    """The test a loaded machine once failed (0.323 s measured for ten 30 ms kernels): on the
    simulated clock the total is exactly 10.6 kernels, inside its hint's band."""
    ok, out = run(capsys, "ex04.stream_timer",
                  lambda launch, sync, clock, warmup, repeats: repeats * time_kernel(
                      launch, sync, clock, warmup, repeats))
    assert not ok and "case 1 of 4" in out and "measured 0.424 s" in out
    assert "hint: return the time of ONE kernel" in out


@timing
def test_a_timer_that_launches_too_often(capsys: pytest.CaptureFixture[str]) -> None:
    def twice(launch, synchronize, clock, warmup, repeats):
        launch()
        return time_kernel(launch, synchronize, clock, warmup, repeats)

    ok, out = run(capsys, "ex04.stream_timer", twice)
    assert not ok and "launch() was called 12 times with warmup=1, repeats=10" in out


def test_the_timer_source_must_synchronize_and_read_its_clock() -> None:
    part = timer_part()
    assert part.source_check is not None
    naive_source = '''
def time_kernel(launch, synchronize, clock, warmup, repeats):
    times = []
    for _ in range(repeats):
        start = clock()
        launch()
        times.append(clock() - start)
    return statistics.median(times)
'''
    verdict = part.source_check(naive_source)
    assert not verdict.ok and "never calls synchronize()" in verdict.message
    renamed = '''
def time_kernel(go, wait, tick, warmup, repeats):
    wait()
    start = tick()
    go()
    wait()
    return tick() - start
'''
    assert part.source_check(renamed).ok  # the parameters' own names count
    machine_clock = renamed.replace("tick()", "time.perf_counter()")
    assert "never calls tick()" in part.source_check(machine_clock).message
    inside = renamed.replace("return tick() - start", "return go._kernel_s + 0 * tick()")
    verdict = part.source_check(inside)
    assert not verdict.ok and "not look inside them: it reads go._kernel_s" in verdict.message


def test_the_grader_refuses_a_forged_timer_by_its_source() -> None:
    from edu_dl.grading.stages import judge

    part = timer_part()
    cases = protocol.roundtrip(part.cases(np.random.default_rng(7), False))
    forged = [part.expected(*args) for args in cases]  # perfect values from a hacked sandbox
    status, message = judge.judge(part, cases, forged, '''
def time_kernel(launch, synchronize, clock, warmup, repeats):
    start = clock()
    launch()
    return clock() - start
''')
    assert status != "passed" and message.startswith("the values are right, but")


PEEK = '''
def time_kernel(launch, synchronize, clock, warmup, repeats):
    synchronize()
    clock()  # looks like a timer
    return sys._getframe(1).f_locals["args"][0]
'''


@timing
def test_the_frame_peek_finds_no_case(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The review's attack scored 3/3: a timer returning the caller's args[0], the kernel's own
    duration. Run as the sandbox runs it (the pickled call=, the inputs file), no frame above
    the student's function holds a case, and the grader refuses the source."""
    import sys

    from edu_dl.grading import check
    from edu_dl.grading.stages import judge, load

    part = timer_part()
    cases = protocol.roundtrip(part.cases(np.random.default_rng(3), False))
    protocol.write_inputs(tmp_path / "inputs" / f"{part.id}.npz", cases)
    (tmp_path / "inputs" / f"{part.id}.call.pkl").write_bytes(load.pickled_call(part))
    monkeypatch.setenv(protocol.GRADING_ENV, str(tmp_path))
    seen: list[Any] = []
    this_test = sys._getframe(0).f_code  # in a notebook, check()'s caller is the cell

    def peek(launch: Any, synchronize: Any, clock: Any, warmup: int, repeats: int) -> Any:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not this_test:  # every frame up to check()
            seen.extend(frame.f_locals.values())
            frame = frame.f_back
        synchronize()
        return sys._getframe(1).f_locals["args"][0]

    check(part.id, peek)
    _, got = protocol.read_outputs(tmp_path / "outputs" / f"{part.id}.1.npz")
    durations = {float(args[0]) for args in cases}
    assert len(seen) > 10
    held = seen + [x for value in seen if isinstance(value, tuple | list) for x in value]
    assert not [v for v in held if isinstance(v, float) and v in durations]
    assert not [v for v in held if isinstance(v, tuple) and v in cases]
    status, message = judge.judge(part, cases, got, PEEK)
    assert status == "failed" and "KeyError" in message, message
    # Had the values been right, the source would still give it away.
    status, message = judge.judge(part, cases, [part.expected(*a) for a in cases], PEEK)
    assert status == "failed" and "look its duration up: it uses _getframe" in message
