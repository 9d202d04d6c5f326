"""How Canvas and Moodle name the files of a submissions download.

A pattern is a regular expression matched at the start of a member's path (``/``-separated,
relative to the download's root) with the named groups ``user`` (the LMS's id of the student:
Canvas's user id, Moodle's participant id) and ``file`` (the name the student uploaded, with
its folders); Canvas's also has ``submission`` (its submission id) and ``late``. ``--pattern``
replaces the default with one of the instructor's own, anchored (``^``) as they are.

The owner is taken from the LMS's own prefix, never from what the student wrote: the patterns
are anchored at the start of the path and take the first id there (Moodle's name group is not
greedy), the ``user`` group must end before the ``file`` group begins, and a member whose
uploaded name (or a folder in it) is itself named like a submission of the LMS is refused:
Alice's upload ``x_7654321_assignsubmission_file_02_mini.ipynb`` would otherwise name Bob
(participant 7654321) as its owner in a search of the path.

Canvas (Assignments > Download Submissions) names each file
``<lastfirst>[_LATE]_<user id>_<submission id>_<original name>``, and an upload whose name the
student had already used gets ``-1``, ``-2``... before its extension. Moodle (View all
submissions > Download all submissions) puts each submission's files in a folder
``<Full Name>_<participant id>_assignsubmission_file_/`` or, with "Download submissions in
folders" off, prefixes that to every file name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from edu_dl.grading.trust.text import visible

CANVAS = (r"^(?P<name>[^/_]*)(?:_(?P<late>LATE))?_(?P<user>[0-9]+)_(?P<submission>[0-9]+)"
          r"_(?P<file>[^/]+)$")
# The folder (or, flattened, the file name's prefix) Moodle writes per submission; the files
# the student put in folders keep them.
MOODLE = r"^(?P<name>[^/]*?)_(?P<user>[0-9]+)_assignsubmission_file_/?(?P<file>[^/].*)$"
PATTERNS = {"canvas": CANVAS, "moodle": MOODLE}
REQUIRED_GROUPS = ("user", "file")
# A resubmission's suffix, as Canvas writes it: "08_autograd_from_scratch-1.ipynb".
RESUBMISSION = re.compile(r"^(?P<stem>.+?)-(?P<n>\d{1,4})$")
PLAIN_STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}")
# How tools name a copy of a notebook, each with the original's name in ``of``: never an
# exercise of its own, whatever the student uploaded it as.
COPIES = (
    (re.compile(r"^(?P<of>.+)-Copy[0-9]{1,4}$"), "Jupyter's copy (File > Make a Copy)"),
    (re.compile(r"^(?P<of>.+?) - Copy(?: \([0-9]{1,4}\))?$"), "a Windows copy"),
    (re.compile(r"^(?P<of>.+?) ?\([0-9]{1,4}\)$"), "a browser's second download"),
    (re.compile(r"^Copy of (?P<of>.+)$"), "Colab's copy"),
    (re.compile(r"^(?P<of>.+?) copy(?: [0-9]{1,4})?$"), "a macOS copy"),
)


class PatternError(ValueError):
    """A --pattern that is not a regular expression with the groups collect needs."""


def compile_pattern(kind: str, pattern: str | None = None) -> re.Pattern[str]:
    """The pattern for ``kind`` (canvas or moodle), or the instructor's ``pattern``."""
    text = pattern if pattern is not None else PATTERNS[kind]
    try:
        compiled = re.compile(text)
    except re.error as exc:
        raise PatternError(f"--pattern {text!r}: not a regular expression ({exc})") from None
    if not text.startswith(("^", r"\A")):
        raise PatternError(f"--pattern {text!r}: must be anchored at the start of the member's "
                           "path (begin it with ^), so that the LMS's prefix names the owner and "
                           f"the student's own file name cannot; e.g. {PATTERNS[kind]}")
    missing = [g for g in REQUIRED_GROUPS if g not in compiled.groupindex]
    if missing:
        raise PatternError(f"--pattern {text!r}: needs the named groups "
                           f"{', '.join(f'(?P<{g}>...)' for g in missing)}; e.g. "
                           f"{PATTERNS[kind]}")
    return compiled


@dataclass(frozen=True)
class Named:
    """What a member's path says: whose, which upload, which resubmission."""

    user: str
    file: str  # the uploaded name, without folders
    submission: int  # Canvas's submission id; 0 when the pattern has none
    resubmission: int  # the -N suffix; 0 for the first upload
    problem: str = ""  # why whose it is cannot be told ("" when it can)

    @property
    def stem(self) -> str:
        """The uploaded name without ``.ipynb`` and without a resubmission suffix."""
        stem = self.file[:-len(".ipynb")] if self.file.lower().endswith(".ipynb") else self.file
        found = RESUBMISSION.match(stem)
        return found.group("stem") if found else stem


@dataclass(frozen=True)
class Copy:
    """A notebook's name that says it is a copy of another notebook."""

    of: str  # the original's name, without .ipynb (the innermost copy's original)
    how: str  # what made the copy, in words


def copy_of(stem: str) -> Copy | None:
    """What ``stem`` (a notebook's name without .ipynb or a resubmission suffix) is a copy of,
    as Jupyter (``05_x-Copy1``), a browser (``05_x (1)``), Colab, Windows or macOS name a
    copy; None when it does not look like one. A copy of a copy names the first original."""
    found: Copy | None = None
    for _ in range(8):  # a copy of a copy of a copy...; a bounded name, a bounded loop
        match = next(((m, how) for regex, how in COPIES if (m := regex.match(stem))), None)
        if match is None:
            break
        stem = match[0].group("of").strip()
        found = Copy(stem, found.how if found else match[1])
    return found


def parse_name(pattern: re.Pattern[str], path: str) -> Named | None:
    """The parts of a member's path, or None when the pattern does not match it at its start.
    A match whose owner the student's own file name could have chosen has a ``problem``."""
    found = pattern.match(path)
    if found is None or not found.group("user") or not found.group("file"):
        return None
    uploaded = found.group("file")
    file = uploaded.rsplit("/", 1)[-1]
    groups = found.groupdict()
    submission = groups.get("submission") or ""
    stem = file[:-len(".ipynb")] if file.lower().endswith(".ipynb") else file
    again = RESUBMISSION.match(stem)
    named = Named(found.group("user"), file, _number(submission),
                  _number(again.group("n")) if again else 0)
    if found.end("user") > found.start("file"):
        problem = ("the pattern takes the owner's id from the uploaded name, which the "
                   "student chose")
    elif any(pattern.match(uploaded[at:]) for at in _starts(uploaded)):
        problem = (f"the uploaded name {visible(uploaded)!r} is itself named like a "
                   "submission (it matches the pattern), so whose it is cannot be told")
    else:
        return named
    return replace(named, problem=f"{problem}; not collected: collect it by hand if it is "
                   f"the student's with id {named.user}")


def _starts(path: str) -> list[int]:
    """Where each component of a path begins."""
    return [0, *(i + 1 for i, char in enumerate(path) if char == "/")]


def _number(text: str) -> int:
    """A decimal id of at most 18 ASCII digits, else 0 (a name can hold any digits)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else 0
