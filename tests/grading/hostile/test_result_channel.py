"""The way out of the sandbox: the result and log pipes against the student's own kernel.

The kernel is the runner's child and runs as the same uid. It must not be able to take the
runner's result descriptor (through /proc/<pid>/fd or pidfd_getfd), nor reserve the grader's disk
through a descriptor it inherited (fallocate with KEEP_SIZE). Killing its own runner costs the
student their own run, nothing else. Run as root and as an ordinary user (CI does both).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from pathlib import Path

import pytest
from fixtures.hostile import attacks, corpus

from edu_dl.grading.settings import Settings
from edu_dl.grading.term import batch as G
from hostile.test_attacks import (
    _own_sandbox_group,  # noqa: F401  (the fixture: this module's sandboxes carry GROUP)
    assert_no_process_left,
    attacker,
    everything_written,
    points,
    write,
)

pytestmark = pytest.mark.slow
FAST = Settings(timeout_s=30, budget_s=90, memory_mb=2048)


def test_a_forged_result_is_never_used(tmp_path: Path) -> None:
    """Both routes to the runner's result descriptor fail; a student who kills the runner gets
    their own crash. Before the fix the proc route forged a full score as a user, pidfd as root."""
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())  # the honest control
    write(subs / "mallory_proc", attacker(attacks.forge("proc")))
    write(subs / "mallory_pidfd", attacker(attacks.forge("pidfd")))
    write(subs / "killer", attacker("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"))
    summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False)
    assert points(summary) == {"alice": 2.0, "mallory_proc": 0.0, "mallory_pidfd": 0.0,
                               "killer": 0.0}, summary.rows
    rows = {(r.student, r.part): r for r in summary.rows}
    assert {rows[("killer", p)].status for p in corpus.PARTS} == {"crashed"}, summary.rows
    for name in ("mallory_proc", "mallory_pidfd"):  # judged on their own (wrong) functions
        assert {rows[(name, p)].status for p in corpus.PARTS} == {"failed"}, summary.rows
    written = everything_written(out, [])
    assert "FORGED-RESULT-MARKER" not in written
    # What the attacks printed (their sources are in the notebooks too: whole lines only).
    assert "ATTACK DONE proc" in written and "ATTACK DONE pidfd" in written
    assert not re.search(r"(OPENED|FORGED via) [/\dp]", written), written
    # The runner's own descriptor first (its pid and the number in its environment): EACCES,
    # as it is non-dumpable; nothing else in the sandbox held one that could be opened.
    refused = re.findall(r"proc refused (\d+) (\d+) (\d+)\b", written)
    assert refused and refused[0][2] == "13", refused
    assert re.search(r"pidfd_open -1 1\b", written), written  # EPERM: the seccomp filter
    assert_no_process_left()


def test_fallocate_reserves_no_host_disk(tmp_path: Path) -> None:
    """fallocate(KEEP_SIZE, 2 GiB) on every descriptor the kernel holds or can reopen: each call
    fails with EOPNOTSUPP, and the grader's temporary folder loses no space meanwhile."""
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    write(subs / "mallory", attacker(attacks.FALLOCATE))
    folder = tempfile.gettempdir()

    def free() -> int:
        st = os.statvfs(folder)
        return st.f_bavail * st.f_frsize

    before = max(free() for _ in range(3))
    lowest = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            lowest[0] = min(lowest[0], free())
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False)
    finally:
        done.set()
        sampler.join()
    assert points(summary) == {"alice": 2.0, "mallory": 0.0}, summary.rows
    written = everything_written(out, [])
    assert "ATTACK DONE" in written, written
    calls = re.findall(r"fallocate (.+?) (-?\d+) (\d+)\n", written)
    assert len(calls) >= 3, written  # its stdin, stdout and stderr at least
    assert all(rc == "-1" and errno == "95" for _, rc, errno in calls), calls  # EOPNOTSUPP
    # 2 GiB per host file it reached before the fix; other users of the disk move it a little.
    assert before - lowest[0] < 1 << 30, (before - lowest[0]) >> 20
    assert_no_process_left()
