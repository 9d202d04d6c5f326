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

The exercise is the uploaded name (without its resubmission suffix) unless ``--as`` names it.
A name that says it is a copy of a notebook (Jupyter's ``05_x-Copy1``, a browser's ``05_x
(1)``, ``formats.copy_of``) is never an exercise of its own: it is refused, naming the notebook
it copies. With the source's exercises (``--source``, as ``edu-dl grade`` reads them), a name
that matches none of them is refused too ("matches no source notebook", as grade says it).

Every member is read through ``trust.archive``; a problem costs the member's own line of the
report (or, for an unreadable archive, that archive's), never the collection.

Canvas: the ids collect learned of each student it identified (the user id in the file's
name, and the SIS ids ``--metadata`` gives that user) are recorded in ``OUT/canvas_ids.csv``
(``roster.read_ids``), for ``lms export canvas --collected OUT``. An id learned as two
students', or two ids of one student, is recorded for neither, and the report says so.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from edu_dl.grading.notebooks import write_atomic
from edu_dl.grading.stages.collect import NBGRADER_FOLDERS
from edu_dl.grading.term.lms.formats import PLAIN_STEM, Named, copy_of, parse_name
from edu_dl.grading.term.lms.metadata import Metadata
from edu_dl.grading.term.lms.roster import (
    IDS_COLUMNS,
    IDS_FILE,
    KEYS,
    Roster,
    Student,
    ids_csv,
    read_ids,
    usable_id,
)
from edu_dl.grading.term.policy import PolicyError
from edu_dl.grading.term.renumbered import explained
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
    checked: bool = False  # were the exercise names checked against the source's?
    ids: int = 0  # students whose Canvas ids OUT/canvas_ids.csv records

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
                      exercises: Collection[str] | None = None,
                      limits: ArchiveLimits = DEFAULT_LIMITS) -> Collected:
    """Read every download, choose each student's latest notebook per exercise, write them
    (and their timestamps) under ``out/submitted/``; the report has one line per member.
    ``exercises``: the source's exercise names, which a notebook's name must be one of (None:
    any plain name); Canvas's ids learned are recorded in ``out/canvas_ids.csv``."""
    check_out(out)
    _check_names(out, roster)
    if exercises is not None and exercise is not None and exercise not in exercises:
        raise CollectError(explained(f"--as {exercise}: no such exercise in the source (it "
                                     f"has {', '.join(sorted(exercises))})", [exercise],
                                     exercises))
    ids = _Ids(out / IDS_FILE if kind == "canvas" else None)
    report = Collected(checked=exercises is not None)
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
            whose = _identify(kind, member, shown, roster, pattern, metadata, key)
            if isinstance(whose, Line):
                report.lines.append(whose)
                continue
            ids.learn(whose[1].id, _learned(kind, whose[0].user, metadata, key))
            found = _exercise(whose[0], whose[1], member, shown, exercise, exercises)
            if isinstance(found, Line):
                report.lines.append(found)
            else:
                chosen.setdefault((found.student, found.exercise), []).append(
                    _Candidate(found.named, order, member, shown))
    for (student, name), candidates in sorted(chosen.items()):
        report.lines += _choose(out, student, name, candidates, metadata)
    report.lines += ids.record()
    report.ids = ids.recorded
    return report


def _learned(kind: str, user: str, metadata: Metadata | None, key: str | None
             ) -> dict[str, str]:
    """The Canvas ids a member's name (and the metadata of its user) give its student."""
    column = key or DIRECT_KEY[kind]
    if kind != "canvas" or column not in IDS_COLUMNS:
        return {}
    found = {column: user}
    submitted = metadata.by_user.get(user) if metadata and column == "canvas_id" else None
    if submitted is not None:
        found |= {c: v for c, v in submitted.keys.items() if c in IDS_COLUMNS and v}
    return {c: v for c, v in found.items() if usable_id(c, v)}


class _Ids:
    """The Canvas ids learned in one collection, merged into the record an earlier one left
    (read first: a record collect cannot read stops it before anything is written)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.recorded = 0
        try:
            before = read_ids(path) if path is not None and path.exists() else {}
        except PolicyError as exc:
            raise CollectError(str(exc)) from None
        self.seen: dict[tuple[str, str], set[str]] = {}  # (student, column) -> values
        for student, found in before.items():
            self.learn(student, found)

    def learn(self, student: str, found: dict[str, str]) -> None:
        for column, value in found.items():
            self.seen.setdefault((student, column), set()).add(value)

    def record(self) -> list[Line]:
        """Write the record (when there is one to write); a line per id not recorded."""
        if self.path is None or not self.seen:
            return []
        lines: list[Line] = []
        owners: dict[tuple[str, str], set[str]] = {}
        for (student, column), values in self.seen.items():
            for value in values:
                owners.setdefault((column, value), set()).add(student)
        ids: dict[str, dict[str, str]] = {}
        shown = self.path.name
        for (student, column), values in sorted(self.seen.items()):
            value = min(values)
            if len(values) > 1:
                lines.append(Line(shown, "", "", student, "", "id conflict",
                                  f"Canvas gave {student} two {column}s "
                                  f"({', '.join(sorted(values))}); neither is recorded "
                                  f"(give the right one in the roster's {column})"))
            elif len(others := owners[(column, value)]) > 1:
                lines.append(Line(shown, "", value, student, "", "id conflict",
                                  f"the {column} {value} was learned for "
                                  f"{', '.join(sorted(others))}; it is recorded for none "
                                  f"(check the roster and --metadata)"))
            else:
                ids.setdefault(student, {})[column] = value
        write_atomic(self.path, ids_csv(ids))
        self.recorded = len(ids)
        return lines


@dataclass(frozen=True)
class _Whose:
    named: Named
    student: str
    exercise: str


def _identify(kind: str, member: Member, download: str, roster: Roster,
              pattern: re.Pattern[str], metadata: Metadata | None,
              key: str | None) -> tuple[Named, Student] | Line:
    """Whose notebook the member is, or the report's line on why that cannot be told."""
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
    return named, student


def _exercise(named: Named, student: Student, member: Member, download: str,
              exercise: str | None, exercises: Collection[str] | None) -> _Whose | Line:
    """Which exercise the member answers, or the report's line on why it answers none: a copy
    of a notebook, a name that is not an exercise's (of the source's, when they are known)."""
    def refused(status: str, message: str) -> Line:
        return Line(download, member.shown, named.user, student.id, "", status, message)

    if exercise is not None:
        return _Whose(named, student.id, exercise)
    name, file = named.stem, repr(visible(named.file))
    if exercises is not None and name in exercises and PLAIN_STEM.fullmatch(name):
        return _Whose(named, student.id, name)
    copy = copy_of(name)
    if copy is not None and (exercises is None or copy.of in exercises):
        return refused("copy", f"{file} is {copy.how} of {visible(copy.of)}.ipynb, not an "
                       f"exercise of its own; not collected: if it is the student's "
                       f"{visible(copy.of)}, collect it by hand")
    if exercises is not None:
        return refused("not an exercise", explained(
            f"{file} matches no source notebook ({', '.join(sorted(exercises))}); not collected",
            [name, copy.of] if copy else [name], exercises))
    if not PLAIN_STEM.fullmatch(name):
        return refused("unusable name", f"{file} does not name an exercise "
                       "(letters, digits, _.+-); name the exercise with --as")
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
