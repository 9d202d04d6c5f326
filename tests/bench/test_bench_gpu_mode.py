"""The benchmarks' GPU mode without a GPU: refused in one sentence, and its logic run on a fake
GPU (EDU_DL_BENCH_FAKE_GPU=1: the GPU mode's code with NumPy standing in for CuPy). Real GPU runs
are recorded under benchmarks/gpu/, rendered into RESULTS.md, which must be up to date."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import edu_dl
from edu_dl.bench import kernels, record
from edu_dl.bench.common import TIMES
from edu_dl.bench.device import FAKE_GPU_ENV, Device, get_device, why_no_gpu_mode
from edu_dl.cli import main
from edu_dl.machine import recorded

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "benchmarks" / "gpu" / "nvidia-h100-80gb-hbm3"
GPU_HERE = why_no_gpu_mode() is None and not Device("gpu").fake


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAKE_GPU_ENV, "1")  # the workers inherit it


@pytest.mark.skipif(GPU_HERE, reason="a GPU is here: the GPU mode runs instead of refusing")
@pytest.mark.parametrize("argv", [
    ["engine", "--device", "gpu"], ["plan", "--device", "gpu"], ["matmul", "--device", "gpu"],
    ["transfer", "--device", "gpu"], ["loader", "--device", "gpu"],
    ["twins", "--device", "gpu"], ["parallel", "--device", "gpu"], ["kernels"], ["gpu"],
])
def test_without_a_gpu_the_gpu_mode_says_so_in_one_sentence(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(FAKE_GPU_ENV, raising=False)
    assert main(["bench", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.rstrip().endswith(".")
    assert err.startswith(f"edu-dl bench {argv[0]}") and "no NVIDIA GPU here" in err


def test_a_fake_gpu_is_labelled_and_synchronized_sentences_differ(fake_gpu: None) -> None:
    fake, cpu, real = get_device("gpu"), get_device("cpu"), Device("gpu")
    assert fake.fake and fake.runs_on == "cpu" and fake.torch == "cpu" and fake.tf == "/CPU:0"
    assert real.runs_on == "gpu" and real.torch == "cuda" and real.tf == "/GPU:0"
    assert "synchronize" in real.synced and "not GPU times" in fake.synced
    assert "nothing needs synchronizing" in cpu.synced
    fake.synchronize()  # nothing queued: returns at once
    with pytest.raises(ValueError, match="'tpu'"):
        get_device("tpu")


def test_engine_gpu_mode_end_to_end_on_a_fake_gpu(
    fake_gpu: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "engine", "--device", "gpu", "--sizes", "tiny", "--frameworks",
            "numpy,eager,static,host", "--quick", "--no-progress", "--no-plan", "--out",
            str(tmp_path)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "| CuPy by hand | edu_dl eager (CuPy) | edu_dl static (CuPy) |" in text
    assert "NumPy by hand, host CPU" in text and "### GPU targets" in text
    assert "fake GPU" in text and "Where edu_dl eager's time goes" not in text  # CPU only
    data = json.loads((tmp_path / "engine.json").read_text())
    assert data["device"] == "gpu" and data["fake"] is True
    assert all(row["seconds"] for row in data["rows"])


def test_kernels_logic_on_a_fake_gpu(fake_gpu: None, capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    assert main(["bench", "kernels", "--quick", "--sizes", "16,32", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for kernel in kernels.KERNELS:
        assert f"\n{kernel} " in text
    data = json.loads((tmp_path / "kernels.json").read_text())
    assert [(r["kernel"], r["n"]) for r in data["rows"]] == [
        (k, n) for k in kernels.KERNELS for n in (16, 32)]
    for r in data["rows"]:
        assert r["gflops"] == pytest.approx(2 * r["n"] ** 3 / r["seconds"] / 1e9)
        assert r["max_rel_error"] < 1e-5 and r["fraction_of_peak"] is None  # no peak: fake
    assert main(["bench", "kernels", "--device", "cpu"]) == 2  # no CPU side, said so


def test_kernels_fraction_of_peak_and_errors_are_reported() -> None:
    rows = [kernels.KernelRow("tiled", 1024, 1e-3, 2147.48, 0.032, 1e-6)]
    result = kernels.KernelsResult(rows, {"naive": "NvvmSupportError: libNVVM cannot be found"},
                                   67_000.0, "132 SMs x 128 FP32 lanes", Device("gpu"))
    text = kernels.kernels_table(result)
    assert "3.2%" in text and "FAILED naive: NvvmSupportError" in text
    assert "67000 GFLOP/s" in text and "synchronize" in text
    assert kernels.KernelsResult.from_json(result.to_json()) == result


def test_twins_gpu_mode_on_a_fake_gpu(fake_gpu: None, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "twins", "--device", "gpu", "--model", "tiny", "--twins",
                 "numpy,edu_static", "--quick", "--no-progress", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| / CuPy |" in text and "fake GPU" in text and "| edu_static |" in text
    assert json.loads((tmp_path / "twins.json").read_text())["device"] == "gpu"


@pytest.mark.slow
def test_parallel_gpu_mode_on_a_fake_gpu(fake_gpu: None, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    assert main(["bench", "parallel", "--device", "gpu", "--steps", "2", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "| ddp | 2 | 32 |" in text and "| mirrored |" not in text and "fake GPU" in text


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_record_gpu_on_a_fake_gpu_writes_results_and_provenance(
    fake_gpu: None, tmp_path: Path
) -> None:
    out = tmp_path / "gpu"
    (out / "fake-gpu" / "stale").mkdir(parents=True)  # a former recording's leftovers
    folder = record.record_gpu(out, quick=True, only=["kernels", "transfer"],
                               device=get_device("gpu"), log=lambda text: None)
    assert folder == out / "fake-gpu" and not (folder / "stale").exists()
    facts = recorded.read_provenance(folder)
    for key in ("device", "driver", "versions", "commit", "date", "python", "total"):
        assert facts[key], key
    assert facts["status kernels"].startswith("ok")
    # transfer measures the real bus: a fake GPU has none, and the record says so
    assert facts["status transfer"].startswith("exit status 1")
    assert facts["command kernels"].startswith("edu-dl bench kernels --device gpu --quick")
    assert (folder / "kernels" / "kernels.md").is_file()
    got = recorded.recorded("kernels", root=tmp_path)
    assert got["folder"] == folder and got["data"]["fake"] is True
    text = record.results_markdown(tmp_path)
    assert "## On the GPU: fake GPU" in text and "### kernels" in text
    over = record.record_gpu(out, quick=True, only=["kernels"], budget_s=0.0,
                             device=get_device("gpu"), log=lambda text: None)
    assert recorded.read_provenance(over)["status kernels"].startswith("skipped")


def test_a_recording_is_found_on_whichever_device_holds_it(tmp_path: Path) -> None:
    """Without a device named, the first device folder that holds the benchmark answers: a
    recording made on the second device only is found, not reported missing."""
    for device, benchmarks in (("a-gpu", ["matmul"]), ("b-gpu", ["matmul", "kernels"])):
        for name in benchmarks:
            (tmp_path / "gpu" / device / name).mkdir(parents=True)
            (tmp_path / "gpu" / device / name / f"{name}.json").write_text(f'{{"on": "{device}"}}')
        (tmp_path / "gpu" / device / "PROVENANCE").write_text(f"device: {device}\n")
    assert recorded.recorded("matmul", root=tmp_path)["data"] == {"on": "a-gpu"}
    assert recorded.recorded("kernels", root=tmp_path)["data"] == {"on": "b-gpu"}
    with pytest.raises(FileNotFoundError, match=r"'kernels'.*'a-gpu'"):
        recorded.recorded("kernels", "a-gpu", root=tmp_path)


def test_the_h100_record_is_complete_and_labelled() -> None:
    facts = recorded.read_provenance(H100)
    assert facts["commit"] == "e5ef6d5" and facts["python"] == "3.12.3"
    assert "torch 2.11" in facts["versions"] and "cupy-cuda13x 14.2" in facts["versions"]
    assert facts["driver"].startswith("580.159.04")
    assert facts["command engine_step_separate_script"].startswith("NOT the project's command")
    for name in ("matmul", "transfer", "loader", "parallel"):
        assert record.render_folder(H100 / name, name) is not None, name
        assert recorded.recorded(name, "nvidia-h100-80gb-hbm3")["data"]
    step = (H100 / "engine_step_separate_script" / "engine_step_gpu.txt").read_text()
    assert "0.82x cupy-hand" in step and "62.07x cupy-hand" in step


def test_results_md_is_up_to_date() -> None:
    """benchmarks/RESULTS.md is what `edu-dl bench results` writes from the recorded files."""
    text = record.results_markdown()
    assert "## On the CPU" in text and "## On the GPU: NVIDIA H100 80GB HBM3" in text
    assert f"eager ≤ 1.2{TIMES} PyTorch CUDA at large | not measured |" in text
    assert (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8") == text, (
        "benchmarks/RESULTS.md is stale: run `edu-dl bench results`")


# --------------------------------------------------------------------------- on a real GPU


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_engine_and_kernels_run_on_the_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(FAKE_GPU_ENV, raising=False)
    assert main(["bench", "engine", "--device", "gpu", "--sizes", "tiny,lecture", "--frameworks",
                 "numpy,eager,static,host", "--quick", "--no-plan", "--no-progress", "--out",
                 str(tmp_path / "engine")]) == 0
    data = json.loads((tmp_path / "engine" / "engine.json").read_text())
    assert data["device"] == "gpu" and not data["fake"] and not data["errors"]
    first = {(r["size"], r["framework"]): r["first_loss"] for r in data["rows"]}
    for size in ("tiny", "lecture"):  # CuPy and the host start from the same weights
        assert first[size, "eager"] == pytest.approx(first[size, "host"], rel=1e-4)
    assert main(["bench", "kernels", "--quick", "--out", str(tmp_path / "kernels")]) == 0
    rows = json.loads((tmp_path / "kernels" / "kernels.json").read_text())["rows"]
    assert {r["kernel"] for r in rows} == set(kernels.KERNELS)
    assert all(r["max_rel_error"] < 1e-4 for r in rows)
    assert "synchronize" in capsys.readouterr().out
