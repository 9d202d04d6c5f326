"""The sandbox itself against a process that tries to get out: identity, syscalls, sockets, paths.

Run as root and as an ordinary user (CI does both); nothing here may skip.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from fixtures.hostile.planted import Listener

from edu_dl.grading import sandbox

FAST = sandbox.Limits(wall_s=30, memory_mb=1024, processes=64, file_mb=8, tmp_mb=16)


def py(code: str, **kw: object) -> sandbox.Result:
    return sandbox.run([sandbox.python(), "-c", code], limits=FAST,
                       env={"PATH": "/usr/bin:/bin"}, **kw)  # type: ignore[arg-type]


def status_fields(log: str) -> dict[str, str]:
    return dict(line.split(":", 1) for line in log.splitlines() if ":" in line)


def test_no_root_no_capabilities_no_new_privileges() -> None:
    done = py("print(open('/proc/self/status').read())")
    fields = {k: v.strip() for k, v in status_fields(done.log).items()}
    assert fields["CapEff"] == fields["CapPrm"] == fields["CapBnd"] == "0" * 16, fields
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", fields
    assert fields["Uid"].split() == [str(sandbox.INSIDE_UID)] * 4, fields
    # Seen from the host (the watchdog reads /proc here, not what the sandbox says):
    assert done.uids_seen == {done.uid}
    if os.geteuid() == 0:  # root's sandboxes run as a uid of their own, never 0
        assert done.uid >= sandbox.UID_BASE
    else:
        assert done.uid == os.getuid()


def _syscall_probe(names: tuple[str, ...] = sandbox.DENIED_SYSCALLS) -> str:
    """Calls each syscall with zero arguments; prints its name, result and errno."""
    import pyseccomp as seccomp

    numbers = {}
    for name in names:
        try:
            numbers[name] = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
        except Exception:
            continue
    return (f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"for name, nr in {numbers!r}.items():\n"
            "    ctypes.set_errno(0)\n"
            "    r = libc.syscall(nr, 0, 0, 0, 0, 0, 0)\n"
            "    print('call', name, r, ctypes.get_errno())\n")


def test_each_denied_syscall_fails_with_eperm() -> None:
    done = py(_syscall_probe())
    calls = {line.split()[1]: line.split()[2:] for line in done.log.splitlines()
             if line.startswith("call ")}
    assert len(calls) >= 30, done.log
    for required in ("mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
                     "ptrace", "keyctl", "bpf", "perf_event_open"):
        assert calls[required] == ["-1", "1"], (required, done.log)  # EPERM
    assert all(result == ["-1", "1"] for result in calls.values()), calls


def test_the_syscall_test_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """With an empty filter, keyctl answers with its own error, not EPERM: the probe sees it."""
    monkeypatch.setattr(sandbox.bwrap, "DENIED_SYSCALLS", ())
    sandbox.bwrap.seccomp_filter.cache_clear()
    try:
        done = py(_syscall_probe(("keyctl",)))
    finally:
        sandbox.bwrap.seccomp_filter.cache_clear()
    assert "call keyctl" in done.log and "call keyctl -1 1\n" not in done.log, done.log


def test_no_nested_namespaces_no_remount_no_umount() -> None:
    done = py("import subprocess\n"
              "for cmd in (['unshare', '-U', '-r', 'id'], ['unshare', '-m', 'true'],\n"
              "            ['umount', '-l', '/tmp'], ['mount', '-o', 'remount,rw', '/']):\n"
              "    r = subprocess.run(cmd, capture_output=True, text=True)\n"
              "    print('cmd', cmd[0], cmd[1], r.returncode)\n"
              "import os\n"
              "for path in ('/usr/x', '/etc/x', '/x', sys_prefix + '/x'):\n"
              "    try:\n"
              "        open(path, 'w'); print('WROTE', path)\n"
              "    except OSError as exc:\n"
              "        print('refused', path, exc.errno)\n".replace("sys_prefix",
                                                                 repr(sys.prefix)))
    commands = [line for line in done.log.splitlines() if line.startswith("cmd ")]
    assert len(commands) == 4 and all(not line.endswith(" 0") for line in commands), done.log
    assert "WROTE" not in done.log and done.log.count("refused") == 4, done.log


def test_host_unix_sockets_are_out_of_reach(tmp_path: Path) -> None:
    listeners = [Listener(f"/var/tmp/edu-dl-sock-{os.getpid()}"),
                 Listener(str(tmp_path / "sock")), Listener(f"\0edu-dl-test-{os.getpid()}")]
    try:
        addresses = [listener.path for listener in listeners]
        done = py("import socket\n"
                  f"for address in {addresses!r}:\n"
                  "    s = socket.socket(socket.AF_UNIX)\n"
                  "    try:\n"
                  "        s.connect(address); s.sendall(b'hello'); print('CONNECTED')\n"
                  "    except OSError as exc:\n"
                  "        print('refused', exc.errno)\n")
        assert done.log.count("refused") == 3 and "CONNECTED" not in done.log, done.log
        assert [listener.accepted for listener in listeners] == [0, 0, 0]
        # The control: from outside the sandbox each listener does answer.
        for listener in listeners:
            client = socket.socket(socket.AF_UNIX)
            client.connect(listener.path)
            client.close()
        import time

        deadline = time.monotonic() + 5
        while sum(listener.accepted for listener in listeners) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [listener.accepted for listener in listeners] == [1, 1, 1]
    finally:
        for listener in listeners:
            listener.close()


def test_nothing_inside_names_a_private_path(tmp_path: Path) -> None:
    private = tmp_path / "very-private-solutions"
    private.mkdir()
    done = py("import os\n"
              "for pid in os.listdir('/proc'):\n"
              "    if pid.isdigit():\n"
              "        print(open(f'/proc/{pid}/cmdline', 'rb').read())\n"
              "print(open('/proc/self/mountinfo').read())\n"
              "print(os.environ)\n",
              files={"/tmp/work/notebook.ipynb": b"{}"}, hide=[private])
    assert "very-private-solutions" not in done.log and str(tmp_path) not in done.log, done.log
    assert "--args" in done.log  # bwrap's own command line holds a descriptor, not the options


def test_root_tmpfs_is_read_only_and_tmp_is_bounded() -> None:
    done = py("import os\n"
              "for path in ('/newfile', '/work/newfile', '/tmp/ok'):\n"
              "    try:\n"
              "        open(path, 'w').write('x'); print('wrote', path)\n"
              "    except OSError as exc:\n"
              "        print('refused', path, exc.errno)\n")
    assert "refused /newfile 30" in done.log, done.log  # EROFS
    assert "wrote /tmp/ok" in done.log, done.log
