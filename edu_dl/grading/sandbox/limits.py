"""What one sandboxed run may use (``Limits``) and what came of it (``Result``), and the
constants the sandbox's pieces share."""

from __future__ import annotations

from dataclasses import dataclass, field

MB = 1 << 20
TREE_MEMORY = 1.25  # the tree may hold a quarter more than one process's RLIMIT_DATA
# Tasks the pids cgroup and RLIMIT_NPROC allow beyond Limits.processes: bwrap's own two processes
# and room for the watchdog to see the count pass the limit and name the cause.
CGROUP_MARGIN = 8


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
    seconds: float = 0.0  # from the gate's opening where it had one (Gate), else from its start
    gate_s: float = 0.0  # started ahead: from its start to its gate's opening
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
