"""Data parallelism: R workers, N/R rows each, averaged gradients = one worker with all N rows."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import time

import numpy as np
import pytest
from fixtures.frameworks import dist, torch

import edu_dl
from edu_dl import parallel as par  # its torch modules load on first use, not at collection
from edu_dl.backend import DeviceError


# float64 and a mean loss: averaging the shards' gradients IS the full-batch gradient, so the
# only difference left is the order of floating-point sums (~1e-16).
@functools.cache
def problem() -> par.TwoLayerProblem:
    """The shared problem, made when a test first needs it (it needs torch)."""
    return par.make_problem(n=16, d_in=40, hidden=20, d_out=5, seed=7)


STEPS, LR, TOL = 6, 2e-2, 1e-10


def spawned_children() -> list[object]:
    """Live worker processes this test process started, spawned or forked from the fork server
    (the resource tracker and the fork server itself excluded)."""
    try:
        import psutil
    except ImportError:  # not a declared dependency; multiprocessing.active_children() still checks
        return []
    found, servers, children = [], set(), psutil.Process().children(recursive=True)
    for child in children:
        try:
            if any("forkserver" in part for part in child.cmdline()):
                servers.add(child.pid)  # the fork server stays: its workers must not
            elif any("spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    for child in children:
        try:
            if child.ppid() in servers:  # a worker forked from the server
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def assert_no_children_left() -> None:
    assert multiprocessing.active_children() == []
    assert spawned_children() == []


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def single():
    return par.train_single(problem(), steps=STEPS, lr=LR)


def test_single_process_is_plain_sgd_on_the_full_batch_gradient():
    p = problem()
    X, Y, w1, w2 = p.X, p.Y, p.w1, p.w2
    h = np.maximum(X @ w1, 0)
    d_pred = 2 * (h @ w2 - Y) / X.shape[0]  # d/dy_pred of sum(diff**2) / N
    grad_w2 = h.T @ d_pred
    grad_w1 = X.T @ ((d_pred @ w2.T) * (h > 0))
    result = par.train_single(problem(), steps=1, lr=LR)
    assert par.max_rel_diff(result.weights, [w1 - LR * grad_w1, w2 - LR * grad_w2]) < TOL
    assert result.global_losses[0] == pytest.approx(((h @ w2 - Y) ** 2).sum() / X.shape[0])


def test_training_moves_the_weights_and_lowers_the_loss(single):
    # Otherwise "parallel equals single" could hold for a run that does nothing.
    assert par.max_rel_diff(single.weights, [problem().w1, problem().w2]) > 1e-2
    assert single.global_losses[-1] < 0.7 * single.global_losses[0]


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("mode", ["all_reduce", "ddp"])
def test_two_workers_with_half_batches_match_one_worker_with_the_whole_batch(single, mode):
    result = par.train_data_parallel(problem(), world_size=2, steps=STEPS, lr=LR, mode=mode)
    assert (result.backend, result.world_size, result.mode) == ("gloo", 2, mode)
    assert result.rows_per_rank == [8, 8]
    assert len(set(result.pids)) == 2 and os.getpid() not in result.pids  # two real processes
    assert par.max_rel_diff(result.weights, single.weights) < TOL
    assert par.max_rel_diff(result.rank_weights[1], result.rank_weights[0]) < TOL
    # Each rank's own loss is its shard's; their mean is the full-batch loss.
    assert result.losses.shape == (2, STEPS)
    assert not np.allclose(result.losses[0], result.losses[1])
    np.testing.assert_allclose(result.losses.mean(axis=0), result.global_losses, rtol=1e-12)
    np.testing.assert_allclose(result.global_losses, single.global_losses, rtol=TOL)
    assert result.wall_seconds >= result.seconds > 0
    assert_no_children_left()


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_nccl_on_the_gpu_runs_the_same_code(single):
    # One rank per GPU; with one GPU the group has one rank, and the code path is the same.
    world_size = 2 if torch.cuda.device_count() >= 2 else 1
    result = par.train_data_parallel(
        problem(), world_size=world_size, steps=STEPS, lr=LR, mode="ddp", backend="nccl"
    )
    assert result.backend == "nccl"
    assert par.max_rel_diff(result.weights, single.weights) < TOL
    assert_no_children_left()


def test_a_batch_that_does_not_split_evenly_is_refused_before_spawning():
    odd = par.make_problem(n=15, d_in=4, hidden=3, d_out=2)
    with pytest.raises(ValueError, match="15 rows does not split evenly over 2 workers"):
        par.train_data_parallel(odd, world_size=2, steps=1)
    with pytest.raises(ValueError, match="unknown mode 'sum'"):
        par.train_data_parallel(problem(), mode="sum")  # type: ignore[arg-type]


def test_backend_choice():
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    expected = "nccl" if dist.is_nccl_available() and gpus >= 2 else "gloo"
    assert par.choose_backend(None, 2) == expected
    assert par.choose_backend("gloo", 2) == "gloo"
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        par.choose_backend("mpi", 2)
    if gpus < 64:
        with pytest.raises(DeviceError, match="needs 64 CUDA GPUs"):
            par.choose_backend("nccl", 64)


def test_nccl_without_a_gpu_says_why_pytorch_sees_none(monkeypatch):
    from edu_dl.parallel import launch

    monkeypatch.setattr(launch, "gpu_status", lambda name="cupy": (False, f"{name} sees none"))
    with pytest.raises(DeviceError, match=r"this machine has 0 \(torch sees none\)"):
        par.choose_backend("nccl", 1)
    assert par.choose_backend(None, 1) == "gloo"


# Workers for the failure tests: module-level, so the spawned children can import them.
def _rank1_raises(rank: int, world_size: int, device: torch.device) -> None:
    if rank == 1:
        raise ValueError("rank 1 refuses to train")
    dist.barrier()  # rank 0 waits for a partner that never comes


def _hangs(rank: int, world_size: int, device: torch.device) -> None:
    time.sleep(600)


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.timing
def test_a_worker_that_raises_surfaces_in_the_parent_and_no_child_survives():
    # A deadline far beyond the work: two spawned workers that import torch and meet at the
    # store take a few seconds on a quiet machine and took 118 s beside eight busy
    # processes (issue 43), so a bound of 100 s under a 120 s deadline graded the load. Half
    # of a 600 s deadline still tells "surfaced at once" from "waited for the deadline".
    timeout_s = 600
    start = time.monotonic()
    with pytest.raises(par.WorkerError) as info:
        par.run_workers(_rank1_raises, world_size=2, timeout_s=timeout_s)
    message = str(info.value)
    assert message.startswith("data-parallel worker rank 1 of 2 failed: ValueError: rank 1 refuses")
    assert "_rank1_raises" in message  # the worker's own traceback comes along
    assert time.monotonic() - start < timeout_s / 2  # it did not wait for the deadline
    assert_no_children_left()


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.timing
def test_a_hung_worker_is_killed_at_the_deadline():
    with pytest.raises(TimeoutError, match="did not finish within 3 s"):
        par.run_workers(_hangs, world_size=2, timeout_s=3)
    assert_no_children_left()


@pytest.mark.slow  # a fresh TensorFlow process: ~5 s on a quiet machine, 20+ s on a busy one
def test_mirrored_strategy_on_two_logical_cpus_matches_one_device(single):
    result = par.mirrored_strategy_demo(problem(), replicas=2, steps=STEPS, lr=LR)
    assert result.num_replicas_in_sync == 2
    assert result.devices == ["/device:CPU:0", "/device:CPU:1"]
    assert result.rows_per_replica == [8, 8]  # each replica saw half the batch
    assert result.replicas_agree
    assert result.dtype == "float64"  # MirroredStrategy all-reduces float64 on CPU
    assert par.max_rel_diff(result.weights, result.single_weights) < TOL
    np.testing.assert_allclose(result.losses, result.single_losses, rtol=TOL)
    # And TensorFlow's one device agrees with PyTorch's one process: the same model and loss.
    assert par.max_rel_diff(result.single_weights, single.weights) < TOL
    assert result.wall_seconds > result.seconds > 0


def test_pitfalls_names_the_lectures_pitfalls_and_quotes_measured_numbers(single):
    generic = " ".join(par.pitfalls().split())
    for phrase in (
        "Limited memory per GPU",
        "Transfer bottlenecks",
        "Instability with many GPUs",
        "Parallelizing correctly",
    ):
        assert phrase in generic
    # GPUs on one PCIe bus can exchange gradients directly (peer-to-peer), not only via the host.
    assert "directly between GPUs where peer-to-peer access is supported" in generic
    # A hand-made 4-worker result: the numbers must come from it, not from a template.
    parallel = par.train_single(problem(), steps=STEPS, lr=LR)
    parallel.world_size, parallel.rows_per_rank = 4, [4, 4, 4, 4]
    parallel.weights = [w + 1e-6 for w in parallel.weights]
    text = par.pitfalls(parallel, single, width=72)
    assert max(len(line) for line in text.splitlines()) <= 72
    text = " ".join(text.split())  # undo the line wrapping
    n_params = problem().w1.size + problem().w2.size
    assert f"{n_params:,} parameters" in text
    assert f"{n_params * 8 / 1e6:.3g} MB of gradients on EACH of 4 workers" in text
    assert f"a ring sends {1.5 * n_params * 8 / 1e6:.3g} MB per worker" in text  # 2(R-1)/R
    drift = par.max_rel_diff(parallel.weights, single.weights)
    assert f"differ from one process's by {drift:.1e}" in text


def test_pitfalls_say_that_sharding_fits_what_data_parallelism_cannot():
    generic = " ".join(par.pitfalls().split())
    assert "With data parallelism alone, a model too big for one GPU does not fit" in generic
    assert "ZeRO-3, FSDP" in generic


def test_the_data_parallel_step_diagram_draws_both_workers_and_one_all_reduce():
    from matplotlib.figure import Figure  # no pyplot: no window, no global state

    ax = Figure().subplots()
    assert par.draw_data_parallel_step(batch_size=8, ax=ax) is ax
    texts = [t.get_text() for t in ax.texts]
    assert len(ax.patches) == 1 + 2 * 4 + 1  # the batch, four boxes per worker, the all-reduce
    assert sum("all-reduce" in t for t in texts) == 1
    assert any("rows 0..3" in t for t in texts) and any("rows 4..7" in t for t in texts)
    assert "8 rows" in texts[0]
    with pytest.raises(ValueError, match="two halves"):
        par.draw_data_parallel_step(batch_size=7, ax=Figure().subplots())


def test_bench_parallel_command_is_registered_and_refuses_an_uneven_split(capsys):
    from edu_dl.cli import main

    assert main(["bench", "parallel", "--world-size", "3", "--no-progress"]) == 2
    assert "64 rows does not split over 3 workers" in capsys.readouterr().err
    assert_no_children_left()


def test_bench_parallel_table_and_outputs(tmp_path):
    from edu_dl.bench.parallel import Row, parallel_report, table

    rows = [
        Row("single", 1, 64, 2.5, 0.1, 0.5, 0.0, [3.0, 1.0, 0.5]),
        Row("ddp", 2, 32, 4.0, 6.0, 0.5, 2e-16, [3.0, 1.0, 0.5]),
    ]
    text = table(rows, steps=3)
    assert "| ddp | 2 | 32 | 4 | 6 | 0.5 | 2.0e-16 |" in text
    _, json_path, png_path = parallel_report(rows, text).write("parallel", tmp_path / "out")
    assert json.loads(json_path.read_text())[1]["rows_each"] == 32
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
