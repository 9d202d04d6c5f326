"""Source checks, for the authors of parts: what a function's text looks up, its decorators.

Some parts grade *how* an answer was computed (a thread, a Session, ``get_xp``, shared memory):
behaviour the student's process could fake, so the grader judges it from the submitted source
instead. ``trust.source.find_source`` finds that text in the restored notebook (the last
module-level ``def``/``class`` of the name the test cell checks, or None when the name is rebound
or the parser cannot see it); a part's ``source_check`` judges it with the helpers here
(:func:`names_check`, :func:`decorator_names`, ...), and :func:`judge_source` fails the part with
:data:`NOT_FOUND` when there is no such text. Nothing is executed: the helpers only ``compile()``.

What stays out of reach of any static reading (code that rebinds the name through ``globals()``
or ``exec``, dead code that merely names a thread) is visible in the submission itself, for the
instructor; the grade never rests on what the student's process reports.
"""

from __future__ import annotations

import ast
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from edu_dl.grading.authoring.spec import Part, Verdict, global_names
from edu_dl.grading.trust.scopes import SCOPES, parse_python, segment

NOT_FOUND = ("the grader could not find the source of the function you pass to check() for "
             "this part: define it with a plain top-level `def` (or `class`) of that name in a "
             "cell before the test cell, and do not assign, import or redefine that name later "
             "(this part judges how the function computes its result, from its source)")
def judge_source(part: Part, source: str | None, missing: str = "") -> Verdict:
    """The part's source check on the found source; a clear failure when there is none
    (``missing``: why it could not be read, when the reader knows)."""
    if part.source_check is None:
        return Verdict(True)
    if source is None:
        return Verdict(False, missing or NOT_FOUND)
    try:
        return part.source_check(source)
    except Exception as exc:  # a check that cannot read this source does not pass it
        return Verdict(False, f"could not read the function's source ({type(exc).__name__}: "
                              f"{exc})")


# --------------------------------------------------------------------------- reading a definition


def definition_node(source: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef:
    """The def or class statement a source text holds (ValueError otherwise)."""
    tree = parse_python(source)
    if len(tree.body) != 1 or not isinstance(tree.body[0], SCOPES):
        raise ValueError("the source is not one def or class statement")
    return tree.body[0]


def code_names(source: str) -> set[str]:
    """The names the defined function (or class, its methods included) looks up: the same
    ``global_names`` a check of ``fn.__code__`` sees, from ``compile()`` (nothing runs)."""
    node = definition_node(source)
    module = compile(source, "<submission>", "exec", dont_inherit=True)
    for const in module.co_consts:
        if isinstance(const, types.CodeType) and const.co_name == node.name:
            return global_names(const)
    raise ValueError(f"no code object for {node.name}")  # pragma: no cover


def _dotted(node: ast.expr) -> str:
    """'cuda.jit' for cuda.jit, cuda.jit(...) and numba.cuda.jit; '' for anything else."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def decorator_names(source: str, nested: bool = False) -> set[str]:
    """Dotted names of the definition's decorators (and, with ``nested``, of every def in it)."""
    node = definition_node(source)
    nodes = [n for n in ast.walk(node) if isinstance(n, SCOPES)] if nested else [node]
    return {_dotted(d) for n in nodes for d in n.decorator_list}


@dataclass(frozen=True)
class NamesCheck:
    """A source check on :func:`code_names`: for each (alternatives, message) of ``required``
    one of the names must be looked up, for each of ``forbidden`` none may be. Data only, so a
    release can carry it."""

    required: tuple[tuple[tuple[str, ...], str], ...] = ()
    forbidden: tuple[tuple[tuple[str, ...], str], ...] = ()

    def __call__(self, source: str) -> Verdict:
        names = code_names(source)
        for alternatives, message in self.forbidden:
            if names & set(alternatives):
                return Verdict(False, message)
        for alternatives, message in self.required:
            if not names & set(alternatives):
                return Verdict(False, message)
        return Verdict(True)


def _rules(pairs: Iterable[tuple[Iterable[str], str]]) -> tuple[tuple[tuple[str, ...], str], ...]:
    return tuple((tuple(alternatives), str(message)) for alternatives, message in pairs)


def names_check(required: Iterable[tuple[Iterable[str], str]] = (),
                forbidden: Iterable[tuple[Iterable[str], str]] = (),
                ) -> NamesCheck:
    """A :class:`NamesCheck` from (alternatives, message) pairs."""
    return NamesCheck(_rules(required), _rules(forbidden))


@dataclass(frozen=True)
class AllChecks:
    """Source checks in order; the first failure decides."""

    checks: tuple[Callable[[str], Verdict], ...] = ()

    def __call__(self, source: str) -> Verdict:
        for one in self.checks:
            verdict = one(source)
            if not verdict.ok:
                return verdict
        return Verdict(True)


def all_checks(*checks: Callable[[str], Verdict]) -> AllChecks:
    """Source checks in order; the first failure decides."""
    return AllChecks(tuple(checks))


def own_source(fn: Any) -> str | None:
    """``fn``'s own def/class text (check()'s feedback, what the grader will read), or None
    when Python cannot tell: found through the code's file and first line, which IPython keeps
    for every cell, so a class defined in a notebook is found by its methods."""
    import inspect
    import linecache

    target = getattr(fn, "py_func", fn)  # a numba kernel: its Python function
    name = getattr(target, "__name__", None)
    if isinstance(target, type):
        methods = [inspect.unwrap(getattr(v, "__func__", v)) for v in vars(target).values()]
        codes = [m.__code__ for m in methods if hasattr(m, "__code__")
                 and m.__qualname__.startswith(f"{target.__qualname__}.")]
    else:
        codes = [target.__code__] if hasattr(target, "__code__") else []
    if not codes or name is None:
        return None
    code = codes[0]
    text = "".join(linecache.getlines(code.co_filename))
    try:
        tree = parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    line = code.co_firstlineno
    for node in ast.walk(tree):
        if not isinstance(node, SCOPES) or node.name != name:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        inside = first < line <= (node.end_lineno or node.lineno)
        if first == line if not isinstance(target, type) else inside:
            return segment(text, node)
    return None


def speed_rules(source: str) -> Verdict:
    """A speed task's rules on its function (NumPy and math only: no import, no dunder name), as
    a part's source check: check() says at once what the grader's timed run would refuse."""
    from edu_dl.grading.trust.speed import source_problem

    problem = source_problem(source)
    return Verdict(not problem, problem)
