"""The notebooks' GPU fallbacks: one sentence and no traceback where a library has no GPU."""

from __future__ import annotations

import functools

import pytest

from edu_dl import backend
from edu_dl.notebook import lecture


def fake_gpu_status(monkeypatch, reasons, asked=None):
    """backend.gpu_status answering from ``reasons`` ({framework: None when usable, else why})."""
    def status(framework="cupy"):
        if asked is not None:
            asked.append(framework)
        reason = reasons[framework]
        return (True, "a GPU") if reason is None else (False, reason)

    monkeypatch.setattr(backend, "gpu_status", status)


def test_on_gpu_runs_the_section_when_every_library_has_a_gpu(monkeypatch):
    fake_gpu_status(monkeypatch, {"cupy": None, "torch": None})
    assert lecture.on_gpu(lambda: 42, "the test", needs=("cupy", "torch")) == 42


def test_on_gpu_skips_with_one_sentence_naming_the_library_without_a_gpu(monkeypatch, capsys):
    reason = "PyTorch 2.13.0+cpu sees no CUDA device"
    fake_gpu_status(monkeypatch, {"cupy": None, "torch": reason})
    ran = []
    assert lecture.on_gpu(lambda: ran.append(1), "the NCCL run", needs=("torch",)) is None
    assert ran == []
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert reason in out and "the NCCL run is skipped" in out


def test_cupy_is_asked_first_so_a_machine_without_gpu_gets_its_reason(monkeypatch, capsys):
    asked: list[str] = []
    fake_gpu_status(monkeypatch, {"cupy": "no GPU", "tensorflow": "TensorFlow sees no GPU"},
                    asked)
    assert lecture.gpu_missing(("tensorflow", "cupy")) == "no GPU"
    assert asked == ["cupy"]  # TensorFlow (slow to import) is never asked


def test_unknown_library_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown libraries \\['jax'\\]"):
        lecture.gpu_missing(("jax",))


@pytest.mark.parametrize(("status", "missing"), [
    ((True, "1 CUDA device(s)"), None),
    ((False, "CuPy found no CUDA device"), "CuPy found no CUDA device"),
    ((False, "CuPy is not installed"), "CuPy is not installed"),
])
def test_the_cupy_probe_gives_the_backends_reason(monkeypatch, status, missing):
    """The lecture's CuPy probe answers from backend.gpu_status(), on any machine: each state
    is made here (it once compared the probe with the backend on this machine only, which holds
    by construction and so could not fail)."""
    fake_gpu_status(monkeypatch, {"cupy": None if status[0] else status[1]})
    assert lecture.gpu_missing(("cupy",)) == missing


def test_device_or_cpu_falls_back_with_one_sentence(capsys):
    device = lecture.device_or_cpu("gpu")
    if backend.gpu_available():
        assert device == "gpu"
    else:
        assert device == "cpu"
        assert capsys.readouterr().out.startswith("No GPU here (")
    assert lecture.device_or_cpu("cpu") == "cpu"


def test_with_framework_runs_or_says_one_sentence(capsys):
    assert lecture.with_framework("numpy", lambda: 7, "the test") == 7
    assert capsys.readouterr().out == ""
    assert lecture.with_framework("no_such_framework_xyz", lambda: 7, "the test") is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no_such_framework_xyz is missing here" in out
    assert "the test is skipped" in out


def test_recorded_gpu_is_labelled(tmp_path, monkeypatch, capsys):
    from edu_dl.machine import recorded

    folder = tmp_path / "gpu" / "some-gpu"
    (folder / "matmul").mkdir(parents=True)
    (folder / "matmul" / "matmul.json").write_text('{"x": 1}')
    (folder / "PROVENANCE").write_text("device: Some GPU\ndate: 2026-11-24\n"
                                       "versions: torch 9\ncommand matmul: edu-dl bench matmul\n")
    monkeypatch.setattr(recorded, "recorded", functools.partial(recorded.recorded, root=tmp_path))
    result = lecture.recorded_gpu("matmul")
    assert result["data"] == {"x": 1}
    assert result["label"] == ("recorded on Some GPU (2026-11-24; torch 9) by: "
                               "edu-dl bench matmul")
    assert lecture.recorded_gpu("loader") is None
    assert "No GPU recording of 'loader' exists yet" in capsys.readouterr().out
