"""The watchdog: the sandbox's process tree policed from outside until it ends.

``_watch`` starts the command (its cgroups, rlimits and uid entered in the child: ``identity``)
and at every poll reads the tree from ``/proc``: wall time, memory, processes and threads, CPU
seconds, host uids. Over a limit it kills the whole tree and names the cause in
``Result.killed``; afterwards it reaps whatever survived. ``STOP`` (the grader interrupted) kills
every sandbox of this process at its next poll.

Memory: the sandbox as a whole may hold ``TREE_MEMORY`` times one process's RLIMIT_DATA, counted
by the kernel where a memory cgroup can be made (``cgroups``: shm, memfds, tmpfs files and kernel
memory included; an OOM kill there kills the sandbox and reads killed="memory"). Where none can
be made (an ordinary user without a delegated cgroup v2) the watchdog counts instead: the resident
memory of the process tree plus the bytes on the sandbox's tmpfs mounts (``_Tmpfs``), and it kills
a sandbox that holds over ``Limits.tmp_inodes`` files there (each costs kernel memory no size
limit sees); SysV shm and memfds, which it could not see, are then denied (``bwrap``'s seccomp
filter).
"""

from __future__ import annotations

import functools
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence

from edu_dl.grading.sandbox import cgroups
from edu_dl.grading.sandbox.bwrap import _Fds
from edu_dl.grading.sandbox.gate import Gate
from edu_dl.grading.sandbox.identity import _enter, _nproc_cap
from edu_dl.grading.sandbox.limits import CGROUP_MARGIN, MB, TREE_MEMORY, Limits, Result

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat counts CPU time in these
# The fallback's count of a tmpfs file's kernel memory (an inode and a dentry: about 1.3 kB were
# measured per empty file), added to the memory compared with the limit.
INODE_BYTES = 1300
# Set when the grader is interrupted (Ctrl-C): every sandbox this process runs is killed at its
# watchdog's next poll, and its run is marked killed "interrupted" (never a grade).
STOP = threading.Event()


def _watch(command: list[str], env: dict[str, str], cwd: str, limits: Limits, result: Result,
           fds: _Fds, log: int, uid: int, gid: int, group: cgroups.Group, tmp: _Tmpfs | None,
           *, tag: str, isolated: bool, poll_s: float,
           gate: tuple[Gate, int] | None = None) -> None:
    """Start the command and police it until it ends or is killed; fills ``result``.
    ``gate``: the Gate and the write end of its pipe: one byte is written there once its turn
    comes and a slot is taken (given back when the run ends); the wall time counts from then."""
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
    ended = _Exit(proc.pid)
    waiting = gate is not None  # for a slot: memory and processes policed, no wall time counted
    try:
        cpu_seen: dict[int, float] = {}  # each process's own CPU seconds, last seen
        cpu_tree = 0.0  # the largest total of the tree seen at once
        while _reaped(proc, result) is None:
            if STOP.is_set():  # the grader was interrupted: this run is not used
                result.killed = "interrupted"
                _kill([proc.pid])
                _kill(_tree(proc.pid, scan_tag))
                break
            if waiting and gate is not None and gate[0].turns.take(gate[0].ticket, poll_s):
                waiting = False
                os.write(gate[1], b"1")  # a pipe's first byte: never blocks
                result.gate_s = time.monotonic() - start
                start = time.monotonic()
            if not waiting and time.monotonic() - start > limits.wall_s:  # first: scans may be slow
                result.killed = "timeout"
                _kill([proc.pid])
            # The group's own list where there is one (a few pids), else a scan of all /proc
            # (a few ms a poll on a busy machine: the grader's largest cost while it waits).
            pids = (None if scan_tag else group.processes()) or _tree(proc.pid, scan_tag)
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
            if not waiting:  # while it waits, take() has waited the poll already
                ended.wait(poll_s)
    finally:
        if gate is not None:  # its slot given back, or its turn passed to the next
            if waiting:
                gate[0].turns.pass_turn(gate[0].ticket)
            else:
                gate[0].turns.give_back()
        ended.close()
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


class _Exit:
    """Waits between two polls that end early when the process exits: the run is over as soon
    as it is, not up to a poll later (0.1 s of every sandboxed run, a notebook's or a speed
    task's, was spent waiting for a process that had ended). A pidfd where Linux has one (5.3
    and later); else a plain sleep."""

    def __init__(self, pid: int) -> None:
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no pidfd_open: an older kernel, or not Linux
            self.fd = None

    def wait(self, seconds: float) -> None:
        if self.fd is None:
            time.sleep(seconds)
        else:
            select.select([self.fd], [], [], seconds)  # readable once the process has ended

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


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
