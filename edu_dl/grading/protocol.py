"""The grading protocol: every name, path and file layout the grader, the sandbox's runner and
``check()`` share, and the wire format of what crosses the sandbox's wall.

Inside the sandbox, ``$EDU_DL_GRADING_DIR`` (:data:`GRADING_ENV`) names a folder holding
``inputs/<part>.npz`` (the grader's cases, read-only); each ``check()`` call writes
``outputs/<part>.<k>.npz``. The runner packs :data:`RUN_RECORD`, :data:`EXECUTED` and
``outputs/`` into one STORED zip written to the descriptor in ``$EDU_DL_RESULT_FD``
(:data:`RESULT_FD_VAR`): the one thing the grader reads back (``results.read_run``). Every file is
plain NumPy data written with ``allow_pickle=False``: nothing that crosses is ever a pickle.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# --------------------------------------------------------------------------- names

GRADING_ENV = "EDU_DL_GRADING_DIR"  # set inside the sandbox: check() records, compares nothing
RESULT_FD_VAR = "EDU_DL_RESULT_FD"  # the descriptor the sandbox writes its result zip to
# Grading ahead: a pipe the runner reads one byte from, its kernel ready, before the first cell;
# the grader writes it when one of its --jobs slots is free (sandbox.Gate).
GATE_FD_VAR = "EDU_DL_GATE_FD"
# A part id: '<exercise>.<name>', e.g. 'ex08.relu_backward' (the course's) or 'hw1.squares' (an
# instructor's); the exercise names the file of Part specs that defines it (parts/ex08.py in the
# package, parts/hw1.py beside the source), the name is a Python identifier.
EXERCISE_ID = r"[A-Za-z][A-Za-z0-9_]{0,63}"
EXERCISE_NAME = re.compile(EXERCISE_ID)
PART_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
PART_ID = re.compile(rf"^({EXERCISE_ID})\.{PART_NAME}$")

# check()'s cases when it is not grading: the visible ones a release freezes, and the hidden
# ones an instructor's solutions check in the source folder.
VISIBLE_SEED = 20170418  # CS231n 2017, lecture 8: "Deep Learning Software"
HIDDEN_SEED = 8  # a different fixed seed: the instructor's hidden cells in normal mode

# --------------------------------------------------------------------------- layouts

INPUTS = "inputs"  # <grading dir>/inputs/<part>.npz: the grader's cases
OUTPUTS = "outputs"  # <grading dir>/outputs/<part>.<k>.npz: one per check() call
RUN_RECORD = "run.json"  # in the result zip: one entry per code cell
EXECUTED = "executed.ipynb"  # in the result zip: the notebook with its outputs
# A member of the result zip that holds one check() call's results: (part id, call number).
OUTPUT_MEMBER = re.compile(rf"^{OUTPUTS}/({EXERCISE_ID}\.{PART_NAME})\.(\d{{1,9}})\.npz$")


def inputs_path(grading_dir: str | Path, part_id: str) -> str:
    """Where a part's inputs lie inside the grading folder."""
    return f"{grading_dir}/{INPUTS}/{part_id}.npz"


def call_path(grading_dir: str | Path, part_id: str) -> str:
    """Where a part's own ``call=`` lies inside the grading folder, pickled by value (only for
    a part that has one): it runs the student's function in the sandbox, as check() does."""
    return f"{grading_dir}/{INPUTS}/{part_id}.call.pkl"


def output_name(part_id: str, k: int) -> str:
    """The file name of the k-th check() call's results for a part (k counts from 1)."""
    return f"{part_id}.{k}.npz"


def output_number(part_id: str, name: str) -> int | None:
    """k of an output file name written for ``part_id``, or None for any other name."""
    stem = name[len(part_id) + 1:-4]
    ok = name.startswith(f"{part_id}.") and name.endswith(".npz") and stem.isdigit()
    return int(stem) if ok else None


# --------------------------------------------------------------------------- the wire format


class ErrorText(str):
    """The text of an exception the student's function raised on a case (grading mode)."""


@dataclass(frozen=True)
class Guarded:
    """A case's result with what the guard saw the call do to its arguments (:class:`Finding`
    rows, parsed strictly by :func:`decode`): written beside the result as
    ``case<i>_guard``, only where the guard found something."""

    result: Any
    findings: tuple[Finding, ...]


WROTE, ALIASED = 0, 1  # what a finding says: the call wrote into an argument; returned it
MAX_FINDINGS = 64  # a case's findings that cross the wall (a part has far fewer arguments)
MAX_ARGUMENTS = 256  # an argument index past this is no argument of any part


@dataclass(frozen=True)
class Finding:
    """What a call did to case argument ``arg`` (its index in the part's case): ``kind``
    :data:`WROTE` (``changed``: how many of an array's entries, -1 when not counted) or
    :data:`ALIASED` (the result holds the argument's own memory)."""

    kind: int
    arg: int
    changed: int = -1

    def row(self) -> tuple[int, int, int]:
        return self.kind, self.arg, self.changed


def encode(found: Sequence[Finding]) -> np.ndarray:
    """Findings as the sandbox writes them: an (n, 3) int64 array of rows (kind, arg, changed)."""
    import numpy as np

    return np.array([f.row() for f in found], dtype=np.int64).reshape(-1, 3)


def decode(rows: Any) -> tuple[Finding, ...]:
    """Findings the sandbox wrote, parsed strictly (ValueError for anything else)."""
    import numpy as np

    a = np.asarray(rows)
    if a.dtype.kind not in "iu" or a.ndim != 2 or a.shape[1] != 3 or a.shape[0] > MAX_FINDINGS:
        raise ValueError("a guard record is an (n, 3) integer array")
    found = []
    for kind, arg, changed in a.tolist():
        if kind not in (WROTE, ALIASED) or not 0 <= arg < MAX_ARGUMENTS or changed < -1:
            raise ValueError(f"a guard record holds a row out of range: {(kind, arg, changed)}")
        found.append(Finding(int(kind), int(arg), int(changed)))
    return tuple(found)


def unguarded(result: Any) -> tuple[Any, tuple[Finding, ...]]:
    """(the result, the guard's findings) of a case's recorded result."""
    if isinstance(result, Guarded):
        return result.result, result.findings
    return result, ()


def as_array(value: Any) -> np.ndarray:
    """NumPy view of a result: CuPy and torch tensors are copied to the host first."""
    import numpy as np

    if hasattr(value, "get") and type(value).__module__.split(".")[0] == "cupy":
        value = value.get()
    if type(value).__module__.split(".")[0] == "torch":
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def savez(file: Any, arrays: dict[str, np.ndarray]) -> None:
    """np.savez refusing object arrays: nothing in these files is ever a pickle."""
    import numpy as np

    save: Any = np.savez  # its stub cannot type **arrays next to allow_pickle
    save(file, allow_pickle=False, **arrays)


def from_array(a: np.ndarray) -> Any:
    """A 0-d array back to a Python number or string; anything else stays an array."""
    return a.item() if a.ndim == 0 else a


def encode_cases(cases: Sequence[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    """Cases -> npz arrays: case{i}_arg{j}, n_cases, n_args (per case). No pickles."""
    import numpy as np

    arrays: dict[str, np.ndarray] = {"n_cases": np.array(len(cases)),
                                     "n_args": np.array([len(c) for c in cases], dtype=np.int64)}
    for i, args in enumerate(cases):
        for j, arg in enumerate(args):
            a = np.asarray(arg)
            if a.dtype.kind == "O":
                raise TypeError(f"case {i} argument {j}: {type(arg).__name__} cannot be saved "
                                "without pickle; use arrays, numbers or strings")
            arrays[f"case{i}_arg{j}"] = a
    return arrays


def decode_cases(arrays: Any) -> list[tuple[Any, ...]]:
    """Every case of an inputs npz, in order: the inverse of encode_cases."""
    return [decode_case(arrays, i) for i in range(int(arrays["n_cases"]))]


def decode_case(arrays: Any, i: int) -> tuple[Any, ...]:
    """Case ``i`` of an inputs npz (a mapping of arrays, as np.load gives)."""
    import numpy as np

    n_args = np.broadcast_to(np.asarray(arrays["n_args"]), (int(arrays["n_cases"]),))
    return tuple(from_array(np.asarray(arrays[f"case{i}_arg{j}"])) for j in range(int(n_args[i])))


def encode_inputs(cases: Sequence[tuple[Any, ...]]) -> bytes:
    """The npz file of a part's inputs, as bytes: handed to the sandbox read-only."""
    buffer = io.BytesIO()
    savez(buffer, encode_cases(cases))
    return buffer.getvalue()


def roundtrip(cases: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The cases exactly as the grader's npz file delivers them, so both modes see the same."""
    import numpy as np

    with np.load(io.BytesIO(encode_inputs(cases)), allow_pickle=False) as data:
        return decode_cases(data)


def write_inputs(path: str | Path, cases: Sequence[tuple[Any, ...]]) -> None:
    """The grader's side: <dir>/inputs/<part_id>.npz."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_inputs(cases))


def encode_result(i: int, result: Any) -> dict[str, np.ndarray]:
    """One case's result as npz arrays (a tuple output by output); ValueError for an object."""
    import numpy as np

    outputs = tuple(result) if isinstance(result, tuple | list) else (result,)
    arrays = {f"case{i}_tuple": np.array(isinstance(result, tuple | list)),
              f"case{i}_n_out": np.array(len(outputs))}
    for j, out in enumerate(outputs):
        a = as_array(out)
        if a.dtype.kind == "O":
            raise NotPlainData(f"output {j} is a {type(out).__name__}, not an array or a number")
        arrays[f"case{i}_out{j}"] = a
    return arrays


class NotPlainData(ValueError):
    """A result that cannot cross the wall without pickle."""


def read_outputs(path: Any) -> tuple[bool, list[Any]]:
    """The grader's side: (hidden, per case: the result (tuples rebuilt) or an error string)."""
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        hidden = bool(data["hidden"])
        results: list[Any] = []
        for i in range(int(data["n_cases"])):
            if f"case{i}_error" in data:
                result: Any = ErrorText(str(data[f"case{i}_error"]))
            else:
                result = decode_result(data, i)
            if f"case{i}_guard" in data:
                result = Guarded(result, decode(data[f"case{i}_guard"]))
            results.append(result)
    return hidden, results


def decode_result(arrays: Any, i: int, prefix: str = "") -> Any:
    """Case ``i``'s result as :func:`encode_result` wrote it (under ``prefix``): a tuple
    rebuilt output by output, or the one output."""
    n = int(arrays[f"{prefix}case{i}_n_out"])
    outputs = tuple(from_array(arrays[f"{prefix}case{i}_out{j}"]) for j in range(n))
    return outputs if bool(arrays[f"{prefix}case{i}_tuple"]) else outputs[0]


def skip_slow_optional_imports() -> None:
    """Keep jsonschema (under nbformat's validator) from importing rfc3987_syntax, which
    Jupyter's format checks install: it compiles ~40 grammars at import, 1-4 s for every
    process that reads a notebook (each sandbox's runner, each ``edu-dl`` command), for IRI
    formats no notebook uses. jsonschema skips that checker on ImportError, as when it is
    not installed."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
