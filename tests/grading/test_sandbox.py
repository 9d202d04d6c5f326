"""The bubblewrap sandbox: isolation, limits, and nothing left running afterwards."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from edu_dl.grading import sandbox
from edu_dl.grading.sandbox import cgroups

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
    repo_secret = Path(__file__).resolve().parents[2] / "solutions"
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


@pytest.mark.timing
def test_wall_time_kills_everything() -> None:
    limits = sandbox.Limits(wall_s=2, memory_mb=512, processes=64)
    # Durations no other process on the machine has (a plain `sleep 300` elsewhere is not ours,
    # nor this test's twin in the ordinary user's pass, which make test runs beside this one).
    mark = f".{MARK}"
    done = sandbox.run(["/bin/sh", "-c",
                        f"(sleep 300{mark} &); setsid sleep 301{mark} & sleep 302{mark}"],
                       limits=limits, env={"PATH": "/usr/bin:/bin"})
    assert done.killed == "timeout"
    assert done.seconds < 15
    assert not any(mark in _cmdline(pid) and "sleep 30" in _cmdline(pid)
                   for pid in _all_pids())


@pytest.mark.timing
@pytest.mark.slow
def test_fork_bomb_is_stopped_and_reaped() -> None:
    limits = sandbox.Limits(wall_s=30, memory_mb=1024, processes=48)
    # A mark no other process has: this module's other fork bombs may run beside it (xdist hands
    # out one test at a time), and their command lines say os.fork() too.
    mark = f"stopped and reaped {os.getpid()}"
    done = py(f"import os\nwhile True:\n    os.fork()  # {mark}", limits=limits)
    # Killed by the watchdog, or refused by the kernel first (RLIMIT_NPROC on the uid's count).
    refused = "Resource temporarily unavailable" in done.log
    assert done.killed in ("processes", "memory") or refused, done
    assert done.seconds < 25
    assert not any(mark in _cmdline(pid) for pid in _all_pids())


@pytest.mark.timing
def test_the_kernel_refuses_a_fork_bomb(monkeypatch: pytest.MonkeyPatch) -> None:
    """RLIMIT_NPROC binds for the sandbox's unprivileged uid (as root too: it is never root), and
    where a pids cgroup can be made (as root) it caps the sandbox as well; nothing is skipped."""
    made = cgroups.create(f"{cgroups.PREFIX}probe_{os.getpid()}", 64 << 20, 10)
    probe = made.pids
    if probe is not None:
        assert (probe / "pids.max").read_text().strip() == "10"
        made.remove()
        assert not any(folder.exists() for folder in made.folders())
    else:  # an ordinary user: the rlimit alone, on the user's own count
        assert os.geteuid() != 0
    group = f"cgtest{os.getpid()}_"
    monkeypatch.setenv(sandbox.GROUP_VAR, group)
    limits = sandbox.Limits(wall_s=30, memory_mb=1024, processes=16)
    # Children that sleep: without a cap they pile up faster than the watchdog polls; it polls
    # every 5 s here, so on a loaded machine too the kernel's cap is met before it kills.
    done = py("import os, time\n"
              "try:\n"
              "    while True:\n"
              "        if os.fork() == 0:\n"
              "            time.sleep(60)\n"
              "except OSError as exc:\n"
              "    print('fork refused:', exc.strerror, flush=True)\n"
              "    time.sleep(60)", limits=limits, poll_s=5.0)
    assert "fork refused: Resource temporarily unavailable" in done.log, done
    if probe is None:
        return
    assert done.killed == "processes", done  # the watchdog still names the cause
    assert done.peak_tasks <= limits.processes + sandbox.CGROUP_MARGIN, done
    hierarchy = probe.parent
    assert not [p for p in hierarchy.iterdir() if group in p.name]  # removed after the run
    # One left behind (a grader killed mid-run) is swept once it is old, never while new. It is
    # aged rather than swept with older_than_s=0: that would also take the new, still empty
    # groups of sandboxes that other test workers are starting (their child then fails to join).
    left = hierarchy / f"{cgroups.PREFIX}{group}left"
    left.mkdir()
    cgroups.remove_stale(hierarchy)
    assert left.exists()
    os.utime(left, (time.time() - 2 * cgroups.STALE_S,) * 2)
    cgroups.remove_stale(hierarchy)
    assert not left.exists()


@pytest.mark.timing
def test_a_fork_bomb_held_at_its_cap_is_processes_not_timeout() -> None:
    """The kernel holds a fork bomb at its cap (a pids cgroup, RLIMIT_NPROC) and it spins there
    until the budget ends: it is named "processes" all the same. Where a pids cgroup counts the
    refused forks (root), the watchdog looks only before the bomb and after the budget; an
    ordinary user's cap leaves room above the limit for the watchdog to see."""
    made = cgroups.create(f"{cgroups.PREFIX}probe_{os.getpid()}", 64 << 20, 10)
    counted = made.pids is not None
    made.remove()
    limits = sandbox.Limits(wall_s=4 if counted else 20, memory_mb=1024, processes=16)
    done = py("import os, time\n"
              "while True:\n"
              "    try:\n"
              "        if os.fork() == 0:\n"
              f"            time.sleep(60.{MARK})\n"
              "    except OSError:\n"
              "        pass\n", limits=limits, poll_s=5.0 if counted else 0.1)
    assert done.killed == "processes", done
    assert not any(f"time.sleep(60.{MARK})" in _cmdline(pid) for pid in _all_pids())


def test_fallback_without_bwrap_says_so_and_reaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback (--no-sandbox, validate's): labelled, never root (as root: a leased uid
    that owns its fresh private folder), and nothing of it left running."""
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    limits = sandbox.Limits(wall_s=2, memory_mb=512, processes=64)
    # /bin/sh: the leased uid may not reach this Python (a pyenv under /root)
    with sandbox.fallback_folder() as folder:
        done = sandbox.run(["/bin/sh", "-c", f"id -u > uid; (setsid sleep 303.{MARK} &); "
                            f"sleep 304.{MARK}"], limits=limits, env={"PATH": "/usr/bin:/bin"},
                           fallback_dir=folder)
        ran_as = int((folder / "uid").read_text())
        assert (folder / "uid").stat().st_uid == ran_as == done.uid
        assert folder.stat().st_uid == ran_as and folder.stat().st_mode & 0o777 == 0o700
    assert not done.isolated and "NOT ISOLATED" in done.notes[0]
    assert done.killed == "timeout"
    if os.geteuid() == 0:
        assert sandbox.UID_BASE <= ran_as < sandbox.UID_BASE + sandbox.UID_SPAN
    else:
        assert ran_as == os.getuid()
    # The double-forked child escaped the process tree; the tag (and, as root, its uid) finds
    # and kills it.
    assert not any(f"sleep 303.{MARK}" in _cmdline(pid) for pid in _all_pids())
    assert not folder.exists()


def test_the_fallback_writes_only_into_its_folder(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    with pytest.raises(ValueError, match="needs a folder"):
        sandbox.run(["/bin/true"], limits=FAST, files={str(tmp_path / "x"): b""})
    with sandbox.fallback_folder() as folder, pytest.raises(ValueError, match="outside"):
        sandbox.run(["/bin/true"], limits=FAST, fallback_dir=folder,
                    files={f"{folder}/../x": b""})
    assert list(tmp_path.iterdir()) == []


def test_without_bwrap_the_result_and_log_are_pipes_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap is not installed")
    # The leased uid may not reach this Python (a pyenv under /root): the system's where not.
    python = PY if not sandbox.fallback_problem() else shutil.which("python3", path="/usr/bin")
    assert python is not None, "a Python the fallback's uid can run"
    with sandbox.fallback_folder() as folder:
        done = sandbox.run([python, "-c", "import os\n"
                            "os.write(int(os.environ['EDU_DL_RESULT_FD']), b'result')\n"
                            "for fd in (1, 2, int(os.environ['EDU_DL_RESULT_FD'])):\n"
                            "    print(os.readlink(f'/proc/self/fd/{fd}').split(':')[0])"],
                           limits=FAST, env={"PATH": "/usr/bin:/bin"}, fallback_dir=folder,
                           output_limit=100)
    assert not done.isolated and done.output == b"result" and done.output_size == 6, done
    assert done.log.split() == ["pipe"] * 3, done.log


# The fractional part of the sleeps these tests leave behind to be killed: this process's own, so
# that a check for leftovers never sees another test process's (the ordinary user's pass runs these
# tests beside the root pass).
MARK = f"{os.getpid():07d}"


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
    mirrored = sandbox.bwrap._mirror(venv) / "lib" / "python3.11"
    assert (mirrored / "site-packages" / "pkg" / "__init__.py").read_text() == "x = 1"
    mirrored = sandbox.bwrap._mirror(base) / "lib" / "python3.11"
    assert (mirrored / "os.py").exists()
    assert not (mirrored / "site-packages").exists() and not (mirrored / "test").exists()


# --------------------------------------------------------------------------- what it can write


def test_dev_and_hidden_folders_are_read_only(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev and the tmpfs over a hidden folder have no size limit: nothing may be written there
    (before, both took files of any size); /tmp and /dev/shm are bounded and writable."""
    secret = tmp_path / "secret"  # a private folder inside the software shown, e.g. an --out
    secret.mkdir()
    shown = sandbox.software()
    monkeypatch.setattr(sandbox.bwrap, "software", lambda: [*shown, tmp_path])
    done = sandbox.run(["/bin/sh", "-c", f"for p in /dev/x {secret}/x /dev/shm/x /tmp/x; do "
                        "(echo x > $p) 2>/dev/null && echo wrote $p || echo refused $p; done"],
                       limits=FAST, env={"PATH": "/usr/bin:/bin"}, hide=[secret])
    assert "refused /dev/x" in done.log and f"refused {secret}/x" in done.log, done.log
    assert "wrote /dev/shm/x" in done.log and "wrote /tmp/x" in done.log, done.log


def test_stdout_stderr_and_result_are_pipes_and_fallocate_is_refused() -> None:
    """Nothing of the host to reserve: the three ways out are pipes, fallocate fails with
    EOPNOTSUPP everywhere (on the sandbox's own /tmp too: glibc then writes instead)."""
    done = py("import ctypes, os\n"
              "libc = ctypes.CDLL(None, use_errno=True)\n"
              "libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, "
              "ctypes.c_long]\n"
              "for fd in (1, 2, int(os.environ['EDU_DL_RESULT_FD'])):\n"
              "    print('fd', fd, os.readlink(f'/proc/self/fd/{fd}').split(':')[0])\n"
              "    print('fallocate', fd, libc.fallocate(fd, 1, 0, 1 << 30), ctypes.get_errno())\n"
              "with open('/tmp/f', 'wb') as f:\n"
              "    print('fallocate tmp', libc.fallocate(f.fileno(), 0, 0, 1 << 20), "
              "ctypes.get_errno())\n"
              "    os.posix_fallocate(f.fileno(), 0, 1 << 20)\n"
              "print('posix_fallocate wrote', os.path.getsize('/tmp/f'))\n")
    assert done.log.count("pipe\n") == 3, done.log
    assert done.log.count(" -1 95\n") == 4, done.log  # EOPNOTSUPP
    assert f"posix_fallocate wrote {1 << 20}" in done.log, done.log


def test_a_log_flood_is_cut_and_costs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LOG_CAP the grader stops reading and closes the pipe: the writer gets EPIPE at once,
    and only the log's tail was kept."""
    monkeypatch.setattr(sandbox.drain, "LOG_CAP", 4 << 20)
    done = py("import sys\n"
              "try:\n"
              "    while True:\n"
              "        sys.stdout.buffer.write(b'y' * 65536); sys.stdout.flush()\n"
              "except BrokenPipeError:\n"
              "    sys.exit(42)\n", log_bytes=1000)
    assert done.returncode == 42 and not done.killed, done
    assert len(done.log) < 1100 and done.log.startswith("[... log cut ...]"), done.log
    assert any("over 4 MB to stdout/stderr" in note for note in done.notes), done.notes


def test_the_result_is_read_to_its_limit_and_no_further() -> None:
    """One byte over the limit says "over"; then the pipe is closed and the writer gets EPIPE."""
    done = py("import os\n"
              "fd = int(os.environ['EDU_DL_RESULT_FD'])\n"
              "try:\n"
              "    for _ in range(64):\n"
              "        os.write(fd, b'r' * 65536)\n"
              "    print('WROTE ALL')\n"
              "except BrokenPipeError:\n"
              "    print('EPIPE')\n", output_limit=100_000)
    assert done.output_size == 100_001 and done.output == b"r" * 100_000, done.output_size
    assert "EPIPE" in done.log and "WROTE ALL" not in done.log, done.log


def test_pack_sends_the_record_alone_when_the_result_would_not_fit(tmp_path: Path) -> None:
    import io
    import zipfile

    from edu_dl.grading import runner

    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "ex01.part.1.npz").write_bytes(b"x" * 50_000)
    record = {"cells": [], "kernel": "ok", "message": ""}
    full, small = io.BytesIO(), io.BytesIO()
    runner.pack(dict(record), tmp_path, full, None, limit=10**6)
    runner.pack(dict(record), tmp_path, small, None, limit=10_000)
    assert zipfile.ZipFile(full).namelist() == ["run.json", "outputs/ex01.part.1.npz"]
    assert len(small.getvalue()) <= 10_000
    with zipfile.ZipFile(small) as zf:
        assert zf.namelist() == ["run.json"]
        assert "results too large to return" in zf.read("run.json").decode()


def test_the_runner_makes_itself_undumpable() -> None:
    """What keeps the kernel (its child, the same uid) from its result descriptor."""
    done = py("import ctypes\nfrom edu_dl.grading.runner import undumpable\n"
              "libc = ctypes.CDLL(None)\n"
              "print('dumpable', libc.prctl(3, 0, 0, 0, 0), undumpable(), "
              "libc.prctl(3, 0, 0, 0, 0))")  # PR_GET_DUMPABLE
    assert "dumpable 1 True 0" in done.log, done.log


# --------------------------------------------------------------------------- memory accounting


def test_uncounted_memory_calls_are_denied_only_where_nothing_counts_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a memory cgroup (forced here) shmget and memfd_create fail with EPERM; with one
    (root) they work, the cgroup counts their pages."""
    probe = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "print('shmget', libc.shmget(0, 4096, 0o1600), ctypes.get_errno())\n"
             "try:\n    os.memfd_create('x'); print('memfd ok')\n"
             "except OSError as exc:\n    print('memfd', exc.errno)\n")
    if os.geteuid() == 0:
        done = py(probe)
        assert done.memory_accounting.startswith("cgroup v"), done
        assert "memfd ok" in done.log and "shmget -1" not in done.log, done.log
    monkeypatch.setenv(cgroups.DELEGATE_VAR, "off")
    done = py(probe)
    assert done.memory_accounting == "watchdog", done
    assert "shmget -1 1\n" in done.log and "memfd 1\n" in done.log, done.log


def test_the_runner_as_a_file_imports_nothing_of_the_package() -> None:
    """The sandbox runs the runner as a file: its start then costs no NumPy and no engine (a
    fifth of a trivial notebook's CPU time), and it still works (the argv of stages/run.py)."""
    from edu_dl.grading import runner
    from edu_dl.grading.stages import run

    argv = run.run_sandboxed.__code__.co_consts  # the command is built there: "-P" and a path
    assert "-P" in argv
    probe = ("import runpy, sys\nsys.argv = ['runner.py', '--help']\ntry:\n"
             f"    runpy.run_path({str(Path(runner.__file__))!r}, run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules\n"
             "             if m in ('numpy', 'edu_dl') or m.startswith('edu_dl.')))")
    import subprocess

    shown = subprocess.run([PY, "-P", "-c", probe], capture_output=True, text=True, timeout=60,
                           cwd="/", env={**os.environ, "PYTHONPATH": ""})
    assert "usage: " in shown.stdout and shown.stdout.strip().endswith("[]"), shown


def test_the_runner_and_its_kernel_run_without_jupyters_client_and_kernel(
        tmp_path: Path) -> None:
    """The runner drives IPython's shell over pipes (runner.py, kernel.py): neither process
    loads nbformat, nbclient, jupyter_client, ipykernel or ZeroMQ (0.3 s of CPU in every
    sandbox, 2026-12-05), and the kernel sees its notebook's folder as ipykernel shows it: the
    working directory, and first on the path. Run as the sandbox runs it: the runner's file."""
    import json
    import subprocess
    import zipfile

    from edu_dl.grading import runner

    heavy = ("nbformat", "nbclient", "jupyter_client", "ipykernel", "zmq", "tornado",
             "jsonschema", "numpy")
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                     "source": "import os, sys\n"
                               f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
                               "print(os.getcwd() == os.path.dirname(os.path.abspath("
                               "'n.ipynb')), sys.path[0] == '', type(get_ipython()).__name__)"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    probe = ("import runpy, sys\n"
             f"r = runpy.run_path({str(Path(runner.__file__))!r}, run_name='edu_dl_runner')\n"
             "r['main'](sys.argv[1:])\n"
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    done = subprocess.run([PY, "-P", "-c", probe, str(tmp_path / "n.ipynb"), str(tmp_path / "g"),
                           "--result", str(tmp_path / "r.zip")], cwd=tmp_path, timeout=120,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0 and done.stdout.strip() == "[]", done  # the runner's modules
    with zipfile.ZipFile(tmp_path / "r.zip") as zf:
        executed = json.loads(zf.read("executed.ipynb"))
    assert executed["cells"][0]["outputs"] == [
        {"output_type": "stream", "name": "stdout", "text": "[]\nTrue True FramedShell\n"}]


def test_the_watchdog_sees_every_process_of_the_sandbox() -> None:
    """Five sleeping children (two daemonized, re-parented inside): the tasks the watchdog
    counts include them all, whether it lists the sandbox's cgroup (as root) or scans /proc."""
    done = sandbox.run(["/bin/sh", "-c", "for i in 1 2 3; do sleep 2.417 & done; "
                        "(sleep 2.418 &); (sleep 2.419 &); wait; sleep 0.5"],
                       limits=FAST, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and not done.killed, done
    assert done.peak_tasks >= 6, done  # the shell and five sleeps (and bwrap's own)


def test_a_groups_processes_are_its_cgroup_procs(tmp_path: Path) -> None:
    group = cgroups.Group(version=1, pids=tmp_path)
    (tmp_path / "cgroup.procs").write_text("12\n3\n7\n")
    assert group.processes() == [3, 7, 12]
    (tmp_path / "cgroup.procs").write_text("3\nx\n")
    assert group.processes() is None  # unreadable: the watchdog scans /proc instead
    assert cgroups.Group().processes() is None


def test_the_memory_cgroup_is_the_graders_own_child() -> None:
    """As root: a sandbox's memory group lies below this process's own memory cgroup (not at
    the hierarchy's root, where it would leave the grader's limits), and is gone afterwards."""
    done = py("print('ok')")
    if os.geteuid() != 0:
        assert done.memory_accounting == "watchdog" and done.cgroup == "", done
        return
    own = cgroups._own_paths(cgroups.PROC_SELF)["memory"]
    assert Path(done.cgroup).parent == cgroups.ROOT / "memory" / own.lstrip("/"), done.cgroup
    assert Path(done.cgroup).name.startswith(cgroups.PREFIX)
    assert not Path(done.cgroup).exists()


# --------------------------------------------------------------------------- uids and mirrors


@pytest.mark.root_only
def test_two_concurrent_sandboxes_never_share_a_uid(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """The random draw made to collide: in-process (threads) and across processes (a lock held
    by another process), every sandbox still gets a uid of its own."""
    import subprocess
    import threading

    assert os.geteuid() == 0
    monkeypatch.setattr(sandbox.identity.secrets, "randbelow", lambda n: 0)
    limits = sandbox.Limits(wall_s=20, memory_mb=512, processes=64)
    done: list[sandbox.Result] = []
    runs = [threading.Thread(target=lambda: done.append(sandbox.run(
        ["/bin/sleep", "1"], limits=limits, env={"PATH": "/usr/bin:/bin"}))) for _ in range(2)]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join()
    assert len({d.uid for d in done}) == 2, [d.uid for d in done]
    deadline = time.monotonic() + 10  # their last processes may take a moment to be reaped
    while {d.uid for d in done} & sandbox.identity._uids_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    # Another grader holds UID_BASE: this one draws it first and must pass it by.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import secrets; secrets.randbelow = lambda n: 0\n"
         "from edu_dl.grading import sandbox\n"
         "with sandbox.sandbox_ids() as ids:\n    print(ids[0], flush=True)\n"
         "    import time; time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline()) if holder.stdout else -1
        assert held == sandbox.UID_BASE
        assert py("print('hi')").uid == sandbox.UID_BASE + 1
    finally:
        holder.kill()
        holder.wait()
    with sandbox.sandbox_ids() as (uid, _):  # released when its holder died
        assert uid == sandbox.UID_BASE


def test_mirrors_of_dead_graders_are_swept(tmp_path: Path) -> None:
    """A mirror names its owner (pid and start time): a Dask worker killed before atexit leaves
    one, and the next grader removes it; a live owner's, or an older unnamed one, stays."""
    import signal
    import subprocess

    code = ("import sys, os; from pathlib import Path; from edu_dl.grading import sandbox\n"
            "print(sandbox.bwrap._mirror(Path(sys.argv[1])), flush=True)\n"
            "os.kill(os.getpid(), 9)")
    src = tmp_path / "software"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "x.py").write_text("x = 1")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run([sys.executable, "-c", code, str(src)], env=env,
                            capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    mirror = Path(killed.stdout.strip()).parent
    assert mirror.parent == tmp_path and mirror.name.startswith(sandbox.MIRROR_PREFIX), mirror
    assert (mirror / "root" / "lib" / "x.py").exists()  # left behind: atexit never ran
    live = tmp_path / f"{sandbox.MIRROR_PREFIX}{sandbox._process_id(os.getpid())}-live"
    unnamed = tmp_path / f"{sandbox.MIRROR_PREFIX}k2j3h4l5"
    live.mkdir()
    unnamed.mkdir()
    assert sandbox.sweep_mirrors(tmp_path) == [mirror]
    assert not mirror.exists() and live.exists() and unnamed.exists()


def test_a_zombie_owner_counts_as_gone(tmp_path: Path) -> None:
    """A worker that has exited but is not yet reaped holds its pid: its mirror is still swept
    (a local cluster's workers are such zombies for a moment after the cluster closes)."""
    import subprocess
    import time

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    try:
        owner = sandbox._process_id(child.pid)
        assert not owner.endswith(".gone")  # named while it ran
        mirror = tmp_path / f"{sandbox.MIRROR_PREFIX}{owner}-x"
        mirror.mkdir()
        deadline = time.monotonic() + 30
        while sandbox._process_id(child.pid) == owner and time.monotonic() < deadline:
            time.sleep(0.02)  # not reaped: it stays a zombie, its pid held
        assert Path(f"/proc/{child.pid}").exists()
        assert sandbox.sweep_mirrors(tmp_path) == [mirror]
    finally:
        child.wait()


GATE_READER = ("import os, time\n"
               "began = time.time()\n"
               "opened = os.read(int(os.environ['EDU_DL_GATE_FD']), 1)\n"
               "os.write(int(os.environ['EDU_DL_RESULT_FD']),\n"
               "         f'{opened.decode()} {time.time() - began:.2f}'.encode())\n")


@pytest.mark.timing  # the run after its gate opens takes milliseconds of a 2 s wall limit
def test_a_gated_run_waits_for_a_slot_and_its_wall_time_counts_from_then() -> None:
    """Grading ahead (sandbox.Gate): the sandbox starts at once, its command waits on the gate's
    pipe for a free slot, and its wall limit counts from the gate's opening, not its start."""
    import threading

    turns = sandbox.Turns(1)
    assert turns.take(0, timeout=0)  # the one slot is another notebook's, ticket 0
    freed = threading.Timer(2.5, turns.give_back)
    freed.start()
    done = py(GATE_READER, sandbox.Limits(wall_s=2, memory_mb=512, processes=64),
              output_limit=100, gate=sandbox.Gate(turns, 1))
    freed.join()
    assert done.killed == "" and done.returncode == 0, (done.killed, done.log)
    opened, waited = done.output.decode().split()
    assert opened == "1" and float(waited) >= 2.0  # it waited for the slot
    assert done.gate_s >= 2.0 and done.seconds < 2.0  # and the wait was not its run's time
    assert turns.free == 1 and turns.take(2, timeout=0)  # given back; the next ticket's turn


def test_a_run_stopped_while_it_waits_for_a_slot_takes_none_and_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    turns = sandbox.Turns(1)
    assert turns.take(0, timeout=0)
    group = f"gate{os.getpid()}-"
    monkeypatch.setenv(sandbox.GROUP_VAR, group)
    stop = threading.Timer(1.0, sandbox.STOP.set)
    stop.start()
    try:
        done = py(GATE_READER, output_limit=100, gate=sandbox.Gate(turns, 1))
    finally:
        stop.join()
        sandbox.STOP.clear()
    assert done.killed == "interrupted" and done.output == b"", done
    assert turns.free == 0  # still the other notebook's: none was taken
    turns.give_back()
    assert turns.take(2, timeout=0)  # ticket 1 passed its turn on to the next
    from fixtures.hostile.corpus import sandbox_processes

    assert sandbox_processes(group) == []
