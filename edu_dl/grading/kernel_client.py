"""The runner's end of its kernel (``kernel.py``): the process, the pipes, the frames.

Loaded by the runner as a file beside it (``runner._sibling``), so that it needs nothing of the
package. Everything read here was written by the student's process and is read as such: frames
within :data:`MAX_FRAME`, outputs within the runner's cap, anything malformed dropped or taken
for a dead kernel, never for a crash of the runner.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

FLOOD = 16  # a cell printing more than FLOOD x the output cap is interrupted
KERNEL = Path(__file__).with_name("kernel.py")  # the student's side, run as a file
MAX_FRAME = 64 << 20  # bytes of one frame from the kernel: kernel.MAX_FRAME
AFTER_INTERRUPT = 4.0  # seconds the interrupted cell gets to show its KeyboardInterrupt
HEADER_SIZE = 5  # kernel.HEADER: one byte of kind, four of length


class KernelDied(Exception):
    """The kernel process ended (os._exit, a crash, a kill) or broke the frames' protocol."""


class Kernel:
    """The kernel (kernel.py: IPython's shell) as this process's child, in a session of its own,
    and the pipes to it: the commands, its frames, and its descriptors 1 and 2.

    Everything read here was written by the student's process: frames are read within
    :data:`MAX_FRAME`, outputs within ``output_cap`` bytes in all (over FLOOD times that in one
    cell, the cell is interrupted), and a frame that breaks the protocol ends the kernel."""

    def __init__(self, cwd: Path, output_cap: int, env: dict[str, str]) -> None:
        import selectors
        import subprocess

        commands, self.commands = os.pipe()
        self.events, events = os.pipe()
        out, out_w = os.pipe()
        err, err_w = os.pipe()
        try:
            # A session of its own, as jupyter_client starts kernels: an interrupt goes to the
            # process group, the cell's subprocesses included.
            self.process = subprocess.Popen(
                [sys.executable, "-P", str(KERNEL), str(commands), str(events)],
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w, pass_fds=(commands, events),
                cwd=cwd, env=env, start_new_session=True)
        finally:
            for fd in (commands, events, out_w, err_w):
                os.close(fd)
        self.selector = selectors.DefaultSelector()
        os.set_blocking(self.commands, False)  # send() never waits on a kernel that is stuck
        for fd, name in ((self.events, "frames"), (out, "stdout"), (err, "stderr")):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, name)
        self.open = 3  # pipes not at their end
        self.pending = bytearray()  # frame bytes not yet whole
        # UTF-8 of each stream, read in pieces: from the descriptors, and from the frames
        # (kernel.py cuts a long text into frames of whole bytes, not whole characters)
        self.decoders = {name: _decoder() for name in ("stdout", "stderr")}
        self.framed = {name: _decoder() for name in ("stdout", "stderr")}
        self.output_cap, self.output_bytes, self.output_cut = output_cap, 0, False
        self.cell: dict[str, Any] | None = None  # the cell whose outputs come in
        self.cell_bytes, self.flooded, self.cell_stderr = 0, False, False
        self.error_over_cap = False  # this cell kept an error over the cap: no more
        self.clear_next = False  # clear_output(wait=True): before the next output
        self.displays: dict[str, list[dict[str, Any]]] = {}  # display_id -> its outputs
        self.done: dict[str, Any] | None = None  # the last "done" frame
        self.ready = False
        self.ids = 0

    # ----------------------------------------------------------------------- the process
    def alive(self) -> bool:
        return self.process.poll() is None

    def interrupt(self) -> None:
        """SIGINT to the kernel's process group (as jupyter_client interrupts a kernel)."""
        try:
            os.killpg(self.process.pid, signal.SIGINT)
        except OSError:
            try:
                os.kill(self.process.pid, signal.SIGINT)
            except OSError:
                pass

    def stop(self) -> None:
        """Kill it at once: every output is in, and an exit would only tear modules down."""
        for fd in (self.commands,):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.process.kill()
            self.process.wait(timeout=5)
        except Exception:
            pass

    # ----------------------------------------------------------------------- reading
    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} s")
            self.pump(min(left, 1.0))

    def pump(self, timeout: float) -> None:
        """Read whatever the kernel writes within ``timeout`` seconds (at most) and handle it.
        KernelDied once the kernel has ended and everything it wrote is read."""
        ready = self.selector.select(max(timeout, 0.0)) if self.open else []
        for key, _ in ready:
            self._read(key.fd, key.data)
        if not ready and (not self.open or not self.alive()):
            self.drain()
            raise KernelDied("the kernel died (os._exit, a crash or a kill)")

    def drain(self) -> None:
        """What the kernel's descriptors 1 and 2 hold now (written before its last frame)."""
        for key in list(self.selector.get_map().values()):
            if key.data != "frames":
                self._read(key.fd, key.data)

    def _read(self, fd: int, name: str) -> None:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.selector.unregister(fd)
            os.close(fd)
            self.open -= 1
            if name != "frames":
                self._stream(name, self.decoders[name].decode(b"", final=True), 0)
            return
        if name == "frames":
            self.pending += chunk
            self._frames()
        else:
            self._stream(name, self.decoders[name].decode(chunk), len(chunk))

    def _frames(self) -> None:
        data, at = self.pending, 0
        while len(data) - at >= HEADER_SIZE:
            kind, size = data[at:at + 1], int.from_bytes(data[at + 1:at + HEADER_SIZE], "big")
            if kind not in (b"o", b"e", b"j") or size > MAX_FRAME:  # kernel.py sends neither
                self.stop()
                raise KernelDied(f"the kernel broke the runner's protocol (a frame of kind "
                                 f"{bytes(kind)!r} and {size} bytes)")
            if len(data) - at < HEADER_SIZE + size:
                break
            payload = bytes(data[at + HEADER_SIZE:at + HEADER_SIZE + size])
            at += HEADER_SIZE + size
            if kind == b"j":
                self._message(payload)
            else:
                name = "stdout" if kind == b"o" else "stderr"
                self._stream(name, self.framed[name].decode(payload), size)
        del data[:at]

    def _message(self, payload: bytes) -> None:
        try:
            message = json.loads(payload)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
            return  # the student's to break: nothing of it is kept
        if not isinstance(message, dict):
            return
        if message.get("ready") is True:
            self.ready = True
        elif "done" in message:
            self.drain()  # what the cell's C code and children wrote: before its end
            self.done = message
        elif isinstance(message.get("error"), dict):
            error = message["error"]
            self._output({"output_type": "error", "ename": _str(error.get("ename")),
                          "evalue": _str(error.get("evalue")),
                          "traceback": [_str(t) for t in _list(error.get("traceback"))]},
                         len(payload))
        elif isinstance(message.get("result"), dict):
            result = message["result"]
            count = result.get("execution_count")
            self._output({"output_type": "execute_result", "data": _dict(result.get("data")),
                          "metadata": _dict(result.get("metadata")),
                          "execution_count": count if isinstance(count, int) else None},
                         len(payload))
        elif isinstance(message.get("display"), dict):
            self._display(message["display"], len(payload))
        elif "clear" in message and self.cell is not None:
            if message["clear"]:
                self.clear_next = True
            else:
                self.cell["outputs"] = []

    def _display(self, display: dict[str, Any], size: int) -> None:
        """display_data, or an update of an earlier one with its display_id (as nbclient)."""
        data, metadata = _dict(display.get("data")), _dict(display.get("metadata"))
        display_id = _dict(display.get("transient")).get("display_id")
        if display.get("update"):
            if isinstance(display_id, str) and self.cell is not None and self._count(size):
                for earlier in self.displays.get(display_id, []):
                    earlier.update(data=data, metadata=metadata)
            return
        output = {"output_type": "display_data", "data": data, "metadata": metadata}
        if self._output(output, size) and isinstance(display_id, str):
            for earlier in self.displays.get(display_id, []):
                earlier.update(data=data, metadata=metadata)
            self.displays.setdefault(display_id, []).append(output)

    def _stream(self, name: str, text: str, size: int) -> None:
        if self.cell is None or not text:
            return  # before the first cell, or between cells: no cell's output
        if name == "stderr":
            self.cell_stderr = True  # recorded even when the output itself is dropped
        outputs = self.cell["outputs"]
        if not self.clear_next and outputs and outputs[-1].get("output_type") == "stream" \
                and outputs[-1].get("name") == name:
            if self._count(size):
                outputs[-1]["text"].append(text)  # joined when the cell ends (run)
            return
        self._output({"output_type": "stream", "name": name, "text": [text]}, size)

    def _count(self, size: int) -> bool:
        """Count ``size`` bytes of output; whether they are kept (within the cap)."""
        self.output_bytes += size
        self.cell_bytes += size
        if self.output_bytes <= self.output_cap:
            return True
        self.output_cut = True
        if self.cell_bytes > FLOOD * self.output_cap and not self.flooded:
            self.flooded = True  # stop the flood at its source: interrupt the kernel
            self.interrupt()
        return False

    def _output(self, output: dict[str, Any], size: int) -> bool:
        """Add ``output`` to the running cell's, within the cap; over it, the cell's first error
        still (it says what went wrong), and no more: errors too can be sent in a loop."""
        if self.cell is None:
            return False
        if not self._count(size) and (output["output_type"] != "error" or self.error_over_cap):
            return False
        if output["output_type"] == "error" and self.output_bytes > self.output_cap:
            self.error_over_cap = True
        if self.clear_next:
            self.cell["outputs"], self.clear_next = [], False
        self.cell["outputs"].append(output)
        return True

    # ----------------------------------------------------------------------- running
    def send(self, code: str, deadline: float, *, silent: bool = False) -> int:
        """Ask the kernel to run ``code``; its id. KernelDied where the kernel is gone."""
        self.ids += 1
        line = memoryview(json.dumps({"id": self.ids, "code": code, "silent": silent,
                                      "history": not silent}).encode() + b"\n")
        import select

        while line:
            try:
                line = line[os.write(self.commands, line):]
            except BlockingIOError:
                pass
            except OSError:  # the kernel closed its end: it is gone
                raise KernelDied("the kernel closed its commands' pipe") from None
            if line:  # the pipe is full: the kernel reads while nothing of its cell runs
                select.select([], [self.commands], [], 0.1)
                self.pump(0)
                if time.monotonic() > deadline:
                    return self.ids
        return self.ids

    def wait_done(self, ran: int, deadline: float) -> bool:
        """Read the kernel's frames until cell ``ran`` is done (True) or ``deadline`` (False)."""
        while self.done is None or self.done.get("done") != ran:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.pump(min(left, 1.0))
        return True

    def run(self, cell: dict[str, Any], timeout: float) -> bool:
        """Run a notebook cell, its outputs into ``cell``; False where it ran over ``timeout``
        seconds (it was then interrupted, and given AFTER_INTERRUPT seconds to end)."""
        self.cell, cell["outputs"], cell["execution_count"] = cell, [], None
        self.cell_bytes, self.flooded, self.cell_stderr, self.clear_next = 0, False, False, False
        self.error_over_cap = False
        try:
            deadline = time.monotonic() + timeout
            ran = self.send(source(cell), deadline)
            finished = self.wait_done(ran, deadline)
            if not finished:
                self.interrupt()
                self.wait_done(ran, time.monotonic() + AFTER_INTERRUPT)
            if self.done is not None and self.done.get("done") == ran and \
                    isinstance(self.done.get("execution_count"), int):
                cell["execution_count"] = self.done["execution_count"]
            return finished
        finally:
            self.cell = None
            for output in cell["outputs"]:
                if output.get("output_type") == "stream":
                    output["text"] = "".join(output["text"])

    def responsive(self, wait: float = 10.0) -> bool:
        """After an interrupt: does the kernel run a trivial cell within ``wait`` seconds?"""
        deadline = time.monotonic() + wait
        try:
            return self.wait_done(self.send("pass", deadline, silent=True), deadline)
        except KernelDied:
            return False


def _decoder() -> Any:
    import codecs

    return codecs.getincrementaldecoder("utf-8")("replace")


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def source(cell: dict[str, Any]) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)
