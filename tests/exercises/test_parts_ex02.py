"""Exercise 2's parts beyond test_check.py: the mistakes' hints, and matmul_intensity's library
oracle (``edu_dl.machine.hardware.matmul_intensity`` computes the same value) refused by its
source."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from fixtures.exercise_helpers import (
    course_module,
    run_check,
)

from edu_dl.grading.authoring import source
from edu_dl.grading.trust.source import find_source

ex02 = course_module("ex02")

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "02_cpu_vs_gpu.ipynb"

run = run_check


@pytest.mark.parametrize(("part_id", "fn", "hint"), [
    ("ex02.gflops", lambda n, s: n**2 / s / 1e9, "n³ multiply-adds, not n²"),
    ("ex02.peak_bandwidth", lambda m, b, c: m * b, "multiply by the number of channels"),
    ("ex02.matmul_intensity", lambda n, s: 2.0 * n**3 / (3 * n**2), "multiply the elements by "
                                                                     "itemsize"),
    ("ex02.matmul_intensity", lambda n, s: 2.0 * n**3 / (2 * n**2 * s), "three matrices"),
])
def test_mistakes_get_their_hint(capsys: pytest.CaptureFixture[str], part_id: str, fn: object,
                                 hint: str) -> None:
    ok, out = run(capsys, part_id, fn)
    assert not ok and "hint: " in out and hint in out


def intensity_from_the_doctor(n, itemsize):
    from edu_dl.machine.hardware import matmul_intensity

    return matmul_intensity(n, itemsize)


def test_calling_edu_dl_hardware_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """edu_dl.machine.hardware.matmul_intensity gets the values right; the source check refuses it,
    the solution's source passes."""
    ok, out = run(capsys, "ex02.matmul_intensity", intensity_from_the_doctor)
    assert not ok and out == (
        "✗ ex02.matmul_intensity: the values are right, but this part asks you to count the "
        "FLOPs and the bytes yourself (do not call edu_dl.machine.hardware.matmul_intensity or "
        "matmul_flops)\n")
    part = next(p for p in ex02.PARTS if p.id == "ex02.matmul_intensity")
    found = find_source(nbformat.read(NOTEBOOK, as_version=4), part.id)
    assert found is not None and source.judge_source(part, found).ok
