"""One memory cgroup and one pids cgroup per sandbox, children of the grader's OWN cgroups.

Why a memory cgroup: the kernel counts there what no process's resident size shows, and what
the watchdog therefore cannot see: SysV shared memory touched then detached, memfds, files on
the sandbox's tmpfs mounts, and the kernel memory of their inodes. Over the limit the kernel's
OOM killer acts inside the group alone, never on a neighbour graded beside it. Why children of the
grader's own groups: a sandbox must never leave the limits the grader itself runs under.

cgroup v1 (a hierarchy per controller under ``/sys/fs/cgroup/<controller>``; what these machines
and CI run): ``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes`` set to the same value
where swap is accounted (no swap) and ``memory.swappiness`` 0; ``pids.max``. OOM kills are
``oom_kill`` in ``memory.oom_control``, the peak is ``memory.max_usage_in_bytes``. On the kernel
tried (6.18) SysV shm, memfds, tmpfs pages and the slab of empty tmpfs files are all charged to
the group (tests/grading/hostile/test_memory.py shows each being stopped).

cgroup v2 (one hierarchy): ``memory.max``, ``memory.swap.max`` 0, ``memory.oom.group`` 1 (an OOM
kill takes the whole sandbox) and ``pids.max``, in a child of the grader's cgroup, or of the
folder ``$EDU_DL_SANDBOX_CGROUP`` names (a subtree delegated to the grader, e.g. by
``systemd-run --scope -p Delegate=yes``). v2 lets a cgroup hand controllers to children only while
it holds no process itself, so where the grader's cgroup holds processes the grader first moves
itself into a leaf child (``edu_dl_grader_<pid>``); if other processes remain, no group is made
and the note says to delegate a subtree. OOM kills are ``oom_kill`` in ``memory.events``, the
peak is ``memory.peak``.

``EDU_DL_SANDBOX_CGROUP=off`` makes none (the watchdog's fallback, for tests and comparisons).
Where none can be made (an ordinary user on v1, v2 without delegation), the sandbox falls back to
its watchdog's count (``watchdog``) and a stricter seccomp filter (``bwrap``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PROC_SELF = Path("/proc/self/cgroup")
PREFIX = "edu_dl_sandbox_"  # a sandbox's group
LEAF_PREFIX = "edu_dl_grader_"  # cgroup v2: the leaf a grader moves itself into
DELEGATE_VAR = "EDU_DL_SANDBOX_CGROUP"  # "off", or the folder of a delegated cgroup v2 subtree
STALE_S = 600.0  # a sandbox's group older than this and empty is left over: removed


@dataclass
class Group:
    """The cgroups of one sandbox: memory (None: none could be made) and pids."""

    version: int = 0  # 1 or 2; 0 when neither group exists
    memory: Path | None = None
    pids: Path | None = None
    why: str = ""  # why there is no memory group ("" when there is one)
    notes: list[str] = field(default_factory=list)

    @property
    def accounting(self) -> str:
        """How the sandbox's memory is counted: "cgroup v1", "cgroup v2" or "watchdog"."""
        return f"cgroup v{self.version}" if self.memory is not None else "watchdog"

    def folders(self) -> list[Path]:
        return list(dict.fromkeys(p for p in (self.memory, self.pids) if p is not None))

    def enter(self, pid: int) -> None:
        """Move ``pid`` into the groups (in the child, before it runs anything)."""
        for folder in self.folders():
            (folder / "cgroup.procs").write_text(str(pid))

    def processes(self) -> list[int] | None:
        """The pids in the group (its cgroup.procs), sorted; None where there is no group or
        it cannot be read. Every process of the sandbox is there: its first joined before it
        ran anything, and the others cannot leave."""
        folders = self.folders()
        if not folders:
            return None
        try:
            return sorted(int(pid) for pid in (folders[0] / "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer took in the memory group."""
        if self.memory is None:
            return 0
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        return _field(self.memory / name, "oom_kill")

    def fork_refusals(self) -> int:
        """How many forks the pids group refused (pids.events' "max"): a tree that met its
        cap, whether or not the watchdog saw it there."""
        if self.pids is None:
            return 0
        return _field(self.pids / "pids.events", "max")

    def usage_bytes(self) -> int:
        if self.memory is None:
            return 0
        return _number(self.memory / ("memory.usage_in_bytes" if self.version == 1
                                      else "memory.current"))

    def peak_bytes(self) -> int:
        """The memory group's peak (0 where the kernel does not keep it: v2 before 5.19)."""
        if self.memory is None:
            return 0
        return _number(self.memory / ("memory.max_usage_in_bytes" if self.version == 1
                                      else "memory.peak"))

    def remove(self, tries: int = 250) -> None:
        for folder in self.folders():
            remove(folder, tries)


def create(name: str, memory_bytes: int, max_tasks: int, *, root: Path = ROOT,
           proc_self: Path = PROC_SELF) -> Group:
    """New groups for one sandbox (``name`` starts with PREFIX), as many as can be made here."""
    setting = os.environ.get(DELEGATE_VAR, "")
    own = _own_paths(proc_self)
    if (root / "cgroup.controllers").exists():  # cgroup v2 mounted at the root
        if setting == "off":
            return Group(why=f"{DELEGATE_VAR}=off")
        base = Path(setting) if setting else _v2_base(root, own.get("", "/"))
        return _create_v2(base, name, memory_bytes, max_tasks)
    group = Group(version=1)
    pids_base = _v1_base(root, "pids", own)
    if pids_base is not None:
        group.pids = _make(pids_base / name, {"pids.max": max_tasks}, group.notes)
    memory_base = _v1_base(root, "memory", own)
    if setting == "off":
        group.why = f"{DELEGATE_VAR}=off"
    elif memory_base is None or not (memory_base / "memory.limit_in_bytes").exists():
        group.why = "no cgroup v1 memory hierarchy here"
    else:
        group.memory = _make(memory_base / name, {"memory.limit_in_bytes": memory_bytes},
                             group.notes, optional={"memory.memsw.limit_in_bytes": memory_bytes,
                                                    "memory.swappiness": 0})
        if group.memory is None:
            group.why = group.notes[-1] if group.notes else "the memory group was refused"
    if group.pids is None and group.memory is None:
        group.version = 0
    return group


def _own_paths(proc_self: Path) -> dict[str, str]:
    """Controller -> this process's cgroup path ("" -> the v2 path), from /proc/self/cgroup."""
    own: dict[str, str] = {}
    try:
        text = proc_self.read_text()
    except OSError:
        return own
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                own[controller] = parts[2]
    return own


def _v1_base(root: Path, controller: str, own: dict[str, str]) -> Path | None:
    hierarchy = root / controller
    if controller not in own or not (hierarchy / "cgroup.procs").exists():
        return None
    return hierarchy / own[controller].lstrip("/")


def _v2_base(root: Path, own: str) -> Path:
    """The grader's own v2 cgroup; the parent of its leaf once it has moved into one."""
    base = root / own.lstrip("/")
    return base.parent if base.name == f"{LEAF_PREFIX}{os.getpid()}" else base


def _create_v2(base: Path, name: str, memory_bytes: int, max_tasks: int) -> Group:
    problem = _delegate(base)
    if problem:
        return Group(why=problem)
    notes: list[str] = []
    folder = _make(base / name, {"memory.max": memory_bytes, "pids.max": max_tasks}, notes,
                   optional={"memory.swap.max": 0, "memory.oom.group": 1})
    if folder is None:
        return Group(why=notes[-1] if notes else "the cgroup was refused", notes=notes)
    return Group(version=2, memory=folder, pids=folder, notes=notes)


def _delegate(base: Path) -> str:
    """'' once ``base`` hands the memory and pids controllers to its children, else why not."""
    wanted = {"memory", "pids"}
    try:
        if wanted <= set((base / "cgroup.subtree_control").read_text().split()):
            return ""
        missing = wanted - set((base / "cgroup.controllers").read_text().split())
        if missing:
            return f"cgroup v2: {base} lacks the {' and '.join(sorted(missing))} controller"
        if (base / "cgroup.procs").read_text().split():  # v2: no process beside child groups
            leaf = base / f"{LEAF_PREFIX}{os.getpid()}"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
        (base / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError as exc:
        return (f"cgroup v2: cannot enable memory and pids below {base} ({exc.strerror}); "
                f"other processes may share the grader's cgroup: give the grader a delegated "
                f"subtree of its own and name it in {DELEGATE_VAR}")
    return ""


def _make(folder: Path, values: dict[str, int], notes: list[str],
          optional: dict[str, int] | None = None) -> Path | None:
    """mkdir a group and write its limits; None (and a note) where that is refused."""
    remove_stale(folder.parent)
    try:
        folder.mkdir()
    except OSError as exc:
        notes.append(f"cannot make {folder} ({exc.strerror})")
        return None
    try:
        for key, value in values.items():
            (folder / key).write_text(str(value))
    except OSError as exc:
        notes.append(f"cannot set {key} in {folder} ({exc.strerror})")
        remove(folder)
        return None
    for key, value in (optional or {}).items():  # absent where the kernel lacks it (swap)
        try:
            (folder / key).write_text(str(value))
        except OSError as exc:
            notes.append(f"cannot set {key} ({exc.strerror})")
    return folder


def remove_stale(base: Path) -> None:
    """Remove the groups that runs left (their tasks died slowly, or the grader was killed) and
    the leaves of graders that are gone. Only old ones: a new one may await its first task."""
    now = time.time()
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for path in entries:
        try:
            if path.name.startswith(PREFIX) and now - path.stat().st_mtime > STALE_S:
                path.rmdir()  # refused while any task is left in it
            elif path.name.startswith(LEAF_PREFIX) and not _alive(path.name[len(LEAF_PREFIX):]):
                path.rmdir()
        except OSError:
            continue


def remove(folder: Path, tries: int = 250) -> None:
    """rmdir a group once its last task is gone (the kernel refuses while any is left; the tasks
    of a killed PID namespace can take a moment to go)."""
    for _ in range(tries):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _alive(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def _number(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _field(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == key:
                return int(words[1])
    except (OSError, ValueError):
        pass
    return 0
