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

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

# CPython 3.11 keeps the AST builder's recursion depth in one counter per interpreter, so two
# threads parsing at once (a batch grades submissions on a thread pool) can fail one of them with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905): a grader error
# for an answer that parses. Parsing is a few milliseconds; one at a time costs nothing.
_ONE_PARSE_AT_A_TIME = threading.Lock()


def parse_python(code: str) -> ast.Module:
    """``ast.parse(code)``, one thread at a time; raises what ``ast.parse`` raises."""
    with _ONE_PARSE_AT_A_TIME:
        return ast.parse(code)


def segment(code: str, node: ast.AST) -> str:
    """The node's lines, decorators included, dedented (a def inside a top-level ``if``)."""
    assert isinstance(node, SCOPES)
    lines = code.splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno or node.lineno
    return textwrap.dedent("\n".join(lines[first - 1:last])) + "\n"
