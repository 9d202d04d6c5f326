"""Run one untrusted command in a bubblewrap sandbox with resource limits.

bubblewrap (``bwrap``, the sandbox Flatpak uses) gives the isolation; this module only builds its
command line and adds what bwrap does not do: rlimits, a wall-time limit and a memory/process
watchdog. Inside: a read-only view of the system, a private size-bounded ``/tmp`` (the only
writable place besides the one result file), no network (loopback works, so the notebook client
and its kernel talk inside), and a PID namespace whose processes all die with the sandbox.

Memory: RLIMIT_AS is useless with TensorFlow and PyTorch (they reserve gigabytes of address space
they never touch; thread stacks and malloc arenas grow it with the core count), so each process gets
RLIMIT_DATA (private writable memory: a malloc bomb gets MemoryError, TF+torch need ~0.6 GB) and a
watchdog sums the resident memory of the whole process tree (catches many processes that each stay
under RLIMIT_DATA). As root RLIMIT_NPROC does not bind, so the watchdog also counts processes and
threads, and the PID namespace guarantees that killing the sandbox kills all of them.

Processes: where the kernel's pids cgroup controller can be written (as root), each sandbox also
gets a pids cgroup of its own, which caps its processes and threads in the kernel. Without it, a
fork bomb run as root outgrows the watchdog's polling and can fill the machine's whole PID space,
starving every other process (seen once in CI: 114 s to stop one). The watchdog still reports it.
"""

from __future__ import annotations

import functools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

MB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
TREE_MEMORY = 1.25  # the tree may hold a quarter more than one process's RLIMIT_DATA
TAG_VAR = "EDU_DL_SANDBOX_TAG"  # marks every process of one sandbox (fallback cleanup)
# Tasks the pids cgroup allows beyond Limits.processes: bwrap's own two processes and room for
# the watchdog to see the count pass the limit and name the cause.
CGROUP_MARGIN = 8
PIDS_HIERARCHIES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))  # cgroup v1, then v2
GROUP_VAR = "EDU_DL_SANDBOX_GROUP"


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    wall_s: float = 600.0  # the whole run; the sandbox is killed after it
    memory_mb: int = 4096  # RLIMIT_DATA per process; the tree's resident total: TREE_MEMORY x
    cpu_s: int = 900  # RLIMIT_CPU per process
    processes: int = 512  # processes + threads in the tree (the watchdog's count)
    file_mb: int = 64  # RLIMIT_FSIZE: the largest file any process may write
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


@functools.cache
def bwrap_problem() -> str:
    """'' if bwrap works here, else one sentence on why not."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [exe, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--die-with-parent",
             "--size", str(MB), "--tmpfs", "/tmp", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap does not start: {exc}"
    if done.returncode != 0:
        return f"bwrap cannot create namespaces here: {done.stderr.strip()[:200]}"
    return ""


def software_under_tmp() -> list[Path]:
    """The Python environment and the edu_dl checkout, where they live under /tmp."""
    import edu_dl

    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
             Path(edu_dl.__file__).parent.parent}
    tmp = Path("/tmp")
    found = sorted({r.resolve() for r in roots if r.resolve().is_relative_to(tmp)})
    # Keep the outermost of nested roots: binding a parent already shows its children.
    return [r for r in found if not any(r != o and r.is_relative_to(o) for o in found)]


def bwrap_args(
    *, hide: Iterable[Path], ro_binds: Sequence[tuple[Path, str]],
    rw_binds: Sequence[tuple[Path, str]], env: dict[str, str], limits: Limits, cwd: str,
    tmpfs: Sequence[tuple[str, int]] = (),
) -> list[str]:
    """The bwrap command-line prefix: read-only system, private tmpfs, hidden paths, no network."""
    tmp = str(limits.tmp_mb * MB)
    args = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev",
            "--size", tmp, "--tmpfs", "/dev/shm", "--proc", "/proc",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", "--clearenv"]
    hidden = [path.resolve() for path in hide if path.is_dir()]
    for path in hidden:  # an empty tmpfs over each hidden directory
        args += ["--tmpfs", str(path)]
    args += ["--size", tmp, "--tmpfs", "/tmp"]  # after the hides: /tmp may hold one of them
    # The private /tmp also covers a Python or a checkout that lives there (a CI clone in /tmp):
    # show those again, read-only, and hide again what they contain that must stay hidden.
    shown = software_under_tmp()
    for path in shown:
        args += ["--ro-bind", str(path), str(path)]
    for path in hidden:
        if any(path.is_relative_to(root) for root in shown):
            args += ["--tmpfs", str(path)]
    for dest, mb in tmpfs:  # separate budgets: a full /tmp must not stop results being written
        args += ["--size", str(mb * MB), "--tmpfs", dest]
    for src, dest in ro_binds:
        args += ["--ro-bind", str(src.resolve()), dest]
    for src, dest in rw_binds:
        args += ["--bind", str(src.resolve()), dest]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--chdir", cwd, "--"]


def _set_limits(limits: Limits, nproc: int, cgroup: Path | None = None) -> None:
    """preexec_fn: rlimits (and the pids cgroup) inherited by bwrap and everything it starts."""
    if cgroup is not None:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    def cap(which: int, value: int) -> None:
        resource.setrlimit(which, (value, value))
    cap(resource.RLIMIT_DATA, limits.memory_mb * MB)
    cap(resource.RLIMIT_CPU, limits.cpu_s)
    cap(resource.RLIMIT_FSIZE, limits.file_mb * MB)
    cap(resource.RLIMIT_CORE, 0)  # a segfault must not dump a core into the grading folder
    if nproc:
        cap(resource.RLIMIT_NPROC, nproc)
    os.nice(5)  # a busy sandbox (a fork bomb) must not starve the watchdog that polices it


def _nproc_cap(limits: Limits) -> int:
    """RLIMIT_NPROC for the sandbox, or 0 for none.

    It counts processes AND threads of the user across the whole machine, so the cap is what the
    user already runs plus the sandbox's share; root ignores it (the watchdog and the PID
    namespace stop a fork bomb there).
    """
    if os.geteuid() == 0:
        return 0
    uid, running = os.getuid(), 0
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
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
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


def _usage(pids: Iterable[int]) -> tuple[float, int]:
    """(resident MB, tasks) summed over pids; shared pages count once per process (conservative)."""
    rss_pages, tasks = 0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                rss_pages += int(f.read().split()[1])
            tasks += len(os.listdir(f"/proc/{pid}/task"))
        except (OSError, IndexError, ValueError):
            continue
    return rss_pages * PAGE / MB, tasks


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run(
    argv: Sequence[str], *, limits: Limits, hide: Iterable[Path] = (),
    ro_binds: Sequence[tuple[Path, str]] = (), rw_binds: Sequence[tuple[Path, str]] = (),
    env: dict[str, str] | None = None, cwd: str = "/tmp", log_bytes: int = 20_000,
    fallback_dir: Path | None = None, poll_s: float = 0.1, tmpfs: Sequence[tuple[str, int]] = (),
) -> Result:
    """Run argv sandboxed; kill the whole tree on wall time, memory or process count.

    Without bwrap (``bwrap_problem()`` says why) the command runs with the rlimits alone, in
    ``fallback_dir`` (paths in ``ro_binds``/``rw_binds`` must then already be where argv expects
    them), and ``Result.isolated`` is False.
    """
    # EDU_DL_SANDBOX_GROUP prefixes the tag, so one caller can find its own sandboxes' processes
    # among others' (the tests check that nothing is left running while others grade).
    tag = os.environ.get(GROUP_VAR, "") + secrets.token_hex(8)
    env = {**(env or {}), TAG_VAR: tag}
    problem = bwrap_problem()
    if problem:
        command, run_env, run_cwd = list(argv), env, str(fallback_dir or cwd)
    else:
        prefix = bwrap_args(hide=hide, ro_binds=ro_binds, rw_binds=rw_binds, env=env,
                            limits=limits, cwd=cwd, tmpfs=tmpfs)
        command, run_env, run_cwd = [*prefix, *argv], {"PATH": os.environ.get("PATH", "")}, "/"
    result = Result(returncode=None, isolated=not problem)
    if problem:
        result.notes.append(f"NOT ISOLATED: {problem}; resource limits only")
    scan_tag = tag if problem else ""  # inside a PID namespace the tree is enough
    cgroup = make_pids_cgroup(f"edu_dl_sandbox_{tag}", limits.processes + CGROUP_MARGIN)
    start = time.monotonic()
    log_path = None
    with open(os.devnull, "rb") as stdin, _log_file(fallback_dir) as log:
        log_path = log.name
        proc = subprocess.Popen(
            command, stdin=stdin, stdout=log, stderr=subprocess.STDOUT, env=run_env,
            cwd=run_cwd, start_new_session=True,
            preexec_fn=functools.partial(_set_limits, limits, _nproc_cap(limits), cgroup),
        )
        try:
            while proc.poll() is None:
                if time.monotonic() - start > limits.wall_s:  # first: scans may be slow
                    result.killed = "timeout"
                    _kill([proc.pid])
                pids = _tree(proc.pid, scan_tag)
                rss, tasks = _usage(pids)
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
        log.flush()
        result.log = _tail(log_path, log_bytes)
    return result


def _reap(root: int, tag: str, tries: int = 50) -> None:
    """Kill whatever of the sandbox survived (only possible without bwrap) until nothing is left."""
    for _ in range(tries):
        left = [pid for pid in _tree(root, tag) if pid != root and pid != os.getpid()]
        if not left:
            return
        _kill(left)
        time.sleep(0.05)


class _log_file:
    """A temporary file for the sandbox's stdout/stderr, deleted afterwards (bounded by FSIZE)."""

    def __init__(self, where: Path | None) -> None:
        import tempfile

        self.file = tempfile.NamedTemporaryFile(
            "w+b", dir=where, prefix=".sandbox-log-", delete=False
        )
        self.name = self.file.name

    def __enter__(self) -> IO[bytes]:
        return self.file

    def __exit__(self, *exc: object) -> None:
        self.file.close()
        Path(self.name).unlink(missing_ok=True)


def _tail(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit))
        text = f.read().decode("utf-8", "replace")
    return ("[... log cut ...]\n" if size > limit else "") + text


def python() -> str:
    """The interpreter the sandbox runs (the grader's own: the same packages inside)."""
    return sys.executable
