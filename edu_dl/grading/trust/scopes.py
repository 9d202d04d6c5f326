"""The text of one definition: what a module-level ``def`` or ``class`` is, and its lines.

Read by ``trust.source`` (finding a part's function in a student's cells) and by the part
authors' source checks (``grading.authoring.source``); pure ``ast`` and text, importing nothing
of the grader, so that the trusted readers sit below what an author writes.
"""

from __future__ import annotations

import ast
import textwrap

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def segment(code: str, node: ast.AST) -> str:
    """The node's lines, decorators included, dedented (a def inside a top-level ``if``)."""
    assert isinstance(node, SCOPES)
    lines = code.splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno or node.lineno
    return textwrap.dedent("\n".join(lines[first - 1:last])) + "\n"
