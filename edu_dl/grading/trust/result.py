"""Reading a sandbox's result zip: the one thing that comes back from a student's run.

Careful because it is hostile input. The zip was written inside the sandbox, by a process the
student's code ran in, so it can be anything: not a zip at all, a zip bomb, thousands of members,
a ``run.json`` that is not JSON or not a dict, arrays whose headers lie about their size, object
arrays that would unpickle (and so run code) here in the grader. So:

- the whole result is at most ``max_bytes`` (the sandbox could not write more: RLIMIT_FSIZE, and
  the reader takes no more), with at most ``MAX_ENTRIES`` members;
- members must be STORED, as the runner and ``np.savez`` write them: nothing is ever decompressed,
  so a small member can never become a large one (no bzip2 or deflate bombs, ratio 1);
- every member is read once, its size bounded, and no array is loaded with pickle or before its
  header has been checked against its bytes.

- ``run.json`` is JSON no deeper than ``notebook.MAX_DEPTH`` and is read field by field into a
  :class:`RunRecord`: an entry of the wrong type or an unknown status is dropped, every text
  capped.

What cannot be read counts as a result never written (or, for a broken zip, as a problem of the
whole run): it can lose a student points, never gain them.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edu_dl.grading.model import Refused
from edu_dl.grading.protocol import EXECUTED, OUTPUT_MEMBER, RUN_RECORD, read_outputs
from edu_dl.grading.trust.notebook import too_deep

MAX_ENTRIES = 1000  # members of one result zip (and of one npz inside it)
MAX_ARRAY_BYTES = 64 << 20
MAX_RECORD_BYTES = 1 << 20  # run.json
MAX_CELLS = 10_000  # entries of run.json
RECORD_TEXT = 2000  # characters of a message in run.json (the runner keeps as many)
MAX_SECONDS = 86_400.0  # a duration in run.json: no run lasts a day (NaN and inf fail too)
# What the runner writes: a cell's status, and how the kernel ended.
CELL_STATUSES = frozenset({"ok", "error", "timeout", "not run", "died"})
KERNEL_STATES = frozenset({"ok", "budget", "stuck", "died", "failed", "unreadable",
                           "timeout"})  # timeout: a cell timed out, later cells were skipped


@dataclass(frozen=True)
class CellRecord:
    """One code cell as the runner recorded it."""

    index: int
    grade_id: str
    status: str  # one of CELL_STATUSES
    error: str = ""
    stderr: bool = False  # it wrote to stderr (nbgrader scores such a test cell 0)


@dataclass(frozen=True)
class RunRecord:
    """run.json, read field by field: what the runner says happened, cell by cell."""

    cells: tuple[CellRecord, ...] = ()
    kernel: str = ""  # one of KERNEL_STATES, or "" when the record said nothing usable
    message: str = ""
    output_cut: bool = False
    # Where the run's time went, as the runner says: for the cost report only, never a grade
    # (the grader clips both to the sandbox's wall time, which it measures itself).
    kernel_seconds: float = 0.0  # starting the kernel
    cells_seconds: float = 0.0  # running the cells, all of them
    gate_seconds: float = 0.0  # started ahead: waiting, kernel ready, for a slot to run in

    def cell(self, grade_id: str) -> CellRecord | None:
        return next((c for c in self.cells if c.grade_id == grade_id), None)


def _capped(value: Any) -> str:
    return value[:RECORD_TEXT] if isinstance(value, str) else ""


def _seconds(value: Any) -> float:
    """A duration the runner reported: a finite number of seconds in [0, MAX_SECONDS], else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if 0.0 <= value <= MAX_SECONDS else 0.0


def parse_record(raw: Any) -> RunRecord:
    """The record from run.json's JSON, keeping only what has the runner's types."""
    if not isinstance(raw, dict):
        return RunRecord()
    cells = raw.get("cells")
    kept = []
    cells_seconds = 0.0
    for entry in cells[:MAX_CELLS] if isinstance(cells, list) else []:
        if not isinstance(entry, dict):
            continue
        index, gid, status = entry.get("index"), entry.get("grade_id"), entry.get("status")
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(gid, str) \
                or not isinstance(status, str) or status not in CELL_STATUSES:
            continue
        kept.append(CellRecord(index, gid[:200], status, _capped(entry.get("error")),
                               entry.get("stderr") is True))
        cells_seconds += _seconds(entry.get("seconds"))
    kernel = raw.get("kernel")
    if not isinstance(kernel, str) or kernel not in KERNEL_STATES:
        kernel = ""
    return RunRecord(tuple(kept), kernel, _capped(raw.get("message")),
                     raw.get("output_cut") is True, _seconds(raw.get("kernel_seconds")),
                     min(cells_seconds, MAX_SECONDS), _seconds(raw.get("gate_seconds")))


@dataclass
class RunResult:
    """What a sandbox returned, read with every bound: all of it written by untrusted code."""

    record: RunRecord = field(default_factory=RunRecord)  # run.json: one entry per cell
    outputs: dict[str, list[Any]] = field(default_factory=dict)  # part -> results
    problem: str = ""  # why nothing could be read ("" when the result was read)
    executed: bytes = b""  # the executed notebook (not parsed here; at most max_notebook bytes)


def read_run(data: bytes, size: int, max_bytes: int, max_notebook: int) -> RunResult:
    """The result zip as a RunResult (see read_result); the executed notebook beside it."""
    record, outputs, problem = read_result(data, size, max_bytes)
    executed = b""
    if not problem:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            executed = _read(zf, EXECUTED, max_notebook) or b""
    return RunResult(parse_record(record), outputs, problem, executed)


def read_result(data: bytes, size: int, max_bytes: int
                ) -> tuple[dict[str, Any], dict[str, list[Any]], str]:
    """(run record, part -> results, problem) from the result the sandbox wrote.

    ``data`` is what was read back (at most ``max_bytes``); ``size`` how much of it the sandbox
    wrote, one more than ``max_bytes`` when it wrote more (the rest is never read).
    Per part: the last file a hidden check call wrote, else the last visible one.
    """
    if size == 0:
        return {}, {}, "the sandbox returned no result (the runner was killed or crashed)"
    if size > max_bytes or len(data) != size:
        return {}, {}, (f"refused: the result is over the limit of {max_bytes} bytes "
                        "(--file-size); nothing of it was read")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = _stored_members(zf, max_bytes)
            record = json.loads(_read(zf, RUN_RECORD, MAX_RECORD_BYTES) or b"{}")
            best: dict[str, tuple[tuple[bool, int], list[Any]]] = {}
            for info in infos:
                match = OUTPUT_MEMBER.match(info.filename)
                if match is None or info.file_size > MAX_ARRAY_BYTES:
                    continue
                parsed = _outputs(zf.read(info))
                if parsed is None:  # malformed by the student: as if never written
                    continue
                hidden, results = parsed
                rank = (hidden, int(match.group(2)))
                if match.group(1) not in best or rank > best[match.group(1)][0]:
                    best[match.group(1)] = (rank, results)
    except Refused as exc:
        return {}, {}, f"refused: {exc}"
    except (zipfile.BadZipFile, json.JSONDecodeError, OSError, ValueError, EOFError,
            NotImplementedError, RecursionError) as exc:
        return {}, {}, f"the result file is broken ({type(exc).__name__}: {str(exc)[:200]})"
    if not isinstance(record, dict) or too_deep(record):
        record = {}
    return record, {part: results for part, (_, results) in best.items()}, ""


def _stored_members(zf: zipfile.ZipFile, max_bytes: int) -> list[zipfile.ZipInfo]:
    """The members, checked: few enough, all STORED, their sizes summing to at most max_bytes."""
    infos = zf.infolist()
    if len(infos) > MAX_ENTRIES:
        raise Refused(f"the result has {len(infos)} members, over the limit of {MAX_ENTRIES}")
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
            raise Refused(f"member {info.filename[:80]!r} is compressed (method "
                          f"{info.compress_type}); results are stored uncompressed")
    total = sum(info.file_size for info in infos)
    if total > max_bytes:
        raise Refused(f"its members add up to {total} bytes, over the limit of {max_bytes}")
    return infos


def _read(zf: zipfile.ZipFile, name: str, limit: int) -> bytes | None:
    try:
        info = zf.getinfo(name)
    except KeyError:
        return None
    return zf.read(info) if info.file_size <= limit else None


def _outputs(data: bytes) -> tuple[bool, list[Any]] | None:
    """(hidden, results) of one check call's npz, or None if it is not plain, bounded data."""
    if not safe_npz(data):
        return None
    try:
        return read_outputs(io.BytesIO(data))
    except Exception:
        return None


def safe_npz(data: bytes, limit: int = MAX_ARRAY_BYTES) -> bool:
    """True when an npz is STORED, plain data, and every array's header fits its bytes."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_ENTRIES or sum(i.file_size for i in infos) > limit:
                return False
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED:
                    return False
                f = io.BytesIO(zf.read(info))
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(f)
                if dtype.hasobject or int(np.prod(shape, dtype=np.float64)) * dtype.itemsize \
                        > info.file_size:
                    return False
    except Exception:
        return False
    return True
