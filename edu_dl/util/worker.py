"""One way to run a measurement in a fresh Python process: ``Worker`` and ``run_in_worker``.

Why a process of its own: each framework brings its own BLAS/OpenMP thread pools and its own CUDA
and cuDNN libraries, which fight or clash inside one process; a library that crashes or hangs
becomes a reported error instead of taking the command down; and a timing then measures the code
with its own caches, pools and GPU context.

The protocol, in full. The parent starts ``python -m edu_dl.util.worker`` and writes one request
per line on its stdin: ``{"call": "module:function", "kwargs": {...}}``. The worker imports the
function, calls it and answers on a private copy of its stdout, every line marked: one
``{"item": ...}`` per value a generator function yields, then ``{"result": ...}`` or
``{"error": "Type: message"}``. Whatever a library prints goes to stderr, which the parent keeps
in a temporary file (a pipe could fill up and block the worker) and quotes the tail of when the
worker dies. Every answer has a deadline: past it the worker is killed and the call raises
``WorkerError``. The worker exits when its stdin closes.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

MARK = "EDU_DL_WORKER "
DEFAULT_TIMEOUT_S = 600.0
# Tells a worker how many threads --threads asked for (TensorFlow ignores OMP_NUM_THREADS).
THREADS_ENV = "EDU_DL_BENCH_THREADS"
ROOT = Path(__file__).resolve().parents[2]  # the folder holding the edu_dl package


class WorkerError(RuntimeError):
    """A call raised (kind "error"), the worker died ("died") or ran past its time ("timeout")."""

    def __init__(self, message: str, kind: str = "error", returncode: int | None = None,
                 tail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.returncode = returncode  # the dead worker's exit status
        self.tail = tail  # the last lines of its stderr


def thread_env(threads: int) -> dict[str, str]:
    """Environment that caps OpenBLAS, MKL, OpenMP (PyTorch) and TensorFlow at ``threads``."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", THREADS_ENV)
    return dict.fromkeys(names, str(threads))


class Worker:
    """The parent's handle on one worker process; ``send`` a call, then ``receive`` its answer."""

    def __init__(self, name: str, *, threads: int | None = None,
                 env: Mapping[str, str] | None = None, pythonpath: Sequence[str] = (),
                 argv: Sequence[str] | None = None) -> None:
        self.name = name
        self.started = time.monotonic()
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self._timed_out: float | None = None
        full = dict(os.environ)
        full.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        if threads:
            full.update(thread_env(threads))
        full.update(env or {})
        path = [str(ROOT), *pythonpath, full.get("PYTHONPATH", "")]
        full["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in path if p))
        cmd = list(argv) if argv else [sys.executable, "-m", "edu_dl.util.worker"]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True, bufsize=1, env=full)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, call: str, /, **kwargs: Any) -> None:
        """Ask for ``call`` ('module:function') with ``kwargs``; the answer comes by ``receive``."""
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"call": call, "kwargs": kwargs}) + "\n")
            self._proc.stdin.flush()
        except OSError:  # it died already: receive() says how
            pass

    def stream(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Iterator[Any]:
        """The items of the call sent last, as they come; ends at its result."""
        for kind, value in self._replies(timeout_s):
            if kind == "item":
                yield value
            else:
                return

    def receive(self, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Any:
        """The result of the call sent last (any items are passed over)."""
        for kind, value in self._replies(timeout_s):
            if kind == "result":
                return value
        raise AssertionError("unreachable: _replies ends with a result or raises")

    def call(self, call: str, /, timeout_s: float | None = DEFAULT_TIMEOUT_S,
             **kwargs: Any) -> Any:
        self.send(call, **kwargs)
        return self.receive(timeout_s)

    def _replies(self, timeout_s: float | None) -> Iterator[tuple[str, Any]]:
        assert self._proc.stdout is not None
        watchdog = None
        if timeout_s is not None:
            watchdog = threading.Timer(max(0.0, timeout_s), self._kill_for_time, [timeout_s])
            watchdog.daemon = True
            watchdog.start()
        try:
            while True:
                line = self._proc.stdout.readline()
                if not line:
                    raise self._death()
                if not line.startswith(MARK):
                    continue  # not ours: a program that does not speak the protocol
                reply = json.loads(line[len(MARK):])
                if "error" in reply:
                    raise WorkerError(f"{self.name} worker: {reply['error']}")
                if "item" in reply:
                    yield "item", reply["item"]
                else:
                    yield "result", reply.get("result")
                    return
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def _kill_for_time(self, timeout_s: float) -> None:
        self._timed_out = timeout_s
        self._proc.kill()

    def _death(self) -> WorkerError:
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # stdout closed but still running: stop it
            self._proc.kill()
            code = self._proc.wait()
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()[-5:]
        tail = " | ".join(lines) or "no output"
        if self._timed_out is not None:
            return WorkerError(f"{self.name} worker ran past {self._timed_out:g} s and was "
                               "killed", "timeout", code, tail)
        return WorkerError(f"{self.name} worker exited with code {code} without an answer: "
                           + tail, "died", code, tail)

    def close(self) -> None:
        """Close its stdin (the worker exits), wait a little, then kill."""
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except OSError:
                    pass
        self._stderr.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_in_worker(call: str, /, *, name: str | None = None,
                  timeout_s: float | None = DEFAULT_TIMEOUT_S, threads: int | None = None,
                  env: Mapping[str, str] | None = None, pythonpath: Sequence[str] = (),
                  **kwargs: Any) -> Any:
    """``call(**kwargs)`` in a fresh worker process; its result, or a WorkerError."""
    with Worker(name or call, threads=threads, env=env, pythonpath=pythonpath) as worker:
        return worker.call(call, timeout_s, **kwargs)


# --------------------------------------------------------------------------- the worker side


def resolve(call: str) -> Any:
    """The object named 'package.module:qualname'."""
    module, _, qualname = call.partition(":")
    if not qualname:
        raise ValueError(f"expected 'module:function', got {call!r}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def main() -> int:
    """Serve calls from stdin until it closes."""
    # The answers get a private copy of stdout; whatever a library prints goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(reply: dict[str, Any]) -> None:
        protocol.write(MARK + json.dumps(reply) + "\n")

    for line in sys.stdin:
        try:
            request = json.loads(line)
            value = resolve(request["call"])(**request.get("kwargs", {}))
            if inspect.isgenerator(value):
                for item in value:
                    answer({"item": item})
                value = None
            answer({"result": value})
        except Exception as exc:  # reported to the parent, which decides
            answer({"error": f"{type(exc).__name__}: {exc}"})
    protocol.flush()
    return 0


if __name__ == "__main__":
    code = main()
    # Every answer is written: skip the interpreter's teardown, which frees each module's objects
    # one by one. With TensorFlow loaded it cost 1.8 s of CPU per worker, with torch 0.4 s
    # (2026-12-05, 2 cores), on every benchmark's and the doctor's every framework worker.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
