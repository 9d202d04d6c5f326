"""The one worker protocol of the benchmarks (edu_dl.util.worker): answers, items, errors,
deaths and deadlines, each reported, never hung on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from edu_dl.util.worker import THREADS_ENV, Worker, WorkerError, run_in_worker, thread_env

HERE = [str(Path(__file__).resolve().parent)]  # where bench_worker_helpers lives
HELPERS = "bench_worker_helpers"


def test_a_call_comes_back_with_its_result() -> None:
    assert run_in_worker("edu_dl.util.args:int_list", text="3,1,3") == [1, 3]


def test_one_worker_serves_many_calls_and_streams_a_generators_items() -> None:
    with Worker("helpers", pythonpath=HERE) as worker:
        worker.send(f"{HELPERS}:count", n=3)
        assert list(worker.stream()) == [0, 1, 2]
        assert worker.call(f"{HELPERS}:noisy") == "ok"  # what a library prints is kept apart
        with pytest.raises(WorkerError, match="ValueError: boom") as exc:
            worker.call(f"{HELPERS}:boom")
        assert exc.value.kind == "error"
        assert worker.call(f"{HELPERS}:nap", seconds=0.0) == 0.0  # it survived the error


def test_a_dying_worker_is_reported_with_its_exit_status_and_stderr() -> None:
    with pytest.raises(WorkerError, match="exited with code 3") as exc:
        run_in_worker(f"{HELPERS}:die", pythonpath=HERE)
    assert exc.value.kind == "died" and exc.value.returncode == 3
    assert "dying now" in exc.value.tail


def test_a_worker_past_its_deadline_is_killed() -> None:
    with pytest.raises(WorkerError, match=r"ran past 0\.5 s and was killed") as exc:
        run_in_worker(f"{HELPERS}:nap", pythonpath=HERE, timeout_s=0.5, seconds=30)
    assert exc.value.kind == "timeout"


def test_a_program_that_does_not_speak_the_protocol_gives_no_answer() -> None:
    worker = Worker("stranger", argv=[sys.executable, "-c", "print('hello')"])
    worker.send("anything:at_all")
    with pytest.raises(WorkerError, match="without an answer") as exc:
        worker.receive(30)
    worker.close()
    assert exc.value.returncode == 0


def test_unknown_calls_are_errors() -> None:
    with pytest.raises(WorkerError, match="ModuleNotFoundError"):
        run_in_worker("edu_dl.no_such_module:f")
    with pytest.raises(WorkerError, match="expected 'module:function'"):
        run_in_worker("edu_dl.util.args")


def test_threads_and_environment_reach_the_worker() -> None:
    env = thread_env(1)
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == env[THREADS_ENV] == "1"
    with Worker("env", threads=2, env={"EDU_DL_TEST": "yes"}, pythonpath=HERE) as worker:
        assert worker.call(f"{HELPERS}:env", name="OMP_NUM_THREADS") == "2"
        assert worker.call(f"{HELPERS}:env", name="EDU_DL_TEST") == "yes"
