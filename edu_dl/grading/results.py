"""Reading a sandbox's result zip: the one thing that comes back from a student's run.

Careful because it is hostile input. The zip was written inside the sandbox, by a process the
student's code ran in, so it can be anything: not a zip at all, a zip bomb, thousands of members,
a ``run.json`` that is not JSON or not a dict, arrays whose headers lie about their size, object
arrays that would unpickle (and so run code) here in the grader. So every read is bounded (the
file, each member, the number of entries), no array is loaded with pickle or before its header has
been checked against its bytes, and what cannot be read counts as a result never written (or, for
a broken zip, as a problem of the whole run): it can lose a student points, never gain them.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .checking import read_outputs

MAX_ENTRIES = 2000  # members read from one result zip
MAX_ARRAY_BYTES = 64 << 20
OUTPUT_NAME = re.compile(r"^outputs/(ex\d\d[a-z]?\.[A-Za-z_][A-Za-z0-9_]*)\.(\d+)\.npz$")


def read_result(path: Path, max_bytes: int) -> tuple[dict[str, Any], dict[str, list[Any]], str]:
    """(run record, part -> results, problem): the result zip read with every size bounded.

    Per part: the last file a hidden check call wrote, else the last visible one.
    """
    try:
        size = path.stat().st_size
    except OSError:
        return {}, {}, "the sandbox returned no result"
    if size == 0:
        return {}, {}, "the sandbox returned no result (the runner was killed or crashed)"
    if size > max_bytes:
        return {}, {}, f"the result file is too large ({size} bytes)"
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()[:MAX_ENTRIES]
            record = json.loads(_member(zf, "run.json", 1 << 20) or b"{}")
            chosen: dict[str, tuple[bool, int, str]] = {}
            for info in infos:
                match = OUTPUT_NAME.match(info.filename)
                if match:
                    part_id, k = match.group(1), int(match.group(2))
                    chosen.setdefault(part_id, (False, -1, ""))
                    data = _member(zf, info.filename, MAX_ARRAY_BYTES)
                    hidden = data is not None and _hidden_flag(data)
                    if (hidden, k) > chosen[part_id][:2]:
                        chosen[part_id] = (hidden, k, info.filename)
            outputs: dict[str, list[Any]] = {}
            for part_id, (_, _, name) in chosen.items():
                data = _member(zf, name, MAX_ARRAY_BYTES) if name else None
                if data is not None and safe_npz(data):
                    try:
                        _, results = read_outputs(io.BytesIO(data))  # type: ignore[arg-type]
                    except Exception:  # malformed by the student: as if never written
                        continue
                    outputs[part_id] = results
    except (zipfile.BadZipFile, json.JSONDecodeError, OSError, ValueError) as exc:
        return {}, {}, f"the result file is broken ({type(exc).__name__}: {exc})"
    if not isinstance(record, dict):
        record = {}
    return record, outputs, ""


def _member(zf: zipfile.ZipFile, name: str, limit: int) -> bytes | None:
    try:
        with zf.open(name) as f:
            data = f.read(limit + 1)
    except (KeyError, zipfile.BadZipFile, OSError, ValueError, NotImplementedError):
        return None
    return data if len(data) <= limit else None


def safe_npz(data: bytes, limit: int = MAX_ARRAY_BYTES) -> bool:
    """True when every array of an npz is plain data whose header fits its bytes (no pickle)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            if len(zf.infolist()) > MAX_ENTRIES:
                return False
            for info in zf.infolist():
                raw = _member(zf, info.filename, limit)
                if raw is None:
                    return False
                f = io.BytesIO(raw)
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(f)
                if dtype.hasobject or int(np.prod(shape, dtype=np.float64)) * dtype.itemsize \
                        > len(raw):
                    return False
    except Exception:
        return False
    return True


def _hidden_flag(data: bytes) -> bool:
    if not safe_npz(data):
        return False
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return bool(npz["hidden"])
    except Exception:
        return False
