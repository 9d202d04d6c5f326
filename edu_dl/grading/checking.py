"""``check(part_id, fn)``: the student's side of a part (the spec is ``spec.py``, the wire format
``protocol.py``).

Normal mode: draw the part's cases from a fixed seed, compute the expected results with the part's
oracle in this process, call the student's function, print a pass or raise one specific failure
(CheckFailed, an AssertionError).
Grading mode (``EDU_DL_GRADING_DIR`` set by the grader, inside the sandbox): compare nothing; call
the function on the grader's inputs and record the raw results for the grader to judge outside.
"""

from __future__ import annotations

import copy
import os
import pickle
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import protocol
from .parts import get
from .protocol import GRADING_ENV, HIDDEN_SEED, VISIBLE_SEED  # noqa: F401 (re-exported)
from .release import visible
from .source import judge_source, own_source
from .spec import CheckFailure, Part, Verdict, describe_case, judge_case, plain_call

GRADING_DIR = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- student errors


def student_error(exc: BaseException) -> str:
    """'ValueError: ... (line 3 in relu_backward: return dout @ x)': the student's frame only."""
    if isinstance(exc, CheckFailure):
        return str(exc)
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not f.filename.startswith(str(GRADING_DIR))
           and "site-packages" not in f.filename and "/lib/python" not in f.filename]
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if own or frames:
        frame = (own or frames)[-1]
        where = f"line {frame.lineno} in {frame.name}"
        if frame.line:
            where += f": {frame.line.strip()}"
        text += f"\n  at {where}"
    return text


# --------------------------------------------------------------------------- check()


class Outcome:
    """What check() returns when the part passed (true). A notebook shows nothing for it, since
    check() has printed the verdict already (a bare `True` under it would only be noise)."""

    __slots__ = ("passed", "report")

    def __init__(self, passed: bool, report: str = "") -> None:
        self.passed = passed
        self.report = report  # the ✓ or ✗ line check() printed or raised (grading mode: "")

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return f"Outcome(passed={self.passed})"

    def _ipython_display_(self) -> None:
        """IPython calls this instead of printing the repr: display nothing."""


class CheckFailed(AssertionError):
    """A failing check(), outside grading mode: its report is the ✗ line and the hint.

    An AssertionError, as a failing ``assert`` in a test cell: nbgrader's autograde (an error output
    scores the cell 0), nbval, pytest and "Run All" (it stops here) all see a failure. IPython
    shows the report alone (``_render_traceback_``), not a traceback into the checker."""

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.report = report

    def _render_traceback_(self) -> list[str]:
        """IPython's hook: the lines shown for the exception, in place of its traceback."""
        return self.report.splitlines()


def check(part_id: str, fn: Callable[..., Any], hidden: bool = False) -> Outcome:
    """Check ``fn`` against part ``part_id``: print the ✓ line and return a true Outcome, or
    raise CheckFailed with the ✗ line and a hint (an unknown part and a broken part spec too:
    a check that did not pass must fail the cell). Grading mode records and never raises."""
    if os.environ.get(GRADING_ENV):
        try:
            return Outcome(_record(Path(os.environ[GRADING_ENV]), part_id, fn, hidden))
        except Exception as exc:  # the grader judges what was recorded, outside
            print(f"✗ {part_id}: internal error in the checker ({type(exc).__name__}: {exc})")
            return Outcome(False)
    try:
        passed, report = _check(part_id, fn, hidden)
    except UnknownPart as exc:
        raise CheckFailed(f"✗ {part_id}: unknown part ({exc})") from None
    except Exception as exc:  # a broken part spec: a failure the student can read, its cause kept
        raise CheckFailed(f"✗ {part_id}: internal error in the checker "
                          f"({type(exc).__name__}: {exc})") from exc
    if not passed:
        raise CheckFailed(report)
    print(report)
    return Outcome(True, report)


class UnknownPart(Exception):
    """check() was given a part id that no parts module defines."""


def _get(part_id: str) -> Part:
    try:
        return get(part_id, local=not os.environ.get(GRADING_ENV))  # the sandbox: never
    except KeyError as exc:
        raise UnknownPart(exc.args[0] if exc.args else part_id) from None


def _check(part_id: str, fn: Callable[..., Any], hidden: bool) -> tuple[bool, str]:
    part = _get(part_id)
    drawn = visible(part, hidden)
    if not drawn and hidden:
        return False, (f"✗ {part_id}: no hidden cases here (the student version holds the "
                       "visible ones only; your instructor grades the hidden ones)")
    cases = [args for args, _ in drawn]
    for i, (args, expected) in enumerate(drawn):
        try:
            got = part.call(fn, copy.deepcopy(args))  # a copy: the student may write into inputs
        except NotImplementedError:
            return False, f"✗ {part_id}: not implemented yet"
        except Exception as exc:
            what = "failed" if isinstance(exc, CheckFailure) else "raised"
            return False, (f"✗ {part_id}: {describe_case(part, i, len(cases), args)} {what}: "
                           f"{student_error(exc)}")
        verdict = judge_case(part, i, len(cases), args, expected, got)
        if not verdict.ok:
            return False, f"✗ {part_id}: {verdict.message}"
    if part.source_check is not None:  # what the grader will judge from the notebook's source
        text = own_source(fn)
        verdict = judge_source(part, text) if text is not None else Verdict(True)
        if not verdict.ok:
            return False, f"✗ {part_id}: the values are right, but {verdict.message}"
    kind = "hidden cases" if hidden else "cases"
    return True, f"✓ {part_id}: {len(cases)} {kind} passed"


def _encode_result(i: int, result: Any) -> dict[str, np.ndarray]:
    """protocol.encode_result, failing the case (CheckFailure) on a result that is no data."""
    try:
        return protocol.encode_result(i, result)
    except protocol.NotPlainData as exc:
        raise CheckFailure(str(exc)) from None


def _call_case(call: Callable[..., Any], fn: Callable[..., Any], inputs: str, i: int) -> Any:
    """``call(fn, case i)``, the case read from the inputs file straight into the call: while
    the student's function runs, no frame of the grader's code holds a case (a part's own
    ``call=`` keeps none either: see the threat model)."""
    return call(fn, _read_case(inputs, i))


def _read_case(inputs: str, i: int) -> tuple[Any, ...]:
    with np.load(inputs, allow_pickle=False) as data:
        return protocol.decode_case(data, i)


def _record(root: Path, part_id: str, fn: Callable[..., Any], hidden: bool) -> bool:
    """Grading mode: results for the grader's inputs, written to outputs/<part_id>.<k>.npz.

    No part file reaches the sandbox: a part's own ``call=`` comes pickled beside its inputs
    (prepare.py sends it), else the function is called plainly, fn(*args). Either way the results
    are judged outside, with the part the grader loaded."""
    call = plain_call
    pickled = Path(protocol.call_path(root, part_id))
    if pickled.is_file():
        call = pickle.loads(pickled.read_bytes())  # from the grader, never from a submission
    inputs = protocol.inputs_path(root, part_id)
    with np.load(inputs, allow_pickle=False) as data:
        count = int(data["n_cases"])
    arrays: dict[str, np.ndarray] = {"hidden": np.array(hidden), "n_cases": np.array(count)}
    for i in range(count):
        try:
            arrays.update(_encode_result(i, _call_case(call, fn, inputs, i)))
        except NotImplementedError:
            arrays[f"case{i}_error"] = np.array("not implemented yet")
        except Exception as exc:
            arrays[f"case{i}_error"] = np.array(student_error(exc))
    out_dir = root / protocol.OUTPUTS
    out_dir.mkdir(parents=True, exist_ok=True)
    taken = [protocol.output_number(part_id, p.name) for p in out_dir.glob(f"{part_id}.*.npz")]
    k = max((t for t in taken if t is not None), default=0) + 1  # never overwrite an earlier call
    name = protocol.output_name(part_id, k)
    tmp = out_dir / f".{name}.tmp"
    with open(tmp, "wb") as f:
        protocol.savez(f, arrays)
    os.replace(tmp, out_dir / name)
    print(f"{part_id}: results recorded for grading")
    sys.stdout.flush()
    return True
