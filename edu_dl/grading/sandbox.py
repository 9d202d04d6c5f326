"""Run one untrusted command in a bubblewrap sandbox with resource limits.

bubblewrap (``bwrap``, the sandbox Flatpak uses) gives the isolation; this module builds its
arguments and adds what bwrap does not do: an unprivileged identity, a seccomp filter, rlimits, a
wall-time limit and a memory/process watchdog.

Who runs it: never root. A grader started as root drops, before bwrap starts, to a host uid/gid of
its own from a range no account uses (one per run, so two sandboxes share nothing); an ordinary
user's grader runs it as that user. bwrap then adds a user namespace with no capabilities
(``--cap-drop ALL``), no further user namespaces (``--disable-userns``), ``no_new_privs``, and a
seccomp filter (libseccomp) that refuses mount, namespace, tracing, keyring, BPF and kernel-module
calls with EPERM.

What it sees: an empty root with, read-only, the system's programs and libraries (``/usr`` and its
links), a few files of ``/etc``, the Python, the virtual environment and the ``edu_dl`` package;
a synthetic ``/etc/passwd``; a private size-bounded ``/tmp``; the files the caller hands over as
bytes. Nothing of ``/home``, ``/root``, ``/var``, ``/run``, other users' files or the caller's
folders. No network (loopback works, so the notebook client and its kernel talk inside), its own
PID namespace whose processes all die with the sandbox. Its arguments travel through ``--args FD``
and every mounted folder through an open descriptor, so nothing inside learns a host path beyond
the software it runs. The one way out is a file descriptor (``RESULT_FD_VAR``), read back here with
a size bound; stdout and stderr go to another.

Memory: RLIMIT_AS is useless with TensorFlow and PyTorch (they reserve gigabytes of address space
they never touch), so each process gets RLIMIT_DATA (a malloc bomb gets MemoryError) and a watchdog
sums the resident memory of the whole process tree. Processes: RLIMIT_NPROC binds for the
unprivileged uid; where the kernel's pids cgroup controller can be written (as root), each sandbox
also gets a pids cgroup of its own, which caps its processes and threads in the kernel.
"""

from __future__ import annotations

import errno
import functools
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .protocol import RESULT_FD_VAR  # the descriptor the sandbox writes its result to

MB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
TREE_MEMORY = 1.25  # the tree may hold a quarter more than one process's RLIMIT_DATA
TAG_VAR = "EDU_DL_SANDBOX_TAG"  # marks every process of one sandbox (fallback cleanup)
# Tasks the pids cgroup and RLIMIT_NPROC allow beyond Limits.processes: bwrap's own two processes
# and room for the watchdog to see the count pass the limit and name the cause.
CGROUP_MARGIN = 8
PIDS_HIERARCHIES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))  # cgroup v1, then v2
GROUP_VAR = "EDU_DL_SANDBOX_GROUP"
# Host uids/gids a root grader runs sandboxes as: one per run, from a range no account uses
# (far above the 100000+ ranges of /etc/subuid). EDU_DL_SANDBOX_UID_BASE moves it.
UID_BASE = int(os.environ.get("EDU_DL_SANDBOX_UID_BASE", "1900000000"))
UID_SPAN = 1 << 16
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
# process, the kernel keyring, BPF, perf, kernel modules, io_uring (which bypasses seccomp).
DENIED_SYSCALLS = (
    "mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "chroot", "unshare", "setns", "ptrace", "process_vm_readv",
    "process_vm_writev", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl",
    "open_by_handle_at", "name_to_handle_at", "io_uring_setup", "io_uring_enter",
    "io_uring_register",
)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    wall_s: float = 600.0  # the whole run; the sandbox is killed after it
    memory_mb: int = 4096  # RLIMIT_DATA per process; the tree's resident total: TREE_MEMORY x
    cpu_s: int = 900  # RLIMIT_CPU per process
    processes: int = 512  # processes + threads in the tree (the watchdog's count)
    file_mb: int = 64  # RLIMIT_FSIZE: the largest file any process may write (the result too)
    tmp_mb: int = 256  # size of the private /tmp (and /dev/shm) tmpfs


@dataclass
class Result:
    """What came of one sandboxed run."""

    returncode: int | None
    killed: str = ""  # "" or why the watchdog killed it: "timeout", "memory", "processes"
    isolated: bool = True  # False: bwrap missing, resource limits only
    log: str = ""  # the tail of stdout+stderr
    peak_rss_mb: float = 0.0
    peak_tasks: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    output: bytes = b""  # what the sandbox wrote to its result descriptor (at most output_limit)
    output_size: int = 0  # how many bytes it wrote: more than len(output) when over the limit
    uid: int = -1  # the host uid the sandbox ran as
    uids_seen: set[int] = field(default_factory=set)  # host uids of its processes (watchdog)


# --------------------------------------------------------------------------- what bwrap needs


@functools.cache
def seccomp_filter() -> bytes:
    """The BPF program bwrap loads (``--seccomp``): DENIED_SYSCALLS fail with EPERM."""
    import pyseccomp as seccomp  # libseccomp through ctypes

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):  # unknown on this architecture or libseccomp
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


def isolation() -> str:
    """The gradebook's sandbox column for a run on this machine: "bwrap" or "rlimits only"."""
    return "rlimits only" if bwrap_problem() else "bwrap"


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
    base = Path(tempfile.mkdtemp(prefix="edu-dl-sandbox-software-"))
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


class _Fds:
    """Descriptors handed to bwrap: opened here, inherited by the child, closed after."""

    def __init__(self) -> None:
        self.fds: list[int] = []

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
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def bwrap_args(
    fds: _Fds, *, uid: int, gid: int, limits: Limits, env: Mapping[str, str], cwd: str,
    files: Mapping[str, bytes] = {}, tmpfs: Sequence[tuple[str, int]] = (),
    hide: Iterable[Path] = (),
) -> list[str]:
    """bwrap's options (passed through --args): the whole sandbox, built from descriptors."""
    tmp = str(limits.tmp_mb * MB)
    args = ["--unshare-user", "--disable-userns", "--cap-drop", "ALL",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID),
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox",
            "--die-with-parent", "--new-session", "--clearenv",
            "--proc", "/proc", "--dev", "/dev", "--size", tmp, "--tmpfs", "/dev/shm",
            "--size", tmp, "--tmpfs", "/tmp"]
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
            args += ["--tmpfs", str(path)]
    for dest, mb in tmpfs:  # separate budgets: a full /tmp must not stop results being written
        args += ["--size", str(mb * MB), "--tmpfs", dest]
    for dest, data in files.items():
        args += ["--perms", "0444", "--ro-bind-data", fds.data(data), dest]
    for key, value in env.items():
        args += ["--setenv", key, value]
    # The root bwrap builds is a tmpfs of no size limit: once everything is mounted, read-only.
    args += ["--remount-ro", "/", "--seccomp", fds.data(seccomp_filter()), "--chdir", cwd]
    return args


# --------------------------------------------------------------------------- identity and limits


def sandbox_ids() -> tuple[int, int]:
    """(uid, gid) for a new sandbox: a fresh unprivileged pair as root, else the caller's own."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    busy = _uids_running()
    while True:
        uid = UID_BASE + secrets.randbelow(UID_SPAN)
        if uid not in busy:
            return uid, uid


def _uids_running() -> set[int]:
    uids = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                uids.add(entry.stat().st_uid)
            except OSError:
                continue
    return uids


def _enter(limits: Limits, nproc: int, cgroup: Path | None, uid: int, gid: int) -> None:
    """preexec_fn: the cgroup and rlimits, then (as root) the sandbox's own uid and gid."""
    if cgroup is not None:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

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


def _nproc_cap(limits: Limits, uid: int) -> int:
    """RLIMIT_NPROC for the sandbox, or 0 for none.

    It counts processes AND threads of the uid across the whole machine: a root grader's sandbox
    has a uid of its own, so the cap is the sandbox's share; an ordinary user's sandbox adds its
    share to what the user already runs.
    """
    if os.geteuid() == 0:
        return limits.processes + CGROUP_MARGIN
    running = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    running += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    want = running + limits.processes
    return want if hard == resource.RLIM_INFINITY or hard > want else 0


def make_pids_cgroup(name: str, max_tasks: int) -> Path | None:
    """A new pids cgroup allowing ``max_tasks`` tasks, or None where none can be made here."""
    for hierarchy in PIDS_HIERARCHIES:
        controllers = hierarchy / "cgroup.controllers"  # cgroup v2 lists them; v1 has none
        if controllers.exists() and "pids" not in controllers.read_text().split():
            continue
        if not (hierarchy / "cgroup.procs").exists():
            continue
        _remove_stale(hierarchy)
        path = hierarchy / name
        try:
            path.mkdir()
        except OSError:
            continue
        try:
            (path / "pids.max").write_text(str(max_tasks))
            return path
        except OSError:
            remove_cgroup(path)
    return None


def _remove_stale(hierarchy: Path, older_than_s: float = 600.0) -> None:
    """Remove sandbox cgroups left by runs that could not (their tasks died slowly, or the
    grader was killed). Only old ones: a new one may be waiting for its first task."""
    now = time.time()
    for path in hierarchy.glob("edu_dl_sandbox_*"):
        try:
            if now - path.stat().st_mtime > older_than_s:
                path.rmdir()  # refused while any task is left in it
        except OSError:
            continue


def remove_cgroup(path: Path, tries: int = 250) -> None:
    """rmdir the cgroup once its last task is gone (the kernel refuses while any is left; the
    tasks of a killed PID namespace can take a moment to go)."""
    for _ in range(tries):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


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


# --------------------------------------------------------------------------- one run


def run(
    argv: Sequence[str], *, limits: Limits, env: Mapping[str, str] | None = None,
    cwd: str = "/tmp", files: Mapping[str, bytes] = {}, tmpfs: Sequence[tuple[str, int]] = (),
    hide: Iterable[Path] = (), output_limit: int = 0, log_bytes: int = 20_000,
    fallback_dir: Path | None = None, poll_s: float = 0.1, require_bwrap: bool = False,
) -> Result:
    """Run argv sandboxed; kill the whole tree on wall time, memory or process count.

    ``files`` (path inside -> bytes) are shown read-only inside. The sandbox may write up to
    ``output_limit`` bytes to the descriptor named by ``$EDU_DL_RESULT_FD``; they come back as
    ``Result.output``. Without bwrap (``bwrap_problem()`` says why) the command runs with the
    rlimits alone as the caller, in ``fallback_dir``, ``files`` are written where they name, and
    ``Result.isolated`` is False. ``require_bwrap`` skips that check (the probe itself).
    """
    # EDU_DL_SANDBOX_GROUP prefixes the tag, so one caller can find its own sandboxes' processes
    # among others' (the tests check that nothing is left running while others grade).
    tag = os.environ.get(GROUP_VAR, "") + secrets.token_hex(8)
    problem = "" if require_bwrap else bwrap_problem()
    uid, gid = sandbox_ids() if not problem else (os.getuid(), os.getgid())
    result = Result(returncode=None, isolated=not problem, uid=uid)
    if problem:
        result.notes.append(f"NOT ISOLATED: {problem}; resource limits only")
    fds = _Fds()
    with tempfile.TemporaryFile() as log, tempfile.TemporaryFile() as output:
        os.set_inheritable(output.fileno(), True)
        env = {**(env or {}), TAG_VAR: tag, RESULT_FD_VAR: str(output.fileno())}
        try:
            if problem:
                for dest, data in files.items():
                    Path(dest).parent.mkdir(parents=True, exist_ok=True)
                    Path(dest).write_bytes(data)
                command, run_env, run_cwd = list(argv), dict(env), str(fallback_dir or cwd)
            else:
                options = bwrap_args(fds, uid=uid, gid=gid, limits=limits, env=env, cwd=cwd,
                                     files=files, tmpfs=tmpfs, hide=hide)
                arg_fd = fds.data(b"".join(a.encode() + b"\0" for a in options))
                command = [shutil.which("bwrap") or "bwrap", "--args", arg_fd, "--", *argv]
                run_env, run_cwd = {"PATH": os.environ.get("PATH", "")}, "/"
            _watch(command, run_env, run_cwd, limits, result, log, output, fds, uid, gid,
                   tag=tag, isolated=not problem, poll_s=poll_s)
        finally:
            fds.close()
        result.log = _tail(log, log_bytes)
        output.seek(0, os.SEEK_END)
        result.output_size = output.tell()
        output.seek(0)
        result.output = output.read(output_limit) if output_limit else b""
    return result


def _watch(command: list[str], env: dict[str, str], cwd: str, limits: Limits, result: Result,
           log: IO[bytes], output: IO[bytes], fds: _Fds, uid: int, gid: int, *, tag: str,
           isolated: bool, poll_s: float) -> None:
    """Start the command and police it until it ends or is killed; fills ``result``."""
    cgroup = make_pids_cgroup(f"edu_dl_sandbox_{os.environ.get(GROUP_VAR, '')}"
                              f"{secrets.token_hex(8)}", limits.processes + CGROUP_MARGIN)
    scan_tag = "" if isolated else tag  # inside a PID namespace the tree is enough
    start = time.monotonic()
    with open(os.devnull, "rb") as stdin:
        proc = subprocess.Popen(
            command, stdin=stdin, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
            start_new_session=True, pass_fds=[output.fileno(), *fds.fds],
            preexec_fn=functools.partial(_enter, limits, _nproc_cap(limits, uid), cgroup,
                                         uid, gid),
        )
    fds.close()  # the child holds its copies; ours would only keep the data alive
    try:
        while proc.poll() is None:
            if time.monotonic() - start > limits.wall_s:  # first: scans may be slow
                result.killed = "timeout"
                _kill([proc.pid])
            pids = _tree(proc.pid, scan_tag)
            rss, tasks, uids = _usage(pids)
            result.uids_seen |= uids
            result.peak_rss_mb = max(result.peak_rss_mb, rss)
            result.peak_tasks = max(result.peak_tasks, tasks)
            if result.killed:
                pass
            elif rss > TREE_MEMORY * limits.memory_mb:
                result.killed = "memory"
            elif tasks > limits.processes:
                result.killed = "processes"
            if result.killed:
                _kill([proc.pid])  # bwrap's death kills its PID namespace (--die-with-parent)
                _kill(pids)
                break
            time.sleep(poll_s)
    finally:
        if proc.poll() is None and not result.killed:
            _kill([proc.pid])
        result.returncode = proc.wait()
        _reap(proc.pid, tag)  # the namespace dies with bwrap; make sure of it
        if cgroup is not None:
            remove_cgroup(cgroup)
        result.seconds = time.monotonic() - start


def _reap(root: int, tag: str, tries: int = 50) -> None:
    """Kill whatever of the sandbox survived (only possible without bwrap) until nothing is left."""
    for _ in range(tries):
        left = [pid for pid in _tree(root, tag) if pid != root and pid != os.getpid()]
        if not left:
            return
        _kill(left)
        time.sleep(0.05)


def _tail(f: IO[bytes], limit: int) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    text = f.read().decode("utf-8", "replace")
    return ("[... log cut ...]\n" if size > limit else "") + text


def python() -> str:
    """The interpreter the sandbox runs (the grader's own: the same packages inside)."""
    return os.path.normpath(os.path.abspath(sys.executable))


# The probe of bwrap_problem runs through this module's own run, whatever replaces ``run`` later
# (a test that stands in for the sandbox sees only the runs it asked for).
_probe = run
