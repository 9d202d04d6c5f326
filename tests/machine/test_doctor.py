"""`edu-dl doctor` on this machine: well-formed, plausible, honest about what it cannot know."""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.once import once_per_session

from edu_dl.cli import main
from edu_dl.machine import doctor
from edu_dl.machine import probes as gp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One full `edu-dl doctor --json` run (all four framework probes) in a fresh process,
    shared by both workers."""
    def run() -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, "-m", "edu_dl.cli", "doctor", "--json", "--quick",
             "--fma-units", "2", "--memory-mts", "2933", "--channels", "4"],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        data: dict[str, Any] = json.loads(proc.stdout)  # --json prints JSON and nothing else
        return data

    shared: dict[str, Any] = once_per_session(tmp_path_factory, "doctor", run)
    return shared


def _value(fact: dict[str, Any]) -> float:
    assert fact["value"] is not None, fact["reason"]
    return float(fact["value"])


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_cpu_and_ram_are_plausible(report: dict[str, Any]) -> None:
    cpu = report["cpu"]
    logical = _value(cpu["logical_cores"])
    assert logical >= 1
    assert 1 <= _value(cpu["usable_cores"]) <= logical
    assert 1 <= _value(cpu["physical_cores"]) <= logical
    assert cpu["model"]["value"] or cpu["model"]["reason"]
    clock = cpu["clock_mhz"]
    assert (clock["value"] is not None and 100 < clock["value"] < 10_000) or clock["reason"]
    assert 2**26 < _value(report["ram"]) < 2**50  # between 64 MiB and 1 PiB
    assert report["machine"].startswith(str(cpu["model"]["value"] or "unknown CPU"))


def test_measured_never_exceeds_a_known_theory(report: dict[str, Any]) -> None:
    pairs = [
        (report["peak"]["theoretical"], report["peak"]["measured_matmul"]),
        (report["peak"]["assumed"], report["peak"]["measured_matmul"]),
        (report["bandwidth"]["theoretical"], report["bandwidth"]["measured_copy"]),
    ]
    for theory, measured in pairs:
        m = _value(measured)
        assert m > 0 and math.isfinite(m)
        if theory["value"] is None:
            assert "measured" in theory["reason"] or "clock" in theory["reason"]
        else:
            assert m <= theory["value"]
    # The flags made the bandwidth computable: 2933 MT/s * 8 B * 4 channels.
    bandwidth = report["bandwidth"]["theoretical"]
    assert bandwidth["value"] == pytest.approx(93.856) or "wrong" in bandwidth["reason"]
    assert len(report["checks"]) == 3


def test_every_framework_is_reported(report: dict[str, Any]) -> None:
    frameworks = report["frameworks"]
    assert set(frameworks) == set(gp.FRAMEWORKS)
    assert frameworks["numpy"]["status"] == "ok"
    assert frameworks["numpy"]["version"] == np.__version__
    for name, dist in (("torch", "torch"), ("tensorflow", "tensorflow-cpu")):
        f = frameworks[name]
        assert f["status"] == "ok", f
        assert f["version"].split("+")[0] == metadata.version(dist).split("+")[0]
    tf = frameworks["tensorflow"]
    assert isinstance(tf["gpu_device_name"], str)  # the source's tf.test.gpu_device_name()
    assert (tf["gpu_device_name"] == "") == (not tf["gpus"])


def test_gpus_and_the_explanation_agree(report: dict[str, Any]) -> None:
    seen = any(f["gpus"] for f in report["frameworks"].values())
    assert report["gpu_found"] == seen
    blind = [n for n, f in report["frameworks"].items() if n != "numpy" and not f["gpus"]]
    if blind:  # this machine: no GPU, so one paragraph on why
        text = report["gpu_explanation"]
        assert text and "\n" not in text and "What to check" in text
        if not report["nvidia_driver"]["present"]:
            assert not seen and "No NVIDIA GPU" in text
        if not report["frameworks"]["torch"].get("cuda_build"):
            assert "CPU-only build" in text
    else:
        assert report["gpu_explanation"] is None


def test_the_table_shows_every_section(report: dict[str, Any]) -> None:
    text = doctor.render(report)
    for heading in ("CPU and memory", "Compute, float32", "Memory bandwidth", "Checks",
                    "Frameworks and the GPUs they see"):
        assert heading in text
    for name in gp.FRAMEWORKS:
        assert f"\n  {name} " in text
    assert "93.9 GB/s" in text or "CONTRADICTED" in text
    for value, shown in ((3 * 2**30 + 2**29, "3.5 GiB"), (2**29, "512.0 MiB")):  # format_bytes
        ram = {**report["ram"], "value": value}
        assert re.search(rf"\n  RAM +{shown}\n", doctor.render({**report, "ram": ram}))
    if report["gpu_explanation"]:
        assert "Why no GPU is seen" in text


def _a_gpu_machine(report: dict[str, Any]) -> dict[str, Any]:
    """This machine's report as a machine with two H100s and an A100 would fill its table."""
    gpus = [{"name": "NVIDIA H100 80GB HBM3"}] * 2 + [{"name": "NVIDIA A100-SXM4-40GB"}]
    frameworks = {
        "numpy": {"status": "ok", "version": "2.4.6", "gpus": []},
        "cupy": {"status": "ok", "version": "14.0.1", "gpus": gpus, "cuda": "13.0"},
        "torch": {"status": "ok", "version": "2.13.0+cu130", "gpus": gpus, "cuda": "13.0",
                  "cudnn": "91002", "cuda_build": True},
        "tensorflow": {"status": "error", "gpus": [], "detail": "ImportError: libcudnn.so.9: "
                       "cannot open shared object file: No such file or directory " * 3},
    }
    return {**report, "frameworks": frameworks, "gpu_explanation": None,
            "nvidia_driver": {"present": True, "version": "580.65.06", "max_cuda": "13.0"}}


@pytest.mark.parametrize("machine", ["this one", "three GPUs"])
def test_the_page_fits_a_notebook_column(report: dict[str, Any], machine: str) -> None:
    """Lecture 1 prints the page in a notebook, where a longer line wraps into a mess."""
    report = report if machine == "this one" else _a_gpu_machine(report)
    text = doctor.render(report, width=doctor.PAGE_WIDTH)
    too_wide = [line for line in text.splitlines() if len(line) > doctor.PAGE_WIDTH]
    assert not too_wide, "\n".join(too_wide)
    if machine == "three GPUs":
        assert "2x NVIDIA H100 80GB HBM3" in " ".join(text.split())
        assert "libcudnn.so.9" in text  # the notes under the table keep the framework's reason


def test_the_page_width_is_a_notebook_columns_off_a_terminal(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert not sys.stdout.isatty()  # pytest's capture, as in a notebook's kernel
    assert doctor.page_width() == doctor.PAGE_WIDTH


def test_a_table_wraps_its_widest_column_to_fit() -> None:
    rows = [["torch", "NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-40GB", "13.0"]]
    text = doctor.table(["name", "GPUs seen", "CUDA"], rows, width=40, wrap=1)
    assert max(len(line) for line in text.splitlines()) <= 40
    assert text.splitlines()[2].endswith("13.0")  # the row's other cells stay on its first line
    assert " ".join(text.split()).count("NVIDIA") == 2
    assert doctor.table(["name", "GPUs seen", "CUDA"], rows) == doctor.table(
        ["name", "GPUs seen", "CUDA"], rows, width=200, wrap=1)


def _args(**flags: Any) -> argparse.Namespace:
    base = {"fma_units": None, "clock_mhz": None, "memory_mts": None, "channels": None,
            "bus_bytes": 8}
    return argparse.Namespace(**{**base, **flags})


def test_a_theory_below_the_measurement_is_called_wrong() -> None:
    # 1 MHz and 100 MT/s on one channel: far below anything this machine measures.
    facts = doctor.compute_facts(
        _args(fma_units=1, clock_mhz=1.0, memory_mts=100.0, channels=1), measure=True, quick=True
    )
    for theory in (facts["peak"]["theoretical"], facts["bandwidth"]["theoretical"]):
        assert theory["value"] is None and "input is wrong" in theory["reason"]
    assert sum("CONTRADICTED" in c for c in facts["checks"]) >= 2
    text = doctor.render({**facts, "frameworks": {}, "nvidia_driver": {"present": False},
                          "gpu_explanation": None})
    assert "CONTRADICTED" in text


def test_unknowns_carry_reasons_without_flags() -> None:
    facts = doctor.compute_facts(_args(), measure=False, quick=True)
    assert "--fma-units" in facts["peak"]["theoretical"]["reason"]
    assert "--memory-mts" in facts["bandwidth"]["theoretical"]["reason"]
    assert facts["peak"]["measured_matmul"]["reason"].startswith("not measured")


def test_the_command_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--no-measure", "--frameworks", "numpy"])
    out = capsys.readouterr().out
    assert code == 0
    assert "edu-dl doctor:" in out and "numpy" in out and np.__version__ in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["doctor", "--fma-units", "0"], "must be positive"),
        (["doctor", "--memory-mts", "fast"], "expected a number"),
        (["doctor", "--frameworks", "caffe"], "unknown framework(s) 'caffe'"),
    ],
)
def test_bad_flags_are_clear_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
