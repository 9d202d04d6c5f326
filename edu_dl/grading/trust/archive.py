"""A learning-management system's download of submissions (a zip, or the folder it unpacked to).

Canvas and Moodle build these archives, but every member's name and bytes came from a student,
so the download is read as hostile input, member by member:

- the archive is a regular file (never through a link) of at most ``max_archive_bytes``; its
  central directory is checked before ``zipfile`` reads it (member count and size, so a
  directory of millions of entries is never loaded);
- at most ``max_members`` members are looked at; the rest are reported, not read;
- a member's name must be relative and plain: no absolute path, no drive, no ``..``, no NUL,
  at most :data:`MAX_NAME` characters; a
  link, device, FIFO or socket is refused (zip: its Unix mode; folder: never followed); a name
  that appears twice is refused both times (which one is the submission would be a guess);
- a name that is not UTF-8 is kept, its bytes as lone surrogates (``trust.text`` shows them as
  ``\\xNN``), never a reason to stop;
- a member's bytes are decompressed up to ``max_member_bytes`` plus one byte and no further,
  whatever its header claims (a zip bomb costs that much work, then its own row), and all
  members together to ``max_total_bytes``; an encrypted member, an unknown compression method
  or a bad CRC cost that member alone.

A problem with one member is that member's :attr:`Member.problem`; a problem with the whole
archive (not a zip, a broken central directory) is :attr:`Download.problem`, and costs only the
rows of that archive. Nothing here raises for what a student wrote.
"""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.text import visible

MB = 1 << 20
EOCD = b"PK\x05\x06"  # end of central directory
ZIP64_LOCATOR = b"PK\x06\x07"
ZIP64_EOCD = b"PK\x06\x06"
MAX_COMMENT = 0xFFFF
UTF8_FLAG = 1 << 11
MAX_NAME = 1024  # characters of a member's path: patterns are searched in it
UNIX_SYSTEM = 3  # ZipInfo.create_system of a member made on Unix (its mode is meaningful)


@dataclass(frozen=True)
class ArchiveLimits:
    """Bounds on one download. Canvas zips a class of 300 into a few hundred members."""

    max_archive_bytes: int = 4096 * MB
    max_members: int = 10_000
    # The zip's central directory, which zipfile reads whole (as objects of ~0.5 KB each):
    # 10,000 members with names of 100 characters take about 1.5 MB of it.
    max_directory_bytes: int = 4 * MB
    max_member_bytes: int = 16 * MB  # as --max-notebook-mb
    max_total_bytes: int = 2048 * MB  # decompressed, all members together
    max_depth: int = 8  # folders, in an unpacked download


DEFAULT_LIMITS = ArchiveLimits()


@dataclass
class Member:
    """One file of the download: its path (``/``-separated, possibly with lone surrogates for
    undecodable bytes), its bytes when read, and why it was not, when it was not."""

    path: str
    data: bytes | None = None
    problem: str = ""

    @property
    def shown(self) -> str:
        return visible(self.path)


@dataclass
class Download:
    """What was read of one download: its members (read or refused), and the archive's own
    problem when nothing of it could be read."""

    source: Path
    members: list[Member] = field(default_factory=list)
    problem: str = ""
    skipped: int = 0  # members past ``max_members``, not looked at


def read_download(path: Path, limits: ArchiveLimits = DEFAULT_LIMITS, only: str = ".ipynb"
                  ) -> Download:
    """The members of a zip file or an unpacked folder. Only the bytes of members whose name
    ends with ``only`` are read (others are listed, with data None and no problem)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return Download(path, problem=f"{visible(path)}: cannot read it ({exc.strerror})")
    if stat.S_ISLNK(st.st_mode):
        return Download(path, problem=f"{visible(path)}: a symbolic link; links are never "
                        "followed")
    if stat.S_ISDIR(st.st_mode):
        return _read_folder(path, limits, only)
    return _read_zip(path, limits, only)


# --------------------------------------------------------------------------- names


def plain_path(name: str) -> str:
    """Why a member's name is not a plain relative path ('' when it is one)."""
    if "\x00" in name:
        return "its name holds a NUL byte"
    if len(name) > MAX_NAME:
        return f"its name is over {MAX_NAME} characters"
    unified = name.replace("\\", "/")
    if unified.startswith("/") or (len(unified) > 1 and unified[1] == ":"):
        return "an absolute path"
    if ".." in unified.split("/"):
        return "a path with '..' in it"
    return ""


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The member's name as text: UTF-8 when it is UTF-8, else its bytes as surrogates.
    zipfile decodes a name without the UTF-8 flag as cp437, which never fails and is a
    bijection, so its bytes come back exactly."""
    name = info.orig_filename
    if info.flag_bits & UTF8_FLAG:
        return name
    raw = name.encode("cp437")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- zip files


def _directory_problem(f: IO[bytes], size: int, limits: ArchiveLimits) -> str:
    """Why the zip's central directory is not to be read ('' when it may be): more entries or
    bytes than the limits allow. Read from its end records, before zipfile reads them all."""
    tail = min(size, 22 + MAX_COMMENT)
    f.seek(size - tail)
    data = f.read(tail)
    at = data.rfind(EOCD)
    if at < 0 or len(data) - at < 22:
        return "not a zip archive (no end of central directory)"
    entries, directory_bytes = struct.unpack("<HI", data[at + 10:at + 16])
    # zipfile takes the zip64 record from just before its locator (not from the offset the
    # locator holds), and so does this check: both read the same numbers.
    end = size - tail + at
    if end >= 76:
        f.seek(end - 76)
        record, locator = f.read(56), f.read(20)
        if locator[:4] == ZIP64_LOCATOR and record[:4] == ZIP64_EOCD:
            entries, directory_bytes = struct.unpack("<QQ", record[32:48])
    if directory_bytes > limits.max_directory_bytes:
        return (f"its central directory is {directory_bytes} bytes, over the limit of "
                f"{limits.max_directory_bytes}")
    if entries > 10 * limits.max_members:
        return f"it claims {entries} members, far over the limit of {limits.max_members}"
    return ""


def _read_zip(path: Path, limits: ArchiveLimits, only: str) -> Download:
    download = Download(path)
    shown = visible(path.name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        download.problem = f"{shown}: cannot read it ({exc.strerror})"
        return download
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            download.problem = f"{shown}: not a regular file or folder; not read"
            return download
        if st.st_size > limits.max_archive_bytes:
            download.problem = (f"{shown} is {st.st_size // MB} MB, over the limit of "
                                f"{limits.max_archive_bytes // MB} MB for a download")
            return download
        why = _directory_problem(f, st.st_size, limits)
        if why:
            download.problem = f"{shown}: {why}; nothing of it read"
            return download
        try:
            f.seek(0)
            with zipfile.ZipFile(f) as zf:
                _zip_members(zf, download, limits, only)
        except UnicodeDecodeError:
            download.problem = (f"{shown}: a member's name is marked UTF-8 but is not; "
                                "Python's zipfile refuses the whole archive")
        except Exception as exc:  # BadZipFile, struct.error, EOFError...: this archive's alone
            download.problem = (f"{shown}: not a readable zip archive ({type(exc).__name__}: "
                                f"{str(exc)[:200]})")
    return download


def _zip_members(zf: zipfile.ZipFile, download: Download, limits: ArchiveLimits, only: str) -> None:
    infos = zf.infolist()
    download.skipped = max(0, len(infos) - limits.max_members)
    infos = infos[:limits.max_members]
    names = [_zip_name(info) for info in infos]
    seen: dict[str, int] = {}
    for name in names:
        seen[name] = seen.get(name, 0) + 1
    total = 0
    for info, name in zip(infos, names):
        if info.is_dir():
            continue
        member = Member(name)
        download.members.append(member)
        mode = info.external_attr >> 16 if info.create_system == UNIX_SYSTEM else 0
        kind = stat.S_IFMT(mode)
        member.problem = (
            plain_path(name)
            or ("a symbolic link; links are never followed" if kind == stat.S_IFLNK else "")
            or ("not a regular file" if kind not in (0, stat.S_IFREG) else "")
            or ("its name appears more than once in the archive; which one is the "
                "submission cannot be told" if seen[name] > 1 else "")
            or ("encrypted" if info.flag_bits & 0x1 else ""))
        if member.problem or not name.lower().endswith(only):
            continue
        if info.file_size > limits.max_member_bytes:
            member.problem = _over(info.file_size, limits.max_member_bytes)
            continue
        # Counted before it is read, refused or not: zipfile inflates no more than the size a
        # header claims, so this bounds the work of all members together.
        if total + info.file_size > limits.max_total_bytes:
            member.problem = (f"not read: the download's members already add up to the limit "
                              f"of {limits.max_total_bytes // MB} MB")
            continue
        total += info.file_size
        member.data, member.problem = _read_member(zf, info, limits.max_member_bytes)


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int
                 ) -> tuple[bytes | None, str]:
    """(bytes, '') or (None, why): at most ``limit`` + 1 bytes are ever decompressed."""
    try:
        with zf.open(info) as stream:
            data = stream.read(limit + 1)
            if len(data) > limit:
                return None, _over(len(data), limit, "decompresses to more than")
            stream.read(1)  # at the end: zipfile checks the CRC here
    except Exception as exc:  # a bad CRC, an unknown method, zlib.error...: this member's
        return None, f"not readable ({type(exc).__name__}: {str(exc)[:160]})"
    return data, ""


def _over(size: int, limit: int, verb: str = "is") -> str:
    return (f"{verb} {size} bytes, over the limit of {limit // MB} MB for one notebook "
            "(--max-notebook-mb); not read")


# --------------------------------------------------------------------------- unpacked folders


def _read_folder(root: Path, limits: ArchiveLimits, only: str) -> Download:
    """An unpacked download, walked without following a link, bounded in entries and depth."""
    download = Download(root)
    todo: list[tuple[Path, int]] = [(root, 0)]
    total = looked = 0
    while todo:
        folder, depth = todo.pop()
        try:
            with os.scandir(folder) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            download.members.append(Member(_relative(folder, root),
                                           problem=f"folder not read ({exc.strerror})"))
            continue
        for entry in found:
            looked += 1
            if looked > limits.max_members:
                download.skipped += 1
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < limits.max_depth:
                    todo.append((path, depth + 1))
                else:
                    download.members.append(Member(_relative(path, root),
                                                   problem="a folder nested too deep; not read"))
                continue
            member = Member(_relative(path, root))
            download.members.append(member)
            member.problem = plain_path(member.path)
            if member.problem:
                continue
            if entry.is_symlink():
                member.problem = "a symbolic link; links are never followed"
            elif not entry.is_file(follow_symlinks=False):
                member.problem = "not a regular file"
            elif entry.name.lower().endswith(only):
                if total >= limits.max_total_bytes:
                    member.problem = (f"not read: the download's members already add up to "
                                      f"the limit of {limits.max_total_bytes // MB} MB")
                    continue
                try:
                    member.data = read_bounded(path, limits.max_member_bytes)
                    total += len(member.data)
                except Exception as exc:  # Refused, OSError: this member's problem alone
                    member.problem = str(exc)
    download.members.sort(key=lambda m: m.path)
    return download


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()
