"""The notebooks' GPU fallbacks: one sentence and no traceback where a library has no GPU."""

from __future__ import annotations

import pytest

from edu_dl import backend, lecture


def test_on_gpu_runs_the_section_when_every_library_has_a_gpu(monkeypatch):
    monkeypatch.setitem(lecture._GPU_PROBES, "cupy", lambda: None)
    monkeypatch.setitem(lecture._GPU_PROBES, "torch", lambda: None)
    assert lecture.on_gpu(lambda: 42, "the test", needs=("cupy", "torch")) == 42


def test_on_gpu_skips_with_one_sentence_naming_the_library_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setitem(lecture._GPU_PROBES, "cupy", lambda: None)
    reason = "PyTorch 2.13.0+cpu sees no CUDA device"
    monkeypatch.setitem(lecture._GPU_PROBES, "torch", lambda: reason)
    ran = []
    assert lecture.on_gpu(lambda: ran.append(1), "the NCCL run", needs=("torch",)) is None
    assert ran == []
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert reason in out and "the NCCL run is skipped" in out


def test_cupy_is_asked_first_so_a_machine_without_gpu_gets_its_reason(monkeypatch, capsys):
    asked = []
    monkeypatch.setitem(lecture._GPU_PROBES, "cupy", lambda: asked.append("cupy") or "no GPU")
    monkeypatch.setitem(lecture._GPU_PROBES, "tensorflow",
                        lambda: asked.append("tensorflow") or "TensorFlow sees no GPU")
    assert lecture.gpu_missing(("tensorflow", "cupy")) == "no GPU"
    assert asked == ["cupy"]  # TensorFlow (slow to import) is never asked


def test_unknown_library_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown libraries \\['jax'\\]"):
        lecture.gpu_missing(("jax",))


def test_real_probes_agree_with_the_backend_on_this_machine():
    reason = lecture.gpu_missing(("cupy",))
    assert (reason is None) == backend.gpu_available()
    if not backend.gpu_available():
        assert reason == backend.gpu_status()[1]


def test_device_or_cpu_falls_back_with_one_sentence(capsys):
    device = lecture.device_or_cpu("gpu")
    if backend.gpu_available():
        assert device == "gpu"
    else:
        assert device == "cpu"
        assert capsys.readouterr().out.startswith("No GPU here (")
    assert lecture.device_or_cpu("cpu") == "cpu"
