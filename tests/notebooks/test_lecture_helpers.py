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
    assert lecture.why_no_gpu(("tensorflow", "cupy")) == "no GPU"
    assert asked == ["cupy"]  # TensorFlow (slow to import) is never asked


def test_unknown_library_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown libraries \\['jax'\\]"):
        lecture.why_no_gpu(("jax",))


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
    assert lecture.why_no_gpu(("cupy",)) == missing


def test_device_or_cpu_falls_back_with_one_sentence(capsys):
    device = lecture.device_or_cpu("gpu")
    if backend.gpu_status()[0]:
        assert device == "gpu"
    else:
        assert device == "cpu"
        assert capsys.readouterr().out.startswith("No GPU here (")
    assert lecture.device_or_cpu("cpu") == "cpu"


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


def test_recorded_gpu_reads_a_later_session_and_a_probe_folder(tmp_path, monkeypatch):
    """A PROVENANCE line '<benchmark> <key>' is that benchmark's own session (its device, date,
    versions replace the folder's); a probe's JSON may have its own name; a probe recorded on its
    own sits in benchmarks/<probe>/<device>/ with its PROVENANCE and its one command line."""
    from edu_dl.machine import recorded

    folder = tmp_path / "gpu" / "some-gpu"
    (folder / "matmul").mkdir(parents=True)
    (folder / "matmul" / "matmul.json").write_text('{"x": 1}')
    (folder / "probe").mkdir()
    (folder / "probe" / "my_probe.json").write_text('{"y": 2}')
    (folder / "probe" / "my_probe.log").write_text("not data")
    (folder / "PROVENANCE").write_text(
        "# a comment: ignored\ndevice: Some GPU\ndate: 2026-11-24\nversions: torch 9\n"
        "command matmul: edu-dl bench matmul\ncommand probe: a maintainer's note\n"
        "probe device: Some GPU (the probe's own words)\nprobe date: 2026-11-25\n")
    probe_folder = tmp_path / "kernel_probe" / "other-gpu"
    probe_folder.mkdir(parents=True)
    (probe_folder / "kernel_probe.json").write_text('{"z": 3}')
    (probe_folder / "PROVENANCE").write_text("device: Other GPU\ndate: 2026-11-26\n"
                                             "versions: numba 1\ncommand k: python3 k.py\n")
    monkeypatch.setattr(recorded, "recorded", functools.partial(recorded.recorded, root=tmp_path))

    matmul = lecture.recorded_gpu("matmul")
    assert matmul["provenance"]["date"] == "2026-11-24" and matmul["files"] == folder / "matmul"
    probe = lecture.recorded_gpu("probe", "some-gpu", command="my_probe.py (a probe script)")
    assert probe["data"] == {"y": 2} and probe["folder"] == folder
    assert probe["label"] == ("recorded on Some GPU (the probe's own words) (2026-11-25; "
                              "torch 9) by: my_probe.py (a probe script)")
    assert lecture.recorded_gpu("probe")["command"] == "a maintainer's note"
    alone = lecture.recorded_gpu("kernel_probe", "other-gpu")
    assert alone["data"] == {"z": 3} and alone["folder"] == alone["files"] == probe_folder
    assert alone["label"] == "recorded on Other GPU (2026-11-26; numba 1) by: python3 k.py"


def test_the_recordings_lecture_05_reads_are_found():
    from edu_dl.machine.recorded import recorded

    memory_probe = recorded("memory_probe", "nvidia-h100-80gb-hbm3")
    facts = memory_probe["provenance"]
    assert memory_probe["data"]["device"]["multiprocessor_count"] == 132
    assert facts["date"] == "2026-11-25" and facts["device"].startswith("NVIDIA H100")
    assert recorded("practice_probe")["provenance"]["date"] == "2026-11-24"  # the folder's own
    h200 = recorded("gpu_memory_system", "nvidia-h200")
    assert h200["provenance"]["device"].startswith("NVIDIA H200")
    assert h200["data"]["transpose"]["n"] == 8192


# --------------------------------------------------------------------------- %%needs


@pytest.fixture
def shell():
    """An in-process IPython shell with %%needs registered, as setup() leaves a kernel."""
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    lecture.register_needs_magic()
    yield ip
    InteractiveShell.clear_instance()


def test_needs_runs_the_cell_unchanged_when_the_framework_imports(shell, capsys):
    result = shell.run_cell("%%needs numpy\nimport numpy as np\nanswer = int(np.int64(41) + 1)\n"
                            "print('ran', answer)\nanswer")
    assert result.success
    assert shell.user_ns["answer"] == 42
    out = capsys.readouterr().out
    assert out.startswith("ran 42\nOut[") and out.endswith("]: 42\n")  # last expression shown


def test_needs_skips_with_one_sentence_and_later_cells_skip_too(shell, capsys):
    first = shell.run_cell("%%needs numpy no_such_framework_xyz\nimport numpy\nskipped = 1")
    later = shell.run_cell("%%needs no_such_framework_xyz\nprint(skipped)")  # would be a NameError
    assert first.success and later.success
    assert "skipped" not in shell.user_ns and "numpy" not in shell.user_ns
    out = capsys.readouterr().out
    assert out == ("no_such_framework_xyz is missing here, so this cell is skipped "
                   "(`pip install no_such_framework_xyz` brings it).\n") * 2


def test_needs_lets_a_failing_cell_fail_the_notebook(shell, capsys):
    result = shell.run_cell("%%needs numpy\nraise ValueError('broken on purpose')")
    assert not result.success
    assert isinstance(result.error_in_exec, lecture.CellFailed)
    out = capsys.readouterr().out
    assert "broken on purpose" in out  # the cell's own traceback, then one line, not a second one
    assert out.count("CellFailed") == 1
    assert out.rstrip().endswith("CellFailed: this cell failed (its traceback is above)")


def test_needs_gpu_skips_with_the_libraries_reason_and_runs_where_it_has_one(shell, monkeypatch,
                                                                           capsys):
    """``%%needs gpu`` asks CuPy; ``%%needs gpu torch`` asks torch (the GPU library named)."""
    asked: list[str] = []
    fake_gpu_status(monkeypatch, {"cupy": "CuPy found no CUDA device", "torch": None}, asked)
    assert shell.run_cell("%%needs gpu\nran_on_cupy = 1").success
    assert "ran_on_cupy" not in shell.user_ns and asked == ["cupy"]
    assert capsys.readouterr().out == (
        "No GPU here (CuPy found no CUDA device): this cell is skipped; on a machine with an "
        "NVIDIA GPU and `make lab GPU=1` it runs.\n")
    assert shell.run_cell("%%needs gpu torch\nran_on_torch = 1").success
    assert shell.user_ns["ran_on_torch"] == 1 and asked == ["cupy", "torch"]
    assert capsys.readouterr().out == ""


def test_needs_gpu_says_a_missing_gpu_library_is_why_there_is_no_gpu(shell, monkeypatch, capsys):
    """Not "pip install cupy": on a laptop the reason is that there is no GPU for it to use."""
    fake_gpu_status(monkeypatch, {"cupy": "CuPy is not installed", "torch": None})
    assert shell.run_cell("%%needs gpu cupy torch\nboth = 1").success
    assert "both" not in shell.user_ns
    assert capsys.readouterr().out.startswith("No GPU here (CuPy is not installed): this cell "
                                              "is skipped;")


def test_needs_gpu_names_a_missing_framework_before_asking_for_a_gpu(shell, monkeypatch, capsys):
    asked: list[str] = []
    fake_gpu_status(monkeypatch, {}, asked)
    assert shell.run_cell("%%needs gpu no_such_framework_xyz\nx = 1").success
    assert asked == [] and "x" not in shell.user_ns
    assert capsys.readouterr().out.startswith("no_such_framework_xyz is missing here, so this "
                                              "cell is skipped")


def test_needs_without_a_name_is_a_usage_error(shell, capsys):
    assert not shell.run_cell("%%needs\nx = 1").success
    assert "%%needs takes import names" in capsys.readouterr().err
    assert "x" not in shell.user_ns


# --------------------------------------------------------------------------- threads and load


def test_limit_threads_caps_blas_and_torch_and_restores_them():
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

    torch.set_num_threads(2)
    with threadpool_limits(limits=2):  # two threads before, whatever OMP_NUM_THREADS says
        before = blas_threads()
        assert before == {2}
        with lecture.limit_threads(1):
            assert blas_threads() == {1}
            assert torch.get_num_threads() == 1
        assert blas_threads() == before and torch.get_num_threads() == 2


@pytest.mark.parametrize(("load", "expected"), [(0.5, None), (2.0, None), (2.5, 1)])
def test_threads_if_busy_caps_only_when_load_exceeds_the_cores(monkeypatch, capsys, load, expected):
    from types import SimpleNamespace

    from edu_dl.machine import hardware

    two_cores = SimpleNamespace(usable_cores=SimpleNamespace(value=2))
    monkeypatch.setattr(hardware, "read_cpu", lambda: two_cores)
    monkeypatch.setattr(lecture.os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert lecture.threads_if_busy() == expected
    out = capsys.readouterr().out
    assert (out == "") == (expected is None)
    if expected:
        assert "1-minute load average 2.50 on 2 usable cores" in out


# --------------------------------------------------------------------------- provenance


def test_provenance_is_shown_in_full_once_then_referred_to(monkeypatch, capsys):
    monkeypatch.setattr(lecture, "_shown_provenance", set())
    facts = {"device": "Some GPU (9 SMs)", "date": "2026-11-24", "versions": "torch 9"}
    lecture.show_provenance({"provenance": facts, "command": "edu-dl bench matmul"})
    lecture.show_provenance({"provenance": facts, "command": "edu-dl bench transfer"})
    lecture.show_provenance({"provenance": {**facts, "date": "2026-12-01"}, "command": "probe"})
    assert capsys.readouterr().out.splitlines() == [
        "recorded on Some GPU (9 SMs) (2026-11-24; torch 9) by: edu-dl bench matmul",
        "recorded on the same Some GPU as above (2026-11-24) by: edu-dl bench transfer",
        "recorded on Some GPU (9 SMs) (2026-12-01; torch 9) by: probe",
    ]


# --------------------------------------------------------------------------- progress bars


@pytest.mark.parametrize("bar", ["tqdm.std", "tqdm.notebook"])
def test_progress_is_off_under_tqdm_disable_even_for_the_notebook_bar(monkeypatch, bar):
    import importlib

    import tqdm.auto

    # tqdm.auto picks the notebook bar in a Jupyter kernel, the text bar elsewhere
    monkeypatch.setattr(tqdm.auto, "tqdm", importlib.import_module(bar).tqdm)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert list(lecture.progress(range(3), desc="steps")) == [0, 1, 2]
    assert lecture.progress(range(3)).disable
    monkeypatch.delenv("TQDM_DISABLE")
    shown = lecture.progress(range(3), desc="steps")
    assert not shown.disable
    shown.close()
