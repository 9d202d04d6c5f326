"""The student side: ``check(part_id, fn)`` and the Part spec it runs.

Normal mode: draw the part's cases from a fixed seed, compute the expected results with the part's
oracle in this process, call the student's function, print a pass or one specific failure.
Grading mode (``EDU_DL_GRADING_DIR`` set by the grader, inside the sandbox): compare nothing; call
the function on the grader's inputs and record the raw results for the grader to judge outside.
"""

from __future__ import annotations

import copy
import io
import os
import sys
import traceback
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

GRADING_ENV = "EDU_DL_GRADING_DIR"
VISIBLE_SEED = 20170418  # CS231n 2017, lecture 8: "Deep Learning Software"
HIDDEN_SEED = 8  # a different fixed seed: the instructor's hidden cells in normal mode
MAX_SHOWN = 3  # differing entries shown in a message
GRADING_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Verdict:
    """A comparison's outcome: ok, and a message that says what differs (empty when ok)."""

    ok: bool
    message: str = ""

    def __bool__(self) -> bool:
        return self.ok


# --------------------------------------------------------------------------- comparing


def _as_array(value: Any) -> np.ndarray:
    """NumPy view of a result: CuPy and torch tensors are copied to the host first."""
    if hasattr(value, "get") and type(value).__module__.split(".")[0] == "cupy":
        value = value.get()
    if type(value).__module__.split(".")[0] == "torch":
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _kind(a: np.ndarray) -> str:
    """'number' for int/uint/float (they compare with each other), else the kind's name."""
    if a.dtype.kind in "iuf":
        return "number"
    return {"b": "bool", "c": "complex", "U": "string", "S": "bytes", "O": "object"}.get(
        a.dtype.kind, a.dtype.kind)


def _fmt(x: Any) -> str:
    """A number or string for a message: floats to 6 significant digits."""
    x = x.item() if hasattr(x, "item") and np.ndim(x) == 0 else x
    if isinstance(x, float):
        return f"{x:.6g}"
    text = repr(x)
    # A long argument (a whole /proc/cpuinfo, say) would bury the message: show its start.
    return text if len(text) <= 60 else f"{text[:45]}... ({len(text)} characters)"


def compare_arrays(expected: Any, got: Any, rtol: float = 1e-6, atol: float = 1e-8) -> Verdict:
    """One output: same shape and kind, then |got - expected| <= atol + rtol * |expected|."""
    e = _as_array(expected)
    try:
        g = _as_array(got)
    except Exception as exc:
        return Verdict(False, f"got a {type(got).__name__} that is not an array ({exc})")
    if g.dtype.kind == "O":
        return Verdict(False, f"expected an array of shape {e.shape}, got a {type(got).__name__}")
    if e.shape != g.shape:
        return Verdict(False, f"expected shape {e.shape}, got shape {g.shape}")
    if _kind(e) != _kind(g):
        return Verdict(False, f"expected {_kind(e)} values ({e.dtype}), got {_kind(g)} ({g.dtype})")
    if _kind(e) != "number":
        bad = e != g
    else:
        e64, g64 = e.astype(np.float64), g.astype(np.float64)
        bad = ~np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if not np.any(bad):
        return Verdict(True)
    if e.ndim == 0:
        return Verdict(False, f"expected {_fmt(e)}, got {_fmt(g)}")
    lines = [f"{int(np.count_nonzero(bad))} of {e.size} entries differ"]
    if _kind(e) == "number":
        if not np.all(np.isfinite(g64)):
            lines.append(f"got contains {int(np.count_nonzero(~np.isfinite(g64)))} inf/nan")
        err = np.abs(g64 - e64)
        finite = np.isfinite(err)
        if finite.any():
            # CS231n's relative error, |e - g| / max(1e-8, |e| + |g|): at most 1, also at e == 0
            rel = err[finite] / np.maximum(1e-8, np.abs(e64[finite]) + np.abs(g64[finite]))
            lines.append(f"max abs error {err[finite].max():.3g}, max rel error {rel.max():.3g} "
                         f"(tolerance: atol={atol:g} + rtol={rtol:g} * |expected|)")
    shown = [f"[{', '.join(map(str, idx))}] expected {_fmt(e[tuple(idx)])}, got "
             f"{_fmt(g[tuple(idx)])}" for idx in np.argwhere(bad)[:MAX_SHOWN]]
    return Verdict(False, "; ".join(lines) + "\n  first differing entries: " + "; ".join(shown))


def default_compare(expected: Any, got: Any, rtol: float = 1e-6, atol: float = 1e-8) -> Verdict:
    """Tuples output by output, arrays and numbers by shape, kind and np.isclose(rtol, atol)."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple | list):
            return Verdict(False, f"expected a tuple of {len(expected)} outputs, got a "
                                  f"{type(got).__name__}")
        if len(got) != len(expected):
            return Verdict(False, f"expected {len(expected)} outputs, got {len(got)}")
        for j, (e, g) in enumerate(zip(expected, got)):
            verdict = compare_arrays(e, g, rtol, atol)
            if not verdict.ok:
                return Verdict(False, f"output {j}: {verdict.message}")
        return Verdict(True)
    return compare_arrays(expected, got, rtol, atol)


def tolerance(rtol: float = 1e-6, atol: float = 1e-8) -> Callable[[Any, Any], Verdict]:
    """default_compare with a part's own tolerances."""

    def compare(expected: Any, got: Any) -> Verdict:
        return default_compare(expected, got, rtol=rtol, atol=atol)

    return compare


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    return fn(*args)


Hint = tuple[Callable[[Any, Any, tuple[Any, ...]], bool], str]


@dataclass(frozen=True)
class Part:
    """One graded part: its cases, the oracle, how to compare, and hints for typical mistakes.

    What decides the grade is judged outside the student's process (``grade.judge``), from data
    only: ``compare`` (the raw result against the oracle), ``result_check`` (the raw result
    against the case's arguments, for answers an oracle value cannot pin down) and
    ``source_check`` (the submitted source of the checked function, for parts that judge *how*
    an answer was computed). ``call`` runs inside the student's process, so whatever it checks
    or counts there is feedback for ``check()`` only: ``feedback_outputs`` names the outputs
    it observes (counts, flags), which the grader ignores.
    """

    id: str
    points: float
    cases: Callable[[np.random.Generator, bool], list[tuple[Any, ...]]]
    expected: Callable[..., Any]
    compare: Callable[[Any, Any], Verdict] = default_compare
    hints: tuple[Hint, ...] = ()
    call: Callable[[Callable[..., Any], tuple[Any, ...]], Any] = _call
    timeout_s: float = 10.0
    arg_names: tuple[str, ...] = ()  # only for messages: "dout (3, 4), x (3, 4)"
    output_names: tuple[str, ...] = ()  # only for messages: "output 1 (dw)"
    result_check: Callable[[Any, tuple[Any, ...]], Verdict] | None = None  # (got, args)
    source_check: Callable[[str], Verdict] | None = None  # the checked function's source text
    feedback_outputs: tuple[int, ...] = ()  # outputs observed in the sandbox: check() only


def describe_case(part: Part, index: int, n_cases: int, args: tuple[Any, ...]) -> str:
    """'case 2 of 4 (dout (3, 5), x (3, 4))': the failing case, by its arguments' shapes."""
    shown = []
    for j, arg in enumerate(args):
        name = part.arg_names[j] if j < len(part.arg_names) else f"arg{j}"
        a = np.asarray(arg)
        shown.append(f"{name} {a.shape}" if a.ndim else f"{name}={_fmt(a)}")
    return f"case {index + 1} of {n_cases} ({', '.join(shown)})"


def _first_hint(part: Part, expected: Any, got: Any, args: tuple[Any, ...]) -> str | None:
    for predicate, hint in part.hints:
        try:
            if predicate(expected, got, args):
                return hint
        except Exception:  # a hint that cannot judge this answer simply does not apply
            continue
    return None


# A result may hold at most this many times the values of the expected one (plus a slack for
# short answers): a far larger one fails at once, before any comparison or hint touches it.
SIZE_FACTOR = 4
SIZE_SLACK = 4096


def result_size(value: Any, depth: int = 0) -> int:
    """How many values a result holds (characters for strings), without converting it."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "U":
            return int(value.nbytes) // 4
        return int(value.nbytes) if value.dtype.kind in "SV" else int(value.size)
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple | list):
        if depth >= 2 or len(value) > SIZE_SLACK:
            return len(value)
        return sum(result_size(v, depth + 1) for v in value)
    return 1


def size_verdict(expected: Any, got: Any) -> Verdict:
    """Refuse a result hugely larger than the expected one (bounded work on the trusted side)."""
    want, have = result_size(expected), result_size(got)
    if have > SIZE_FACTOR * want + SIZE_SLACK:
        return Verdict(False, f"the result holds {have} values where {want} are expected; "
                              "not compared")
    return Verdict(True)


def trusted_result(part: Part, expected: Any, got: Any) -> Any:
    """The result as the grader judges it: outputs observed inside the sandbox (counts, flags
    the student's process could forge) replaced by their expected values, i.e. ignored."""
    if not part.feedback_outputs or not isinstance(expected, tuple) or \
            not isinstance(got, tuple | list) or len(got) != len(expected):
        return got
    return tuple(expected[j] if j in part.feedback_outputs else g for j, g in enumerate(got))


def judge_case(part: Part, index: int, n_cases: int, args: tuple[Any, ...], expected: Any,
               got: Any) -> Verdict:
    """Compare one case and, on a failure, say which case, what differs and the first hint."""
    verdict = size_verdict(expected, got)
    if not verdict.ok:  # no hint either: hints may walk the result
        return Verdict(False, f"{describe_case(part, index, n_cases, args)}: {verdict.message}")
    try:
        verdict = part.compare(expected, got)
        if verdict.ok and part.result_check is not None:
            verdict = part.result_check(got, args)
    except Exception as exc:
        verdict = Verdict(False, f"could not compare the result ({type(exc).__name__}: {exc})")
    if verdict.ok:
        return verdict
    message = verdict.message
    if part.output_names and message.startswith("output "):
        j = int(message.split(":", 1)[0].split()[1])
        if j < len(part.output_names):
            message = f"output {j} ({part.output_names[j]})" + message[message.index(":"):]
    lines = [f"{describe_case(part, index, n_cases, args)}: {message}"]
    hint = _first_hint(part, expected, got, args)
    if hint:
        lines.append(f"  hint: {hint}")
    return Verdict(False, "\n".join(lines))


# --------------------------------------------------------------------------- serialization


def encode_cases(cases: Sequence[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    """Cases -> npz arrays: case{i}_arg{j}, n_cases, n_args (per case). No pickles."""
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


def _savez(file: Any, arrays: dict[str, np.ndarray]) -> None:
    """np.savez refusing object arrays: nothing in these files is ever a pickle."""
    savez: Any = np.savez  # its stub cannot type **arrays next to allow_pickle
    savez(file, allow_pickle=False, **arrays)


def _from_array(a: np.ndarray) -> Any:
    """A 0-d array back to a Python number or string; anything else stays an array."""
    return a.item() if a.ndim == 0 else a


def decode_cases(arrays: Any) -> list[tuple[Any, ...]]:
    n_cases = int(arrays["n_cases"])
    n_args = np.broadcast_to(np.asarray(arrays["n_args"]), (n_cases,))
    return [tuple(_from_array(np.asarray(arrays[f"case{i}_arg{j}"])) for j in range(int(n_args[i])))
            for i in range(n_cases)]


def roundtrip(cases: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The cases exactly as the grader's npz file delivers them, so both modes see the same."""
    buffer = io.BytesIO()
    _savez(buffer, encode_cases(cases))
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as data:
        return decode_cases(data)


def write_inputs(path: str | Path, cases: Sequence[tuple[Any, ...]]) -> None:
    """The grader's side: <dir>/inputs/<part_id>.npz."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        _savez(f, encode_cases(cases))


def read_outputs(path: str | Path) -> tuple[bool, list[Any]]:
    """The grader's side: (hidden, per case: the result (tuples rebuilt) or an error string)."""
    with np.load(path, allow_pickle=False) as data:
        hidden = bool(data["hidden"])
        results: list[Any] = []
        for i in range(int(data["n_cases"])):
            if f"case{i}_error" in data:
                results.append(ErrorText(str(data[f"case{i}_error"])))
            elif bool(data[f"case{i}_tuple"]):
                n = int(data[f"case{i}_n_out"])
                results.append(tuple(_from_array(data[f"case{i}_out{j}"]) for j in range(n)))
            else:
                results.append(_from_array(data[f"case{i}_out0"]))
    return hidden, results


class CheckFailure(Exception):
    """Raised by a Part's ``call`` to fail a case with its own message (no traceback shown)."""


class ErrorText(str):
    """The text of an exception the student's function raised on a case (grading mode)."""


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


def check(part_id: str, fn: Callable[..., Any], hidden: bool = False) -> bool:
    """Check ``fn`` against part ``part_id``; print a pass or a specific failure; never raise."""
    try:
        if os.environ.get(GRADING_ENV):
            return _record(Path(os.environ[GRADING_ENV]), part_id, fn, hidden)
        return _check(part_id, fn, hidden)
    except UnknownPart as exc:
        print(f"✗ {part_id}: unknown part ({exc})")
        return False
    except Exception as exc:  # a broken part spec must not crash the student's notebook
        print(f"✗ {part_id}: internal error in the checker ({type(exc).__name__}: {exc})")
        return False


class UnknownPart(Exception):
    """check() was given a part id that no parts module defines."""


def _get(part_id: str) -> Part:
    from .parts import get

    try:
        return get(part_id)
    except KeyError as exc:
        raise UnknownPart(exc.args[0] if exc.args else part_id) from None


def _check(part_id: str, fn: Callable[..., Any], hidden: bool) -> bool:
    part = _get(part_id)
    rng = np.random.default_rng(HIDDEN_SEED if hidden else VISIBLE_SEED)
    cases = roundtrip(part.cases(rng, hidden))
    for i, args in enumerate(cases):
        expected = part.expected(*copy.deepcopy(args))
        try:
            got = part.call(fn, copy.deepcopy(args))  # a copy: the student may write into inputs
        except NotImplementedError:
            print(f"✗ {part_id}: not implemented yet")
            return False
        except Exception as exc:
            what = "failed" if isinstance(exc, CheckFailure) else "raised"
            print(f"✗ {part_id}: {describe_case(part, i, len(cases), args)} {what}: "
                  f"{student_error(exc)}")
            return False
        verdict = judge_case(part, i, len(cases), args, expected, got)
        if not verdict.ok:
            print(f"✗ {part_id}: {verdict.message}")
            return False
    if part.source_check is not None:  # what the grader will judge from the notebook's source
        from .source import judge_source, own_source

        text = own_source(fn)
        verdict = judge_source(part, text) if text is not None else Verdict(True)
        if not verdict.ok:
            print(f"✗ {part_id}: the values are right, but {verdict.message}")
            return False
    kind = "hidden cases" if hidden else "cases"
    print(f"✓ {part_id}: {len(cases)} {kind} passed")
    return True


def _encode_result(i: int, result: Any) -> dict[str, np.ndarray]:
    outputs = tuple(result) if isinstance(result, tuple | list) else (result,)
    arrays = {f"case{i}_tuple": np.array(isinstance(result, tuple | list)),
              f"case{i}_n_out": np.array(len(outputs))}
    for j, out in enumerate(outputs):
        a = _as_array(out)
        if a.dtype.kind == "O":
            raise CheckFailure(f"output {j} is a {type(out).__name__}, not an array or a number")
        arrays[f"case{i}_out{j}"] = a
    return arrays


def _record(root: Path, part_id: str, fn: Callable[..., Any], hidden: bool) -> bool:
    """Grading mode: results for the grader's inputs, written to outputs/<part_id>.<k>.npz."""
    part = _get(part_id)
    with np.load(root / "inputs" / f"{part_id}.npz", allow_pickle=False) as data:
        cases = decode_cases(data)
    arrays: dict[str, np.ndarray] = {"hidden": np.array(hidden), "n_cases": np.array(len(cases))}
    for i, args in enumerate(cases):
        try:
            arrays.update(_encode_result(i, part.call(fn, args)))
        except NotImplementedError:
            arrays[f"case{i}_error"] = np.array("not implemented yet")
        except Exception as exc:
            arrays[f"case{i}_error"] = np.array(student_error(exc))
    out_dir = root / "outputs"
    out_dir.mkdir(parents=True, exist_ok=True)
    taken = [int(p.name[len(part_id) + 1:-4]) for p in out_dir.glob(f"{part_id}.*.npz")
             if p.name[len(part_id) + 1:-4].isdigit()]
    k = max(taken, default=0) + 1  # never overwrite an earlier call's file
    tmp = out_dir / f".{part_id}.{k}.npz.tmp"
    with open(tmp, "wb") as f:
        _savez(f, arrays)
    os.replace(tmp, out_dir / f"{part_id}.{k}.npz")
    print(f"{part_id}: results recorded for grading")
    sys.stdout.flush()
    return True


def global_names(code: types.CodeType) -> set[str]:
    """Names a function's code looks up, nested functions and comprehensions included.

    For parts that also check *how* an answer was computed (e.g. through ``get_xp``); the
    grade itself still rests on values compared outside the student's process.
    """
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names
