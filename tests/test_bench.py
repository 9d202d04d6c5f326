"""The benchmark's code paths, not its speed: no test here asserts a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edu_dl import bench
from edu_dl.cli import main

STEPS = 3


def losses(framework: str, size: str = "tiny") -> list[float]:
    """The first STEPS losses of ``framework``, then the first loss again after reset()."""
    trainer = bench.make_trainer(framework, size)
    trainer.reset()
    values = [trainer.loss_of(trainer.step()) for _ in range(STEPS)]
    trainer.reset()
    return [*values, trainer.loss_of(trainer.step())]


@pytest.fixture(scope="module")
def numpy_losses() -> list[float]:
    return losses("numpy")


def test_problem_is_seeded_float32() -> None:
    a, b = bench.make_problem("tiny"), bench.make_problem("tiny")
    for name in ("x", "y", "w1", "w2"):
        assert getattr(a, name).dtype == np.float32
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.w1.shape == (16, 16) and a.w2.shape == (16, 10)


def test_numpy_step_is_the_lectures_loss_and_gradients(numpy_losses: list[float]) -> None:
    """Hand-written NumPy agrees with float64 autograd (torch) on the loss mean(sum(diff**2, 1))."""
    torch = pytest.importorskip("torch")
    p = bench.make_problem("tiny")
    x, y = torch.from_numpy(p.x).double(), torch.from_numpy(p.y).double()
    w1 = torch.from_numpy(p.w1).double().requires_grad_()
    w2 = torch.from_numpy(p.w2).double().requires_grad_()
    for expected in numpy_losses[:STEPS]:
        loss = ((torch.relu(x @ w1) @ w2 - y) ** 2).sum(dim=1).mean()
        loss.backward()
        with torch.no_grad():
            w1 -= p.lr * w1.grad
            w2 -= p.lr * w2.grad
            w1.grad = w2.grad = None
        assert expected == pytest.approx(loss.item(), rel=1e-5)
    assert numpy_losses[STEPS] == numpy_losses[0], "reset() must restore the initial weights"


@pytest.mark.parametrize(
    "framework",
    [
        "eager",
        "static",
        "torch",
        pytest.param("tf_function", marks=pytest.mark.slow),  # importing TensorFlow takes ~5 s
    ],
)
def test_every_framework_computes_the_same_losses(
    framework: str, numpy_losses: list[float]
) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    if framework == "tf_function":
        pytest.importorskip("tensorflow")
    # Float32 with different summation orders: agreement to ~1e-6 relative, not bit for bit.
    np.testing.assert_allclose(losses(framework), numpy_losses, rtol=1e-5)


def test_time_steps_and_calibrate_run() -> None:
    trainer = bench.make_trainer("numpy", "tiny")
    assert bench.time_steps(trainer, 2) > 0
    assert bench.calibrate(trainer, target_s=0.001) >= 1


def test_worker_round_trip() -> None:
    worker = bench.Worker("numpy")
    try:
        first = worker.ask("setup", size="tiny", warmup_s=0.0)["first_loss"]
        assert first == pytest.approx(losses("numpy")[0], rel=1e-6)
        assert worker.ask("time", steps=2)["seconds"] > 0
        with pytest.raises(bench.WorkerError, match="unknown command"):
            worker.ask("fly")
    finally:
        worker.close()


def test_worker_reports_a_failed_setup() -> None:
    worker = bench.Worker("numpy")
    try:
        with pytest.raises(bench.WorkerError, match="KeyError"):
            worker.ask("setup", size="huge", warmup_s=0.0)
    finally:
        worker.close()


def test_bench_engine_writes_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "RESULTS.md"
    argv = ["bench", "engine", "--sizes", "tiny", "--frameworks", "numpy,eager", "--repeats",
            "1", "--quick", "--out", str(out)]
    assert main(argv) == 0
    text = out.read_text(encoding="utf-8")
    assert "| size | N, D, H, out | NumPy by hand | edu_dl eager |" in text
    row = next(line for line in text.splitlines() if line.startswith("| tiny |"))
    assert f"(1.00{bench.TIMES})" in row and "n/a" not in row
    assert "### Targets" in text and "### Machine" in text
    assert "warning" not in capsys.readouterr().err


def test_targets_are_checked_from_ratios() -> None:
    result = bench.EngineResult(["tiny"], ["numpy", "eager", "torch"], repeats=1)
    result.seconds = {("tiny", "numpy"): 10e-6, ("tiny", "eager"): 20e-6, ("tiny", "torch"): 100e-6}
    verdicts = {t.text: (ratio, met) for t, ratio, met in bench.check_targets(result)}
    assert verdicts[f"eager ≤ 2.0{bench.TIMES} NumPy at tiny"] == (pytest.approx(2.0), True)
    torch_target = f"eager ≥ 4{bench.TIMES} faster than PyTorch eager at tiny"
    assert verdicts[torch_target] == (pytest.approx(5.0), True)
    assert verdicts[f"eager ≤ 1.05{bench.TIMES} NumPy at large"] == (None, None)


def test_disagreeing_losses_are_a_warning() -> None:
    result = bench.EngineResult(["tiny"], ["numpy", "eager"], repeats=1)
    result.first_losses = {("tiny", "numpy"): 1.0, ("tiny", "eager"): 1.1}
    bench._check_losses(result, "tiny", ["numpy", "eager"])
    assert len(result.warnings) == 1 and "eager" in result.warnings[0]


def test_format_time() -> None:
    assert bench.format_time(37.2e-6) == "37.2 µs"
    assert bench.format_time(114e-6) == "114 µs"
    assert bench.format_time(1.5e-3) == "1.5 ms"
    assert bench.format_time(2.0) == "2 s"


def test_bench_plan_runs() -> None:
    rows = bench.run_plan(repeats=1, quick=True)
    assert [row.name.split(":")[0] for row in rows] == ["pruning", "constant folding"]
    assert all(row.eager_s > 0 and row.static_s > 0 for row in rows)
    assert "| optimization |" in bench.plan_markdown(rows)


def test_thread_env_caps_every_pool() -> None:
    env = bench.thread_env(1)
    assert env["OPENBLAS_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "1"
    assert env[bench.THREADS_ENV] == "1"


def test_engine_splits_its_repeats_among_fresh_worker_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    timed: list[int] = []

    class CountingWorker(bench.Worker):
        def __init__(self, framework: str, threads: int | None = None) -> None:
            started.append(framework)
            super().__init__(framework, threads)

        def ask(self, command: str, **args: Any) -> dict[str, Any]:
            if command == "time":
                timed.append(len(started))  # which round of processes timed this batch
                super().ask(command, **args)
                # Round 2's process is the fast one; round 3's is slow.
                return {"seconds": {1: 5e-3, 2: 2e-3, 3: 9e-3}[len(started)]}
            return super().ask(command, **args)

    monkeypatch.setattr(bench, "Worker", CountingWorker)
    monkeypatch.setattr(bench, "BATCH_SECONDS", 0.005)
    monkeypatch.setattr(bench, "SETTLE_SECONDS", 0.0)
    result = bench.run_engine(["tiny"], ["numpy"], repeats=5, progress=False, processes=3)
    assert started == ["numpy"] * 3
    assert timed == [1, 1, 2, 2, 3]  # 5 repeats over 3 rounds: 2, 2, 1
    assert result.processes == 3
    assert result.seconds["tiny", "numpy"] == 2e-3  # the fastest process's median
    # Never more rounds than repeats, and one with --quick.
    started.clear()
    assert bench.run_engine(["tiny"], ["numpy"], repeats=2, progress=False,
                            processes=4).processes == 2
    assert bench.run_engine(["tiny"], ["numpy"], repeats=2, progress=False, quick=True,
                            processes=4).processes == 1
