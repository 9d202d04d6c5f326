"""The conv2d benchmark runs, checks what it times, and its NumPy reference is right."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from fixtures.frameworks import F, torch

from edu_dl.bench import conv as conv_bench
from edu_dl.cli import main


def test_the_reference_is_pytorchs_conv2d() -> None:
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((4, 3, 3, 3)), \
        rng.standard_normal(4)
    grad = rng.standard_normal((2, 4, 5, 4))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out = F.conv2d(tx, tw, tb, padding=1)
    out.backward(torch.tensor(grad))
    np.testing.assert_allclose(conv_bench.numpy_forward(x, w, b, 1), out.detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    for mine, t in zip(conv_bench.numpy_backward(x, w, grad, 1), (tx, tw, tb), strict=True):
        np.testing.assert_allclose(mine, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_one_quick_round_gives_the_whole_table() -> None:
    rows = conv_bench.run(rounds=1, min_block_s=0.0)
    assert [(r.size, r.implementation) for r in rows] == [
        (size, impl) for size, _, _ in conv_bench.SIZES for impl in conv_bench.IMPLEMENTATIONS]
    assert all(r.forward_us > 0 and r.both_us > 0 for r in rows)
    text = conv_bench.table(rows)
    assert text.count("| numpy | ") == len(conv_bench.SIZES) and "| 1.00 |" in text


def test_the_cli_writes_its_report_and_data_on_a_tiny_size(tmp_path: Path, capsys) -> None:
    out = tmp_path / "conv"
    assert main(["bench", "conv", "--quick", "--batch", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| conv1 1->8, 8x8 | edu_dl |" in printed and "Target: edu_dl's conv2d" in printed
    assert "batch 1, float32" in printed and "Made by `edu-dl bench conv --quick`" in printed
    assert sorted(p.name for p in out.iterdir()) == ["conv.csv", "conv.json", "conv.md",
                                                      "conv.png"]
    data = json.loads((out / "conv.json").read_text())
    assert data["batch"] == 1 and data["rounds"] == 1 and data["device"] == "cpu"
    result = conv_bench.ConvResult.from_json(data)
    assert [(r.size, r.implementation) for r in result.rows] == [
        (size, impl) for size, _, _ in conv_bench.SIZES for impl in conv_bench.IMPLEMENTATIONS]
    assert (out / "conv.md").read_text() == printed


def test_the_gpu_mode_runs_on_a_fake_gpu(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("EDU_DL_BENCH_FAKE_GPU", "1")
    assert main(["bench", "conv", "--quick", "--batch", "1", "--device", "gpu"]) == 0
    printed = capsys.readouterr().out
    assert "fake GPU" in printed and "wall clock, every block of calls ending with a device " \
        "synchronize" in printed


def test_gpu_without_one_says_so(capsys, monkeypatch) -> None:
    from edu_dl import backend
    from edu_dl.bench.device import FAKE_GPU_ENV

    monkeypatch.delenv(FAKE_GPU_ENV, raising=False)
    monkeypatch.setattr(backend, "gpu_status", lambda: (False, "no GPU in this test"))
    assert main(["bench", "conv", "--quick", "--device", "gpu"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "edu-dl bench conv --device gpu: there is no NVIDIA GPU here that " \
        "edu_dl can use (no GPU in this test)" in err
