"""nbgrader's own environment is built once per machine, however many workers ask at once."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from fixtures import nbgrader_course


def creates(argv: list[str]) -> bool:
    """Is this the call that makes the environment (`python -m venv DIR`, `uv venv ... DIR`)?"""
    return argv[1:3] == ["-m", "venv"] or argv[1] == "venv"


def fake_builds(monkeypatch: pytest.MonkeyPatch, *, fail: bool = False,
                uv: bool = False) -> list[list[str]]:
    """subprocess.run replaced: `venv` makes the folder, the install (the environment's pip, or
    uv given its --python) makes bin/nbgrader (slowly). ``uv``: as where make installed uv."""
    calls: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if creates(argv):
            (Path(argv[-1]) / "bin").mkdir(parents=True)
        else:
            time.sleep(0.2)  # long enough for the other worker to arrive while this one builds
            python = argv[argv.index("--python") + 1] if uv else argv[0]
            if not fail:
                (Path(python).parent / "nbgrader").write_text("#!/bin/sh\n")
        return subprocess.CompletedProcess(argv, int(fail), "", "no registry" * fail)

    monkeypatch.setattr(nbgrader_course.subprocess, "run", run)
    monkeypatch.setattr(nbgrader_course, "uv_beside_python",
                        lambda: Path("/venv/bin/uv") if uv else None)
    monkeypatch.setattr(nbgrader_course.pip_sources, "flags_for", lambda: ["--from-pip"])
    return calls


INSTALLERS = pytest.mark.parametrize("uv", [False, True], ids=["pip", "uv"])


@INSTALLERS
def test_two_workers_at_once_build_one_environment(tmp_path: Path, uv: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_builds(monkeypatch, uv=uv)
    found: list[Path] = []
    workers = [threading.Thread(target=lambda: found.append(
        nbgrader_course.nbgrader_venv(tmp_path / "nbgrader-venv"))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(found) == 2 and found[0] == found[1]
    assert sum(creates(argv) for argv in calls) == 1, calls
    if uv:  # with pip's sources, into the new environment
        install = calls[1]
        assert install[:3] == ["/venv/bin/uv", "pip", "install"] and "--from-pip" in install
        assert install[install.index("--python") + 1] == str(found[0] / "python")
    assert nbgrader_course.nbgrader_venv(tmp_path / "nbgrader-venv") == found[0]
    assert len(calls) == 2, "a third call rebuilt a finished environment"


@INSTALLERS
def test_a_half_made_environment_is_built_again(tmp_path: Path, uv: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_builds(monkeypatch, fail=True, uv=uv)
    with pytest.raises(nbgrader_course.NbgraderUnavailable, match="no registry"):
        nbgrader_course.nbgrader_venv(tmp_path / "venv")
    calls.clear()
    fake_builds(monkeypatch, uv=uv)
    (tmp_path / "venv" / "bin" / "nbgrader").write_text("")  # as if pip died halfway
    bin_dir = nbgrader_course.nbgrader_venv(tmp_path / "venv")
    assert (bin_dir / "nbgrader").read_text() == "#!/bin/sh\n", "the half-made one was kept"
