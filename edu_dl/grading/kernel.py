"""The student's side of a grading run: an IPython shell that runs the cells its runner sends.

``python -P kernel.py COMMANDS_FD EVENTS_FD``, started by ``edu_dl.grading.runner`` inside the
sandbox, as its child. It is what ipykernel is to nbclient, less the network: IPython's own
``InteractiveShell`` runs each cell (magics, displays, tracebacks, execution counts, top-level
``await``), and everything a cell shows comes back as frames on one pipe. No ZeroMQ, no Tornado,
no Jupyter client or server: ipykernel and nbclient cost 0.3 s of CPU per notebook run, more than
half of what a trivial notebook's sandbox costs (2026-12-05), and grading starts one per notebook.

A frame is one byte of kind, four of length (big-endian), then the payload:

- ``o`` / ``e``: text the cell wrote to ``sys.stdout`` / ``sys.stderr`` (UTF-8);
- ``j``: a JSON object: ``{"ready": true}`` once, then per cell ``display`` (a display_data or
  update_display_data), ``result`` (execute_result), ``error``, ``clear``, and last ``done``.

What C code and child processes write to the descriptors 1 and 2 reaches the runner on pipes of
its own (as ipykernel captures it), and so does what a forked child writes to ``sys.stdout``: it
cannot share this process's frames. The runner reads all of it as the student's (every byte of it
is theirs to forge) and the grader trusts none of it. SIGINT interrupts a cell, as it does
ipykernel's: KeyboardInterrupt, shown as the cell's error.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import struct
import sys
import threading
from typing import Any

HEADER = struct.Struct(">cI")  # kind, payload length
STDOUT, STDERR, MESSAGE = b"o", b"e", b"j"
FLUSH_AT = 8192  # characters of a stream buffered before it is sent without a newline
FRAME_TEXT = 1 << 20  # bytes of stream text in one frame, however much one write() gave
MAX_FRAME = 64 << 20  # bytes of any frame: the runner takes a larger one for a broken kernel


class Channel:
    """The frames to the runner, and the kernel's SIGINT. A frame is written whole: an
    interrupt that arrives meanwhile is raised once the frame is out, never half way through;
    one that arrives between cells interrupts nothing, as in ipykernel."""

    def __init__(self, fd: int) -> None:
        self.fd, self.pid = fd, os.getpid()
        self.lock = threading.Lock()
        self.main = threading.main_thread().ident
        self.in_cell = False  # a cell runs: SIGINT raises KeyboardInterrupt in it
        self.sending = False  # the main thread is inside a frame
        self.interrupted = False  # a SIGINT came meanwhile

    def send(self, kind: bytes, payload: bytes) -> None:
        data = memoryview(HEADER.pack(kind, len(payload)) + payload)
        main = threading.get_ident() == self.main
        with self.lock:
            if main:
                self.sending = True
            try:
                while data:
                    data = data[os.write(self.fd, data):]
            finally:
                if main:
                    self.sending = False
        if main and self.interrupted:
            self.interrupted = False
            raise KeyboardInterrupt

    def message(self, **content: Any) -> None:
        data = json.dumps(content, default=_jsonable).encode()
        if len(data) > MAX_FRAME:  # a display, a result or an error of tens of megabytes
            what = next(iter(content))
            data = json.dumps({what: {"data": {"text/plain": f"[{len(data)} bytes of {what}: "
                                                             "too large to return]"},
                                      "ename": "TooLarge", "evalue": f"{len(data)} bytes"}
                               }).encode()
        self.send(MESSAGE, data)

    def on_sigint(self, signum: int, frame: Any) -> None:
        if not self.in_cell:
            return
        if self.sending:
            self.interrupted = True
            return
        raise KeyboardInterrupt


def _jsonable(value: Any) -> Any:
    """What json cannot write, as ipykernel's json_clean writes it: bytes (a PNG) as base64."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class FramedStream(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` of the kernel: buffered up to a newline (or FLUSH_AT
    characters), then sent as a frame. Written from a forked child, whose frames would mix with
    this process's on the one pipe, it writes to its descriptor instead, as C code does."""

    def __init__(self, channel: Channel, kind: bytes, fd: int, name: str) -> None:
        self.channel, self.kind, self.fd, self.name = channel, kind, fd, name
        self.parts: list[str] = []
        self.size = 0

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.fd  # what faulthandler, subprocess and C libraries write to

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if os.getpid() != self.channel.pid:  # a forked child: the descriptor, unframed
            data = text.encode("utf-8", "replace")
            while data:
                data = data[os.write(self.fd, data):]
            return len(text)
        self.parts.append(text)
        self.size += len(text)
        if "\n" in text or self.size >= FLUSH_AT:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if not self.parts or os.getpid() != self.channel.pid:
            return
        text, self.parts, self.size = "".join(self.parts), [], 0
        data = text.encode("utf-8", "replace")  # a lone surrogate as "?"
        for at in range(0, len(data), FRAME_TEXT):  # a frame the runner keeps whole
            self.channel.send(self.kind, data[at:at + FRAME_TEXT])


def flush_streams() -> None:
    """Send what sys.stdout and sys.stderr hold: before a display, a result, an error or the
    cell's end, so that the runner sees them in the order the cell made them."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # the student replaced or closed it: theirs to lose
            pass


def _shell_class(channel: Channel) -> Any:
    """IPython's InteractiveShell with its displays, results and tracebacks sent as frames."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell

    class FramedPublisher(DisplayPublisher):
        def publish(self, data: Any, metadata: Any = None, source: Any = None, *,
                    transient: Any = None, update: bool = False, **kwargs: Any) -> None:
            flush_streams()
            channel.message(display={"data": data, "metadata": metadata or {},
                                     "transient": transient or {}, "update": bool(update)})

        def clear_output(self, wait: bool = False) -> None:
            flush_streams()
            channel.message(clear=bool(wait))

    class FramedDisplayHook(DisplayHook):
        """execute_result, as ipykernel's ZMQShellDisplayHook builds it."""

        bundle: dict[str, Any] | None = None

        def start_displayhook(self) -> None:
            self.bundle = {"data": {}, "metadata": {}}

        def write_output_prompt(self) -> None:
            if self.bundle is not None:
                self.bundle["execution_count"] = self.prompt_count

        def write_format_data(self, format_dict: Any, md_dict: Any = None) -> None:
            if self.bundle is not None:
                self.bundle.update(data=format_dict, metadata=md_dict or {})

        def finish_displayhook(self) -> None:
            flush_streams()
            bundle, self.bundle = self.bundle, None
            if bundle and bundle["data"]:
                channel.message(result=bundle)

    class FramedShell(InteractiveShell):
        displayhook_class = FramedDisplayHook
        display_pub_class = FramedPublisher

        def _showtraceback(self, etype: Any, evalue: Any, stb: Any) -> None:
            flush_streams()
            channel.message(error={"ename": _text(getattr(etype, "__name__", etype)),
                                   "evalue": _text(evalue),
                                   "traceback": [_text(line) for line in
                                                 (stb if isinstance(stb, list) else [stb])]})

        def enable_gui(self, gui: Any = None) -> None:
            """No event loop to integrate with (ipykernel's answer for a GUI it lacks)."""
            if gui:
                raise NotImplementedError(f"no GUI event loop ({gui}) in a grading run")

    return FramedShell


def _text(value: Any) -> str:
    """str() of what a student raised, whose __str__ may itself raise."""
    try:
        return str(value)
    except BaseException:  # a hostile __str__ (even raising SystemExit): the name at least
        return f"<unprintable {type(value).__name__}>"


def _no_input(prompt: Any = "") -> str:
    """input() as ipykernel answers it where the client allows no input requests."""
    from IPython.core.error import StdinNotImplementedError

    raise StdinNotImplementedError(
        "raw_input was called, but this frontend does not support input requests.")


def _read_commands(fd: int) -> Any:
    """The runner's commands, one JSON object a line: {"id", "code", "silent", "history"}."""
    with open(fd, "rb", buffering=0) as pipe:
        pending = b""
        while True:
            chunk = pipe.read(1 << 16)
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield json.loads(line)


def main(argv: list[str]) -> None:
    """Build the shell, say it is ready, then run each command the runner sends, each ending
    with its "done" frame; end when the runner closes the commands' pipe."""
    commands, events = int(argv[1]), int(argv[2])
    for fd in (commands, events):
        os.set_inheritable(fd, False)  # a subprocess gets 0, 1 and 2 only
    channel = Channel(events)
    signal.signal(signal.SIGINT, channel.on_sigint)
    # As ipykernel sets it: the notebook's folder is on the path, first.
    sys.argv = [os.path.abspath(argv[0])]
    sys.path.insert(0, "")
    sys.stdout = FramedStream(channel, STDOUT, 1, "<stdout>")
    sys.stderr = FramedStream(channel, STDERR, 2, "<stderr>")
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # a sandbox keeps nothing
    shell = _shell_class(channel).instance(config=config)
    import builtins

    builtins.input = _no_input
    shell.user_ns["input"] = _no_input
    channel.message(ready=True)
    for command in _read_commands(commands):
        status, count = "error", shell.execution_count  # In [count] of this cell
        history = bool(command.get("history", True))
        channel.in_cell = True
        try:
            result = shell.run_cell(str(command.get("code", "")), store_history=history,
                                    silent=bool(command.get("silent", False)))
            status = "ok" if result.success else "error"
        except KeyboardInterrupt:  # between run_cell's own handlers: still this cell's
            pass
        finally:
            channel.in_cell = channel.interrupted = False
        try:
            flush_streams()
        finally:
            channel.message(done=command.get("id"), status=status,
                            execution_count=count if history else None)
    os._exit(0)  # the runner closed the commands: nothing to tear down


if __name__ == "__main__":
    main(sys.argv)
