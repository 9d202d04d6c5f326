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
import re
import sys
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.grading import protocol
from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.guard import CheckTimeout, time_limit
from edu_dl.grading.authoring.parts import get
from edu_dl.grading.authoring.release import visible_cases
from edu_dl.grading.authoring.source import judge_source, own_source
from edu_dl.grading.authoring.spec import (
    CheckFailure,
    Part,
    Verdict,
    describe_case,
    global_names,
    judge_case,
    plain_call,
    uses_named,
)
from edu_dl.grading.protocol import GRADING_ENV, HIDDEN_SEED, VISIBLE_SEED  # noqa: F401 (re-exported)

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


def check(part_id: str, fn: Callable[..., Any], hidden: bool = False,
          timeout_s: float | None = None) -> Outcome:
    """Check ``fn`` against part ``part_id``: print the ✓ line and return a true Outcome, or
    raise CheckFailed with a ✗ line per case and a hint (an unknown part and a broken part spec
    too: a check that did not pass must fail the cell). Grading mode records and never raises.

    ``timeout_s``: how long the function may run over all the cases (default: the part's
    ``timeout_s``); a function still running then is stopped, and the report says where."""
    if os.environ.get(GRADING_ENV):
        try:
            return Outcome(_record(Path(os.environ[GRADING_ENV]), part_id, fn, hidden))
        except Exception as exc:  # the grader judges what was recorded, outside
            print(f"✗ {part_id}: internal error in the checker ({type(exc).__name__}: {exc})")
            return Outcome(False)
    try:
        passed, report = _check(part_id, fn, hidden, timeout_s)
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


def _check(part_id: str, fn: Callable[..., Any], hidden: bool,
           timeout_s: float | None = None, blame: bool = True) -> tuple[bool, str]:
    """(passed, report); remembers the outcome for the parts that use this one (``uses``)."""
    part = _get(part_id)
    drawn = visible_cases(part, hidden)
    if not drawn and hidden:
        return False, (f"✗ {part_id}: no hidden cases here (the student version holds the "
                       "visible ones only; your instructor grades the hidden ones)")
    passed, report = _run_cases(part, fn, drawn, hidden,
                                part.timeout_s if timeout_s is None else timeout_s)
    _OUTCOMES[part_id] = (passed, fn)
    if not passed and blame and not report.startswith(f"✗ {part_id}: not implemented yet"):
        failing = _failing_dependencies(part, fn)
        if failing:
            said = ", ".join(f"`{name}`" for _, name in failing)
            ids = ", ".join(dep for dep, _ in failing)
            verb = "fails its" if len(failing) == 1 else "fail their"
            head, _, rest = report.partition("\n")
            report = (f"✗ {part_id}: your {said} {verb} own check ({ids}); fix it first\n"
                      f"  {head.removeprefix('✗ ').removeprefix(f'{part_id}: ')}\n{rest}")
    return passed, report.rstrip("\n")


def _run_cases(part: Part, fn: Callable[..., Any], drawn: list[tuple[Any, Any]], hidden: bool,
               timeout_s: float) -> tuple[bool, str]:
    """Every case, a line each (✓ or ✗); the first failure in full, the hint on its own line."""
    n = len(drawn)
    lines: list[str] = []
    failed = 0
    left = timeout_s
    for i, (args, expected) in enumerate(drawn):
        case = describe_case(part, i, n, args)
        given = copy.deepcopy(args)  # args stays as drawn: what the function was given
        watched = guard.Watched()
        start = time.perf_counter()
        try:
            with time_limit(max(left, 1e-3)), guard.watching(watched):
                got = part.call(fn, given)
        except NotImplementedError as exc:
            # A stub of the student's own package names itself ('Tape.matmul in
            # mytorch/tape.py is not written yet'): which earlier piece this one waits for.
            said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            return False, f"✗ {part.id}: not implemented yet" + (f" ({said})" if said else "")
        except CheckTimeout:
            failed += 1
            lines += [f"✗ {case} was still running when check()'s time bound of "
                      f"{timeout_s:g} s ran out, so check() stopped it there (an endless "
                      "loop, or far more work than needed?)",
                      "    a slow machine? check(..., timeout_s=60) gives it longer"]
            break
        except Exception as exc:
            what = "failed" if isinstance(exc, CheckFailure) else "raised"
            found = guard.findings(args, given, watched)
            if not found:
                failed += 1
                error = student_error(exc).splitlines() or [""]
                lines += [f"✗ {case} {what}: {error[0]}",
                          *(f"    {t.strip()}" for t in error[1:])]
                continue
            # a write that made the call fail afterwards (a harness reads the arguments): the
            # write is the cause, said first
            verdict = guard.judged(part, i, n, args, found,
                                   Verdict(False, f"{case}: {what} {student_error(exc)}"))
        else:  # the same guard and the same words as the grader's judge (guard.judged)
            verdict = guard.judged(part, i, n, args, guard.findings(args, given, watched),
                                   judge_case(part, i, n, args, expected, got))
        finally:
            left -= time.perf_counter() - start
        if verdict.ok:
            lines.append(f"✓ case {i + 1} of {n}")
            continue
        failed += 1
        detail = verdict.message.splitlines()
        lines.append(f"✗ {detail[0]}")
        if failed == 1:  # the first failure in full; later ones by their first line
            lines += [f"    {shown}" for shown in _small_inputs(part, args)]
            lines += [f"  {d}" for d in detail[1:]]
    if failed:
        passed = sum(1 for line in lines if line.startswith("✓"))
        head = f"✗ {part.id}: {passed} of {n} cases passed"
        return False, "\n".join([head, *_layout(lines, "  ")])
    if part.source_check is not None:  # what the grader will judge from the notebook's source
        module = str(getattr(fn, "__module__", "") or "")
        if module.partition(".")[0] == "edu_dl":  # a course stand-in: not the answer
            return False, (f"✗ {part.id}: the values are right, but "
                           f"`{getattr(fn, '__name__', fn)}` is the course's ({module}), not "
                           "yours: the grader reads your own definition, so this part earns "
                           "nothing until you write it")
        text = own_source(fn)
        verdict = judge_source(part, text) if text is not None else Verdict(True)
        if not verdict.ok:
            return False, f"✗ {part.id}: the values are right, but {verdict.message}"
    kind = "hidden cases" if hidden else "cases"
    return True, f"✓ {part.id}: {n} {kind} passed"


WIDTH = 92  # a report's lines wrap here, at spaces only: a number is never split
# A report's layout: the ✗ header, a line per case indented 2, a failure's details 6; a line
# wrapped goes on 2 deeper (4 or 8), which is how :func:`unwrapped` finds it.
CONTINUED = re.compile(r"\n(?:    |        )(?! )")


def unwrapped(report: str) -> str:
    """A report with its wrapped lines joined again (for tools and tests that search it)."""
    return CONTINUED.sub(" ", report)


def _layout(lines: list[str], indent: str) -> list[str]:
    """Each line indented, and wrapped at spaces (continuations indented under it)."""
    out = []
    for line in lines:
        body = line.lstrip(" ")
        lead = indent + " " * (len(line) - len(body))
        out += textwrap.wrap(body, WIDTH, initial_indent=lead, subsequent_indent=lead + "  ",
                             break_long_words=False, break_on_hyphens=False) or [lead]
    return out


SMALL_INPUT = 12  # arrays up to this many values are shown in a failing case's report


def _small_inputs(part: Part, args: tuple[Any, ...]) -> list[str]:
    """'x = [[1, 2], [3, 4]]' for each small array argument of a case (none for large ones)."""
    shown = []
    for j, arg in enumerate(args):
        if not isinstance(arg, np.ndarray) or not 0 < arg.size <= SMALL_INPUT or arg.ndim == 0 \
                or arg.dtype.kind not in "biuf":
            continue
        name = part.arg_names[j] if j < len(part.arg_names) else f"arg{j}"
        text = np.array2string(arg, separator=", ", threshold=SMALL_INPUT, max_line_width=10_000,
                               formatter={"float_kind": lambda v: f"{v:.4g}"})
        shown.append(f"{name} = {' '.join(text.split())}")
    return shown


# --------------------------------------------------------------------------- dependencies

# The last outcome of check() for each part in this kernel, with the function it checked:
# a failing part that uses another's function says first when that one fails its own check.
_OUTCOMES: dict[str, tuple[bool, Callable[..., Any]]] = {}


def _failing_dependencies(part: Part, fn: Callable[..., Any]) -> list[tuple[str, str]]:
    """(part id, function name) of the student's functions ``fn`` uses that fail their check:
    the parts ``part.uses`` names, and any function ``fn``'s code names that failed its check
    in this kernel. A declared one that was never checked (or redefined since) is checked now,
    quietly."""
    # A class has no globals of its own: its module's (a package's, or the notebook's).
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    scope = getattr(fn, "__globals__", None) or (vars(module) if module is not None else {})
    code = getattr(fn, "__code__", None)
    named = global_names(code) if code is not None else set()
    found: list[tuple[str, str]] = []
    declared = dict(uses_named(entry) for entry in part.uses)
    for dep in dict.fromkeys([*declared, *_OUTCOMES]):
        if dep == part.id:
            continue
        passed, checked = _OUTCOMES.get(dep, (True, None))
        name = getattr(checked, "__name__", "") if checked is not None else ""
        if not name.isidentifier():
            name = declared.get(dep) or dep.partition(".")[2]
        current = scope.get(name)
        if checked is not None and current is checked:
            if not passed and (dep in declared or name in named):
                found.append((dep, name))
        elif dep in declared and callable(current):
            try:
                ok, _ = _check(dep, current, False, blame=False)
            except Exception:  # a dependency that cannot be checked blames nobody
                continue
            if not ok:
                found.append((dep, name))
    return found


def _encode_result(i: int, result: Any) -> dict[str, np.ndarray]:
    """protocol.encode_result, failing the case (CheckFailure) on a result that is no data."""
    try:
        return protocol.encode_result(i, result)
    except protocol.NotPlainData as exc:
        raise CheckFailure(str(exc)) from None


def _call_case(call: Callable[..., Any], fn: Callable[..., Any], inputs: str, i: int
               ) -> tuple[dict[str, np.ndarray], list[Any], guard.Watched]:
    """Case i's result (or error) as npz arrays, with the arguments a call could write into as
    it left them and what it watched: ``call(fn, case i)``, the case read from the inputs file
    straight into the call: while the student's function runs, no frame of the grader's code
    holds a case's plain values (a part's own ``call=`` keeps none either: see the threat
    model), only references to the mutable arguments the function is handed anyway."""
    kept: list[Any] = []
    watched = guard.Watched()
    try:
        with guard.watching(watched):
            arrays = _encode_result(i, call(fn, _keeping(_read_case(inputs, i), kept)))
    except NotImplementedError:
        arrays = {f"case{i}_error": np.array("not implemented yet")}
    except Exception as exc:
        arrays = {f"case{i}_error": np.array(student_error(exc))}
    return arrays, kept, watched


_UNKEPT = object()  # an argument no call can write into (a number, a string): not kept


def _keeping(case: tuple[Any, ...], kept: list[Any]) -> tuple[Any, ...]:
    """``case``, with references to its mutable arguments put in ``kept`` (_UNKEPT for the
    others: a timer's kernel duration must not sit where its frame-walking timer finds it)."""
    kept.extend(value if _mutable(value) else _UNKEPT for value in case)
    return case


def _mutable(value: Any) -> bool:
    if isinstance(value, int | float | complex | str | bytes | np.generic) or value is None:
        return False
    if isinstance(value, tuple):
        return any(_mutable(v) for v in value)
    return True


def _as_left(case: tuple[Any, ...], kept: list[Any]) -> tuple[Any, ...]:
    """The arguments as the call left them: the kept ones, and the unkept from the file."""
    return tuple(original if value is _UNKEPT else value for original, value in zip(case, kept))


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
    called = []
    for i in range(count):
        case_arrays, kept, watched = _call_case(call, fn, inputs, i)
        arrays.update(case_arrays)
        called.append((kept, watched))
    # What the guard found (case<i>_guard, where it found something): each case as the calls
    # left it against the inputs file, read again once all calls are done.
    with np.load(inputs, allow_pickle=False) as data:
        for i, (kept, watched) in enumerate(called):
            case = protocol.decode_case(data, i)
            found = guard.findings(case, _as_left(case, kept), watched)
            if found:
                arrays[f"case{i}_guard"] = protocol.encode(found)
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
