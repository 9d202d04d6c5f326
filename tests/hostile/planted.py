"""Secrets planted in every place a sandbox must not reach, and a socket that must get no call.

Run as root (CI) or as an ordinary user (CI's second run): each place is the one that matters for
that identity. ``Planted.found_in(text)`` names every token that leaked into ``text``.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Listener:
    """A Unix socket listening on the host; counts every connection it accepts."""

    path: str  # a file path, or "\0name" for an abstract socket
    accepted: int = 0
    received: bytes = b""
    sock: socket.socket = field(init=False)

    def __post_init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        if not self.path.startswith("\0"):
            os.chmod(self.path, 0o777)  # anyone who can see it may connect: only sight stops it
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.settimeout(1)
            try:
                self.received += conn.recv(4096)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        if not self.path.startswith("\0"):
            Path(self.path).unlink(missing_ok=True)


@dataclass
class Planted:
    """Tokens by place, the files that hold them, and the listeners."""

    tokens: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    listeners: list[Listener] = field(default_factory=list)

    def plant(self, place: str, path: Path, mode: int = 0o644) -> Path:
        token = f"EDUDLTOKEN{secrets.token_hex(12)}"
        self.tokens[place] = token
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"secret of {place}: {token}\n")
        path.chmod(mode)
        self.files.append(path)
        return path

    def found_in(self, text: str) -> list[str]:
        return [place for place, token in self.tokens.items() if token in text]

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()
        for path in self.files:
            path.unlink(missing_ok=True)


def plant_everywhere(tmp: Path, source: Path, grades: Path, other_student: Path) -> Planted:
    """Tokens in the source, another student's folder, the grades folder, the home folder,
    /var/tmp, a 0600 file where the sandbox can see the folder (as root: root-owned, in the
    virtual environment), and listening sockets (a file in /var/tmp and an abstract one)."""
    planted = Planted()
    tag = secrets.token_hex(6)
    planted.plant("source", source / "private_notes.txt")
    planted.plant("other submission", other_student / "notes.txt")
    planted.plant("grades folder", grades / "instructor_notes.txt")
    home = Path("/root") if os.geteuid() == 0 else Path.home()
    planted.plant("home", home / f".edu-dl-token-{tag}")
    planted.plant("/var/tmp", Path("/var/tmp") / f"edu-dl-token-{tag}")
    # Readable only by its owner, in a folder the sandbox is shown: as root, this proves the
    # sandbox is not root; as an ordinary user it must sit outside what is shown.
    owner_only = Path(sys.prefix) if os.geteuid() == 0 else home
    planted.plant("owner-only 0600 file", owner_only / f".edu-dl-secret-{tag}", mode=0o600)
    planted.listeners = [Listener(f"/var/tmp/edu-dl-sock-{tag}"),
                         Listener(str(tmp / f"sock-{tag}")), Listener(f"\0edu-dl-{tag}")]
    return planted
