"""`edu-dl bench loader` and `edu-dl bench transfer`: well-formed, plausible output, no timings.

The only inequality on a time is one that sleeping guarantees: a reader that sleeps d seconds per
batch cannot read n batches in less than n * d.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

import edu_dl
from edu_dl.bench import loader, transfer
from edu_dl.bench.common import format_time
from edu_dl.cli import main
from edu_dl.util.worker import WorkerError, run_in_worker

PNG = b"\x89PNG\r\n\x1a\n"
BATCHES, DELAY_MS = 4, 5
# The lecture's TF 1.x program: N, D, H, D_out, float32 (4 bytes).
N, D, H, D_OUT = 64, 1000, 100, 1000
FEED_IN = 4 * (N * D + N * D_OUT + D * H + H * D_OUT)  # x, y, w1, w2
FEED_OUT = 4 * (1 + D * H + H * D_OUT)  # loss, grad_w1, grad_w2
VARIABLES_IN = 4 * (N * D + N * D_OUT)  # x, y
VARIABLES_OUT = 4  # loss


def positive_finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


# --------------------------------------------------------------------------- loader


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def loader_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("loader")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["bench", "loader", "--quick", "--batches", str(BATCHES), "--delay-ms",
                     str(DELAY_MS), "--compute-ms", "2", "--no-progress", "--out", str(out)])
    assert code == 0
    return stdout.getvalue(), out


@pytest.mark.slow
def test_bench_loader_writes_plausible_results(loader_run: tuple[str, Path]) -> None:
    table, out = loader_run
    data = json.loads((out / "loader.json").read_text())
    assert data["errors"] == {}
    rows = data["rows"]
    by_framework = {fw: [r for r in rows if r["framework"] == fw] for fw in ("edu_dl", "torch",
                                                                            "tf")}
    assert [r["readers"] for r in by_framework["edu_dl"]] == [0, 1, 2, 4]
    assert [r["readers"] for r in by_framework["torch"]] == [0, 2]
    assert [r["readers"] for r in by_framework["tf"]] == [0, 1, -1]
    assert len(rows) == 9
    # Sleeping guarantees this much: n reads of DELAY_MS each.
    assert data["read_s"] >= BATCHES * DELAY_MS / 1000
    assert positive_finite(data["compute_s"])
    assert data["serial_s"] == pytest.approx(data["read_s"] + data["compute_s"])
    assert data["config"]["compute_steps"] >= 1
    n = BATCHES
    read, compute = data["read_s"] / n, data["compute_s"] / n
    for r in rows:
        assert positive_finite(r["epoch_s"]), r
        assert r["hidden_s"] == pytest.approx(data["serial_s"] - r["epoch_s"])
        if r["readers"] == 0:
            assert r["ideal_s"] == pytest.approx(data["serial_s"])
            assert math.isnan(r["hidden_fraction"])
        else:
            per = read / r["readers"] if r["readers"] > 0 else 0.0
            assert r["ideal_s"] == pytest.approx(read + compute + (n - 1) * max(per, compute))
            assert r["ideal_s"] < data["serial_s"]
            assert math.isfinite(r["hidden_fraction"])
        assert r["variant"] in table and r["framework"] in table
    with (out / "loader.csv").open() as f:
        csv_rows = list(csv.DictReader(f))
    assert [row["variant"] for row in csv_rows] == [r["variant"] for r in rows]
    assert float(csv_rows[0]["epoch_s"]) == pytest.approx(rows[0]["epoch_s"])
    assert (out / "loader.png").read_bytes().startswith(PNG)
    assert "reads alone" in table and "nothing overlapped" in table


def test_finish_rows_formulas() -> None:
    config = loader.LoaderConfig("unused", batches=10)
    result = loader.LoaderResult(config, read_s=0.2, compute_s=0.1)  # 20 ms + 10 ms a batch
    result.rows = [loader.LoaderRow("x", "serial", 0, "0", 0.31),
                   loader.LoaderRow("x", "one", 1, "2", 0.21),
                   loader.LoaderRow("x", "four", 4, "8", 0.12),
                   loader.LoaderRow("x", "autotune", -1, "AUTOTUNE", 0.2)]
    loader.finish_rows(result)
    ideal = [r.ideal_s for r in result.rows]
    # 1 reader: 20 + 10 + 9 * max(20, 10) ms; 4 readers: 20 + 10 + 9 * max(5, 10) ms.
    assert ideal == pytest.approx([0.3, 0.21, 0.12, 0.12])
    assert [r.hidden_s for r in result.rows] == pytest.approx([-0.01, 0.09, 0.18, 0.1])
    assert math.isnan(result.rows[0].hidden_fraction)
    assert result.rows[1].hidden_fraction == pytest.approx(1.0)
    assert result.rows[3].hidden_fraction == pytest.approx(0.1 / 0.18)


def test_batch_reader_reads_batch_k(tmp_path: Path) -> None:
    config = loader.LoaderConfig(str(tmp_path / "d"), batches=3, batch_size=5, features=4,
                                     outputs=2, delay_s=0.0)
    loader.make_loader_data(tmp_path / "d", config)
    reader = loader.BatchReader(config)
    X, y = reader[2]
    rng = np.random.default_rng(0)
    X_all = rng.standard_normal((15, 4)).astype(np.float32)
    np.testing.assert_array_equal(X, X_all[10:15])
    assert y.shape == (5, 2) and len(reader) == 3
    with pytest.raises(IndexError):
        reader[3]


def test_compute_is_a_real_training_step() -> None:
    config = loader.LoaderConfig("unused", batch_size=8, features=6, hidden=5, outputs=3,
                                     compute_steps=20)
    compute = loader.make_compute(config)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    losses = [compute(X, y) for _ in range(5)]
    assert losses[-1] < losses[0]  # SGD on one batch: the loss falls


def test_worker_failure_is_a_clear_error() -> None:
    config = asdict(loader.LoaderConfig("unused", compute_steps=1))
    with pytest.raises(WorkerError, match="KeyError: 'nope'"):
        run_in_worker("edu_dl.bench.loader:loader_task", framework="nope", config=config)


# --------------------------------------------------------------------------- transfer


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def transfer_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("transfer")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["bench", "transfer", "--quick", "--no-progress", "--out", str(out)])
    assert code == 0
    return stdout.getvalue(), out


@pytest.mark.slow
def test_bench_transfer_writes_plausible_results(transfer_run: tuple[str, Path]) -> None:
    table, out = transfer_run
    data = json.loads((out / "transfer.json").read_text())
    assert data["errors"] == {}
    host = [r for r in data["bandwidth"] if r["library"] == "numpy"]
    assert [r["nbytes"] for r in host] == transfer.QUICK_HOST_SIZES
    for r in data["bandwidth"]:
        assert positive_finite(r["seconds"]) and positive_finite(r["gb_per_s"])
        assert r["gb_per_s"] == pytest.approx(r["nbytes"] / r["seconds"] / 1e9)
    for r in data["copy_compute"]:
        assert r["nbytes"] == 3 * r["n"] ** 2 * 4
        assert positive_finite(r["copy_s"]) and positive_finite(r["matmul_s"])
    feed = {(r["framework"], r["variant"]): r for r in data["feed"]}
    assert set(feed) == {(fw, v) for fw in ("edu_dl.graph", "tf.compat.v1")
                         for v in ("feed", "variables")}
    for fw in ("edu_dl.graph", "tf.compat.v1"):
        assert (feed[fw, "feed"]["bytes_in"], feed[fw, "feed"]["bytes_out"]) == (FEED_IN, FEED_OUT)
        assert (feed[fw, "variables"]["bytes_in"], feed[fw, "variables"]["bytes_out"]) == (
            VARIABLES_IN, VARIABLES_OUT)
        assert feed[fw, "feed"]["bytes_per_step"] == 2_112_004
        assert all(positive_finite(feed[fw, v]["step_s"]) for v in ("feed", "variables"))
    assert f"{FEED_IN + FEED_OUT:,}" in table and f"{VARIABLES_IN + VARIABLES_OUT:,}" in table
    gpu_rows = [r for r in data["bandwidth"] if r["direction"] in ("H2D", "D2H")]
    if data["gpu"] is None:
        assert gpu_rows == []
        assert "No CUDA GPU here" in table and "no PCIe host↔device transfer was measured" in table
        assert "Traceback" not in table
    else:
        assert {r["direction"] for r in gpu_rows} == {"H2D", "D2H"}
        assert {r["memory"] for r in gpu_rows} == {"pageable", "pinned"}
    with (out / "transfer_feed.csv").open() as f:
        assert [int(r["bytes_per_step"]) for r in csv.DictReader(f)] == [
            r["bytes_per_step"] for r in data["feed"]]
    assert (out / "transfer.csv").read_text().startswith("library,direction,memory,nbytes")
    assert (out / "transfer.png").read_bytes().startswith(PNG)


def test_edu_dl_feed_bytes_per_step() -> None:
    """In process: the bytes fed and fetched per step are exactly the lecture's arrays."""
    rows = transfer.edu_dl_feed_rows(repeats=1, batch_s=0.001)
    assert [(r.variant, r.bytes_in, r.bytes_out) for r in rows] == [
        ("feed", FEED_IN, FEED_OUT), ("variables", VARIABLES_IN, VARIABLES_OUT)]
    assert all(positive_finite(r.step_s) for r in rows)


@pytest.mark.usefixtures("numpy_as_cupy")
def test_cupy_transfers_through_the_stand_in() -> None:
    """The CPU twin of the GPU test below: every direction and kind of host memory gets a row of
    its own size, and the copies move the bytes (checked through the same helper the rows time)."""
    rows = transfer.cupy_rows([2**16, 2**20], repeats=1, batch_s=0.001)
    assert [(r.direction, r.memory, r.nbytes) for r in rows] == [
        (d, m, n) for n in (2**16, 2**20) for m in ("pageable", "pinned") for d in ("H2D", "D2H")]
    assert all(positive_finite(r.gb_per_s) for r in rows)
    import cupy

    host, device = np.arange(8, dtype=np.uint8), cupy.asarray(np.zeros(8, dtype=np.uint8))
    h2d, d2h = transfer._cupy_copies(host, device, lambda: None)
    h2d()
    assert device.get().tolist() == list(range(8))
    host[...] = 0
    d2h()
    assert host.tolist() == list(range(8))
    (row,) = transfer.copy_compute_rows("cupy", [64], repeats=1, batch_s=0.001)
    assert row.nbytes == 3 * 64 * 64 * 4 and positive_finite(row.matmul_s)


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_cupy_transfers_measured() -> None:
    rows = transfer.cupy_rows([2**16, 2**20], repeats=1, batch_s=0.001)
    assert {(r.direction, r.memory) for r in rows} == {
        (d, m) for d in ("H2D", "D2H") for m in ("pageable", "pinned")}
    assert all(positive_finite(r.gb_per_s) for r in rows)
    (row,) = transfer.copy_compute_rows("cupy", [256], repeats=1, batch_s=0.001)
    assert row.nbytes == 3 * 256 * 256 * 4 and positive_finite(row.matmul_s)


def test_feed_cost_at_measured_gpu_bandwidth() -> None:
    """With H2D/D2H rows (made up here, as a GPU run would measure them), the fed step's copies
    are priced at that bandwidth; without them the sentence says no bus was crossed."""
    feed = transfer.FeedRow("edu_dl.graph", "feed", "gpu", 1e-3, FEED_IN, FEED_OUT)
    variables = transfer.FeedRow("edu_dl.graph", "variables", "gpu", 1e-3, VARIABLES_IN,
                                   VARIABLES_OUT)
    result = transfer.TransferResult(gpu=None, no_gpu_reason="none", feed=[feed, variables])
    assert "crossed no bus" in transfer.feed_cost_sentence(result)
    assert f"{FEED_IN + FEED_OUT - VARIABLES_IN - VARIABLES_OUT:,} more bytes" in (
        transfer.feed_cost_sentence(result))
    # 2**19 bytes in 52.4288 µs: 10 GB/s H2D; D2H twice as slow (5 GB/s).
    result.bandwidth = [
        transfer.BandwidthRow("cupy", "H2D", "pageable", 2**19, 2**19 / 10e9),
        transfer.BandwidthRow("cupy", "D2H", "pageable", 2**19, 2**19 / 5e9),
        transfer.BandwidthRow("cupy", "H2D", "pageable", 2**28, 2**28 / 1e9),  # not nearest
    ]
    expected_s = FEED_IN / 10e9 + FEED_OUT / 5e9  # 131.2 µs + 160.0008 µs
    assert f"about {format_time(expected_s)} per step" in (
        transfer.feed_cost_sentence(result))


def test_bad_loader_arguments_are_clear(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "loader", "--delay-ms", "-5"])
    assert "--delay-ms: must be 0 or more, got -5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "loader", "--frameworks", "edu_dl,jax"])
    assert "unknown framework 'jax'" in capsys.readouterr().err
