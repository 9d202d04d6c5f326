"""Exercise 1's parts: the solutions notebook passes every case; typical mistakes get their hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    course_module,
    run_check,
    solution_namespace,
)

from edu_dl.grading.authoring import source
from edu_dl.grading.trust.source import find_source

ex01 = course_module("ex01")

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "01_getting_started.ipynb"
SOLUTIONS = solution_namespace("01_getting_started.ipynb")
FUNCTIONS = {"ex01.peak_gflops": "peak_gflops", "ex01.choose_gpus": "choose_gpus",
             "ex01.pick_device": "pick_device", "ex01.machine_peak": "machine_peak"}


run = run_check


def test_the_lecture_example_is_192_gflops() -> None:
    assert ex01._peak_expected(2, 3000.0, 256, 2) == pytest.approx(192.0)


def test_peak_without_the_fma_factor(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex01.peak_gflops", lambda c, mhz, bits, u: c * mhz / 1e3 * bits / 32 * u)
    assert not ok
    assert "case 1 of 3 (cores=2, clock_mhz=3000, simd_bits=256, fma_units=2)" in out
    assert "expected 192, got 96" in out
    assert "hint: half the expected peak: an FMA" in out


def test_peak_with_bits_instead_of_lanes(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex01.peak_gflops", lambda c, mhz, bits, u: c * mhz / 1e3 * bits * 2 * u)
    assert not ok and "hint: simd_bits is the register width in bits" in out


def test_gpus_with_strict_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    def strict(vendors, cores, memory, bandwidth):
        rows = np.flatnonzero((vendors == "NVIDIA") & (cores > 1000) & (memory > 8))
        return rows[np.argsort(-bandwidth[rows], kind="stable")]

    ok, out = run(capsys, "ex01.choose_gpus", strict)
    assert not ok
    assert "expected shape (3,), got shape (2,)" in out
    assert "hint: 'at least 1000 cores' and 'at least 8 GB' include the boundary" in out


def test_gpus_ranked_the_wrong_way_and_any_vendor(capsys: pytest.CaptureFixture[str]) -> None:
    def ascending(vendors, cores, memory, bandwidth):
        rows = np.flatnonzero((vendors == "NVIDIA") & (cores >= 1000) & (memory >= 8))
        return rows[np.argsort(bandwidth[rows], kind="stable")]

    ok, out = run(capsys, "ex01.choose_gpus", ascending)
    assert not ok and "hint: rank by bandwidth from the highest down" in out

    def any_vendor(vendors, cores, memory, bandwidth):
        rows = np.flatnonzero((cores >= 1000) & (memory >= 8))
        return rows[np.argsort(-bandwidth[rows], kind="stable")]

    ok, out = run(capsys, "ex01.choose_gpus", any_vendor)
    assert not ok and "hint: only NVIDIA cards have CUDA and cuDNN" in out


def test_device_without_bounds_check_or_index(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex01.pick_device", lambda a, n, i: f"cuda:{i}" if a else "cpu")
    assert not ok
    assert "case 4 of 5 (cuda_available=True, device_count=2, index=2)" in out
    assert "expected 'cpu', got 'cuda:2'" in out and "hint: check the index" in out
    ok, out = run(capsys, "ex01.pick_device", lambda a, n, i: "gpu" if a else "cpu")
    assert not ok and "hint: PyTorch names NVIDIA GPUs 'cuda'" in out


def _peak(physical_id: Any, core_id: Any, flags: str, clock_mhz: float, fma_units: int, *,
          cores: int | None = None, bits: int | None = None, fma: bool | None = None) -> float:
    """A machine's peak written here independently (not the oracle), with mistakes to replay."""
    words = flags.split()
    n = cores if cores is not None else len(set(zip(list(physical_id), list(core_id))))
    width = bits or (512 if "avx512f" in words else 256 if "avx" in words else 128)
    per_lane = 2 if (("fma" in words) if fma is None else fma) else 1
    return n * clock_mhz * 1e6 * width / 32 * per_lane * fma_units / 1e9


def test_machine_peak_oracle_on_the_lecture_example() -> None:
    ids, cores = ex01.logical_cpus(sockets=1, cores=2, threads=2)
    assert list(ids) == [0, 0, 0, 0] and list(cores) == [0, 1, 0, 1]
    flags = ex01.FLAGS["avx2 + fma"]
    assert ex01._machine_peak(ids, cores, flags, 3000.0, 2) == pytest.approx(192.0)
    assert ex01._machine_peak(ids, cores, ex01.FLAGS["avx, no fma"], 3000.0, 2) == \
        pytest.approx(96.0)


@pytest.mark.parametrize(("mistake", "hint"), [
    ({"cores": "logical"}, "your core count includes the hyperthreads"),
    ({"cores": "core id"}, "your core count misses a socket"),
    ({"bits": 256}, "the WIDEST vector instructions count"),
    ({"fma": True}, "without the fma flag a multiply and an add are two instructions"),
])
def test_machine_peak_mistakes_get_their_hints(capsys: pytest.CaptureFixture[str],
                                               mistake: dict[str, Any], hint: str) -> None:
    def wrong(physical_id: Any, core_id: Any, flags: str, clock_mhz: float, fma_units: int):
        kw = dict(mistake)
        if kw.get("cores") == "logical":
            kw["cores"] = len(physical_id)
        elif kw.get("cores") == "core id":
            kw["cores"] = len(set(core_id.tolist()))
        return _peak(physical_id, core_id, flags, clock_mhz, fma_units, **kw)

    ok, out = run(capsys, "ex01.machine_peak", wrong)
    assert not ok and f"hint: {hint}" in out, out


def test_machine_peak_hints_stay_quiet_on_a_right_answer_and_on_noise(
        capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex01.machine_peak", _peak)
    assert ok, out
    ok, out = run(capsys, "ex01.machine_peak", lambda *a: _peak(*a) * 1.37)
    assert not ok and "hint:" not in out, out


# --------------------------------------------------------------------------- the library oracles


def peak_from_the_doctor(cores, clock_mhz, simd_bits, fma_units):
    from edu_dl.machine.hardware import flops_per_cycle, peak_flops

    per_cycle = flops_per_cycle(simd_bits=simd_bits, fma=True, fma_units=fma_units)
    return peak_flops(cores=cores, clock_hz=clock_mhz * 1e6, per_cycle=per_cycle) / 1e9


def machine_peak_from_the_doctor(physical_id, core_id, flags, clock_mhz, fma_units):
    from edu_dl.machine.hardware import flops_per_cycle, peak_flops

    words = flags.split()
    bits = 512 if "avx512f" in words else 256 if "avx" in words else 128
    per_cycle = flops_per_cycle(simd_bits=bits, fma="fma" in words, fma_units=fma_units)
    cores = len(set(zip(physical_id.tolist(), core_id.tolist())))
    return peak_flops(cores=cores, clock_hz=clock_mhz * 1e6, per_cycle=per_cycle) / 1e9


@pytest.mark.parametrize(("part_id", "fn", "message"), [
    ("ex01.peak_gflops", peak_from_the_doctor,
     "this part asks you to write the formula yourself: cores x clock x FLOPs per cycle (do not "
     "call edu_dl.machine.hardware.peak_flops or flops_per_cycle)"),
    ("ex01.machine_peak", machine_peak_from_the_doctor,
     "this part asks you to combine the facts yourself (your peak_gflops may help; do not call "
     "edu_dl.machine.hardware's peak_flops, flops_per_cycle or cpu_from_cpuinfo)"),
])
def test_calling_edu_dl_hardware_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                            fn: Any, message: str) -> None:
    """The oracle is the doctor's own code: a function that calls it gets the values right, and
    the source check (check()'s and the grader's) refuses it; the solution's source passes."""
    ok, out = run(capsys, part_id, fn)
    assert not ok and out == f"✗ {part_id}: the values are right, but {message}\n"
    part = next(p for p in ex01.PARTS if p.id == part_id)
    found = find_source(nbformat.read(NOTEBOOK, as_version=4), part_id)
    assert found is not None and source.judge_source(part, found).ok
    ok, out = run(capsys, part_id, SOLUTIONS[FUNCTIONS[part_id]])
    assert ok, out
