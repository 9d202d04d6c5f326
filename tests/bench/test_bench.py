"""The engine benchmark's code paths, not its speed: no test here asserts a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edu_dl.bench import engine, fused, plan, problems, trainers
from edu_dl.bench.common import TIMES, format_time
from edu_dl.bench.device import Device
from edu_dl.cli import main
from edu_dl.models import spec as models

STEPS = 3


def losses(framework: str, size: str = "tiny", device: Device | None = None) -> list[float]:
    """The first STEPS losses of ``framework``, then the first loss again after reset()."""
    trainer = trainers.make_trainer(framework, size, device)
    trainer.reset()
    values = [trainer.loss_of(trainer.step()) for _ in range(STEPS)]
    trainer.reset()
    return [*values, trainer.loss_of(trainer.step())]


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def numpy_losses() -> list[float]:
    return losses("numpy")


def test_problem_is_seeded_float32_and_drawn_by_models() -> None:
    a, b = problems.make_problem("tiny"), problems.make_problem("tiny")
    spec = models.sized("tiny")
    x, _ = spec.make_data(np.float32)
    for name in ("X", "Y", "w1", "w2"):
        assert getattr(a, name).dtype == np.float32
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.X, x)
    np.testing.assert_array_equal(a.w1, spec.init_weights(np.float32)["w1"])
    assert (a.X.shape, a.w1.shape, a.w2.shape) == ((8, 16), (16, 16), (16, 10))
    assert a.spec == spec and a.spec.lr("sgd") == models.BENCH_RATES["tiny"]


def test_numpy_step_is_the_lectures_loss_and_gradients(numpy_losses: list[float]) -> None:
    """Hand-written NumPy agrees with float64 autograd (torch) on the loss mean(sum(diff**2, 1))."""
    torch = pytest.importorskip("torch")
    p = problems.make_problem("tiny")
    x, y = torch.from_numpy(p.X).double(), torch.from_numpy(p.Y).double()
    w1 = torch.from_numpy(p.w1).double().requires_grad_()
    w2 = torch.from_numpy(p.w2).double().requires_grad_()
    for expected in numpy_losses[:STEPS]:
        loss = ((torch.relu(x @ w1) @ w2 - y) ** 2).sum(dim=1).mean()
        loss.backward()
        with torch.no_grad():
            w1 -= p.spec.lr("sgd") * w1.grad
            w2 -= p.spec.lr("sgd") * w2.grad
            w1.grad = w2.grad = None
        assert expected == pytest.approx(loss.item(), rel=1e-5)
    assert numpy_losses[STEPS] == numpy_losses[0], "reset() must restore the initial weights"


@pytest.mark.parametrize(
    "framework",
    [
        "eager",
        "static",
        "static_unfused",
        "planned",
        "planned_assign",
        "torch",
        "host",
        pytest.param("tf_function", marks=pytest.mark.slow),  # importing TensorFlow takes ~5 s
    ],
)
@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_every_framework_computes_the_same_losses(
    framework: str, numpy_losses: list[float]
) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    if framework == "tf_function":
        pytest.importorskip("tensorflow")
    # Float32 with different summation orders: agreement to ~1e-6 relative, not bit for bit.
    np.testing.assert_allclose(losses(framework), numpy_losses, rtol=1e-5)


@pytest.mark.parametrize("framework", ["numpy", "eager", "static", "planned"])
def test_the_gpu_modes_code_on_a_fake_gpu_computes_the_same_losses(
    framework: str, numpy_losses: list[float]
) -> None:
    """A fake GPU runs the GPU mode's trainers with NumPy as xp: same steps, same numbers."""
    np.testing.assert_allclose(losses(framework, device=Device("gpu", fake=True)),
                               numpy_losses, rtol=1e-5)


def test_time_steps_waits_for_the_device_inside_the_timed_span() -> None:
    trainer = trainers.make_trainer("numpy", "tiny")
    events: list[str] = []
    step = trainer.step
    trainer.step = lambda: events.append("step") or step()
    trainer.sync = lambda: events.append("sync")
    assert trainers.time_steps(trainer, 2) > 0
    assert events == ["sync", "step", "step", "sync"]  # settled before, waited for after
    assert trainers.calibrate(trainer, target_s=0.001) >= 1


def test_worker_side_setup_calibrate_and_time() -> None:
    first = trainers.setup("numpy", "tiny", warmup_s=0.0)["first_loss"]
    assert first == pytest.approx(losses("numpy")[0], rel=1e-6)
    assert trainers.calibrate_steps(0.001) >= 1 and trainers.time_batch(2) > 0
    with pytest.raises(KeyError, match="huge"):
        trainers.setup("numpy", "huge", warmup_s=0.0)


def test_bench_engine_writes_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "engine", "--sizes", "tiny", "--frameworks", "numpy,eager", "--repeats",
            "1", "--quick", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    text = (tmp_path / "engine.md").read_text(encoding="utf-8")
    assert text == capsys.readouterr().out  # printed and written alike
    assert "| size | N, D, H, out | NumPy by hand | edu_dl eager |" in text
    row = next(line for line in text.splitlines() if line.startswith("| tiny |"))
    assert f"(1.00{TIMES})" in row and "n/a" not in row
    assert "### Targets" in text and "### Machine" in text and "Device: CPU" in text
    data = json.loads((tmp_path / "engine.json").read_text())
    back = engine.EngineResult.from_json(data)
    assert back.seconds["tiny", "numpy"] and back.device == Device("cpu")
    assert (tmp_path / "engine.png").read_bytes()[:4] == b"\x89PNG"


def test_a_worker_that_fails_loses_its_framework_not_the_run() -> None:
    result = engine.run_engine(["tiny", "huge"], ["numpy"], repeats=1, quick=True,
                               progress_bar=False)
    assert result.seconds["tiny", "numpy"] and "KeyError" in result.errors["numpy"]
    assert result.seconds["huge", "numpy"] is None


def test_targets_are_checked_from_ratios() -> None:
    result = engine.EngineResult(["tiny"], ["numpy", "eager", "torch"], repeats=1)
    result.seconds = {("tiny", "numpy"): 10e-6, ("tiny", "eager"): 20e-6, ("tiny", "torch"): 100e-6}
    verdicts = {t.text: (ratio, met) for t, ratio, met in engine.check_targets(result)}
    assert verdicts[f"eager ≤ 2.0{TIMES} NumPy at tiny"] == (pytest.approx(2.0), True)
    torch_target = f"eager ≥ 4{TIMES} faster than PyTorch eager at tiny"
    assert verdicts[torch_target] == (pytest.approx(5.0), True)
    assert verdicts[f"eager ≤ 1.05{TIMES} NumPy at large"] == (None, None)


def test_gpu_targets_are_the_h100_baselines() -> None:
    result = engine.EngineResult(["large"], ["numpy", "eager", "static", "torch"], repeats=1,
                                 device=Device("gpu", fake=True))
    # The H100 baseline: eager 1.00x hand CuPy, torch 0.82x of it, so eager/torch = 1.22x.
    result.seconds = {("large", "numpy"): 600e-6, ("large", "eager"): 600e-6,
                      ("large", "static"): 650e-6, ("large", "torch"): 491e-6}
    verdicts = {t.text: (ratio, met) for t, ratio, met in engine.check_targets(result)}
    assert verdicts[f"eager ≤ 1.05{TIMES} CuPy by hand at large"] == (pytest.approx(1.0), True)
    assert verdicts[f"static ≤ 1.05{TIMES} CuPy by hand at large"][1] is False
    assert verdicts[f"eager ≤ 1.2{TIMES} PyTorch CUDA at large"] == (pytest.approx(1.222, abs=1e-3),
                                                                    False)
    assert verdicts[f"eager ≤ 1.05{TIMES} CuPy by hand at xl"] == (None, None)
    text = engine.engine_markdown(result)
    assert "### GPU targets" in text and "| CuPy by hand |" in text
    assert "fake GPU" in text and "not measured" in text


def test_disagreeing_losses_are_a_warning() -> None:
    result = engine.EngineResult(["tiny"], ["numpy", "eager"], repeats=1)
    result.first_losses = {("tiny", "numpy"): 1.0, ("tiny", "eager"): 1.1}
    engine._check_losses(result, "tiny", ["numpy", "eager"])
    assert len(result.warnings) == 1 and "eager" in result.warnings[0]


def test_format_time() -> None:
    assert format_time(37.2e-6) == "37.2 µs"
    assert format_time(114e-6) == "114 µs"
    assert format_time(1.5e-3) == "1.5 ms"
    assert format_time(2.0) == "2 s"


@pytest.mark.parametrize("device", [Device("cpu"), Device("gpu", fake=True)])
def test_bench_plan_runs(device: Device) -> None:
    rows = plan.run_plan(repeats=1, quick=True, device=device)
    assert [row.name.split(":")[0] for row in rows] == ["pruning", "constant folding"]
    assert all(row.eager_s > 0 and row.static_s > 0 for row in rows)
    text = plan.plan_markdown(rows, device)
    assert "| optimization |" in text and device.synced in text


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_engine_splits_its_repeats_among_fresh_worker_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    timed: list[int] = []

    class CountingWorker(engine.Worker):
        def __init__(self, name: str, **kwargs: Any) -> None:
            started.append(name)
            super().__init__(name, **kwargs)

        def call(self, call: str, /, timeout_s: float | None = None, **kwargs: Any) -> Any:
            if call.endswith(":time_batch"):
                timed.append(len(started))  # which round of processes timed this batch
                super().call(call, timeout_s, **kwargs)
                # Round 2's process is the fast one; round 3's is slow.
                return {1: 5e-3, 2: 2e-3, 3: 9e-3}[len(started)]
            return super().call(call, timeout_s, **kwargs)

    monkeypatch.setattr(engine, "Worker", CountingWorker)
    monkeypatch.setattr(engine, "BATCH_SECONDS", 0.005)
    monkeypatch.setattr(engine, "SETTLE_SECONDS", 0.0)
    result = engine.run_engine(["tiny"], ["numpy"], repeats=5, progress_bar=False, processes=3)
    assert len(started) == 3 and all(name.startswith("numpy") for name in started)
    assert timed == [1, 1, 2, 2, 3]  # 5 repeats over 3 rounds: 2, 2, 1
    assert result.processes == 3
    assert result.seconds["tiny", "numpy"] == 2e-3  # the fastest process's median
    # Never more rounds than repeats, and one with --quick.
    started.clear()
    assert engine.run_engine(["tiny"], ["numpy"], repeats=2, progress_bar=False,
                             processes=4).processes == 2
    assert engine.run_engine(["tiny"], ["numpy"], repeats=2, progress_bar=False, quick=True,
                             processes=4).processes == 1


def _fused_result(planned: tuple[float, float], hand: tuple[float, float]) -> engine.EngineResult:
    """A bench plan result at tiny: two rounds each of the hand-written and the fused step."""
    result = engine.EngineResult(["tiny"], ["numpy", "planned"], repeats=2, processes=2)
    result.rounds = {("tiny", "numpy"): list(hand), ("tiny", "planned"): list(planned)}
    result.seconds = {key: min(rounds) for key, rounds in result.rounds.items()}
    return result


def test_bench_plan_reports_ratios_their_spread_and_the_targets() -> None:
    text = fused.fused_markdown(_fused_result(planned=(4e-6, 9e-6), hand=(20e-6, 30e-6)))
    # 4 / 20 = 0.20x from the fastest rounds; round by round 0.20 and 0.30.
    assert f"4 µs (0.20{TIMES}; rounds 0.20 to 0.30)" in text
    assert f"| fused plan ≤ 0.5{TIMES} NumPy by hand at tiny | 0.20{TIMES} | yes |" in text
    assert "at lecture | not measured | — |" in text
    slow = fused.fused_markdown(_fused_result(planned=(15e-6, 16e-6), hand=(20e-6, 21e-6)))
    assert f"at tiny | 0.75{TIMES} | **no** |" in slow


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("device", [Device("cpu"), Device("gpu", fake=True)])
def test_bench_plan_times_the_fused_plan(device: Device) -> None:
    result = fused.run_fused(repeats=1, quick=True, device=device, processes=1,
                             progress_bar=False)
    assert result.errors == {} and result.warnings == []  # first losses agree
    for size in fused.FUSED_SIZES[device.kind]:
        for fw in fused.FUSED_FRAMEWORKS[device.kind]:
            assert result.seconds[size, fw] is not None and result.seconds[size, fw] > 0
    text = fused.fused_markdown(result)
    assert ("### Targets" in text) == (device.kind == "cpu")
    assert ("ElementwiseKernel" in text) == (device.kind == "gpu")


def test_the_machine_lines_name_numpys_blas_beside_scipys(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """SciPy loads an OpenBLAS of its own; the report names NumPy's (the one the hand-written
    steps call), whichever threadpoolctl lists first."""
    import threadpoolctl

    from edu_dl.bench import common

    mine = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["version"]
    libs = [{"user_api": "blas", "internal_api": "openblas", "version": "0.0.1-scipys",
             "architecture": "Haswell", "num_threads": 2, "threading_layer": "pthreads"},
            {"user_api": "blas", "internal_api": "openblas", "version": mine,
             "architecture": "SkylakeX", "num_threads": 1, "threading_layer": "pthreads"}]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: libs)
    assert common.blas_description() == f"openblas {mine} (SkylakeX, 1 threads, pthreads)"
