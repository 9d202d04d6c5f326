"""When each student submitted, and who they are, from the LMS's own exports.

A submission's time is never taken from the download (a file's mtime, a ``timestamp.txt``
inside it): the student made those. It comes from what the LMS recorded:

- Canvas: the Submissions API's list for the assignment, saved as JSON (``GET
  /api/v1/courses/:course/assignments/:assignment/submissions?include[]=user``: objects with
  ``user_id``, ``submitted_at``, ``attempt`` and, with ``include[]=user``, ``user.sis_user_id``,
  ``user.login_id``, ``user.email``), or the same fields as CSV columns (``user_id``,
  ``submitted_at``, ``attempt``, ``sis_user_id``, ``login_id``, ``email``).
- Moodle: the assignment's grading worksheet (View all submissions > Download grading
  worksheet): ``Identifier`` ("Participant 1234567"), ``Email address``, optionally ``ID
  number``, and ``Last modified (submission)``, written as Moodle shows dates ("Monday, 2 March
  2026, 11:59 PM", in the timezone given with ``--timezone``) or ISO; "-" means none.

These files are the instructor's downloads, but names and e-mails in them are the students':
they are read bounded (size, rows, depth, cell length) and a line that cannot be read is
skipped and reported, never a reason to stop.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from edu_dl.grading.notebooks import NotebookError
from edu_dl.grading.term.policy import PolicyError
from edu_dl.grading.trust.bounded import read_named_file
from edu_dl.grading.trust.files import parse_time
from edu_dl.grading.trust.notebook import load_json

MAX_METADATA_BYTES = 32 << 20
MAX_CELL = 200
MOODLE_DATES = ("%A, %d %B %Y, %I:%M %p", "%A, %d %B %Y, %H:%M", "%d %B %Y, %I:%M %p",
                "%d %B %Y, %H:%M")
PARTICIPANT = re.compile(r"^\s*(?:Participant\s*)?([0-9]{1,18})\s*$", re.IGNORECASE)


@dataclass
class Submitted:
    """One student's submission as the LMS recorded it."""

    time: datetime | None = None
    attempt: int = 0
    keys: dict[str, str] = field(default_factory=dict)  # roster key -> value (sis ids, email)


@dataclass
class Metadata:
    """LMS id -> what the LMS recorded; ``problems``: lines that could not be read."""

    by_user: dict[str, Submitted] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _read(path: Path) -> bytes:
    return read_named_file(path, "--metadata", MAX_METADATA_BYTES, PolicyError)


def _text(value: Any) -> str:
    return str(value).strip()[:MAX_CELL] if isinstance(value, str | int) and \
        not isinstance(value, bool) else ""


def _rows(data: bytes) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig", "replace")))
    try:
        return [{str(k).strip(): _text(v) for k, v in line.items() if k is not None}
                for line in reader]
    except csv.Error as exc:  # a cell over csv's field limit (128 KB), a NUL
        raise PolicyError(f"--metadata: not a CSV file this command can read "
                          f"(line {reader.line_num}: {exc})") from None


# --------------------------------------------------------------------------- Canvas


def read_canvas(path: Path) -> Metadata:
    """Canvas's submissions (JSON or CSV): user id -> time, attempt, SIS ids and e-mail.
    A user listed more than once keeps the latest attempt (then the latest time)."""
    data = _read(path)
    if data.lstrip()[:1] in (b"[", b"{"):
        try:
            obj = load_json(data, str(path), max_depth=16)
        except NotebookError as exc:
            raise PolicyError(f"--metadata: {exc}") from None
        if not isinstance(obj, list):
            raise PolicyError(f"--metadata {path}: expected the Submissions API's list of "
                              "submissions (a JSON array)")
        lines = [_flat(item) for item in obj]
    else:
        lines = _rows(data)
    found = Metadata()
    for number, line in enumerate(lines, 1):
        user = line.get("user_id", "")
        if not user.isascii() or not user.isdigit():
            found.problems.append(f"--metadata line {number}: no user_id; skipped")
            continue
        entry = Submitted(keys={"sis_user_id": line.get("sis_user_id", ""),
                                "sis_login_id": line.get("login_id", ""),
                                "email": line.get("email", "")})
        entry.attempt = int(line["attempt"]) if line.get("attempt", "").isdigit() and \
            len(line["attempt"]) < 9 else 0
        when = line.get("submitted_at", "")
        if when:
            try:
                entry.time = parse_time(when)
            except ValueError:
                found.problems.append(f"--metadata line {number}: submitted_at {when[:40]!r} "
                                      "is not a date and time; no timestamp for that user")
        old = found.by_user.get(user)
        if old is None or _later(entry, old):
            found.by_user[user] = entry
    return found


def _flat(item: Any) -> dict[str, str]:
    """A Submissions API object as the CSV's columns."""
    if not isinstance(item, dict):
        return {}
    found = item.get("user")
    user: dict[str, Any] = found if isinstance(found, dict) else {}
    return {"user_id": _text(item.get("user_id")), "submitted_at": _text(item.get("submitted_at")),
            "attempt": _text(item.get("attempt")),
            "sis_user_id": _text(user.get("sis_user_id")), "login_id": _text(user.get("login_id")),
            "email": _text(user.get("email"))}


def _later(new: Submitted, old: Submitted) -> bool:
    if new.attempt != old.attempt:
        return new.attempt > old.attempt
    return (new.time or datetime.min.replace(tzinfo=UTC)) > \
        (old.time or datetime.min.replace(tzinfo=UTC))


# --------------------------------------------------------------------------- Moodle


def timezone(name: str) -> tzinfo:
    """--timezone: an IANA name (Europe/Berlin) or UTC."""
    try:
        return UTC if name.upper() == "UTC" else ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise PolicyError(f"--timezone {name!r}: not a time zone; name one as "
                          "Europe/Berlin or America/New_York, or UTC") from None


def moodle_time(text: str, zone: tzinfo) -> datetime | None:
    """A worksheet's date ('Monday, 2 March 2026, 11:59 PM' in ``zone``, or ISO), in UTC;
    None for '-' or nothing. ValueError when it is neither."""
    text = text.strip()
    if text in ("", "-"):
        return None
    try:
        for form in MOODLE_DATES:
            try:
                return datetime.strptime(text, form).replace(tzinfo=zone).astimezone(UTC)
            except ValueError:
                continue
        if re.match(r"^[0-9]{4}-", text):
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return (moment if moment.tzinfo else moment.replace(tzinfo=zone)).astimezone(UTC)
    except (ValueError, OverflowError):
        pass
    raise ValueError(f"{text[:60]!r} is not a date Moodle writes")


def read_moodle(path: Path, zone: tzinfo = UTC) -> Metadata:
    """Moodle's grading worksheet: participant id -> time, e-mail and ID number."""
    lines = _rows(_read(path))
    if lines and "Identifier" not in lines[0]:
        raise PolicyError(f"--metadata {path}: not a Moodle grading worksheet (no "
                          "'Identifier' column)")
    found = Metadata()
    for number, line in enumerate(lines, 2):
        participant = PARTICIPANT.match(line.get("Identifier", ""))
        if participant is None:
            found.problems.append(f"--metadata line {number}: no participant identifier; "
                                  "skipped")
            continue
        entry = Submitted(keys={"email": line.get("Email address", ""),
                                "id_number": line.get("ID number", "")})
        try:
            entry.time = moodle_time(line.get("Last modified (submission)", ""), zone)
        except ValueError as exc:
            found.problems.append(f"--metadata line {number}: {exc}; no timestamp for "
                                  f"participant {participant.group(1)}")
        found.by_user[participant.group(1)] = entry
    return found
