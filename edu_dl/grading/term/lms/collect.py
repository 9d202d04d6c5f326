"""A Canvas or Moodle submissions download into the folder ``edu-dl grade`` reads.

Writes nbgrader's layout, ``OUT/submitted/<student>/<exercise>/<exercise>.ipynb``, because its
``timestamp.txt`` belongs to one assignment (the flat layout has one per student, and a course
collects one download per assignment into the same folder). ``<student>`` is the roster's id;
the LMS's id in a file name is looked up in the roster (Canvas's user id in ``canvas_id``, a
Moodle participant id in ``moodle_participant_id``) or, through the LMS's metadata, by the SIS
user id, SIS login, e-mail or ID number it records for that user.

``timestamp.txt`` is written only from the LMS's metadata (``metadata``); without it none is
written (a stale one is removed) and the report says so. Of several notebooks of one student
for one exercise, the LMS's latest wins: the highest resubmission suffix (``-2`` over ``-1``
over none), then the highest Canvas submission id, then the later download on the command
line. File times are never looked at. Two of equal standing (``--as`` over two uploads) are
a guess, so neither is written.

Every member is read through ``trust.archive``; a problem costs the member's own line of the
report (or, for an unreadable archive, that archive's), never the collection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from edu_dl.grading.notebooks import write_atomic
from edu_dl.grading.stages.collect import NBGRADER_FOLDERS
from edu_dl.grading.term.lms.formats import PLAIN_STEM, Named, parse_name
from edu_dl.grading.term.lms.metadata import Metadata
from edu_dl.grading.term.lms.roster import KEYS, Roster, Student
from edu_dl.grading.trust.archive import DEFAULT_LIMITS, ArchiveLimits, Member, read_download
from edu_dl.grading.trust.files import TIMESTAMP, entries
from edu_dl.grading.trust.identity import NameClash, check_distinct
from edu_dl.grading.trust.text import visible

COLLECTED = "collected"
DIRECT_KEY = {"canvas": "canvas_id", "moodle": "moodle_participant_id"}


class CollectError(ValueError):
    """An output folder collect cannot write into; the message says what to do."""


@dataclass(frozen=True)
class Line:
    """One line of the collection's report: a member, or a whole archive."""

    download: str
    member: str
    user: str  # the LMS's id in the name
    student: str  # the roster's id
    exercise: str
    status: str
    message: str


@dataclass
class Collected:
    lines: list[Line] = field(default_factory=list)

    @property
    def written(self) -> list[Line]:
        return [line for line in self.lines if line.status == COLLECTED]

    @property
    def problems(self) -> list[Line]:
        return [line for line in self.lines if line.status != COLLECTED]


@dataclass(frozen=True)
class _Candidate:
    named: Named
    order: int  # the download's place on the command line
    member: Member
    download: str

    def rank(self) -> tuple[int, int, int]:
        return (self.named.resubmission, self.named.submission, self.order)


def check_out(out: Path) -> None:
    """OUT must be new, empty or an nbgrader course folder (grade reads it as one)."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CollectError(f"--out {out}: not a folder")
    if not out.exists():
        return
    others = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name not in
                    NBGRADER_FOLDERS)
    if others:
        raise CollectError(f"--out {out}: holds {', '.join(others[:5])}, which are not "
                           "nbgrader's folders; collect into a new folder (it writes "
                           "OUT/submitted/<student>/<exercise>/)")


def _check_names(out: Path, roster: Roster) -> None:
    """The roster's ids and the student folders an earlier collection left in OUT are one
    name each: "Alice" collected beside "alice" would be two students to the grader and one to
    a case-blind disk or a reader."""
    submitted = out / "submitted"
    folders = [e.name for e in entries(submitted)] if submitted.is_dir() else []
    try:
        check_distinct([*folders, *(s.id for s in roster.students)],
                       f"--out {out}: the student folders and roster ids",
                       "rename the folder in OUT/submitted/ as the roster has the student")
    except NameClash as exc:
        raise CollectError(str(exc)) from None


def identify(kind: str, user: str, roster: Roster, metadata: Metadata | None,
             key: str | None = None) -> Student | None:
    """The roster's student for an LMS id: by ``key`` (default: the LMS's own id column),
    else by any id the LMS's metadata records for that user."""
    found = roster.find(key or DIRECT_KEY[kind], user)
    if found is not None or metadata is None or user not in metadata.by_user:
        return found
    for column, value in metadata.by_user[user].keys.items():
        if column in KEYS and (found := roster.find(column, value)) is not None:
            return found
    return None


def collect_downloads(kind: str, downloads: list[Path], roster: Roster, out: Path, *,
                      pattern: re.Pattern[str], metadata: Metadata | None = None,
                      exercise: str | None = None, key: str | None = None,
                      limits: ArchiveLimits = DEFAULT_LIMITS) -> Collected:
    """Read every download, choose each student's latest notebook per exercise, write them
    (and their timestamps) under ``out/submitted/``; the report has one line per member."""
    check_out(out)
    _check_names(out, roster)
    report = Collected()
    chosen: dict[tuple[str, str], list[_Candidate]] = {}
    for order, path in enumerate(downloads):
        download = read_download(path, limits)
        shown = visible(path.name)
        if download.problem:
            report.lines.append(Line(shown, "", "", "", "", "archive unreadable",
                                     download.problem))
        if download.skipped:
            report.lines.append(Line(shown, "", "", "", "", "over the limit",
                                     f"{download.skipped} members past the limit of "
                                     f"{limits.max_members} were not looked at"))
        for member in download.members:
            found = _classify(kind, member, shown, roster, pattern, metadata, exercise, key)
            if isinstance(found, Line):
                report.lines.append(found)
            else:
                chosen.setdefault((found.student, found.exercise), []).append(
                    _Candidate(found.named, order, member, shown))
    for (student, name), candidates in sorted(chosen.items()):
        report.lines += _choose(out, student, name, candidates, metadata)
    return report


@dataclass(frozen=True)
class _Whose:
    named: Named
    student: str
    exercise: str


def _classify(kind: str, member: Member, download: str, roster: Roster,
              pattern: re.Pattern[str], metadata: Metadata | None, exercise: str | None,
              key: str | None) -> _Whose | Line:
    """Whose notebook for which exercise the member is, or the report's line on why it is
    not collected."""
    def refused(status: str, message: str, user: str = "", student: str = "") -> Line:
        return Line(download, member.shown, user, student, "", status, message)

    if member.problem:
        return refused("refused", member.problem)
    if member.data is None:
        return refused("not a notebook", "not an .ipynb file; not collected")
    named = parse_name(pattern, member.path)
    if named is None:
        return refused("unrecognised name", f"not named as {kind} names a submission's "
                       "file (see --pattern); not collected")
    student = identify(kind, named.user, roster, metadata, key)
    if named.problem:  # Alice's upload that names Bob's id: never Bob's, nor a guess
        return refused("refused", named.problem, named.user, student.id if student else "")
    if student is None:
        mapped = " (nor does the metadata map it to one)" if metadata else ""
        return refused("not on the roster", f"no student on the roster has the {kind} id "
                       f"{named.user}{mapped}; not collected", named.user)
    name = exercise or named.stem
    if not PLAIN_STEM.fullmatch(name):
        return refused("unusable name", f"{visible(named.file)!r} does not name an exercise "
                       "(letters, digits, _.+-); name the exercise with --as", named.user,
                       student.id)
    return _Whose(named, student.id, name)


def _choose(out: Path, student: str, exercise: str, candidates: list[_Candidate],
            metadata: Metadata | None) -> list[Line]:
    """Write the latest of a student's notebooks for one exercise; the others' lines say
    which was taken. Two of equal standing (--as over two uploads) are a guess: neither is
    written, and a notebook collected before is removed."""
    candidates.sort(key=_Candidate.rank)
    winner = candidates[-1]
    tied = [c for c in candidates if c.rank() == winner.rank()]
    if len(tied) > 1:
        folder = out / "submitted" / student / exercise
        (folder / f"{exercise}.ipynb").unlink(missing_ok=True)
        (folder / TIMESTAMP).unlink(missing_ok=True)
        names = ", ".join(c.member.shown for c in tied)
        return [Line(c.download, c.member.shown, c.named.user, student, exercise, "ambiguous",
                     f"{len(tied)} notebooks for {exercise} of equal standing ({names}); "
                     "none collected: keep one in the download, or collect it by hand")
                for c in candidates]
    return [*(Line(older.download, older.member.shown, older.named.user, student, exercise,
                   "older resubmission", f"not collected: {winner.member.shown} (in "
                   f"{winner.download}) is the later one") for older in candidates[:-1]),
            _write(out, student, exercise, winner, metadata)]


def _write(out: Path, student: str, exercise: str, winner: _Candidate,
           metadata: Metadata | None) -> Line:
    folder = out / "submitted" / student / exercise
    assert winner.member.data is not None
    write_atomic(folder / f"{exercise}.ipynb", winner.member.data)
    submitted = metadata.by_user.get(winner.named.user) if metadata else None
    if submitted is not None and submitted.time is not None:
        write_atomic(folder / TIMESTAMP,
                     f"{submitted.time:%Y-%m-%d %H:%M:%S.%f} UTC\n".encode())
        note = f"submitted {submitted.time:%Y-%m-%d %H:%M:%S} UTC (LMS metadata)"
    else:
        (folder / TIMESTAMP).unlink(missing_ok=True)
        note = ("no submission time: no --metadata given" if metadata is None else
                "no submission time in the metadata for this user") + \
            "; no timestamp.txt written, so no late policy applies"
    return Line(winner.download, winner.member.shown, winner.named.user, student, exercise,
                COLLECTED, note)
