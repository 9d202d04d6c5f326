"""Run one untrusted command in a bubblewrap sandbox with resource limits.

bubblewrap (``bwrap``, the sandbox Flatpak uses) gives the isolation; this package builds its
arguments and adds what bwrap does not do: an unprivileged identity, a seccomp filter, rlimits, a
wall-time limit, cgroups and a memory/process watchdog. ``run`` (here) is the one way in.

The threat model in short (each module says the rest):

Who runs it: never root. A root grader's sandbox runs as a host uid/gid of its own, leased for the
run (``identity``); an ordinary user's as that user. bwrap adds a user namespace with no
capabilities, no further user namespaces, ``no_new_privs``, and a seccomp filter that refuses
mount, namespace, tracing, pidfd, keyring, BPF and kernel-module calls (``bwrap``).

What it sees: an empty root with, read-only, the system's programs and libraries, a few files of
``/etc``, the Python, the virtual environment and the ``edu_dl`` package; a private size-bounded
``/tmp`` and ``/dev/shm``; the files the caller hands over as bytes. No network, its own PID
namespace, no host path beyond the software it runs (``bwrap``).

What it can write: its tmpfs mounts (each of a bounded size) and two pipes, nothing on the host; a
thread drains both to their caps, so a flood costs the grader nothing (``drain``).

Memory and processes: RLIMIT_DATA per process (``identity``), and the sandbox as a whole
``TREE_MEMORY`` times that, counted by the kernel where a memory cgroup can be made
(``cgroups``), else by the watchdog (``watchdog``), which also kills on wall time and process
count. RLIMIT_NPROC and, as root, a pids cgroup cap its processes and threads.

Without bwrap (``bwrap_problem()`` says why; the callers' settings decide whether that may run at
all): the command runs here with the rlimits alone, never as root (``fallback_problem``,
``fallback_folder``), and ``Result.isolated`` is False.

The modules: ``limits`` (Limits, Result, shared constants), ``identity`` (the run's uid, its
rlimits), ``bwrap`` (bwrap's arguments, the seccomp filter, the software shown and its mirrors),
``watchdog`` (the process tree policed, killed and reaped; ``STOP``), ``drain`` (the pipes),
``cgroups`` (the memory and pids cgroups), and here one run: ``run``, ``bwrap_problem``, the
fallback.

Monkeypatching: ``run`` and ``bwrap_problem`` are looked up in this package by every caller (``run``
itself included), so a test patches them here. Every other name is looked up in the module that
defines it, so patch it there (``sandbox.bwrap.software``, ``sandbox.bwrap.DENIED_SYSCALLS``,
``sandbox.drain.LOG_CAP``): the names re-exported below are for reading.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from edu_dl.grading.protocol import (
    GATE_FD_VAR,  # the pipe its runner waits on (Gate)
    RESULT_FD_VAR,  # the descriptor the sandbox writes its result to
)
from edu_dl.grading.sandbox import bwrap, cgroups
from edu_dl.grading.sandbox.bwrap import (
    DENIED_SYSCALLS,
    INSIDE_UID,
    MIRROR_PREFIX,
    _Fds,
    _process_id,
    bwrap_args,
    python,
    seccomp_filter,
    software,
    sweep_mirrors,
)
from edu_dl.grading.sandbox.drain import LOG_CAP, _Drain
from edu_dl.grading.sandbox.gate import Gate, Turns
from edu_dl.grading.sandbox.identity import UID_BASE, UID_SPAN, _reachable, sandbox_ids
from edu_dl.grading.sandbox.limits import CGROUP_MARGIN, MB, TREE_MEMORY, Limits, Result
from edu_dl.grading.sandbox.watchdog import STOP, _kill, _Tmpfs, _watch

__all__ = [
    "CGROUP_MARGIN", "DENIED_SYSCALLS", "GATE_FD_VAR", "GROUP_VAR", "INSIDE_UID", "LOG_CAP", "MB",
    "MIRROR_PREFIX", "STOP", "TAG_VAR", "TREE_MEMORY", "UID_BASE", "UID_SPAN", "Gate", "Limits",
    "Result", "Turns", "_process_id",
    "bwrap_problem", "cgroups", "fallback_folder", "fallback_problem", "python", "run",
    "sandbox_ids", "seccomp_filter", "software", "sweep_mirrors",
]

TAG_VAR = "EDU_DL_SANDBOX_TAG"  # marks every process of one sandbox (fallback cleanup)
GROUP_VAR = "EDU_DL_SANDBOX_GROUP"


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
    for path in [Path(bwrap.python()).resolve(), *bwrap.software(),
                 Path(tempfile.gettempdir()).resolve()]:
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


def run(
    argv: Sequence[str], *, limits: Limits, env: Mapping[str, str] | None = None,
    cwd: str = "/tmp", files: Mapping[str, bytes] = {}, tmpfs: Sequence[tuple[str, int]] = (),
    hide: Iterable[Path] = (), output_limit: int = 0, log_bytes: int = 20_000,
    fallback_dir: Path | None = None, poll_s: float = 0.1, require_bwrap: bool = False,
    gate: Gate | None = None,
) -> Result:
    """Run argv sandboxed; kill the whole tree on wall time, memory or process count.

    ``files`` (path inside -> bytes) are shown read-only inside. The sandbox may write up to
    ``output_limit`` bytes to the descriptor named by ``$EDU_DL_RESULT_FD`` (a pipe); they come
    back as ``Result.output``. Without bwrap (``bwrap_problem()`` says why; the callers' settings
    decide whether that may run at all) the command runs with the rlimits alone, never as root:
    as root as a leased uid that is given ``fallback_dir`` (a fresh private folder, see
    ``fallback_folder``: ``files`` are written into it), else as the caller; and
    ``Result.isolated`` is False. ``require_bwrap`` skips that check (the probe itself).
    ``gate``: the sandbox starts at once, and the descriptor ``$EDU_DL_GATE_FD`` names gets one
    byte when its ticket's turn comes and a slot is free (the runner waits for it before the
    first cell); its wall time counts from then (``Result.gate_s``: the time before).
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
        gate_w = -1
        if gate is not None:  # the read end is the sandbox's; the write end stays here
            gate_r, gate_w = os.pipe()
            fds.fds.append(gate_r)
        drain = _Drain(out_r, output_limit, log_r, log_bytes)  # owns the read ends
        try:
            env = {**(env or {}), TAG_VAR: tag, RESULT_FD_VAR: str(out_w),
                   **({GATE_FD_VAR: str(gate_r)} if gate is not None else {})}
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
                   tmp, tag=tag, isolated=not problem, poll_s=poll_s,
                   gate=(gate, gate_w) if gate is not None else None)
        finally:
            fds.close()  # the write ends too: the pipes end when the sandbox's copies do
            if gate_w >= 0:  # closed here alone: unopened, the runner reads its end and stops
                os.close(gate_w)
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


# The probe of bwrap_problem runs through this package's own run, whatever replaces ``run`` later
# (a test that stands in for the sandbox sees only the runs it asked for).
_probe = run
