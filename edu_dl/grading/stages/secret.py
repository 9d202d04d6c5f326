"""The grading secret: one per gradebook, from which every part's hidden inputs are drawn.

Same answer, same grade: each part's inputs come from a seed derived from the secret and the
part alone, HMAC-SHA256(secret, "<exercise>/<part id>"), never from the student, the run or the
clock. So identical notebooks get identical inputs and identical grades, a ``--force`` regrade or
a cluster run draws the same inputs as the first run, and ``edu-dl replay`` re-derives the
inputs of any stored run. The secret lives beside the grades (``OUT/.secret``, 32 random bytes as
hex, owner-only), is created on the first grade, and changes only on purpose
(``edu-dl grade --rotate-secret``): its fingerprint is part of every resume key, so a rotated
secret regrades everyone. The secret never leaves the trusted side: a sandbox (or a cluster
worker) gets the inputs drawn from it, never it.

``edu-dl validate`` runs on a student's machine and uses :data:`VALIDATION_SECRET`, public and
fixed, so one notebook validates the same way every time and no instructor's secret is needed.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path

FILE_NAME = ".secret"  # in the grading output folder
SECRET_BYTES = 32
MAX_FILE_BYTES = 4096  # a secret file is 64 hex digits and a newline; never read more
LOOSE = stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP  # refused: others read, others or group write


class SecretError(ValueError):
    """The secret cannot be read or written; the message says why and what to do."""


@dataclass(frozen=True)
class Secret:
    """The key the hidden inputs are derived from (never printed: see ``fingerprint``)."""

    key: bytes = b""
    public: bool = False  # the validation secret: anyone may know it
    path: str = field(default="", compare=False)  # the file it was read from, if any

    def __repr__(self) -> str:  # no traceback or log ever shows the key
        return f"Secret(fingerprint={self.fingerprint!r}, public={self.public})"

    @property
    def fingerprint(self) -> str:
        """Names the secret in run records and resume keys without revealing it."""
        return hashlib.sha256(b"edu-dl grading secret\0" + self.key).hexdigest()[:16]

    def seed(self, exercise: str, part_id: str) -> int:
        """The rng seed of one part's inputs: HMAC-SHA256(secret, "exercise/part"), 63 bits."""
        digest = hmac.new(self.key, f"{exercise}/{part_id}".encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big") >> 1


# Public on purpose: validate runs on students' machines, where no secret of the instructor's
# may be; it only needs to be the same every time.
VALIDATION_SECRET = Secret(b"edu-dl validate: a public, fixed secret", public=True)


def secret_path(out: Path) -> Path:
    """Where the grading secret of the output folder ``out`` lives: ``out/.secret``."""
    return out / FILE_NAME


def read_secret(path: Path) -> Secret:
    """The secret in ``path`` (64 hex digits), read without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SecretError(f"{path}: is a symbolic link; the grading secret is read only "
                              "from a regular file") from None
        raise SecretError(f"{path}: cannot read the grading secret ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"{path}: not a regular file; the grading secret must be one")
        if info.st_mode & LOOSE:  # a group may share it (a course's TAs); nobody else
            raise SecretError(f"{path}: every user of this machine can read or change the "
                              f"grading secret (mode {stat.S_IMODE(info.st_mode):o}); "
                              f"run `chmod 600 {path}` (or 640 for a group of graders)")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    text = data.decode("ascii", "replace").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(data) > MAX_FILE_BYTES or len(key) < 16:
        raise SecretError(f"{path}: not a grading secret (expected at least 32 hex digits on "
                          "one line, as `edu-dl grade` writes them)")
    return Secret(key, path=str(path))


def _write_new(path: Path) -> Secret:
    """A fresh secret written to ``path``, which must not exist (never through a link):
    owner-only from the start (O_CREAT|O_EXCL, mode 0600)."""
    key = secrets.token_bytes(SECRET_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (key.hex() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return Secret(key, path=str(path))


def load_or_create(path: Path) -> tuple[Secret, bool]:
    """(the secret in ``path``, whether it was created now): created on the first grade."""
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _write_new(path), True
        except FileExistsError:  # another grader made it meanwhile: use theirs
            pass
        except OSError as exc:
            raise SecretError(f"{path}: cannot create the grading secret ({exc.strerror})"
                              ) from None
    return read_secret(path), False


def rotate(path: Path) -> Secret:
    """Replace the secret in ``path`` by a fresh one (or create it); every submission graded
    with the old one is regraded on the next run. A link or anything but a secret there is
    refused, as when it is read."""
    if os.path.lexists(path):
        read_secret(path)  # refuses a link, a folder, a file that holds no secret
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f"{path.name}.new-{secrets.token_hex(4)}")
    try:
        secret = _write_new(fresh)
        os.replace(fresh, path)
    except OSError as exc:
        fresh.unlink(missing_ok=True)
        raise SecretError(f"{path}: cannot write the new grading secret ({exc.strerror})"
                          ) from None
    return replace(secret, path=str(path))


def check_unseen(secret: Secret, out: Path, shown: list[Path]) -> None:
    """Refuse a secret file that every sandbox would see: one inside the software shown
    read-only to it (``shown``), other than in the output folder (hidden in every sandbox)."""
    if not secret.path:
        return
    where = Path(secret.path).resolve()
    if where.is_relative_to(out.resolve()):
        return
    inside = next((root for root in shown if where.is_relative_to(root)), None)
    if inside is not None:
        raise SecretError(f"{secret.path}: lies in {inside}, which every sandbox sees "
                          "read-only; keep the grading secret elsewhere (e.g. in the --out "
                          "folder, the default)")
