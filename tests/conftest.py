"""Shared test set-up: hypothesis profiles, the in_solutions and numpy_as_cupy fixtures, and a
guard that no test leaks grad mode."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import edu_dl
from edu_dl import backend

# CI runs the same examples every time (derandomize); locally hypothesis explores freely.
# No deadline: the first example of a test pays for imports and warm-up.
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def in_solutions(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder of a student's notebook in ``solutions/``: check() finds the course's
    parts in ./parts, as it does in the notebook."""
    folder = Path(__file__).resolve().parents[1] / "solutions"
    monkeypatch.chdir(folder)
    return folder


@pytest.fixture
def numpy_as_cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """NumPy in CuPy's place (fixtures/fake_cupy.py): a GPU test's path through ``xp``, run on
    the CPU, where CI has no GPU."""
    from fixtures import fake_cupy

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.module())
    cupyx = types.ModuleType("cupyx")
    cupyx.scatter_add = fake_cupy.scatter_add  # type: ignore[attr-defined]
    cupyx.empty_pinned = fake_cupy.empty_pinned  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupyx", cupyx)
    backend.gpu_status.cache_clear()
    yield
    backend.gpu_status.cache_clear()


@pytest.fixture(autouse=True)
def _grad_mode_is_restored():
    """Every test starts and ends with gradient recording on."""
    assert edu_dl.is_grad_enabled()
    yield
    assert edu_dl.is_grad_enabled(), "a test (or the code it tests) left no_grad() switched on"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """EDU_DL_FORBID_SKIPS=1 (CI's run as an ordinary user): a skipped test is a failed one, so a
    guarantee that holds only as root cannot pass unnoticed."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("EDU_DL_FORBID_SKIPS") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, and EDU_DL_FORBID_SKIPS forbids it: {report.longrepr}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """root_only tests (a cgroup made around the grader, the sandbox's uid range) skip, saying
    so, when an ordinary user runs the suite; `make test-unprivileged` deselects them instead,
    since its skips fail."""
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="root_only: needs root (run by make test as root)")
    for item in items:
        if item.get_closest_marker("root_only"):
            item.add_marker(skip)
