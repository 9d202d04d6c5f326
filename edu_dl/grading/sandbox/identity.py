"""Who a sandbox runs as, and the limits it enters with.

Who runs it: never root. A grader started as root drops, before bwrap starts, to a host uid/gid of
its own from a range no account uses (one per run, reserved with a lock file so that two threads
or two graders never share one); an ordinary user's grader runs it as that user. (bwrap then adds
a user namespace with no capabilities and a seccomp filter: ``bwrap``.)

Memory: RLIMIT_AS is useless with TensorFlow and PyTorch (they reserve gigabytes of address space
they never touch), so each process gets RLIMIT_DATA (a malloc bomb gets MemoryError); the sandbox
as a whole is counted by a memory cgroup or by the watchdog (``watchdog``). Processes:
RLIMIT_NPROC binds for the unprivileged uid; where a pids cgroup can be made (as root) it caps the
sandbox's processes and threads in the kernel as well.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import secrets
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from edu_dl.grading.sandbox import cgroups
from edu_dl.grading.sandbox.limits import CGROUP_MARGIN, MB, Limits

# Host uids/gids a root grader runs sandboxes as: one per run, from a range no account uses
# (far above the 100000+ ranges of /etc/subuid). EDU_DL_SANDBOX_UID_BASE moves it.
UID_BASE = int(os.environ.get("EDU_DL_SANDBOX_UID_BASE", "1900000000"))
UID_SPAN = 1 << 16
# One lock file per uid in use, flock'd for the run: threads and other graders skip it. Root's
# alone (a folder another user could write would let them block or share uids).
UID_LOCKS = Path("/run/edu-dl-sandbox-uids")


@contextlib.contextmanager
def sandbox_ids() -> Iterator[tuple[int, int]]:
    """(uid, gid) for a new sandbox or fallback run, held until the block ends: as root a fresh
    unprivileged pair no running process and no other sandbox (of this grader or another) has
    (a student's code never runs as root); else the caller's own."""
    if os.geteuid() != 0:
        yield os.getuid(), os.getgid()
        return
    folder = _uid_lock_folder()
    busy = _uids_running()
    first = secrets.randbelow(UID_SPAN)
    for step in range(UID_SPAN):
        uid = UID_BASE + (first + step) % UID_SPAN
        if uid in busy:
            continue
        lock = _lock(folder / str(uid))
        if lock is None:
            continue
        try:
            yield uid, uid
        finally:
            os.unlink(folder / str(uid))  # while still locked: a waiter's check sees it gone
            os.close(lock)
        return
    raise RuntimeError(f"no free sandbox uid in {UID_BASE}..{UID_BASE + UID_SPAN - 1}")


def _uid_lock_folder() -> Path:
    """UID_LOCKS (in /run, or the temporary folder where there is no /run), made root's alone."""
    folder = UID_LOCKS
    if not folder.parent.is_dir():
        folder = Path(tempfile.gettempdir()) / folder.name
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o077:
        raise RuntimeError(f"{folder} must be a folder of root's alone (mode 0700): it holds "
                           "the locks that keep two sandboxes from sharing a uid")
    return folder


def _lock(path: Path) -> int | None:
    """An open, flock'd descriptor of ``path``, or None where another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The holder unlinks before it unlocks: a lock won on an unlinked file is no lock.
        if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _uids_running() -> set[int]:
    uids = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                uids.add(entry.stat().st_uid)
            except OSError:
                continue
    return uids


def _reachable(path: Path, uid: int, gid: int) -> bool:
    """Can uid/gid walk down to path (search permission on every folder above it)?"""
    for folder in [*reversed(path.parents), path]:
        if uid == os.getuid():  # ourselves: the kernel's own answer, access lists included
            if not os.access(folder, os.X_OK):
                return False
            continue
        try:
            st = folder.stat()
        except OSError:
            return False
        bit = (stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid
               else stat.S_IXOTH)
        if not st.st_mode & bit:
            return False
    return True


def _enter(limits: Limits, nproc: int, group: cgroups.Group, uid: int, gid: int) -> None:
    """preexec_fn: the cgroups and rlimits, then (as root) the sandbox's own uid and gid."""
    group.enter(os.getpid())

    def cap(which: int, value: int) -> None:
        resource.setrlimit(which, (value, value))
    cap(resource.RLIMIT_DATA, limits.memory_mb * MB)
    cap(resource.RLIMIT_CPU, limits.cpu_s)
    cap(resource.RLIMIT_FSIZE, limits.file_mb * MB)
    cap(resource.RLIMIT_CORE, 0)  # a segfault must not dump a core anywhere
    if nproc:
        cap(resource.RLIMIT_NPROC, nproc)
    os.nice(5)  # a busy sandbox (a fork bomb) must not starve the watchdog that polices it
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)


def _nproc_cap(limits: Limits, uid: int, counted: bool = False) -> int:
    """RLIMIT_NPROC for the sandbox, or 0 for none.

    It counts processes AND threads of the uid across the whole machine: a root grader's sandbox
    has a uid of its own, so the cap is the sandbox's share; an ordinary user's sandbox adds its
    share to what the user already runs. ``counted``: a pids cgroup caps the sandbox too; the
    rlimit then leaves it room, so that the cgroup refuses first and counts what it refused.
    """
    if os.geteuid() == 0:
        return limits.processes + CGROUP_MARGIN * (2 if counted else 1)
    running = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    running += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    # The margin, as for root: a cap at exactly the limit would hold a fork bomb where the
    # watchdog never sees it pass, and it would end as a "timeout".
    want = running + limits.processes + CGROUP_MARGIN
    return want if hard == resource.RLIM_INFINITY or hard > want else 0
