"""A student's cells as text: where is the function a part checks, and what does it say.

:func:`find_source` finds, in the restored notebook, the test cell that checks the part, the name
it passes to ``check("exNN.part", NAME)``, and the last module-level ``def``/``class`` of that
name in the code cells before it; a later rebinding of the name (an assignment, an import, a
``global`` statement) or a definition the parser cannot see (``exec``, a lambda) gives None, and
the part fails with ``source.NOT_FOUND``. Nothing is executed: cells are parsed with ``ast``
after IPython's own text transformations of magics.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..nbgrader import grade_id
from ..source import SCOPES, segment

if TYPE_CHECKING:
    from ..notebooks import Notebook


# --------------------------------------------------------------------------- parsing cells


def _ipython_text(text: str) -> str:
    """The cell as IPython would compile it: magics become plain calls (text only)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython is a dependency of the notebook runner
        return text
    try:
        return str(TransformerManager().transform_cell(text))
    except Exception:  # a cell IPython cannot transform would not run either
        return text


@functools.lru_cache(maxsize=64)
def parse_cell(text: str) -> tuple[ast.Module, str] | None:
    """(tree, the text it was parsed from), or None for a cell that is not Python (it runs
    nothing). A ``%%time`` or ``%%capture`` cell is its body."""
    code = _ipython_text(text)
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = _cell_magic_body(tree)
    return parse_cell(body) if body is not None else (tree, code)


def _cell_magic_body(tree: ast.Module) -> str | None:
    """The Python body of a ``%%time``/``%%capture``/``%%timeit`` cell, else None."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr):
        return None
    call = tree.body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_cell_magic" and len(call.args) == 3):
        return None
    magic, _, body = call.args
    if isinstance(magic, ast.Constant) and magic.value in ("time", "capture", "timeit") and \
            isinstance(body, ast.Constant) and isinstance(body.value, str):
        return body.value
    return None


def checked_name(text: str, part_id: str) -> str | None:
    """NAME in the cell's first ``check("<part_id>", NAME, ...)`` call, if NAME is a plain name."""
    parsed = parse_cell(text)
    if parsed is None:
        return None
    for node in ast.walk(parsed[0]):
        if isinstance(node, ast.Call) and _called_name(node.func) == "check" and \
                len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) and \
                node.args[0].value == part_id:
            return node.args[1].id if isinstance(node.args[1], ast.Name) else None
    return None


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


# --------------------------------------------------------------------------- bindings


def bindings(tree: ast.Module, name: str) -> list[ast.AST | None]:
    """Every statement that binds ``name`` in the module's namespace, in order: the def or
    class node itself, or None for any other binding (assignment, import, loop or ``with``
    target, ``global``/``nonlocal``, a walrus anywhere, ``from m import *``, ``del``)."""
    out: list[ast.AST | None] = []
    _bindings(tree, name, True, out)
    return out


def _bindings(node: ast.AST, name: str, module: bool, out: list[ast.AST | None]) -> None:
    if isinstance(node, SCOPES):
        if module and node.name == name:
            out.append(node)
        for decorator in node.decorator_list:  # evaluated in the enclosing scope
            _bindings(decorator, name, module, out)
        if isinstance(node, ast.ClassDef):
            for base in [*node.bases, *node.keywords]:
                _bindings(base, name, module, out)
        else:
            _bindings(node.args, name, module, out)
        for statement in node.body:
            _bindings(statement, name, False, out)
        return
    if isinstance(node, ast.Lambda):
        _bindings(node.args, name, module, out)
        _bindings(node.body, name, False, out)
        return
    if isinstance(node, ast.Global | ast.Nonlocal) and name in node.names:
        out.append(None)
    elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name) and \
            node.target.id == name:
        out.append(None)  # a walrus in a comprehension binds the enclosing scope
    elif module and _binds(node, name):
        out.append(None)
    comprehension = isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp)
    for child in ast.iter_child_nodes(node):
        _bindings(child, name, module and not comprehension, out)


def _binds(node: ast.AST, name: str) -> bool:
    """A module-level binding of ``name`` by a node other than a def or class."""
    if isinstance(node, ast.Name):
        return node.id == name and isinstance(node.ctx, ast.Store | ast.Del)
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any(alias.name == "*" or (alias.asname or alias.name.split(".")[0]) == name
                   for alias in node.names)
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
        return node.name == name
    if isinstance(node, ast.MatchMapping):
        return node.rest == name
    return False


# --------------------------------------------------------------------------- finding the source


def find_source(nb: Notebook, part_id: str) -> str | None:
    """The source text of the function the graded test cell for ``part_id`` checks, or None."""
    cells = [c for c in nb.cells if c.get("cell_type") == "code"]
    for index, cell in enumerate(cells):
        if grade_id(cell) is None:
            continue
        name = checked_name(str(cell.get("source", "")), part_id)
        if name is not None:
            return definition(cells[:index], name)
    return None


def definition(cells: Iterable[Any], name: str) -> str | None:
    """The last module-level def/class of ``name`` in these cells, unless rebound after it."""
    found: tuple[ast.AST, str] | None = None
    for cell in cells:
        text = str(cell.get("source", ""))
        if name not in text and "*" not in text:  # it cannot bind the name: skip parsing it
            continue
        parsed = parse_cell(text)
        if parsed is None:
            continue
        tree, code = parsed
        try:
            events = bindings(tree, name)
        except RecursionError:
            return None
        for node in events:
            found = (node, code) if node is not None else None
    return segment(found[1], found[0]) if found is not None else None
