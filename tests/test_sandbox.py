"""The bubblewrap sandbox: isolation, limits, and nothing left running afterwards."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from edu_dl.grading import sandbox

FAST = sandbox.Limits(wall_s=20, memory_mb=512, processes=64, file_mb=4, tmp_mb=8)
PY = sys.executable


def py(code: str, limits: sandbox.Limits = FAST, **kw) -> sandbox.Result:
    return sandbox.run([PY, "-c", code], limits=limits, env={"PATH": "/usr/bin:/bin"}, **kw)


def test_bwrap_is_available() -> None:
    # CI installs the Debian package `bubblewrap`; without it grading is not isolated.
    assert sandbox.bwrap_problem() == ""


def test_system_is_read_only_and_tmp_is_private(tmp_path: Path) -> None:
    target = tmp_path / "escape.txt"
    done = py(f"""
import pathlib
try:
    pathlib.Path({str(target)!r}).write_text("x")
    print("WROTE")
except OSError as exc:
    print("refused", exc.errno)
pathlib.Path("/tmp/mine.txt").write_text("ok")
print("tmp ok", sorted(p.name for p in pathlib.Path("/tmp").iterdir()))
""")
    assert done.returncode == 0, done.log
    assert "refused" in done.log and "WROTE" not in done.log
    # A fresh, empty /tmp, but for a Python or checkout that lives there (shown read-only).
    shown = sorted({"mine.txt"} | {p.relative_to("/tmp").parts[0]
                                   for p in sandbox.software() if p.is_relative_to("/tmp")})
    assert f"tmp ok {shown}" in done.log
    assert not target.exists()


def test_private_folders_are_not_there(tmp_path: Path) -> None:
    secret = tmp_path / "solutions"
    secret.mkdir()
    (secret / "answer.ipynb").write_text("{}")
    # Outside /tmp too (the repo): an instructor's --source usually lives there.
    repo_secret = Path(__file__).resolve().parents[1] / "solutions"
    done = py(f"import os; print('seen', os.path.exists({str(secret / 'answer.ipynb')!r}), "
              f"os.path.exists({str(repo_secret)!r}))\nprint('root', *sorted(os.listdir('/')))",
              hide=[secret, repo_secret])
    assert "seen False False" in done.log, done.log
    top = set(done.log.split("root ", 1)[1].split())
    assert not top & {"home", "var", "run", "srv", "mnt", "opt", "media", "boot"}, top


def test_no_network_but_loopback() -> None:
    done = py("""
import socket
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen()
socket.create_connection(server.getsockname(), timeout=2); print("loopback ok")
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2); print("NETWORK")
except OSError as exc:
    print("no network", exc.errno)
""")
    assert "loopback ok" in done.log and "no network" in done.log, done.log
    assert "NETWORK" not in done.log


def test_tmpfs_and_file_size_limits() -> None:
    done = py("""
import signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
try:
    open("/tmp/big", "wb").write(b"0" * (6 << 20))
except OSError as exc:
    print("file size", exc.errno)
try:
    for i in range(10_000):
        with open(f"/tmp/f{i}", "wb") as f:  # closed here: the error is not lost in __del__
            f.write(b"0" * 4096)
except OSError as exc:
    print("tmp full at", i, exc.errno)
""")
    assert "file size 27" in done.log, done.log  # EFBIG: over RLIMIT_FSIZE (4 MB)
    assert "tmp full at" in done.log and "28" in done.log  # ENOSPC: the 8 MB tmpfs


def test_memory_limit_raises_memory_error() -> None:
    done = py("x = bytearray(1 << 30); print('ALLOCATED')")
    assert "MemoryError" in done.log and "ALLOCATED" not in done.log, done.log


def test_wall_time_kills_everything() -> None:
    limits = sandbox.Limits(wall_s=2, memory_mb=512, processes=64)
    # Durations no other process on the machine has (a plain `sleep 300` elsewhere is not ours).
    done = sandbox.run(["/bin/sh", "-c",
                        "(sleep 300.713 &); setsid sleep 301.713 & sleep 302.713"],
                       limits=limits, env={"PATH": "/usr/bin:/bin"})
    assert done.killed == "timeout"
    assert done.seconds < 15
    assert not any(".713" in _cmdline(pid) and "sleep 30" in _cmdline(pid)
                   for pid in _all_pids())


@pytest.mark.slow
def test_fork_bomb_is_stopped_and_reaped() -> None:
    limits = sandbox.Limits(wall_s=30, memory_mb=1024, processes=48)
    done = py("import os\nwhile True:\n    os.fork()", limits=limits)
    # Killed by the watchdog, or refused by the kernel first (RLIMIT_NPROC on the uid's count).
    refused = "Resource temporarily unavailable" in done.log
    assert done.killed in ("processes", "memory") or refused, done
    assert done.seconds < 25
    assert not any("os.fork()" in _cmdline(pid) for pid in _all_pids())


def test_the_kernel_refuses_a_fork_bomb(monkeypatch: pytest.MonkeyPatch) -> None:
    """RLIMIT_NPROC binds for the sandbox's unprivileged uid (as root too: it is never root), and
    where a pids cgroup can be made (as root) it caps the sandbox as well; nothing is skipped."""
    probe = sandbox.make_pids_cgroup(f"edu_dl_probe_{os.getpid()}", 10)
    if probe is not None:
        assert (probe / "pids.max").read_text().strip() == "10"
        sandbox.remove_cgroup(probe)
        assert not probe.exists()
    else:  # an ordinary user: the rlimit alone, on the user's own count
        assert os.geteuid() != 0
    group = f"cgtest{os.getpid()}_"
    monkeypatch.setenv(sandbox.GROUP_VAR, group)
    limits = sandbox.Limits(wall_s=30, memory_mb=1024, processes=16)
    # Children that sleep: without a cap they pile up faster than the watchdog polls.
    done = py("import os, time\n"
              "try:\n"
              "    while True:\n"
              "        if os.fork() == 0:\n"
              "            time.sleep(60)\n"
              "except OSError as exc:\n"
              "    print('fork refused:', exc.strerror, flush=True)\n"
              "    time.sleep(60)", limits=limits)
    assert "fork refused: Resource temporarily unavailable" in done.log, done
    if probe is None:
        return
    assert done.killed == "processes", done  # the watchdog still names the cause
    assert done.peak_tasks <= limits.processes + sandbox.CGROUP_MARGIN, done
    hierarchy = probe.parent
    assert not [p for p in hierarchy.iterdir() if group in p.name]  # removed after the run
    # One left behind (a grader killed mid-run) is swept once it is old, never while new.
    left = hierarchy / f"edu_dl_sandbox_{group}left"
    left.mkdir()
    sandbox._remove_stale(hierarchy)
    assert left.exists()
    sandbox._remove_stale(hierarchy, older_than_s=0)
    assert not left.exists()


def test_fallback_without_bwrap_says_so_and_reaps(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    limits = sandbox.Limits(wall_s=2, memory_mb=512, processes=64)
    done = sandbox.run([PY, "-c", "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                        "    time.sleep(303)\ntime.sleep(304)"], limits=limits,
                       env={"PATH": "/usr/bin:/bin"}, fallback_dir=tmp_path)
    assert not done.isolated and "NOT ISOLATED" in done.notes[0]
    assert done.killed == "timeout"
    # The double-forked child escaped the process tree; the tag finds and kills it.
    assert not any("time.sleep(303)" in _cmdline(pid) for pid in _all_pids())
    assert list(tmp_path.iterdir()) == []  # the log file is gone too


def _all_pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""
    # zombies keep no command line; a live process that matches is a leak
    return text


def test_a_mirror_keeps_a_venvs_packages_and_leaves_out_only_the_base_pythons(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Software the sandbox's uid cannot reach is mirrored; a virtual environment's packages
    come along, only the base Python's own site-packages and test suite stay behind."""
    venv, base = tmp_path / "venv", tmp_path / "base"
    (venv / "lib" / "python3.11" / "site-packages" / "pkg").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages" / "pkg" / "__init__.py").write_text("x = 1")
    for folder in ("site-packages/junk", "test"):
        (base / "lib" / "python3.11" / folder).mkdir(parents=True)
    (base / "lib" / "python3.11" / "os.py").write_text("")
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "base_prefix", str(base))
    mirrored = sandbox._mirror(venv) / "lib" / "python3.11"
    assert (mirrored / "site-packages" / "pkg" / "__init__.py").read_text() == "x = 1"
    mirrored = sandbox._mirror(base) / "lib" / "python3.11"
    assert (mirrored / "os.py").exists()
    assert not (mirrored / "site-packages").exists() and not (mirrored / "test").exists()
