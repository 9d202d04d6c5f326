"""Exercise 1's parts: the solutions notebook passes every case; typical mistakes get their hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from exercise_helpers import assert_solution_passes, course_module, run_check, solution_namespace

from edu_dl.grading import checking, source, spec
from edu_dl.grading.trust.source import find_source

ex01 = course_module("ex01")

NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "01_getting_started.ipynb"
SOLUTIONS = solution_namespace("01_getting_started.ipynb")
FUNCTIONS = {"ex01.peak_gflops": "peak_gflops", "ex01.choose_gpus": "choose_gpus",
             "ex01.pick_device": "pick_device", "ex01.read_cpuinfo": "read_cpuinfo"}


run = run_check


@pytest.mark.parametrize("part", ex01.PARTS, ids=lambda p: p.id)
@pytest.mark.parametrize("hidden", [False, True])
def test_oracle_agrees_with_the_solution(part: spec.Part, hidden: bool) -> None:
    rng = np.random.default_rng(12345 if hidden else checking.VISIBLE_SEED)
    assert_solution_passes(part, SOLUTIONS[FUNCTIONS[part.id]], hidden, rng)


@pytest.mark.parametrize("part_id", FUNCTIONS)
def test_stub_is_not_implemented_yet(capsys: pytest.CaptureFixture[str], part_id: str) -> None:
    def stub(*args: Any) -> Any:
        raise NotImplementedError()

    ok, out = run(capsys, part_id, stub)
    assert not ok and out.strip() == f"✗ {part_id}: not implemented yet"


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


def test_cpuinfo_counting_processor_blocks_as_cores(capsys: pytest.CaptureFixture[str]) -> None:
    def blocks_as_cores(text):
        model, logical, _, bits, fma = SOLUTIONS["read_cpuinfo"](text)
        return model, logical, logical, bits, fma

    ok, out = run(capsys, "ex01.read_cpuinfo", blocks_as_cores)
    assert not ok
    assert "output 2 (physical_cores): expected 6, got 12" in out
    assert "hint: physical cores: hyperthreads (SMT) repeat a core" in out


def test_cpuinfo_with_avx2_before_avx512(capsys: pytest.CaptureFixture[str]) -> None:
    def avx_first(text):
        model, logical, cores, bits, fma = SOLUTIONS["read_cpuinfo"](text)
        return model, logical, cores, 256 if bits == 512 else bits, fma

    ok, out = run(capsys, "ex01.read_cpuinfo", avx_first)
    assert not ok and "hint: the WIDEST vector instructions count" in out


# --------------------------------------------------------------------------- the library oracles


def peak_from_the_doctor(cores, clock_mhz, simd_bits, fma_units):
    from edu_dl.hardware import flops_per_cycle, peak_flops

    per_cycle = flops_per_cycle(simd_bits=simd_bits, fma=True, fma_units=fma_units)
    return peak_flops(cores=cores, clock_hz=clock_mhz * 1e6, per_cycle=per_cycle) / 1e9


def cpuinfo_from_the_doctor(text):
    from edu_dl.hardware import cpu_from_cpuinfo

    cpu = cpu_from_cpuinfo(text, architecture="x86_64")
    return (str(cpu.model.value), int(cpu.logical_cores.value), int(cpu.physical_cores.value),
            int(cpu.simd_bits.value), bool(cpu.fma))


@pytest.mark.parametrize(("part_id", "fn", "message"), [
    ("ex01.peak_gflops", peak_from_the_doctor,
     "this part asks you to write the formula yourself: cores x clock x FLOPs per cycle (do not "
     "call edu_dl.hardware.peak_flops or flops_per_cycle)"),
    ("ex01.read_cpuinfo", cpuinfo_from_the_doctor,
     "this part asks you to read the text yourself: split it into processor blocks and their "
     "fields (do not call edu_dl.hardware.cpu_from_cpuinfo)"),
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
