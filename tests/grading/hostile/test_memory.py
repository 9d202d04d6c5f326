"""Memory no process's resident size shows: SysV shm, memfds, empty tmpfs files.

Each flood is stopped within the sandbox's limit in both ways the grader counts memory: by the
kernel in a memory cgroup (root: the ``cgroup`` cases, root-only) and by the watchdog's fallback
(an ordinary user, and root with ``EDU_DL_SANDBOX_CGROUP=off``), which denies shm and memfds and
caps the files on the sandbox's tmpfs mounts. And an honest neighbour keeps its exact grade while
an attacker floods memory, inside a host-like memory bound that the test puts around the grader.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.hostile import corpus

from edu_dl.grading import sandbox
from edu_dl.grading.sandbox import cgroups
from hostile.test_attacks import GROUP, attacker, write

MB = 1 << 20
LIMITS = sandbox.Limits(wall_s=60, memory_mb=256, processes=64, file_mb=8, tmp_mb=64)
CAP_MB = sandbox.TREE_MEMORY * LIMITS.memory_mb  # what the whole sandbox may hold

SHM = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
held = 0
while held < 2048:
    ident = libc.shmget(0, 32 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if ident < 0:
        print("refused", ctypes.get_errno(), flush=True)
        break
    address = libc.shmat(ident, None, 0)
    ctypes.memset(address, 1, 32 << 20)
    libc.shmdt(ctypes.c_void_p(address))  # detached: in no process's resident size
    held += 32
    print("held", held, flush=True)
'''
MEMFD = r'''
import os
held, fds, block = 0, [], b"1" * (4 << 20)
try:
    while held < 2048 << 20:
        for _ in range(8):  # 4 MB a memfd: each is a file, under RLIMIT_FSIZE
            fd = os.memfd_create("hoard")
            fds.append(fd)
            held += os.write(fd, block)  # written, never mapped: in no resident size
        print("held", held >> 20, flush=True)
except OSError as exc:
    print("refused", exc.errno, flush=True)
'''
FILES = r'''
import os
for i in range(600_000):  # empty: no size limit sees them, each costs kernel memory
    os.close(os.open(f"/tmp/f{i}", os.O_CREAT | os.O_WRONLY, 0o600))
    if i % 10_000 == 0:
        print("files", i, flush=True)
print("held all", flush=True)
'''
MODES = [pytest.param("cgroup", marks=pytest.mark.root_only), "fallback"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)
    if request.param == "fallback":
        monkeypatch.setenv(cgroups.DELEGATE_VAR, "off")
    return str(request.param)


def counted_as(done: sandbox.Result, mode: str) -> None:
    """The run was counted the way ``mode`` says, and left no process and no cgroup."""
    if mode == "cgroup":
        assert done.memory_accounting in ("cgroup v1", "cgroup v2"), done
        assert not Path(done.cgroup).exists(), done.cgroup  # removed after the run
    else:
        assert done.memory_accounting == "watchdog", done
    assert corpus.sandbox_processes(GROUP) == []


def flood(code: str, mode: str) -> sandbox.Result:
    done = sandbox.run([sandbox.python(), "-c", code], limits=LIMITS,
                       env={"PATH": "/usr/bin:/bin"})
    counted_as(done, mode)
    return done


def held(log: str) -> int:
    return max([int(line.split()[1]) for line in log.splitlines()
                if line.startswith("held ") and line.split()[1].isdigit()], default=0)


@pytest.mark.parametrize("code", [SHM, MEMFD], ids=["shm", "memfd"])
def test_shm_and_memfd_floods_stop_within_the_limit(code: str, mode: str) -> None:
    done = flood(code, mode)
    if mode == "cgroup":  # counted by the kernel: the OOM killer stops it at the limit
        assert done.killed == "memory", done
        assert done.peak_memory_mb <= CAP_MB + 1, done
    else:  # nothing the watchdog could see: refused outright
        assert "refused 1\n" in done.log and done.killed == "", done  # EPERM
    assert held(done.log) <= CAP_MB, done.log[-500:]


def test_an_empty_file_flood_stops_within_the_limit(mode: str) -> None:
    done = flood(FILES, mode)
    assert done.killed == "memory" and "held all" not in done.log, done
    made = max(int(line.split()[1]) for line in done.log.splitlines()
               if line.startswith("files "))
    if mode == "cgroup":  # each file's inode and dentry are charged to the group
        assert done.peak_memory_mb <= CAP_MB + 1, done
    else:  # the watchdog's cap on files, a poll or two late
        assert LIMITS.tmp_inodes - 10_000 <= made < 3 * LIMITS.tmp_inodes, done
        assert any("files and folders on its tmpfs mounts" in n for n in done.notes), done


@pytest.mark.timing
def test_the_fallback_counts_tmpfs_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/shm filled within its size but beyond the memory limit: killed for memory."""
    monkeypatch.setenv(cgroups.DELEGATE_VAR, "off")
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)
    limits = sandbox.Limits(wall_s=60, memory_mb=128, processes=64, file_mb=64, tmp_mb=256)
    done = sandbox.run([sandbox.python(), "-c", (
        "import time\nfor i in range(7):\n"
        "    open(f'/dev/shm/f{i}', 'wb').write(b'1' * (32 << 20)); print('held', 32 * (i + 1),"
        " flush=True)\n"
        "    time.sleep(1)  # a poll of the watchdog's between writes, even on a loaded machine\n"
        "print('held all', flush=True); time.sleep(5)")],
        limits=limits, env={"PATH": "/usr/bin:/bin"})
    assert done.memory_accounting == "watchdog"
    assert done.killed == "memory" and "held all" not in done.log, done
    assert held(done.log) <= sandbox.TREE_MEMORY * limits.memory_mb, done.log
    assert corpus.sandbox_processes(GROUP) == []


# --------------------------------------------------------------------------- the neighbour

HOST_MB = 2304  # the bound the test puts around the grader: a machine's memory, in small
NEIGHBOUR = ("import numpy as np, time\n"
             "HOLD = np.ones(400 * 2**20 // 8)  # a legitimate 400 MB, held to the end\n"
             "time.sleep(12)")
SHM_BOMB = ("import time\ntime.sleep(3)  # the neighbour holds its memory by now\n"
            + SHM.replace("held < 2048", "held < 4096") + "time.sleep(6)")


def _memory_cgroup_of_this_process() -> Path:
    own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().split("\n")
               if line.split(":")[1:2] and "memory" in line.split(":")[1].split(","))
    return cgroups.ROOT / "memory" / own.lstrip("/")


@pytest.mark.waits
@pytest.mark.root_only
def test_an_honest_neighbour_keeps_its_grade_while_an_attacker_floods(tmp_path: Path) -> None:
    """The review's case: with a host memory bound, a SysV shm flood that no watchdog sees
    brought the host to its bound and the OOM killer took the honest neighbour (its kernel was
    the largest process). Each sandbox's own memory cgroup stops the flood inside it."""
    assert os.geteuid() == 0, "root-only: deselected in the ordinary user's pass"
    host = _memory_cgroup_of_this_process() / f"edu_dl_test_host_{os.getpid()}"
    host.mkdir()
    try:
        (host / "memory.limit_in_bytes").write_text(str(HOST_MB * MB))
        if (host / "memory.memsw.limit_in_bytes").exists():
            (host / "memory.memsw.limit_in_bytes").write_text(str(HOST_MB * MB))
        subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
        corpus.write_source(source, corpus.source())
        alice = corpus.student()
        corpus._prepend("gflops", NEIGHBOUR)(alice)
        write(subs / "alice", alice)
        write(subs / "mallory", attacker(SHM_BOMB))
        grader = subprocess.run(
            [sys.executable, "-c", "import sys; from edu_dl.cli import main; sys.exit(main())",
             "grade", str(subs), "--source", str(source), "--out", str(out), "--jobs", "2",
             "--memory", "768", "--timeout", "60", "--budget", "120"],
            preexec_fn=lambda: (host / "cgroup.procs").write_text(str(os.getpid())),
            env={**os.environ, sandbox.GROUP_VAR: GROUP}, capture_output=True, text=True,
            timeout=400)
        assert grader.returncode == 0, grader.stdout[-3000:] + grader.stderr[-3000:]
        with open(out / "grades.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        alice_rows = [r for r in rows if r["student"] == "alice"]
        assert sum(float(r["points"]) for r in alice_rows) == 2.0, rows
        assert {r["status"] for r in alice_rows} == {"passed"}, rows
        mallory = [r for r in rows if r["student"] == "mallory"]
        assert {r["status"] for r in mallory} == {"memory"}, rows
        assert sum(float(r["points"]) for r in mallory) == 0.0
        # The host bound was never reached: the sandboxes' own groups acted first.
        peak = int((host / "memory.max_usage_in_bytes").read_text())
        assert peak < HOST_MB * MB, peak >> 20
        assert corpus.sandbox_processes(GROUP) == []
    finally:
        cgroups.remove(host)
    assert not host.exists()



HONEST_PARALLEL = r'''
import multiprocessing as mp
import numba, numpy as np, torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.arange(64.0).reshape(32, 2)), batch_size=4,
                    num_workers=2)  # worker processes hand tensors back through shared memory
print("dataloader", float(sum(batch[0].sum() for batch in loader)), flush=True)
with mp.get_context("fork").Pool(2) as pool:
    print("pool", sum(pool.map(abs, range(-10, 10))), flush=True)
print("shared", mp.Array("d", 4)[:], flush=True)  # a lock and an array on /dev/shm
@numba.njit(parallel=False, cache=False)
def dot(a, b):
    return (a * b).sum()
print("numba", dot(np.arange(4.0), np.ones(4)), flush=True)
'''


@pytest.mark.slow
def test_honest_parallel_code_works_under_either_count(mode: str) -> None:
    """torch's DataLoader workers, multiprocessing and numba need neither SysV shm nor memfds:
    they work with the fallback's filter as with a cgroup."""
    limits = sandbox.Limits(wall_s=180, memory_mb=2048, processes=256, file_mb=64, tmp_mb=256)
    done = sandbox.run([sandbox.python(), "-c", HONEST_PARALLEL], limits=limits,
                       env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "OMP_NUM_THREADS": "1",
                            "NUMBA_CACHE_DIR": "/tmp/numba"})
    assert done.returncode == 0 and not done.killed, done
    for line in ("dataloader 2016.0", "pool 100", "shared [0.0, 0.0, 0.0, 0.0]", "numba 6.0"):
        assert line in done.log, done.log
    counted_as(done, mode)
