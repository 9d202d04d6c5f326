"""The sandbox's two pipes, drained to their caps.

What it can write: its tmpfs mounts (each of a bounded size) and two pipes, nothing on the host.
The result goes to the descriptor in ``RESULT_FD_VAR``, stdout and stderr to another; a thread
here drains both, keeps at most ``output_limit + 1`` bytes of the result and the tail of the log,
and closes a pipe once it has read its cap, so a flood costs the grader nothing.
"""

from __future__ import annotations

import os
import select
import threading

from edu_dl.grading.sandbox.limits import MB, Result

LOG_CAP = 64 * MB  # log bytes read before the pipe is closed: a flood costs the grader nothing


class _Drain:
    """A thread that reads the sandbox's two pipes: the result (at most ``limit`` + 1 bytes: one
    more says it was over) and the log (its tail, and nothing after LOG_CAP bytes). A pipe is
    closed once its cap is read, so that the writer's next write fails with EPIPE: a flood
    costs the grader neither memory nor time."""

    def __init__(self, output_fd: int, limit: int, log_fd: int, log_bytes: int) -> None:
        self.output, self.limit = bytearray(), limit
        self.log, self.log_bytes, self.log_total = bytearray(), log_bytes, 0
        self._open = {output_fd: self._output, log_fd: self._log}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-pipes", daemon=True)
        self._thread.start()

    def _output(self, data: bytes) -> bool:
        self.output += data[: self.limit + 1 - len(self.output)]
        return len(self.output) <= self.limit

    def _log(self, data: bytes) -> bool:
        self.log_total += len(data)
        self.log += data
        if len(self.log) > 2 * self.log_bytes:
            del self.log[: -self.log_bytes]
        return self.log_total < LOG_CAP

    def _loop(self) -> None:
        poller = select.poll()
        for fd in self._open:
            poller.register(fd, select.POLLIN)
        while self._open and not self._stop.is_set():
            for fd, _ in poller.poll(100):
                try:
                    data = os.read(fd, 1 << 16)
                except OSError:
                    data = b""
                if not data or not self._open[fd](data):  # the end, or its cap
                    poller.unregister(fd)
                    os.close(fd)
                    del self._open[fd]
        for fd in self._open:  # stopped: writers that outlived the sandbox get EPIPE
            os.close(fd)

    def finish(self, result: Result, timeout_s: float = 5.0) -> None:
        """Wait for both pipes to end (every writer gone), at most ``timeout_s``; fill result."""
        self._thread.join(timeout_s)
        self._stop.set()
        self._thread.join()
        result.output_size = len(self.output)
        result.output = bytes(self.output[: self.limit])
        text = self.log[-self.log_bytes:].decode("utf-8", "replace")
        result.log = ("[... log cut ...]\n" if self.log_total > self.log_bytes else "") + text
        if self.log_total >= LOG_CAP:
            result.notes.append(f"it wrote over {LOG_CAP // MB} MB to stdout/stderr; the rest "
                                "was not read")
