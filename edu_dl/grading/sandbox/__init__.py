"""Run one untrusted command in a bubblewrap sandbox with resource limits.

bubblewrap (``bwrap``, the sandbox Flatpak uses) gives the isolation; this module builds its
arguments and adds what bwrap does not do: an unprivileged identity, a seccomp filter, rlimits, a
wall-time limit, cgroups and a memory/process watchdog.

Who runs it: never root. A grader started as root drops, before bwrap starts, to a host uid/gid of
its own from a range no account uses (one per run, reserved with a lock file so that two threads
or two graders never share one); an ordinary user's grader runs it as that user. bwrap then adds
a user namespace with no capabilities (``--cap-drop ALL``), no further user namespaces
(``--disable-userns``), ``no_new_privs``, and a seccomp filter (libseccomp) that refuses mount,
namespace, tracing, pidfd, keyring, BPF and kernel-module calls with EPERM.

What it sees: an empty root with, read-only, the system's programs and libraries (``/usr`` and its
links), a few files of ``/etc``, the Python, the virtual environment and the ``edu_dl`` package;
a synthetic ``/etc/passwd``; a private size-bounded ``/tmp`` and ``/dev/shm``; a read-only
``/dev``; the files the caller hands over as bytes. Nothing of ``/home``, ``/root``, ``/var``,
``/run``, other users' files or the caller's folders. No network (loopback works, so the notebook
client and its kernel talk inside), its own PID namespace whose processes all die with the
sandbox. Its arguments travel through ``--args FD`` and every mounted folder through an open
descriptor, so nothing inside learns a host path beyond the software it runs.

What it can write: its tmpfs mounts (each of a bounded size) and two pipes, nothing on the host.
The result goes to the descriptor in ``RESULT_FD_VAR``, stdout and stderr to another; a thread
here drains both, keeps at most ``output_limit + 1`` bytes of the result and the tail of the log,
and closes a pipe once it has read its cap, so a flood costs the grader nothing. fallocate fails
with EOPNOTSUPP (it reserves space no size limit sees).

Memory: RLIMIT_AS is useless with TensorFlow and PyTorch (they reserve gigabytes of address space
they never touch), so each process gets RLIMIT_DATA (a malloc bomb gets MemoryError), and the
sandbox as a whole ``TREE_MEMORY`` times that, counted by the kernel where a memory cgroup can be
made (``cgroups``: shm, memfds, tmpfs files and kernel memory included; an OOM kill there kills the
sandbox and reads killed="memory"). Where none can be made (an ordinary user without a delegated
cgroup v2) the watchdog counts instead: the resident memory of the process tree plus the bytes on
the sandbox's tmpfs mounts, and it kills a sandbox that holds over ``Limits.tmp_inodes`` files
there (each costs kernel memory no size limit sees); SysV shm and memfds, which it could not see,
are then denied. Processes: RLIMIT_NPROC binds for the unprivileged uid; where a pids cgroup can
be made (as root) it caps the sandbox's processes and threads in the kernel as well.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import resource
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edu_dl.grading.protocol import RESULT_FD_VAR  # the descriptor the sandbox writes its result to
from edu_dl.grading.sandbox import cgroups

MB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in these
TREE_MEMORY = 1.25  # the tree may hold a quarter more than one process's RLIMIT_DATA
TAG_VAR = "EDU_DL_SANDBOX_TAG"  # marks every process of one sandbox (fallback cleanup)
# Tasks the pids cgroup and RLIMIT_NPROC allow beyond Limits.processes: bwrap's own two processes
# and room for the watchdog to see the count pass the limit and name the cause.
CGROUP_MARGIN = 8
GROUP_VAR = "EDU_DL_SANDBOX_GROUP"
# Set when the grader is interrupted (Ctrl-C): every sandbox this process runs is killed at its
# watchdog's next poll, and its run is marked killed "interrupted" (never a grade).
STOP = threading.Event()
# Host uids/gids a root grader runs sandboxes as: one per run, from a range no account uses
# (far above the 100000+ ranges of /etc/subuid). EDU_DL_SANDBOX_UID_BASE moves it.
UID_BASE = int(os.environ.get("EDU_DL_SANDBOX_UID_BASE", "1900000000"))
UID_SPAN = 1 << 16
# One lock file per uid in use, flock'd for the run: threads and other graders skip it. Root's
# alone (a folder another user could write would let them block or share uids).
UID_LOCKS = Path("/run/edu-dl-sandbox-uids")
INSIDE_UID = 1000  # the uid (and gid) the sandboxed process sees: "student"
PASSWD = (b"root:x:0:0::/nonexistent:/usr/sbin/nologin\n"
          b"student:x:1000:1000:student:/tmp/home:/bin/sh\n"
          b"nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n")
GROUP = b"root:x:0:\nstudent:x:1000:\nnogroup:x:65534:\n"
# The system the sandbox may see, read-only: programs and libraries (or their merged-/usr links)
# and the few files of /etc that the dynamic loader, fonts, time zones and TLS need.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
       "host.conf", "hosts", "gai.conf", "mime.types", "fonts", "ssl", "ca-certificates",
       "alternatives", "os-release", "matplotlibrc", "protocols", "services")
# Denied with EPERM inside, whatever the capabilities: mounting, namespaces, tracing another
# process or taking its descriptors or memory (pidfd_getfd would take the runner's result
# descriptor), the kernel keyring, BPF, perf, kernel modules, io_uring (which bypasses seccomp).
DENIED_SYSCALLS = (
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "chroot", "unshare", "setns", "ptrace", "process_vm_readv",
    "process_vm_writev", "pidfd_open", "pidfd_getfd", "process_madvise", "keyctl", "add_key",
    "request_key", "bpf", "perf_event_open",
    "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl",
    "open_by_handle_at", "name_to_handle_at", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
)
# Fail with EOPNOTSUPP, as on a file system without it: fallocate reserves space without writing
# (with KEEP_SIZE no size limit ever sees it); glibc's posix_fallocate then writes instead.
UNSUPPORTED_SYSCALLS = ("fallocate",)
# Memory in no process's resident size (SysV shm, memfds): denied with EPERM where no memory
# cgroup counts it (the watchdog's fallback).
UNCOUNTED_SYSCALLS = ("shmget", "memfd_create")
# The fallback's count of a tmpfs file's kernel memory (an inode and a dentry: about 1.3 kB were
# measured per empty file), added to the memory compared with the limit.
INODE_BYTES = 1300
LOG_CAP = 64 * MB  # log bytes read before the pipe is closed: a flood costs the grader nothing


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    wall_s: float = 600.0  # the whole run; the sandbox is killed after it
    memory_mb: int = 4096  # RLIMIT_DATA per process; the whole sandbox: TREE_MEMORY x
    cpu_s: int = 900  # RLIMIT_CPU per process
    processes: int = 512  # processes + threads in the tree (the watchdog's count)
    file_mb: int = 64  # RLIMIT_FSIZE: the largest file any process may write
    tmp_mb: int = 256  # size of the private /tmp (and /dev/shm) tmpfs
    tmp_inodes: int = 50_000  # files and folders on its tmpfs mounts (enforced by the fallback)


@dataclass
class Result:
    """What came of one sandboxed run."""

    returncode: int | None
    killed: str = ""  # "" or why the watchdog killed it: "timeout", "memory", "processes"
    # (or "interrupted": the grader was, see STOP)
    isolated: bool = True  # False: bwrap missing, resource limits only
    log: str = ""  # the tail of stdout+stderr
    peak_rss_mb: float = 0.0  # the resident total of its processes (the watchdog's samples)
    peak_tasks: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    output: bytes = b""  # what the sandbox wrote to its result descriptor (at most output_limit)
    # Bytes read back: more than len(output) (output_limit + 1) when it wrote over the limit;
    # the rest was never read.
    output_size: int = 0
    uid: int = -1  # the host uid the sandbox ran as
    uids_seen: set[int] = field(default_factory=set)  # host uids of its processes (watchdog)
    # How its memory was counted against TREE_MEMORY x memory_mb: "cgroup v1", "cgroup v2"
    # (by the kernel: shm, tmpfs and kernel memory included) or "watchdog" (resident memory plus
    # tmpfs bytes and files, SysV shm and memfds denied).
    memory_accounting: str = ""
    peak_memory_mb: float = 0.0  # the peak of that count
    cgroup: str = ""  # the sandbox's memory cgroup, if it had one (removed after the run)
    # CPU seconds (user + system) the kernel accounted to its processes, read from outside: the
    # largest of wait4's rusage (every process reaped inside it), the watchdog's largest sample
    # of the whole tree (live processes and what they reaped), and the sum of each process's last
    # sample (a detached one too). Each can only undercount; under bwrap, rusage sees bwrap
    # alone (it exits before its namespace's init is reaped), so the samples count.
    cpu_s: float = 0.0


# --------------------------------------------------------------------------- what bwrap needs


@functools.cache
def seccomp_filter(uncounted: bool = False) -> bytes:
    """The BPF program bwrap loads (``--seccomp``): DENIED_SYSCALLS fail with EPERM,
    UNSUPPORTED_SYSCALLS with EOPNOTSUPP; with ``uncounted`` (no memory cgroup counts the
    sandbox) UNCOUNTED_SYSCALLS with EPERM too."""
    import pyseccomp as seccomp  # libseccomp through ctypes

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    denied = [*DENIED_SYSCALLS, *(UNCOUNTED_SYSCALLS if uncounted else ())]
    for code, names in ((errno.EPERM, denied), (errno.EOPNOTSUPP, UNSUPPORTED_SYSCALLS)):
        for name in names:
            try:
                rules.add_rule(seccomp.ERRNO(code), name)
            except (RuntimeError, ValueError, OSError):  # unknown here (architecture, libseccomp)
                continue
    with tempfile.TemporaryFile() as f:
        rules.export_bpf(f)
        f.seek(0)
        return f.read()


@functools.cache
def bwrap_problem() -> str:
    """'' if the sandbox works here, else one sentence on why not."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        seccomp_filter()
    except Exception as exc:  # pyseccomp missing, or libseccomp.so.2 not found
        return (f"libseccomp is not usable ({type(exc).__name__}: {exc}); install the "
                "libseccomp2 package and the pyseccomp module")
    done = _probe(["/bin/true"], limits=Limits(wall_s=30, memory_mb=256, processes=16),
                  require_bwrap=True)
    if done.returncode != 0:
        why = done.log.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return (f"bwrap cannot build the sandbox here as uid {done.uid} ({why[0][:200]}); "
                "unprivileged user namespaces must be enabled (sysctl "
                "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)")
    return ""


def fallback_problem() -> str:
    """'' if the fallback (no bwrap: rlimits only) can run here without root, else why not.

    As root it runs the command as a uid of its own (``sandbox_ids``), which must reach the
    Python and the package without any access root has and others lack."""
    if os.geteuid() != 0:
        return ""  # it runs as the grader's own user, who runs this Python already
    # The Python and the package, and the temporary folder its private folders are made in.
    for path in [Path(python()).resolve(), *software(), Path(tempfile.gettempdir()).resolve()]:
        if not _reachable(path, UID_BASE, UID_BASE):
            return (f"without it, notebooks run as an unprivileged uid, which cannot reach "
                    f"{path} (make the folders above it searchable by every user, chmod o+x)")
    return ""


@contextlib.contextmanager
def fallback_folder() -> Iterator[Path]:
    """A fresh private folder for one run of the fallback (``run``'s ``fallback_dir``): made
    here, root's or the user's (0700), handed to the run's uid by ``run``, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="edu-dl-unboxed-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def software() -> list[Path]:
    """What the sandbox runs, shown read-only at its own path: the Pythons, the package."""
    import edu_dl

    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
             Path(sys.base_exec_prefix), Path(edu_dl.__file__).parent}
    found = sorted({r.resolve() for r in roots})
    # Keep the outermost of nested roots: binding a parent already shows its children.
    return [r for r in found if not any(r != o and r.is_relative_to(o) for o in found)]


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


_MIRRORS: dict[Path, Path] = {}
# <temporary folder>/edu-dl-sandbox-software-<pid>.<start time>-<random>: the owner's pid and
# start time in the name, so a mirror whose process is gone can be told and removed (Dask kills
# its workers before atexit runs).
MIRROR_PREFIX = "edu-dl-sandbox-software-"


def _base_python_only(path: Path) -> bool:
    """Is path the base Python under a virtual environment (whose own packages it never uses)?"""
    return sys.prefix != sys.base_prefix and path == Path(sys.base_prefix).resolve()


def _mirror(path: Path) -> Path:
    """A copy of path (hard links where possible) that any uid can reach, made once per process.

    A root grader's Python often lives under /root (mode 0700), where the sandbox's uid cannot
    look, and bwrap resolves a mount's source as that uid. The copy sits in a root-owned 0755
    folder and is shown inside at the original path. Of a base Python under a virtual
    environment, its own site-packages and test suite are left out: the environment uses neither.
    """
    if path in _MIRRORS:
        return _MIRRORS[path]
    sweep_mirrors()
    base = Path(tempfile.mkdtemp(prefix=f"{MIRROR_PREFIX}{_process_id(os.getpid())}-"))
    base.chmod(0o755)
    target = base / "root"

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            shutil.copy2(src, dst, follow_symlinks=False)

    def unused(folder: str, names: list[str]) -> list[str]:
        if not (_base_python_only(path) and Path(folder).name.startswith("python")):
            return []
        return [n for n in names if n in ("site-packages", "test")]

    shutil.copytree(path, target, symlinks=True, copy_function=link, ignore=unused)
    for folder, dirs, _ in os.walk(target):
        for name in dirs:
            (Path(folder) / name).chmod(0o755)
    target.chmod(0o755)
    import atexit

    atexit.register(shutil.rmtree, base, True)
    _MIRRORS[path] = target
    return target


def _process_id(pid: int) -> str:
    """'<pid>.<start time in clock ticks>': one process, never a later one that reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            start = f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        start = "gone"
    return f"{pid}.{start}"


def sweep_mirrors(folder: Path | None = None) -> list[Path]:
    """Remove the mirrors (this user's) whose process is gone; returns what was removed."""
    removed: list[Path] = []
    folder = folder or Path(tempfile.gettempdir())
    try:
        entries = [p for p in folder.iterdir() if p.name.startswith(MIRROR_PREFIX)]
    except OSError:
        return removed
    for path in entries:
        owner = path.name[len(MIRROR_PREFIX):].split("-", 1)[0]
        pid = owner.split(".", 1)[0]
        if "." not in owner or not pid.isdigit():
            continue  # a mirror from before names carried their owner: whose is unknown
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() \
                and _process_id(int(pid)) != owner:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class _Fds:
    """Descriptors handed to bwrap: opened here, inherited by the child, closed after (``fds``
    keep their numbers in the child; ``others``, e.g. the log pipe's end, are only closed)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.others: list[int] = []

    def path(self, path: Path) -> str:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW)
        self.fds.append(fd)
        return str(fd)

    def data(self, data: bytes) -> str:
        with tempfile.TemporaryFile() as f:
            f.write(data)
            f.seek(0)
            fd = os.dup(f.fileno())  # an unlinked file: no path anywhere
        self.fds.append(fd)
        return str(fd)

    def close(self) -> None:
        for fd in self.fds + self.others:
            os.close(fd)
        self.fds, self.others = [], []


def bwrap_args(
    fds: _Fds, *, uid: int, gid: int, limits: Limits, env: Mapping[str, str], cwd: str,
    files: Mapping[str, bytes] = {}, tmpfs: Sequence[tuple[str, int]] = (),
    hide: Iterable[Path] = (), uncounted: bool = False,
) -> list[str]:
    """bwrap's options (passed through --args): the whole sandbox, built from descriptors."""
    tmp = str(limits.tmp_mb * MB)
    args = ["--unshare-user", "--disable-userns", "--cap-drop", "ALL",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID),
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--clearenv",
            "--proc", "/proc", "--dev", "/dev", "--size", tmp, "--tmpfs", "/dev/shm",
            # /dev is a tmpfs of no size limit: read-only once its nodes and /dev/shm are there
            "--remount-ro", "/dev", "--size", tmp, "--tmpfs", "/tmp"]
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind-fd", fds.path(path), name]
    for name in ETC:
        path = Path("/etc") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.exists():
            args += ["--ro-bind-fd", fds.path(path), str(path)]
    args += ["--perms", "0444", "--ro-bind-data", fds.data(PASSWD), "/etc/passwd",
             "--perms", "0444", "--ro-bind-data", fds.data(GROUP), "/etc/group"]
    shown = software()
    for path in shown:
        source = path if _reachable(path, uid, gid) else _mirror(path)
        args += ["--ro-bind-fd", fds.path(source), str(path)]
    # A private folder inside the software (an unusual --source or --out): hidden again.
    for path in (p.resolve() for p in hide):
        if path.is_dir() and any(path.is_relative_to(root) for root in shown):
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]  # empty, and stays so
    for dest, mb in tmpfs:  # separate budgets: a full /tmp must not stop results being written
        args += ["--size", str(mb * MB), "--tmpfs", dest]
    for dest, data in files.items():
        args += ["--perms", "0444", "--ro-bind-data", fds.data(data), dest]
    for key, value in env.items():
        args += ["--setenv", key, value]
    # The root bwrap builds is a tmpfs of no size limit: once everything is mounted, read-only.
    args += ["--remount-ro", "/", "--seccomp", fds.data(seccomp_filter(uncounted)),
             "--chdir", cwd]
    return args


# --------------------------------------------------------------------------- identity and limits


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


# --------------------------------------------------------------------------- the watchdog


def _tree(root: int, tag: str = "") -> list[int]:
    """Pids of root and its descendants, plus (if ``tag``) any process carrying the tag."""
    parents: dict[int, list[int]] = {}
    tagged: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat_line = f.read()
        except OSError:
            continue
        ppid = int(stat_line[stat_line.rfind(b")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(pid)
        if tag and pid != os.getpid():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if tag.encode() in f.read():
                        tagged.append(pid)
            except OSError:
                pass
    found, todo = set(), [root, *tagged]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(parents.get(pid, ()))
    return sorted(found)


def _usage(pids: Iterable[int]) -> tuple[float, int, set[int]]:
    """(resident MB, tasks, host uids) over pids; shared pages count once per process."""
    rss_pages, tasks, uids = 0, 0, set[int]()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                rss_pages += int(f.read().split()[1])
            tasks += len(os.listdir(f"/proc/{pid}/task"))
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Uid:"):
                        uids.update(int(u) for u in line.split()[1:])
                        break
        except (OSError, IndexError, ValueError):
            continue
    return rss_pages * PAGE / MB, tasks, uids


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class _Tmpfs:
    """The fallback's view of the sandbox's tmpfs mounts: (bytes used, files and folders).

    Seen through ``/proc/<pid>/root`` of a process inside the sandbox's mount namespace that the
    grader may look at (any, as root; as its user, the processes started inside, which belong
    to the user namespace the grader owns).
    """

    def __init__(self, mounts: Sequence[str]) -> None:
        self.mounts = list(mounts)
        self.pid = 0  # the process looked through last
        st = os.stat("/")
        self.host = (st.st_dev, st.st_ino)

    def usage(self, pids: Iterable[int]) -> tuple[int, int] | None:
        for pid in ([self.pid] if self.pid else []) + [p for p in pids if p != self.pid]:
            seen = self._through(pid)
            if seen is not None:
                self.pid = pid
                return seen
        return None

    def _through(self, pid: int) -> tuple[int, int] | None:
        used = files = 0
        try:
            root = os.stat(f"/proc/{pid}/root")
            if (root.st_dev, root.st_ino) == self.host:
                return None  # bwrap's own process outside, or one not yet in the sandbox
            for mount in self.mounts:  # mount points: the student can neither move nor replace
                fd = os.open(f"/proc/{pid}/root{mount}", os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    fs = os.fstatvfs(fd)
                finally:
                    os.close(fd)
                used += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
                files += fs.f_files - fs.f_ffree
        except OSError:
            return None
        return used, files


class _Drain:
    """A thread that reads the sandbox's two pipes: the result (at most ``limit`` + 1 bytes: one
    more says it was over) and the log (its tail, and nothing after LOG_CAP bytes). A pipe is
    closed once its cap is read, so that the writer's next write fails with EPIPE: a flood
    costs the grader neither memory nor time."""

    def __init__(self, output_fd: int, limit: int, log_fd: int, log_bytes: int) -> None:
        self.output, self.limit = bytearray(), limit
        self.log, self.log_bytes, self.log_total = bytearray(), log_bytes, 0
        self._open = {output_fd: self._output, log_fd: self._log}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-pipes", daemon=True)
        self._thread.start()

    def _output(self, data: bytes) -> bool:
        self.output += data[: self.limit + 1 - len(self.output)]
        return len(self.output) <= self.limit

    def _log(self, data: bytes) -> bool:
        self.log_total += len(data)
        self.log += data
        if len(self.log) > 2 * self.log_bytes:
            del self.log[: -self.log_bytes]
        return self.log_total < LOG_CAP

    def _loop(self) -> None:
        poller = select.poll()
        for fd in self._open:
            poller.register(fd, select.POLLIN)
        while self._open and not self._stop.is_set():
            for fd, _ in poller.poll(100):
                try:
                    data = os.read(fd, 1 << 16)
                except OSError:
                    data = b""
                if not data or not self._open[fd](data):  # the end, or its cap
                    poller.unregister(fd)
                    os.close(fd)
                    del self._open[fd]
        for fd in self._open:  # stopped: writers that outlived the sandbox get EPIPE
            os.close(fd)

    def finish(self, result: Result, timeout_s: float = 5.0) -> None:
        """Wait for both pipes to end (every writer gone), at most ``timeout_s``; fill result."""
        self._thread.join(timeout_s)
        self._stop.set()
        self._thread.join()
        result.output_size = len(self.output)
        result.output = bytes(self.output[: self.limit])
        text = self.log[-self.log_bytes:].decode("utf-8", "replace")
        result.log = ("[... log cut ...]\n" if self.log_total > self.log_bytes else "") + text
        if self.log_total >= LOG_CAP:
            result.notes.append(f"it wrote over {LOG_CAP // MB} MB to stdout/stderr; the rest "
                                "was not read")


# --------------------------------------------------------------------------- one run


def run(
    argv: Sequence[str], *, limits: Limits, env: Mapping[str, str] | None = None,
    cwd: str = "/tmp", files: Mapping[str, bytes] = {}, tmpfs: Sequence[tuple[str, int]] = (),
    hide: Iterable[Path] = (), output_limit: int = 0, log_bytes: int = 20_000,
    fallback_dir: Path | None = None, poll_s: float = 0.1, require_bwrap: bool = False,
) -> Result:
    """Run argv sandboxed; kill the whole tree on wall time, memory or process count.

    ``files`` (path inside -> bytes) are shown read-only inside. The sandbox may write up to
    ``output_limit`` bytes to the descriptor named by ``$EDU_DL_RESULT_FD`` (a pipe); they come
    back as ``Result.output``. Without bwrap (``bwrap_problem()`` says why; the callers' settings
    decide whether that may run at all) the command runs with the rlimits alone, never as root:
    as root as a leased uid that is given ``fallback_dir`` (a fresh private folder, see
    ``fallback_folder``: ``files`` are written into it), else as the caller; and
    ``Result.isolated`` is False. ``require_bwrap`` skips that check (the probe itself).
    """
    # EDU_DL_SANDBOX_GROUP prefixes the tag, so one caller can find its own sandboxes' processes
    # among others' (the tests check that nothing is left running while others grade).
    tag = os.environ.get(GROUP_VAR, "") + secrets.token_hex(8)
    problem = "" if require_bwrap else bwrap_problem()
    result = Result(returncode=None, isolated=not problem)
    if problem:
        result.notes.append(f"NOT ISOLATED: {problem}; resource limits only")
    with sandbox_ids() as (uid, gid):
        result.uid = uid
        if problem:
            _hand_over(fallback_dir, files, uid, gid)
        group = cgroups.create(f"{cgroups.PREFIX}{os.environ.get(GROUP_VAR, '')}"
                               f"{secrets.token_hex(8)}",
                               int(TREE_MEMORY * limits.memory_mb * MB),
                               limits.processes + CGROUP_MARGIN)
        result.memory_accounting = group.accounting
        result.cgroup = str(group.memory or "")
        result.notes += group.notes
        if group.memory is None:
            result.notes.append(f"memory counted by the watchdog: {group.why}")
        fds = _Fds()
        out_r, out_w = os.pipe()
        log_r, log_w = os.pipe()
        fds.fds.append(out_w)
        fds.others.append(log_w)
        drain = _Drain(out_r, output_limit, log_r, log_bytes)  # owns the read ends
        try:
            env = {**(env or {}), TAG_VAR: tag, RESULT_FD_VAR: str(out_w)}
            tmp = None
            if problem:
                command, run_env, run_cwd = list(argv), dict(env), str(fallback_dir or cwd)
            else:
                options = bwrap_args(fds, uid=uid, gid=gid, limits=limits, env=env, cwd=cwd,
                                     files=files, tmpfs=tmpfs, hide=hide,
                                     uncounted=group.memory is None)
                arg_fd = fds.data(b"".join(a.encode() + b"\0" for a in options))
                command = [shutil.which("bwrap") or "bwrap", "--args", arg_fd, "--", *argv]
                run_env, run_cwd = {"PATH": os.environ.get("PATH", "")}, "/"
                if group.memory is None:
                    tmp = _Tmpfs(["/tmp", "/dev/shm", *(dest for dest, _ in tmpfs)])
            _watch(command, run_env, run_cwd, limits, result, fds, log_w, uid, gid, group,
                   tmp, tag=tag, isolated=not problem, poll_s=poll_s)
        finally:
            fds.close()  # the write ends too: the pipes end when the sandbox's copies do
            try:
                drain.finish(result)
            finally:
                group.remove()
                if problem and os.geteuid() == 0:  # the uid is the run's alone: none survives
                    _reap_uid(uid)
    return result


def _hand_over(folder: Path | None, files: Mapping[str, bytes], uid: int, gid: int) -> None:
    """The fallback's working folder: ``files`` written into it, and (as root) it and they
    given to the run's uid. ``folder`` must be fresh (``fallback_folder``): root writes here
    before the run's uid ever could."""
    if folder is None:
        raise ValueError("the fallback (no bwrap) needs a folder to run in: fallback_dir")
    for dest, data in files.items():
        if not Path(os.path.normpath(dest)).is_relative_to(folder):
            raise ValueError(f"{dest}: outside the fallback's folder {folder}")
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_bytes(data)
    if os.geteuid() != 0:
        return
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, uid, gid, follow_symlinks=False)
    folder.chmod(0o700)
    if not _reachable(folder, uid, gid):
        raise RuntimeError(f"{folder}: the sandbox's uid {uid} cannot reach it; the fallback "
                           "runs in a folder of the system's temporary folder")


def _reap_uid(uid: int, tries: int = 50) -> None:
    """Kill every process of ``uid`` (a sandbox uid of this run alone) until none is left."""
    for _ in range(tries):
        left = []
        for entry in os.scandir("/proc"):
            try:
                if entry.name.isdigit() and entry.stat().st_uid == uid:
                    left.append(int(entry.name))
            except OSError:
                continue
        if not left:
            return
        _kill(left)
        time.sleep(0.05)


def _watch(command: list[str], env: dict[str, str], cwd: str, limits: Limits, result: Result,
           fds: _Fds, log: int, uid: int, gid: int, group: cgroups.Group, tmp: _Tmpfs | None,
           *, tag: str, isolated: bool, poll_s: float) -> None:
    """Start the command and police it until it ends or is killed; fills ``result``."""
    scan_tag = "" if isolated else tag  # inside a PID namespace the tree is enough
    cap_mb = TREE_MEMORY * limits.memory_mb
    start = time.monotonic()
    with open(os.devnull, "rb") as stdin:
        proc = subprocess.Popen(
            command, stdin=stdin, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
            start_new_session=True, pass_fds=fds.fds,
            preexec_fn=functools.partial(_enter, limits,
                                         _nproc_cap(limits, uid, group.pids is not None),
                                         group, uid, gid),
        )
    fds.close()  # the child holds its copies; ours would only keep the data (and pipes) alive
    try:
        cpu_seen: dict[int, float] = {}  # each process's own CPU seconds, last seen
        cpu_tree = 0.0  # the largest total of the tree seen at once
        while _reaped(proc, result) is None:
            if STOP.is_set():  # the grader was interrupted: this run is not used
                result.killed = "interrupted"
                _kill([proc.pid])
                _kill(_tree(proc.pid, scan_tag))
                break
            if time.monotonic() - start > limits.wall_s:  # first: scans may be slow
                result.killed = "timeout"
                _kill([proc.pid])
            pids = _tree(proc.pid, scan_tag)
            rss, tasks, uids = _usage(pids)
            cpu_tree = max(cpu_tree, _sample_cpu(pids, cpu_seen))
            files = 0
            if group.memory is not None:  # the kernel counts, and kills in the group alone
                memory, over = group.usage_bytes() / MB, group.oom_kills() > 0
            else:  # the watchdog counts: resident memory plus what lies on its tmpfs mounts
                used, files = (tmp.usage(pids) if tmp is not None else None) or (0, 0)
                memory = rss + (used + files * INODE_BYTES) / MB
                over = memory > cap_mb
            result.uids_seen |= uids
            result.peak_rss_mb = max(result.peak_rss_mb, rss)
            result.peak_memory_mb = max(result.peak_memory_mb, memory)
            result.peak_tasks = max(result.peak_tasks, tasks)
            if result.killed:
                pass
            elif over:
                result.killed = "memory"
            elif files > limits.tmp_inodes:
                result.killed = "memory"
                result.notes.append(f"{files} files and folders on its tmpfs mounts, over the "
                                    f"cap of {limits.tmp_inodes}")
            elif tasks > limits.processes:
                result.killed = "processes"
            if result.killed == "timeout" and tasks > limits.processes:
                result.killed = "processes"  # a fork bomb the kernel held until the budget
            elif result.killed in ("", "timeout") and group.fork_refusals():
                # A fork bomb the kernel holds at its cap may never be seen above it, and may
                # outlast the budget: the forks it refused name the cause.
                result.killed = "processes"
                result.notes.append(f"the kernel refused its forks at the cap of "
                                    f"{limits.processes + CGROUP_MARGIN} processes/threads")
            if result.killed:
                _kill([proc.pid])  # bwrap's death kills its PID namespace (--die-with-parent)
                _kill(pids)
                break
            time.sleep(poll_s)
    finally:
        if _reaped(proc, result) is None and not result.killed:
            _kill([proc.pid])
        result.returncode = _reaped(proc, result, block=True)
        result.cpu_s = max(result.cpu_s, cpu_tree, sum(cpu_seen.values()))
        _reap(proc.pid, tag)  # the namespace dies with bwrap; make sure of it
        if group.memory is not None:  # an OOM kill the runner outlived, and the kernel's peak
            if group.oom_kills() and not result.killed:
                result.killed = "memory"
            result.peak_memory_mb = max(result.peak_memory_mb, group.peak_bytes() / MB)
        if result.killed in ("", "timeout") and group.fork_refusals():  # outlived, or timed out
            result.killed = "processes"
            result.notes.append(f"the kernel refused its forks at the cap of "
                                f"{limits.processes + CGROUP_MARGIN} processes/threads")
        if result.killed == "memory" and group.memory is not None:
            result.notes.append(f"the kernel's OOM killer acted in its memory cgroup (limit "
                                f"{cap_mb:.0f} MB)")
        result.seconds = time.monotonic() - start


def _reaped(proc: subprocess.Popen[bytes], result: Result, block: bool = False) -> int | None:
    """The exit code once ``proc`` has ended (None before), reaped with wait4 so that its rusage
    (its own CPU time and that of every process reaped beneath it) lands in ``result.cpu_s``."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        pid, status, usage = os.wait4(proc.pid, 0 if block else os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): Popen knows what to say
        return proc.wait() if block else proc.poll()
    if pid == 0:
        return None
    result.cpu_s = usage.ru_utime + usage.ru_stime
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def _sample_cpu(pids: Iterable[int], seen: dict[int, float]) -> float:
    """Keep each process's latest own CPU seconds (all its threads) in ``seen``; return the
    tree's total now: each live process's own time plus that of the children it reaped (so a
    short-lived orphan reaped by the namespace's init counts too, and nothing counts twice)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        except (OSError, IndexError, ValueError):
            continue
        seen[pid] = max(seen.get(pid, 0.0), own / TICKS)
        total += (own + reaped) / TICKS
    return total


def _reap(root: int, tag: str, tries: int = 50) -> None:
    """Kill whatever of the sandbox survived (only possible without bwrap) until nothing is left."""
    for _ in range(tries):
        left = [pid for pid in _tree(root, tag) if pid != root and pid != os.getpid()]
        if not left:
            return
        _kill(left)
        time.sleep(0.05)


def python() -> str:
    """The interpreter the sandbox runs (the grader's own: the same packages inside)."""
    return os.path.normpath(os.path.abspath(sys.executable))


# The probe of bwrap_problem runs through this module's own run, whatever replaces ``run`` later
# (a test that stands in for the sandbox sees only the runs it asked for).
_probe = run
