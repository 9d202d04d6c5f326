"""The student release is data: what ships gives the same verdicts and hints as the part files,
and nothing that ships computes an answer."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import pkgutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import PACKAGE, SOLUTIONS, all_course_parts
from nbformat.v4 import new_code_cell, new_notebook

import edu_dl.harness
from edu_dl.grading.authoring import hints, parts, release
from edu_dl.grading.authoring.spec import Part, default_compare, judge_case
from edu_dl.grading.term.assign import assign
from edu_dl.speed import tasks as speed

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
COURSE = all_course_parts()


@functools.cache
def frozen(exercise: str) -> dict[str, Part]:
    """The course release of one exercise, as a student's check() loads it."""
    path = EXERCISES / parts.FOLDER / f"{exercise}{release.SUFFIX}"
    return {p.id: p for p in release.load(path, lambda: pytest.fail("no public part file"))}


def _candidates(part: Part, expected: Any, args: tuple[Any, ...]) -> Iterator[Any]:
    """Answers a student might give: right, each typical mistake, and a few shapes of wrong."""
    yield expected
    for hint in part.hints:
        if isinstance(hint, hints.Mistake):
            wrong = hint.value(expected, args)
            if wrong is not None and hint.view is None:
                if hint.output is None:
                    yield wrong
                elif isinstance(expected, tuple):
                    yield tuple(wrong if j == hint.output else e for j, e in enumerate(expected))
    outputs = expected if isinstance(expected, tuple) else (expected,)
    for k, out in enumerate(outputs):
        a = np.asarray(out)
        if a.dtype.kind not in "biuf":
            continue
        for wrong in (np.float64(0.0), a.T, a * 0.5, a * 2.0, np.full_like(a, np.nan)):
            yield wrong if not isinstance(expected, tuple) else \
                tuple(wrong if j == k else e for j, e in enumerate(expected))


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("part", COURSE, ids=lambda p: p.id)
def test_the_release_judges_as_the_part_file_does(part: Part):
    """On every visible case, each candidate answer gets the same verdict and the same hint
    from the shipped data as from the private part file."""
    shipped = frozen(part.id.split(".")[0])
    if part.id not in shipped:
        pytest.skip(f"{part.id} is checked by no released cell")  # the next test forbids it
    mine = shipped[part.id]
    drawn = release.visible_cases(part)
    shipped_cases = release.visible_cases(mine)
    assert _same_cases(shipped_cases, drawn)
    # Each side judges its own copy of the case (they may differ in the last bit: _same_value).
    for i, ((args, expected), (ship_args, _)) in enumerate(zip(drawn, shipped_cases)):
        for got in _candidates(part, expected, args):
            live = judge_case(part, i, len(drawn), args, expected, got)
            ship = judge_case(mine, i, len(drawn), ship_args, mine.expected(*ship_args), got)
            assert (live.ok, live.message) == (ship.ok, ship.message)


def _same_value(p: Any, q: Any) -> bool:
    """Equal; floats to the last few bits: a case computed with a matrix product (ex18's
    partial outputs) differs by an ulp between CPUs, whose BLAS kernels sum in other orders."""
    p, q = np.asarray(p), np.asarray(q)
    if p.dtype.kind == "f" and q.dtype.kind == "f" and p.shape == q.shape:
        return bool(np.allclose(p, q, rtol=1e-13, atol=1e-300, equal_nan=True))
    return np.array_equal(p, q)


def _same_cases(a: list[tuple[Any, Any]], b: list[tuple[Any, Any]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(_same_value(p, q) for p, q in zip(x, y))
        for (x, _), (y, _) in zip(a, b))


def test_every_checked_part_ships_and_nothing_else():
    ids = {p.id for p in COURSE}
    shipped = {pid for ex in {i.split(".")[0] for i in ids} for pid in frozen(ex)}
    assert shipped == ids


def test_the_course_release_holds_no_python_and_no_hidden_case():
    # The students' own framework ships as Python for them to write (its answers stubbed:
    # test_mytorch.py); nothing else does.
    files = [p for p in EXERCISES.rglob("*") if p.is_file() and "__pycache__" not in p.parts
             and p.relative_to(EXERCISES).parts[0] != PACKAGE]
    assert not [p for p in files if p.suffix in (".py", ".pyc", ".pkl")]
    assert sorted(p.name for p in (EXERCISES / parts.FOLDER).iterdir()) == sorted(
        f"{ex}{release.SUFFIX}" for ex in {p.id.split(".")[0] for p in COURSE})
    for part in COURSE:
        mine = frozen(part.id.split(".")[0])[part.id]
        assert mine.cases(np.random.default_rng(1), True) == []
        assert len(mine.cases(np.random.default_rng(1), False)) == len(release.visible_cases(part))


def test_no_course_hint_is_code_a_release_cannot_carry():
    warnings: list[str] = []
    assign(SOLUTIONS, Path("/nonexistent-dest"), write=False, warnings=warnings)
    assert warnings == []
    legacy = [p.id for p in COURSE for h in p.hints if not hints.is_hint(h)]
    assert legacy == []


def _shipped_modules() -> list[Any]:
    """Every module a course release runs as code: the harness, and every module a release
    names."""
    names = {f"edu_dl.harness.{m.name}" for m in pkgutil.iter_modules(edu_dl.harness.__path__)}
    for path in (EXERCISES / parts.FOLDER).glob(f"*{release.SUFFIX}"):
        with np.load(path, allow_pickle=False) as data:
            text = str(data["spec"])
        names |= {ref.split(":")[0] for ref in _imports(text)}
    return [importlib.import_module(release.MOVED.get(name, name)) for name in sorted(names)]


def _imports(text: str) -> list[str]:
    import json

    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("import"), str):
                found.append(node["import"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(text))
    return found


@contextlib.contextmanager
def _at_most(seconds: int) -> Iterator[None]:
    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_nothing_that_ships_returns_an_expected_value():
    """The second net: call every function and class of every module a release runs, on every
    visible case of every part; none may return what the oracle expects."""
    answered: list[str] = []
    # A speed task gives its slow reference on purpose (the task is the speed, not the value).
    cases = [(p.id, args, expected) for p in COURSE if p.id not in speed.TASKS
             for args, expected in release.visible_cases(p)]
    for module in _shipped_modules():
        for name, obj in inspect.getmembers(module, callable):
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            for part_id, args, expected in cases:
                for spread in (True, False):  # obj(*case) and obj(case)
                    try:
                        with _at_most(5):
                            got = obj(*args) if spread else obj(args)
                    except (Exception, SystemExit):  # anything but an answer is fine
                        continue
                    given = [args, *args, args[0] if len(args) == 1 else args]
                    if any(_agrees(a, got) for a in given):  # handed back: no answer computed
                        continue
                    if got is not None and default_compare(expected, got).ok:
                        answered.append(f"{module.__name__}.{name} answers {part_id}")
    assert answered == [], "\n".join(answered)


def _agrees(expected: Any, got: Any) -> bool:
    try:
        return bool(default_compare(expected, got).ok)
    except Exception:
        return False


# --------------------------------------------------------------------------- an instructor's


def _meta(**fields: Any) -> dict[str, Any]:
    meta = {"schema_version": 3, "grade": False, "solution": False, "locked": False}
    meta.update(fields)
    return {"nbgrader": meta}


def _instructor_course(root: Path, public: str | None, private: str) -> Path:
    source = root / "source"
    (source / "parts").mkdir(parents=True)
    if public is not None:
        (source / "parts" / "hw1.py").write_text(public)
    (source / "parts" / "hw1.private.py").write_text(private)
    nb = new_notebook(cells=[
        new_code_cell("from edu_dl.grading import check", metadata=_meta(grade_id="setup")),
        new_code_cell("def squares(x):\n    ### BEGIN SOLUTION\n    return x ** 2\n"
                      "    ### END SOLUTION", metadata=_meta(grade_id="sol", solution=True)),
        new_code_cell('check("hw1.squares", squares)',
                      metadata=_meta(grade_id="t1", grade=True, points=2, locked=True)),
    ])
    nbformat.write(nb, source / "hw1.ipynb")
    return source


PRIVATE = '''
import numpy as np
from edu_dl.grading.authoring.hints import Mistake, Scalar
from edu_dl.grading.authoring.spec import Part
{imports}

def _cases(rng, hidden):
    return [(rng.standard_normal((3, 2)),)] if hidden else [(rng.standard_normal((2, 3)),)]

def _doubled(e, a):
    return a[0] * 2

PARTS = [Part(id="hw1.squares", points=2, cases=_cases, expected={expected}, {extra}
              hints=(Mistake(_doubled, "doubled: square instead"), Scalar("keep the shape"),
                     (lambda e, g, a: False, "a legacy hint")))]
'''


def test_an_instructor_release_ships_data_and_warns_about_what_it_cannot_carry(tmp_path: Path,
                                                                             monkeypatch):
    source = _instructor_course(tmp_path, None, PRIVATE.format(
        imports="", expected="lambda x: x ** 2", extra=""))
    warnings: list[str] = []
    assign(source, tmp_path / "out", warnings=warnings)
    assert sorted(p.name for p in (tmp_path / "out" / "parts").iterdir()) == ["hw1.npz"]
    assert len(warnings) == 1 and "a legacy hint" in warnings[0]
    monkeypatch.chdir(tmp_path / "out")
    (part,) = parts._folder_parts(tmp_path / "out" / "parts", "hw1").values()
    args, expected = release.visible_cases(part)[0]
    assert np.allclose(expected, args[0] ** 2)
    assert "doubled" in judge_case(part, 0, 1, args, expected, args[0] * 2).message
    assert "keep the shape" in judge_case(part, 0, 1, args, expected, 1.0).message
    assert judge_case(part, 0, 1, args, expected, args[0] ** 2).ok


def test_a_public_part_file_ships_only_for_code_the_release_names(tmp_path: Path):
    public = '''
import numpy as np
from edu_dl.grading.authoring.spec import Verdict

def squares_oracle(x):
    return x ** 2

def positive(got, args):
    return Verdict(bool(np.all(np.asarray(got) >= 0)), "squares are never negative")
'''
    source = _instructor_course(tmp_path, public, PRIVATE.format(
        imports="from edu_dl.grading.authoring.parts import sibling\n"
                "pub = sibling(__file__, 'hw1')",
        expected="pub.squares_oracle", extra="result_check=pub.positive,"))
    warnings: list[str] = []
    assign(source, tmp_path / "out", warnings=warnings)
    assert sorted(p.name for p in (tmp_path / "out" / "parts").iterdir()) == [
        "hw1.npz", "hw1.py"]
    oracle = [w for w in warnings if "squares_oracle" in w]
    assert len(oracle) == 1 and "hw1.private.py" in oracle[0]


def test_a_part_whose_call_is_a_lambda_cannot_ship(tmp_path: Path):
    source = _instructor_course(tmp_path, None, PRIVATE.format(
        imports="", expected="lambda x: x ** 2", extra="call=lambda fn, a: fn(*a),"))
    with pytest.raises(Exception, match="lambda"):
        assign(source, tmp_path / "out")


def test_a_damaged_release_is_named(tmp_path: Path):
    path = tmp_path / "hw1.npz"
    path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(release.ReleaseError, match=r"hw1\.npz"):
        release.load(path, lambda: pytest.fail("not reached"))


def test_the_same_release_has_the_same_bytes():
    part = COURSE[0]
    exercise = part.id.split(".")[0]
    a = release.freeze([p for p in COURSE if p.id.startswith(f"{exercise}.")], exercise)[0]
    b = release.freeze([p for p in COURSE if p.id.startswith(f"{exercise}.")], exercise)[0]
    assert a == b


def test_a_release_written_before_the_rooms_still_loads() -> None:
    """Issue 42 moved the authors' modules into grading/authoring/: a release frozen earlier
    names them where they were (``edu_dl.grading.hints:Mistake``), and loads the same objects."""
    from edu_dl.grading.authoring import hints, source, spec

    old = "edu_dl.grading" + "."  # built, so that a rename of module paths leaves it as it was
    assert release._import(old + "hints:Mistake") is hints.Mistake
    assert release._import(old + "source:NamesCheck") is source.NamesCheck
    assert release._import(old + "spec:Tolerance") is spec.Tolerance
    assert release._import("edu_dl.harness.ex08:call_leaving_inputs") is not None
