"""Shared test set-up: hypothesis profiles, the in_solutions and numpy_as_cupy fixtures, and a
guard that no test leaks grad mode."""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Triton's interpreter for every test process, set before anything imports triton: triton.language
# decorates its own helpers (tl.sum, tl.max, ...) when it is imported, so a kernel run in the
# interpreter fails ("Cannot call @triton.jit'd outside of the scope of a kernel") in a process
# where torch.compile (exercises 14, 17) imported triton first. The grading sandbox sets it too.
os.environ.setdefault("TRITON_INTERPRET", "1")

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


@pytest.fixture(scope="session")
def nbgrader_beside_edu_dl(tmp_path_factory: pytest.TempPathFactory,
                           pytestconfig: pytest.Config) -> tuple[dict, Path]:
    """One run of ``tests/bench_grading.py``'s ``versus_nbgrader`` (one round, one worker:
    nbgrader 0.9's autograde and feedback, then edu-dl's grade, of the nbgrader-style sample
    course), made once per session for both workers: ``bench/test_bench_grading.py`` reads its
    result, ``grading/test_nbgrader_course.py`` the gradebook nbgrader's autograde left in
    ``round0/nbgrader/``. Returns (the result, the folder of the graded courses); read only."""
    import json

    import bench_grading
    from fixtures.once import folder_once_per_session

    venv = Path(pytestconfig.cache.mkdir("nbgrader-0.9-venv"))  # the nbgrader tests' own

    def make(folder: Path) -> None:
        result = bench_grading.versus_nbgrader(copies=1, jobs=1, venv=venv, progress=False,
                                               rounds=1, keep=folder / "courses")
        (folder / "result.json").write_text(json.dumps(result))

    folder = folder_once_per_session(tmp_path_factory, "nbgrader-beside-edu-dl", make)
    return json.loads((folder / "result.json").read_text()), folder / "courses"


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
def _frameworks_imported(request: pytest.FixtureRequest) -> None:
    """The frameworks a test module holds from fixtures/frameworks.py, imported in the test's
    set-up: a first import takes seconds, and must not fall inside a call that a test times
    (check()'s time limit); collecting the module imported none of them."""
    from fixtures.frameworks import LazyModule

    module = getattr(request.node, "module", None)  # None for an item that no module holds
    for value in list(vars(module).values()) if module else []:
        if isinstance(value, LazyModule):
            importlib.import_module(value.__name__)


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


# What a test module does that costs the most, as markers (`make test-fast` deselects them; see
# tests/README.md). One rule each, by the module's path from tests/: a folder ends in "/".
# sandbox: runs student code in the bubblewrap sandbox, most of them a graded batch.
SANDBOX = (
    "grading/hostile/",
    "grading/test_grade.py", "grading/test_timeouts_and_causes.py", "grading/test_cluster.py",
    "grading/test_secret.py", "grading/test_instructor_course.py", "grading/test_feedback.py",
    "grading/test_term_grading.py", "grading/test_classreport.py", "grading/test_sandbox.py",
    "grading/test_speed.py", "grading/test_speed_under_load.py", "grading/test_validate.py",
    "grading/test_nbgrader_course.py",
    "grading/test_lms.py", "bench/test_bench_grading.py", "notebooks/test_authoring_guide.py",
    "grading/test_mark_browser.py", "grading/test_ahead.py", "grading/test_student_package.py",
    "grading/test_drawn_once.py",
)
# notebook: executes a notebook (nbval, nbclient, a kernel, nbgrader's autograde).
NOTEBOOK = (
    "notebooks/test_lectures_without_tensorflow.py", "notebooks/test_notebook_checks.py",
    "notebooks/test_compiled.py", "notebooks/test_hosted.py", "notebooks/test_browser.py",
    "grading/test_nbgrader_check.py", "grading/test_kernel.py",
)
# browser: drives headless Chromium (the course site, JupyterLab).
BROWSER = ("notebooks/test_site.py", "notebooks/test_lab.py", "notebooks/test_browser.py",
           "grading/test_mark_browser.py")
TESTS = Path(__file__).resolve().parent


def cost_rank(item: pytest.Item) -> int:
    """-1 for a test marked waits, 0 for one marked slow, 1 for one that runs a sandbox, a
    notebook or a browser, else 2. A test that mostly waits leaves its worker's core idle unless
    something else runs: first, the notebooks and the types run beside it (make test), and
    they fill that core; last, only the other worker does (in the unit phase of 2026-12-05, the
    two cores were idle 7% of 835 s)."""
    if item.get_closest_marker("waits"):
        return -1
    if item.get_closest_marker("slow"):
        return 0
    return 1 if any(item.get_closest_marker(m) for m in ("sandbox", "notebook", "browser")) else 2


def cost_markers(path: Path) -> list[str]:
    """The markers of SANDBOX, NOTEBOOK and BROWSER whose rules name this test file."""
    where = path.resolve().relative_to(TESTS).as_posix()
    return [name for name, rules in (("sandbox", SANDBOX), ("notebook", NOTEBOOK),
                                     ("browser", BROWSER))
            if any(where == rule or (rule.endswith("/") and where.startswith(rule))
                   for rule in rules)]


def pytest_configure(config: pytest.Config) -> None:
    """xdist hands tests out one at a time (--maxschedchunk=1) unless told otherwise. Its default
    first hand-out is a quarter of the suite per worker, in a row: with the costliest tests first
    (below), one worker got nearly all of them. Replayed from a CI run's durations, the unit phase
    took 1,517 s on one worker against 410 s on the other (CI's wall time was 1,544 s); one at a
    time, 963 s on each."""
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def pytest_runtest_setup(item: pytest.Item) -> None:
    """The xdist worker that runs each test, in the JUnit report (.ci/cost_by_folder.py sums each
    worker's busy time, so an unbalanced run shows in CI's log)."""
    item.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cost markers above, on every test of the modules they name; and root_only tests (a
    cgroup made around the grader, the sandbox's uid range) skip, saying so, when an ordinary
    user runs the suite; `make test-unprivileged` deselects them instead, since its skips
    fail."""
    markers: dict[Path, list[str]] = {}
    for item in items:
        path = item.path
        if path not in markers:
            markers[path] = cost_markers(path)
        for name in markers[path]:
            item.add_marker(name)
    # The costliest first: xdist hands tests out in this order, one at a time (pytest_configure),
    # so a two-minute test started last cannot keep one worker busy while the other has nothing
    # left (stable: the order within each group is the files' own).
    items.sort(key=cost_rank)
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="root_only: needs root (run by make test as root)")
    for item in items:
        if item.get_closest_marker("root_only"):
            item.add_marker(skip)
