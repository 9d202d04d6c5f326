"""The text of one definition: what a module-level ``def`` or ``class`` is, and its lines.

Read by ``trust.source`` (finding a part's function in a student's cells) and by the part
authors' source checks (``grading.authoring.source``); pure ``ast`` and text, importing nothing
of the grader, so that the trusted readers sit below what an author writes. Every parse of a
student's text goes through :func:`parse_python`, one at a time.
"""

from __future__ import annotations

import ast
import textwrap
import threading
from typing import Any

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

# CPython 3.11 keeps the AST builder's recursion depth in one counter per interpreter, so two
# threads parsing at once (a batch grades submissions on a thread pool) can fail one of them with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905): a grader error
# for an answer that parses. Parsing is a few milliseconds; one at a time costs nothing.
# Reentrant: a parse that triggers a collection may run a finalizer that parses.
_ONE_PARSE_AT_A_TIME = threading.RLock()
_INTERPRETERS_PARSE = ast.parse


def parse_python(code: str) -> ast.Module:
    """``ast.parse(code)``, one thread at a time; raises what ``ast.parse`` raises."""
    with _ONE_PARSE_AT_A_TIME:
        return ast.parse(code)


def _parse_one_at_a_time(*args: Any, **kwargs: Any) -> Any:
    with _ONE_PARSE_AT_A_TIME:
        return _INTERPRETERS_PARSE(*args, **kwargs)


def parse_one_at_a_time_everywhere() -> None:
    """Every ``ast.parse`` of this process under the same lock, not only the grader's own: NumPy
    reads each ``.npy`` header with ``ast.literal_eval`` (a result, a case: hundreds a batch, in
    every grading thread), ``inspect.signature`` parses a builtin's, a 3.11 traceback the line it
    points at; one of them beside another parse failed an honest control's whole notebook as a
    grader error in CI. Called where a process starts grading on threads (``batch.grade``);
    idempotent."""
    ast.parse = _parse_one_at_a_time


def segment(code: str, node: ast.AST) -> str:
    """The node's lines, decorators included, dedented (a def inside a top-level ``if``)."""
    assert isinstance(node, SCOPES)
    lines = code.splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno or node.lineno
    return textwrap.dedent("\n".join(lines[first - 1:last])) + "\n"
