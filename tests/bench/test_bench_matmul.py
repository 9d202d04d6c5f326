"""`edu-dl bench matmul`: the FLOP count, the crossover and roofline arithmetic, and a real run."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edu_dl
from edu_dl.bench import matmul as bm
from edu_dl.machine import hardware as hw

ROOT = Path(__file__).resolve().parents[2]


def _row(target: str, n: int, gflops: float) -> bm.Row:
    return bm.make_row(target, n, hw.matmul_flops(n) / (gflops * 1e9), repeats=3)


def test_a_row_counts_2n_cubed_flops() -> None:
    row = bm.make_row("numpy", 128, seconds=0.002, repeats=5)
    assert row.flops == 2 * 128**3
    assert row.gflops == pytest.approx(2 * 128**3 / 0.002 / 1e9)
    assert row.intensity == pytest.approx(2 * 128**3 / (3 * 4 * 128**2))
    assert (row.device, row.title) == ("cpu", "NumPy")
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="numpy at n=128"):
            bm.make_row("numpy", 128, bad, repeats=5)


def test_crossover_is_where_the_gpu_wins_from_then_on() -> None:
    cpu = [_row("numpy", n, g) for n, g in ((64, 50), (256, 60), (1024, 70), (2048, 70))]
    cpu += [_row("torch", n, g) for n, g in ((64, 40), (256, 90), (1024, 60), (2048, 60))]
    gpu = [_row("cupy", n, g) for n, g in ((64, 5), (256, 80), (1024, 900), (2048, 5000))]
    # 256: faster than NumPy but not than PyTorch CPU, so the GPU wins only from 1024.
    assert bm.crossover(cpu + gpu, "cupy") == 1024
    never = [_row("cupy", n, 1.0) for n in (64, 256, 1024, 2048)]
    assert bm.crossover(cpu + never, "cupy") is None
    always = [_row("cupy", n, 1e4) for n in (64, 256, 1024, 2048)]
    assert bm.crossover(cpu + always, "cupy") == 64
    # Winning at 1024 but losing again at 2048 is no crossover.
    dip = [_row("cupy", n, g) for n, g in ((64, 1), (256, 1), (1024, 900), (2048, 10))]
    assert bm.crossover(cpu + dip, "cupy") is None


def test_roofline_is_the_lower_of_the_two_roofs() -> None:
    assert bm.roof(100.0, 10.0, 2.0) == pytest.approx(20.0)  # memory bound: 10 GB/s * 2
    assert bm.roof(100.0, 10.0, 50.0) == pytest.approx(100.0)  # compute bound
    assert bm.roof(None, 10.0, 3.0) == pytest.approx(30.0)
    assert bm.roof(None, None, 3.0) is None


def test_reference_peak_prefers_theory_and_labels_an_assumption() -> None:
    theory = hw.Fact(200.0, "GFLOP/s").as_dict()
    assumed = hw.Fact(100.0, "GFLOP/s", "ASSUMPTION").as_dict()
    unknown = hw.unknown("no clock").as_dict()
    assert bm.reference_peak({"theoretical": theory, "assumed": assumed}) == (
        200.0, "theoretical peak")
    value, label = bm.reference_peak({"theoretical": unknown, "assumed": assumed})
    assert value == 100.0 and "ASSUMED" in label
    value, label = bm.reference_peak({"theoretical": unknown, "assumed": unknown})
    assert value is None and "no clock" in label


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_the_timed_matmul_is_the_right_product(library: str) -> None:
    run, sync = bm.make_matmul(library, "cpu", 32)
    rng = np.random.default_rng(32)  # the same seed make_matmul uses for n=32
    a = rng.standard_normal((32, 32), dtype=np.float32)
    b = rng.standard_normal((32, 32), dtype=np.float32)
    got = np.asarray(run())
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    times = bm.time_matmul(run, sync, repeats=3, batch_s=0.001)
    assert len(times) == 3 and all(t > 0 and math.isfinite(t) for t in times)


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_the_gpu_matmul_is_the_same_code_on_cupy() -> None:
    run, sync = bm.make_matmul("numpy", "gpu", 64)
    cpu_run, _ = bm.make_matmul("numpy", "cpu", 64)
    np.testing.assert_allclose(edu_dl.to_numpy(run()), cpu_run(), rtol=1e-3, atol=1e-3)
    assert all(t > 0 for t in bm.time_matmul(run, sync, repeats=2, batch_s=0.001))


@pytest.mark.usefixtures("numpy_as_cupy")
def test_the_gpu_matmul_on_numpy_as_cupy() -> None:
    """The test above where CI has no GPU: NumPy stands in for CuPy, so the GPU target's
    arrays, its synchronize and its timing loop run."""
    test_the_gpu_matmul_is_the_same_code_on_cupy()


def test_unknown_library_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown library 'jax'"):
        bm.make_matmul("jax", "cpu", 8)


def _cli(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edu_dl.cli", "bench", "matmul", *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_asking_for_a_gpu_target_without_a_gpu_fails_clearly() -> None:
    proc = _cli("--frameworks", "cupy", "--sizes", "16", "--repeats", "1")
    if edu_dl.gpu_status()[0]:
        assert proc.returncode == 0 and "CuPy" in proc.stdout
    else:
        assert proc.returncode == 1
        assert "FAILED CuPy" in proc.stdout and "GPU" in proc.stdout


def test_bad_sizes_are_a_clear_error() -> None:
    proc = _cli("--sizes", "16,big")
    assert proc.returncode == 2 and "comma-separated whole numbers" in proc.stderr


@pytest.mark.slow
def test_quick_run_writes_well_formed_csv_json_and_plots(tmp_path: Path) -> None:
    sizes = (16, 64)
    proc = _cli("--quick", "--sizes", ",".join(map(str, sizes)), "--threads", "1",
                "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for title in ("NumPy", "PyTorch CPU", "TensorFlow CPU"):
        assert title in proc.stdout

    with (tmp_path / "matmul.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(r["target"], int(r["n"])) for r in rows} == {
        (t, n) for t in bm.CPU_TARGETS for n in sizes
    }
    for r in rows:
        n, seconds, gflops = int(r["n"]), float(r["seconds"]), float(r["gflops"])
        assert int(r["flops"]) == 2 * n**3
        assert seconds > 0 and math.isfinite(gflops) and gflops > 0
        assert gflops == pytest.approx(2 * n**3 / seconds / 1e9)
        assert float(r["intensity"]) == pytest.approx(n / 6)

    data = json.loads((tmp_path / "matmul.json").read_text())
    assert data["machine"] and len(data["rows"]) == len(rows)
    assert set(data["summary"]["best"]) == set(bm.CPU_TARGETS)
    measured_bw = data["bandwidth"]["measured_copy"]["value"]
    assert measured_bw > 0
    peak = data["summary"]["reference_peak_gflops"]
    if peak is not None:  # measured never above the peak it is compared with
        assert max(r["gflops"] for r in data["rows"]) <= peak
    for name in ("matmul_gflops.png", "matmul_roofline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_is_the_command_called_from_python() -> None:
    result = bm.sweep([64, 16, 16], ["numpy"], quick=True, threads=1, show_progress=False)
    assert [(r.target, r.n) for r in result.rows] == [("numpy", 16), ("numpy", 64)]
    assert all(r.flops == 2 * r.n**3 and r.gflops > 0 for r in result.rows)
    assert result.failed == {} and result.bandwidth["measured_copy"]["value"] > 0
    assert "NumPy" in bm.render(result)


def test_sweep_refuses_an_unknown_target() -> None:
    with pytest.raises(ValueError, match="unknown targets"):
        bm.sweep([16], ["numpy", "jax"])


def test_a_busy_machine_warning_names_the_thread_cap_it_ran_with() -> None:
    rows = [bm.make_row("numpy", 16, 1e-5, 1)]
    facts = {"value": None, "unit": "", "source": "", "reason": "unknown"}
    peak = {"theoretical": facts, "assumed": facts, "measured": facts}
    busy = (99.0, 99.0)
    capped = bm.MatmulResult("m", rows, {}, {}, peak, {"measured_copy": facts}, [], busy, 1)
    assert "each library ran on 1 thread(s)" in bm.render(capped)
    assert "try --threads 1" not in bm.render(capped)
    free = bm.MatmulResult("m", rows, {}, {}, peak, {"measured_copy": facts}, [], busy)
    assert "try --threads 1" in bm.render(free)
