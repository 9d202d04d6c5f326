"""What bwrap needs: its arguments, the seccomp filter, and the software the sandbox is shown.

bwrap (run as the sandbox's own uid: ``identity``) adds a user namespace with no capabilities
(``--cap-drop ALL``), no further user namespaces (``--disable-userns``), ``no_new_privs``, and a
seccomp filter (libseccomp) that refuses mount, namespace, tracing, pidfd, keyring, BPF and
kernel-module calls with EPERM. fallocate fails with EOPNOTSUPP (it reserves space no size limit
sees); where no memory cgroup counts the sandbox, SysV shm and memfds are denied as well.

What it sees: an empty root with, read-only, the system's programs and libraries (``/usr`` and its
links), a few files of ``/etc``, the Python, the virtual environment and the ``edu_dl`` package;
a synthetic ``/etc/passwd``; a private size-bounded ``/tmp`` and ``/dev/shm``; a read-only
``/dev``; the files the caller hands over as bytes. Nothing of ``/home``, ``/root``, ``/var``,
``/run``, other users' files or the caller's folders. No network (loopback works, so the notebook
client and its kernel talk inside), its own PID namespace whose processes all die with the
sandbox. Its arguments travel through ``--args FD`` and every mounted folder through an open
descriptor, so nothing inside learns a host path beyond the software it runs.

The software (``software()``: the Pythons, the package) is shown at its own path; where the
sandbox's uid cannot reach it (a root grader's Python under ``/root``), a copy any uid can reach
is shown there instead (``_mirror``; ``sweep_mirrors`` removes those whose process is gone).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from edu_dl.grading.sandbox.identity import _reachable
from edu_dl.grading.sandbox.limits import MB, Limits

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


def software() -> list[Path]:
    """What the sandbox runs, shown read-only at its own path: the Pythons, the package."""
    import edu_dl

    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
             Path(sys.base_exec_prefix), Path(edu_dl.__file__).parent}
    found = sorted({r.resolve() for r in roots})
    # Keep the outermost of nested roots: binding a parent already shows its children.
    return [r for r in found if not any(r != o and r.is_relative_to(o) for o in found)]


def python() -> str:
    """The interpreter the sandbox runs (the grader's own: the same packages inside)."""
    return os.path.normpath(os.path.abspath(sys.executable))


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
            fields = f.read().rsplit(b")", 1)[1].split()
        # a zombie has ended (its atexit will never run) though its pid is still held
        start = "gone" if fields[0] in (b"Z", b"X") else fields[19].decode()
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
