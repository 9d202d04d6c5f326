"""nbgrader's own environment is built once per machine, however many workers ask at once."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from fixtures import nbgrader_course


def fake_builds(monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> list[list[str]]:
    """subprocess.run replaced: `venv` makes the folder, pip makes bin/nbgrader (slowly)."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[1:3] == ["-m", "venv"]:
            (Path(argv[3]) / "bin").mkdir(parents=True)
        else:
            time.sleep(0.2)  # long enough for the other worker to arrive while this one builds
            if not fail:
                (Path(argv[0]).parent / "nbgrader").write_text("#!/bin/sh\n")
        return subprocess.CompletedProcess(argv, int(fail), "", "no registry" * fail)

    monkeypatch.setattr(nbgrader_course.subprocess, "run", run)
    return calls


def test_two_workers_at_once_build_one_environment(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_builds(monkeypatch)
    found: list[Path] = []
    workers = [threading.Thread(target=lambda: found.append(
        nbgrader_course.nbgrader_venv(tmp_path / "nbgrader-venv"))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(found) == 2 and found[0] == found[1]
    assert sum(argv[1:3] == ["-m", "venv"] for argv in calls) == 1, calls
    assert nbgrader_course.nbgrader_venv(tmp_path / "nbgrader-venv") == found[0]
    assert len(calls) == 2, "a third call rebuilt a finished environment"


def test_a_half_made_environment_is_built_again(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_builds(monkeypatch, fail=True)
    with pytest.raises(nbgrader_course.NbgraderUnavailable, match="no registry"):
        nbgrader_course.nbgrader_venv(tmp_path / "venv")
    calls.clear()
    fake_builds(monkeypatch)
    (tmp_path / "venv" / "bin" / "nbgrader").write_text("")  # as if pip died halfway
    bin_dir = nbgrader_course.nbgrader_venv(tmp_path / "venv")
    assert (bin_dir / "nbgrader").read_text() == "#!/bin/sh\n", "the half-made one was kept"
