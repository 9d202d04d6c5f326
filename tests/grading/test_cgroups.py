"""Per-sandbox cgroups against fake cgroupfs trees (files made here): cgroup v2, which these
machines do not run, and v1's nesting below the grader's own groups. The real v1 hierarchy is
used, as root, by tests/grading/test_sandbox.py and tests/grading/hostile/test_memory.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from edu_dl.grading.sandbox import cgroups

MB = 1 << 20
NAME = f"{cgroups.PREFIX}test"


def fake_v2(tmp_path: Path, own: str = "/system.slice/grader.service",
            controllers: str = "cpuset cpu io memory pids", procs: str = "4242\n",
            subtree: str = "") -> tuple[Path, Path, Path]:
    """A v2 tree: the root and the grader's own group (holding ``procs``), /proc/self/cgroup."""
    root = tmp_path / "cgroup"
    base = root / own.lstrip("/")
    base.mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.controllers").write_text(controllers + "\n")
    (base / "cgroup.subtree_control").write_text(subtree + "\n")
    (base / "cgroup.procs").write_text(procs)
    proc_self = tmp_path / "proc-self-cgroup"
    proc_self.write_text(f"0::{own}\n")
    return root, base, proc_self


def test_v2_the_grader_moves_into_a_leaf_then_delegates_memory_and_pids(tmp_path: Path) -> None:
    """The grader's group holds processes, so v2 lets none of its children have controllers:
    the grader moves itself into a leaf, enables +memory +pids, and the sandbox's group (its
    limits, swap off, one OOM kill for the whole group) is made beside the leaf."""
    root, base, proc_self = fake_v2(tmp_path, procs=f"{os.getpid()}\n")
    group = cgroups.create(NAME, 640 * MB, 520, root=root, proc_self=proc_self)
    assert group.version == 2 and group.accounting == "cgroup v2", group
    assert group.memory == group.pids == base / NAME
    leaf = base / f"{cgroups.LEAF_PREFIX}{os.getpid()}"
    assert (leaf / "cgroup.procs").read_text() == str(os.getpid())
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids"
    limits = {name: (base / NAME / name).read_text()
              for name in ("memory.max", "memory.swap.max", "memory.oom.group", "pids.max")}
    assert limits == {"memory.max": str(640 * MB), "memory.swap.max": "0",
                      "memory.oom.group": "1", "pids.max": "520"}
    group.enter(12345)
    assert (base / NAME / "cgroup.procs").read_text() == "12345"
    # Once moved, /proc/self/cgroup names the leaf: the next sandbox still goes beside it.
    proc_self.write_text(f"0::/system.slice/grader.service/{leaf.name}\n")
    again = cgroups.create(f"{NAME}2", MB, 10, root=root, proc_self=proc_self)
    assert again.memory == base / f"{NAME}2"


def test_v2_a_delegated_subtree_is_used_as_it_is(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root, base, proc_self = fake_v2(tmp_path)
    delegated = root / "user.slice" / "grading"
    delegated.mkdir(parents=True)
    (delegated / "cgroup.subtree_control").write_text("memory pids\n")  # as the kernel shows it
    (delegated / "cgroup.procs").write_text("")
    monkeypatch.setenv(cgroups.DELEGATE_VAR, str(delegated))
    group = cgroups.create(NAME, 64 * MB, 10, root=root, proc_self=proc_self)
    assert group.memory == delegated / NAME, group
    assert not any(p.name.startswith(cgroups.LEAF_PREFIX) for p in base.iterdir())  # no move


@pytest.mark.parametrize(("controllers", "why"), [
    ("cpu io pids", "lacks the memory controller"),
    ("cpu io", "lacks the memory and pids controller"),
])
def test_v2_without_the_controllers_no_group_and_a_reason(tmp_path: Path, controllers: str,
                                                          why: str) -> None:
    root, base, proc_self = fake_v2(tmp_path, controllers=controllers)
    group = cgroups.create(NAME, 64 * MB, 10, root=root, proc_self=proc_self)
    assert group.memory is None and group.accounting == "watchdog"
    assert why in group.why, group.why
    assert not (base / NAME).exists()


def test_v2_a_refused_delegation_says_what_to_do(tmp_path: Path) -> None:
    root, base, proc_self = fake_v2(tmp_path)
    (base / "cgroup.subtree_control").unlink()
    (base / "cgroup.subtree_control").mkdir()  # any write fails, as EBUSY would
    group = cgroups.create(NAME, 64 * MB, 10, root=root, proc_self=proc_self)
    assert group.memory is None and cgroups.DELEGATE_VAR in group.why, group.why


def test_off_makes_no_memory_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _, proc_self = fake_v2(tmp_path)
    monkeypatch.setenv(cgroups.DELEGATE_VAR, "off")
    group = cgroups.create(NAME, 64 * MB, 10, root=root, proc_self=proc_self)
    assert group.memory is None and group.why == f"{cgroups.DELEGATE_VAR}=off"


def test_v2_oom_kills_and_peak_are_read(tmp_path: Path) -> None:
    root, _, proc_self = fake_v2(tmp_path)
    group = cgroups.create(NAME, 64 * MB, 10, root=root, proc_self=proc_self)
    assert group.memory is not None and group.oom_kills() == 0
    (group.memory / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n"
                                                "oom_group_kill 1\n")
    (group.memory / "memory.peak").write_text(f"{60 * MB}\n")
    (group.memory / "memory.current").write_text(f"{10 * MB}\n")
    assert (group.oom_kills(), group.peak_bytes(), group.usage_bytes()) == (2, 60 * MB, 10 * MB)


def fake_v1(tmp_path: Path) -> tuple[Path, Path]:
    """v1: a hierarchy per controller; the grader in /grading/job7 (memory) and /jobs (pids)."""
    root = tmp_path / "cgroup"
    for folder in ("memory", "memory/grading/job7", "pids", "pids/jobs"):
        (root / folder).mkdir(parents=True)
        (root / folder / "cgroup.procs").write_text("")
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (root / "memory" / "grading" / "job7" / "memory.limit_in_bytes").write_text(f"{8 << 30}\n")
    proc_self = tmp_path / "proc-self-cgroup"
    proc_self.write_text("9:pids:/jobs\n4:memory:/grading/job7\n2:cpu,cpuacct:/\n0::/\n")
    return root, proc_self


def test_v1_groups_nest_below_the_graders_own_and_stale_ones_go(tmp_path: Path) -> None:
    """Not at the hierarchy's root, which would take a root grader's sandboxes out of the
    grader's own limits; leftovers of killed runs are removed once old, never while new."""
    root, proc_self = fake_v1(tmp_path)
    own = root / "memory" / "grading" / "job7"
    old, new = own / f"{cgroups.PREFIX}old", own / f"{cgroups.PREFIX}new"
    old.mkdir()
    new.mkdir()
    os.utime(old, (time.time() - 2 * cgroups.STALE_S,) * 2)
    group = cgroups.create(NAME, 320 * MB, 72, root=root, proc_self=proc_self)
    assert group.version == 1 and group.accounting == "cgroup v1"
    assert group.memory == own / NAME and group.pids == root / "pids" / "jobs" / NAME
    written = {name: (own / NAME / name).read_text() for name in (
        "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.swappiness")}
    assert written == {"memory.limit_in_bytes": str(320 * MB),
                       "memory.memsw.limit_in_bytes": str(320 * MB), "memory.swappiness": "0"}
    assert (group.pids / "pids.max").read_text() == "72"
    assert not old.exists() and new.exists()
    (own / NAME / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n"
                                                   "oom_kill 3\n")
    (own / NAME / "memory.max_usage_in_bytes").write_text(f"{320 * MB}\n")
    assert group.oom_kills() == 3 and group.peak_bytes() == 320 * MB
