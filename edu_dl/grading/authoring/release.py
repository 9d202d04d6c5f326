"""The student release of an exercise's parts: data, not code (``parts/<exercise>.npz``).

``edu-dl assign`` draws each part's visible cases (the seed ``check()`` uses), computes the
expected results with the part's oracle, freezes each hint (a :class:`~.hints.Mistake`'s value
on each case, a :class:`~.hints.Rule`'s name and data) and writes them into one NumPy archive
beside the exercise. The oracles, the hidden-case generators and the mistake replays stay
beside the source. What ``check()`` still runs as code is named by reference: how a part calls
the function, how it compares, its source check. Those come from the installed package
(``edu_dl.harness``, ``edu_dl.grading``) or, for an instructor who keeps such code in a public
part file, from ``parts/<exercise>.py`` shipped beside the archive.

The archive holds ``spec`` (JSON: each part's fields and references) and, per part ``p<n>``,
its cases (``p<n>/case<i>_arg<j>``), expected results (``p<n>/expected/...``) and each
Mistake's values (``p<n>/hint<h>/...``). It is written deterministically (stored, fixed
timestamps) so the same release gives the same bytes; nothing in it is a pickle.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from edu_dl.grading import protocol
from edu_dl.grading.authoring.hints import FrozenMistake, Mistake, Rule, case_key
from edu_dl.grading.authoring.source import AllChecks, NamesCheck
from edu_dl.grading.authoring.spec import (
    LATER_FIELDS,
    Part,
    Tolerance,
    given,
    judged_cases,
    oracle,
)

FORMAT = 1
SUFFIX = ".npz"
PUBLIC_MODULE = "edu_dl_course_parts."  # part files load as edu_dl_course_parts.<exercise>
Case = tuple[Any, ...]
MAX_RELEASE_BYTES = 64 * 2**20


class FreezeError(Exception):
    """A part that cannot ship as data: what, where, and how to fix it."""


def visible_cases(part: Part, hidden: bool = False) -> list[tuple[Case, Any]]:
    """The cases ``check()`` runs and their expected results: drawn from the fixed seed and
    computed by the oracle (a part file), or as a release froze them."""
    seed = protocol.HIDDEN_SEED if hidden else protocol.VISIBLE_SEED
    drawn = part.cases(np.random.default_rng(seed), hidden)
    # a case's withheld values (spec.Withheld) reach its expected result, never the student
    return [(given(case), oracle(part, copy.deepcopy(case))) for case in judged_cases(drawn)]


# --------------------------------------------------------------------------- references


# Where a release written before issue 42's rooms names the modules an instructor's part uses.
MOVED = {f"edu_dl.grading.{name}": f"edu_dl.grading.authoring.{name}"
         for name in ("spec", "hints", "generic", "guard", "source", "parts", "release",
                      "withhold")}


def _import(ref: str) -> Any:
    module, _, qualname = ref.partition(":")
    found: Any = importlib.import_module(MOVED.get(module, module))
    for name in qualname.split("."):
        found = getattr(found, name)
    return found


def _plain(value: Any, where: str) -> Any:
    """JSON data (tuples as lists); FreezeError for anything else."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [_plain(v, where) for v in value]
    raise FreezeError(f"{where}: {type(value).__name__} is not data a release can carry")


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def reference(obj: Any, where: str, exercise: str) -> Any:
    """How a release names ``obj`` (a call, compare, check or view): data, or where the code is."""
    if obj is None:
        return None
    if isinstance(obj, Tolerance):
        return {"tolerance": [obj.rtol, obj.atol]}
    if isinstance(obj, NamesCheck):
        return {"names_check": [_plain(obj.required, where), _plain(obj.forbidden, where)]}
    if isinstance(obj, AllChecks):
        return {"all_checks": [reference(c, where, exercise) for c in obj.checks]}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"object": _code_reference(type(obj), where, exercise),
                "fields": {f.name: _plain(getattr(obj, f.name), where)
                           for f in dataclasses.fields(obj)}}
    return _code_reference(obj, where, exercise)


def _code_reference(obj: Any, where: str, exercise: str) -> dict[str, str]:
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", "") or ""
    name = getattr(obj, "__name__", type(obj).__name__)
    if "<" in qualname:  # a lambda, or a function defined inside another
        raise FreezeError(f"{where}: {name} is a lambda or a nested function: a release names "
                          "code by module and name; define it at the top of a module")
    if module == f"{PUBLIC_MODULE}{exercise}":
        return {"public": qualname}
    if module.startswith(PUBLIC_MODULE):
        raise FreezeError(f"{where}: {qualname} is defined in a private part file, which never "
                          f"ships: move it to parts/{exercise}.py (public) or a module the "
                          "students have installed")
    try:
        found = _import(f"{module}:{qualname}")
    except (ImportError, AttributeError):
        found = None
    if found is not obj:
        raise FreezeError(f"{where}: {qualname} from {module or '?'} cannot be imported by "
                          "that name, so a release cannot name it")
    return {"import": f"{module}:{qualname}"}


def resolve(ref: Any, public: Callable[[], ModuleType]) -> Any:
    """The object a release names (the inverse of :func:`reference`)."""
    if ref is None:
        return None
    if "tolerance" in ref:
        rtol, atol = ref["tolerance"]
        return Tolerance(float(rtol), float(atol))
    if "names_check" in ref:
        required, forbidden = ref["names_check"]
        return NamesCheck(_tuples(required), _tuples(forbidden))
    if "all_checks" in ref:
        return AllChecks(tuple(resolve(r, public) for r in ref["all_checks"]))
    if "object" in ref:
        cls = resolve(ref["object"], public)
        return cls(**{k: _tuples(v) for k, v in ref["fields"].items()})
    if "public" in ref:
        found: Any = public()
        for name in ref["public"].split("."):
            found = getattr(found, name)
        return found
    return _import(ref["import"])


# --------------------------------------------------------------------------- freezing


SPECIAL = ("cases", "expected", "hints")


def _freeze_part(part: Part, n: int, exercise: str, arrays: dict[str, np.ndarray],
                 warnings: list[str]) -> dict[str, Any]:
    where = f"part {part.id}"
    drawn = visible_cases(part)
    cases, expected = [args for args, _ in drawn], [value for _, value in drawn]
    for key, a in protocol.encode_cases(cases).items():
        arrays[f"p{n}/{key}"] = a
    for i, value in enumerate(expected):
        _put_result(arrays, f"p{n}/expected", i, value, f"{where}, case {i + 1}")
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(Part):
        if f.name in SPECIAL:
            continue
        value = getattr(part, f.name)
        if f.name in LATER_FIELDS and value == f.default:
            continue  # a release without it reads the default: older releases stay the same
        if callable(value) or dataclasses.is_dataclass(value):
            spec[f.name] = {"ref": reference(value, f"{where}: {f.name}=", exercise)}
        else:
            spec[f.name] = _plain(value, f"{where}: {f.name}=")
    spec["hints"] = []
    for h, hint in enumerate(part.hints):
        at = f"{where}: hint {h + 1}"
        if isinstance(hint, Mistake):
            for i, args in enumerate(cases):
                value = hint.value(expected[i], copy.deepcopy(args))
                if value is not None:
                    _put_result(arrays, f"p{n}/hint{h}", i, value, f"{at}, case {i + 1}")
            spec["hints"].append({
                "mistake": hint.message, "output": hint.output, "rtol": hint.rtol,
                "atol": hint.atol, "view": reference(hint.view, f"{at}: view=", exercise)})
        elif isinstance(hint, Rule):
            entry: dict[str, Any] = {
                "rule": _code_reference(type(hint), at, exercise), "message": hint.message,
                "output": hint.output, "params": _plain_dict(hint.params(), at)}
            if hint.when is not None:
                holds = [i for i, args in enumerate(cases) if _holds(hint, expected[i], args)]
                entry["when"] = holds
            spec["hints"].append(entry)
        else:
            text = str(hint[1]) if isinstance(hint, tuple) and len(hint) == 2 else repr(hint)
            warnings.append(f"{at} ({text[:50]}...) is a (predicate, message) pair: a release "
                            "cannot carry it, so check() from the student version will not "
                            "give it; write it as edu_dl.grading.authoring.hints.Mistake or a Rule")
    return spec


def _holds(rule: Rule, expected: Any, args: Case) -> bool:
    if isinstance(rule.when, frozenset):  # a release frozen again (validate, a re-release)
        return case_key(args) in rule.when
    return rule.when is None or bool(rule.when(expected, copy.deepcopy(args)))


def _plain_dict(params: dict[str, Any], where: str) -> dict[str, Any]:
    return {k: _plain(v, f"{where}: {k}=") for k, v in params.items()}


def _put_result(arrays: dict[str, np.ndarray], prefix: str, i: int, value: Any,
                where: str) -> None:
    try:
        encoded = protocol.encode_result(i, value)
    except protocol.NotPlainData as exc:
        raise FreezeError(f"{where}: {exc}") from None
    for key, a in encoded.items():
        arrays[f"{prefix}/{key}"] = a


def freeze(parts: list[Part], exercise: str) -> tuple[bytes, list[str], bool]:
    """(the release's bytes, warnings, whether it names code in the public part file)."""
    arrays: dict[str, np.ndarray] = {}
    warnings: list[str] = []
    specs = [_freeze_part(part, n, exercise, arrays, warnings) for n, part in enumerate(parts)]
    document = {"format": FORMAT, "exercise": exercise, "parts": specs}
    text = json.dumps(document, sort_keys=True)
    arrays["spec"] = np.array(text)
    return write_archive(arrays), warnings, '"public":' in text


def write_archive(arrays: dict[str, np.ndarray]) -> bytes:
    """An npz archive, byte for byte the same for the same arrays (stored, fixed timestamps)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w") as member:
                np.lib.format.write_array(member, np.asanyarray(arrays[key]),
                                          allow_pickle=False)
    return buffer.getvalue()


# --------------------------------------------------------------------------- loading


class ReleaseError(KeyError):
    """A release archive that cannot be read (named, with why)."""


class FrozenCases:
    """A part's ``cases`` in a release: the visible cases it froze, no hidden ones."""

    def __init__(self, cases: list[Case]) -> None:
        self.cases = cases

    def __call__(self, rng: np.random.Generator, hidden: bool) -> list[Case]:
        return [] if hidden else copy.deepcopy(self.cases)


class FrozenOracle:
    """A part's ``expected`` in a release: the frozen result of each visible case, by value."""

    def __init__(self, results: dict[bytes, Any]) -> None:
        self.results = results

    def __call__(self, *args: Any) -> Any:
        try:
            return copy.deepcopy(self.results[case_key(args)])
        except KeyError:
            raise KeyError("this case is not in the release (a release holds the visible "
                           "cases only)") from None


def _results(data: Any, prefix: str, n_cases: int) -> dict[int, Any]:
    """The results frozen under ``prefix``, by case (a case without one has none)."""
    return {i: protocol.decode_result(data, i, f"{prefix}/") for i in range(n_cases)
            if f"{prefix}/case{i}_tuple" in data}


def load(path: Path, public: Callable[[], ModuleType]) -> list[Part]:
    """The parts a release holds (``public``: the public part file, for code it names)."""
    try:
        if path.stat().st_size > MAX_RELEASE_BYTES:
            raise ReleaseError(f"{path}: larger than {MAX_RELEASE_BYTES // 2**20} MB")
        with np.load(path, allow_pickle=False) as data:
            document = json.loads(str(data["spec"]))
            if document.get("format") != FORMAT:
                raise ReleaseError(f"{path}: release format {document.get('format')!r}, this "
                                   f"edu_dl reads {FORMAT}: run edu-dl assign again")
            return [_load_part(data, f"p{n}", spec, public)
                    for n, spec in enumerate(document["parts"])]
    except ReleaseError:
        raise
    except Exception as exc:
        raise ReleaseError(f"{path}: not a release edu-dl assign wrote ({type(exc).__name__}: "
                           f"{exc})") from None


def _load_part(data: Any, prefix: str, spec: dict[str, Any],
               public: Callable[[], ModuleType]) -> Part:
    sub = {k[len(prefix) + 1:]: data[k] for k in data.files if k.startswith(f"{prefix}/")}
    cases = protocol.decode_cases(sub)
    keys = [case_key(args) for args in cases]
    expected = _results(data, f"{prefix}/expected", len(cases))
    hints: list[Any] = []
    for h, entry in enumerate(spec["hints"]):
        if "mistake" in entry:
            values = _results(data, f"{prefix}/hint{h}", len(cases))
            hints.append(FrozenMistake(
                replay=_no_replay, message=entry["mistake"], output=entry["output"],
                rtol=float(entry["rtol"]), atol=float(entry["atol"]),
                view=resolve(entry["view"], public),
                values={keys[i]: v for i, v in values.items()}))
        else:
            cls = resolve(entry["rule"], public)
            if not (isinstance(cls, type) and issubclass(cls, Rule)):
                raise ReleaseError(f"{entry['rule']} is not a hint rule")
            when = frozenset(keys[i] for i in entry["when"]) if "when" in entry else None
            hints.append(cls(message=entry["message"], output=entry["output"], when=when,
                             **{k: _tuples(v) for k, v in entry["params"].items()}))
    fields: dict[str, Any] = {}
    for name, value in spec.items():
        if name == "hints":
            continue
        fields[name] = resolve(value["ref"], public) if isinstance(value, dict) \
            and "ref" in value else _tuples(value)
    return Part(cases=FrozenCases(cases), hints=tuple(hints),
                expected=FrozenOracle({keys[i]: v for i, v in expected.items()}), **fields)


def _no_replay(expected: Any, args: Case) -> Any:
    return None


def same(a: bytes, b: bytes) -> bool:
    """Two releases with the same data: the same spec, the same integers and strings, floats
    equal to 1e-9 relative (oracles computed on another machine's BLAS differ in the last
    bits; that is not a stale release)."""
    if a == b:
        return True
    try:
        with np.load(io.BytesIO(a), allow_pickle=False) as x, \
                np.load(io.BytesIO(b), allow_pickle=False) as y:
            if sorted(x.files) != sorted(y.files):
                return False
            for key in x.files:
                p, q = x[key], y[key]
                if p.dtype != q.dtype or p.shape != q.shape:
                    return False
                if p.dtype.kind in "fc":
                    if not np.allclose(p, q, rtol=1e-9, atol=1e-12, equal_nan=True):
                        return False
                elif not np.array_equal(p, q):
                    return False
        return True
    except Exception:
        return False
