"""A student's cells as text: where is the function a part checks, and what does it say.

:class:`SourceReader` finds, in the restored notebook, the test cell that checks the part, the
name it passes to ``check("exNN.part", NAME)``, and the last module-level ``def``/``class`` of
that name in the code cells before it; a later rebinding of the name (an assignment, an import, a
``global`` statement) or a definition the parser cannot see (``exec``, a lambda) gives None, and
the part fails with ``source.NOT_FOUND``. The one import followed is from the student's own
package (``from mytorch.nn import Linear``): the definition is read from the package's files as
the grader read them beside the notebook, never from the sandbox. Nothing is executed: cells are
parsed with ``ast`` after IPython's own text transformations of magics.

Parsing is bounded: a cell that cannot bind the name (every mention of it is a call) is never
parsed; a cell over :data:`MAX_CELL_CHARS` that might bind it is not parsed either, and the part
says why. Parsed cells are kept for one submission only (one reader per submission).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from typing import Any

from edu_dl.grading.nbgrader import grade_id
from edu_dl.grading.notebooks import Notebook
from edu_dl.grading.trust.scopes import SCOPES, parse_python, segment

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


MAX_CELL_CHARS = 100_000  # a cell the trusted side parses (a solution cell is a few thousand)
IMPORT_STAR = re.compile(r"import[\s\\(]*\*")


def parse_cell(text: str) -> tuple[ast.Module, str] | None:
    """(tree, the text it was parsed from), or None for a cell that is not Python (it runs
    nothing). A ``%%time`` or ``%%capture`` cell is its body."""
    code = _ipython_text(text)
    try:
        tree = parse_python(code)
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
    return _checked_name(parsed, part_id) if parsed is not None else None


def _checked_name(parsed: tuple[ast.Module, str], part_id: str) -> str | None:
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


def may_bind(text: str, name: str) -> bool:
    """Could this cell bind ``name`` at module level? False only when it surely cannot: no
    ``import *`` and every mention of the name is a call (``name(``), not a def or class."""
    if IMPORT_STAR.search(text):
        return True
    for match in re.finditer(rf"(?<![\w.]){re.escape(name)}(?!\w)", text):
        called = re.match(r"\s*\(", text[match.end():match.end() + 200])
        defined = re.search(r"(def|class)[\s\\]*$", text[max(0, match.start() - 40):
                                                         match.start()])
        if not called or defined:
            return True
    return False


def imported_from(tree: ast.Module, name: str, package: str) -> tuple[str, str] | None:
    """Where the cell's last top-level binding of ``name`` is ``from <package>.<module> import
    <original> [as name]``: (the module inside the package, 'nn' or 'nn/layers', as
    :meth:`SourceReader.module` takes it; the original name); None for any other last binding."""
    for statement in reversed(tree.body):
        if not _binds_at_top(statement, name):
            continue
        if isinstance(statement, ast.ImportFrom) and statement.level == 0 and \
                statement.module and statement.module.split(".")[0] == package:
            for alias in statement.names:
                if (alias.asname or alias.name) == name and alias.name != "*":
                    inside = statement.module.split(".")[1:]
                    return "/".join(inside), alias.name
        return None
    return None


def _binds_at_top(statement: ast.stmt, name: str) -> bool:
    """Does this top-level statement bind ``name`` in the module (anywhere in it)?"""
    events: list[ast.AST | None] = []
    _bindings(statement, name, True, events)
    return bool(events)


# A module of a student's package the trusted side parses (the whole package is 2 MB at most).
MAX_MODULE_CHARS = 400_000


class SourceReader:
    """The checked functions' sources in one notebook; each cell is parsed at most once.
    ``package``: the student's own package (its name, and its files by path inside it, the
    bytes the grader read beside the notebook): a checked name the notebook imports from it is
    read from there."""

    def __init__(self, nb: Notebook, package: tuple[str, Mapping[str, bytes]] | None = None
                 ) -> None:
        self.cells = [c for c in nb.cells if c.get("cell_type") == "code"]
        self._parsed: dict[int, tuple[ast.Module, str] | None] = {}
        self.problems: dict[str, str] = {}  # part id -> why its source could not be read
        self.package_name, self.package_files = package if package else ("", {})
        self._modules: dict[str, tuple[ast.Module, str] | None] = {}

    def module(self, inside: str) -> tuple[ast.Module, str] | None:
        """A module of the student's package ('nn' or 'nn/layers'; '' the package itself),
        parsed once; None where there is none or it is not Python."""
        if inside not in self._modules:
            stem = f"{inside}/" if inside else ""
            data = self.package_files.get(f"{inside}.py") if inside else None
            data = data if data is not None else self.package_files.get(f"{stem}__init__.py")
            parsed = None
            if data is not None and len(data) <= MAX_MODULE_CHARS:
                try:
                    code = data.decode("utf-8")
                    parsed = (parse_python(code), code)
                except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError,
                        MemoryError):
                    parsed = None
            self._modules[inside] = parsed
        return self._modules[inside]

    def from_package(self, inside: str, name: str, follow: bool = True
                     ) -> tuple[ast.AST, str] | None:
        """The last module-level def/class of ``name`` in the package's module ``inside``,
        unless rebound after; an import of it from another module of the package is followed
        once (``follow``)."""
        parsed = self.module(inside)
        if parsed is None:
            return None
        tree, code = parsed
        try:
            events = bindings(tree, name)
        except RecursionError:
            return None
        last = events[-1] if events else None
        if last is not None:
            return last, code
        further = imported_from(tree, name, self.package_name) if events and follow else None
        if further is None or further[0] == inside:
            return None
        return self.from_package(*further, follow=False)

    def parsed(self, index: int) -> tuple[ast.Module, str] | None:
        if index not in self._parsed:
            self._parsed[index] = parse_cell(str(self.cells[index].get("source", "")))
        return self._parsed[index]

    def find(self, part_id: str) -> str | None:
        """The source text of the function the graded test cell for ``part_id`` checks."""
        for index, cell in enumerate(self.cells):
            text = str(cell.get("source", ""))
            if grade_id(cell) is None or part_id not in text or len(text) > MAX_CELL_CHARS:
                continue
            parsed = self.parsed(index)
            name = _checked_name(parsed, part_id) if parsed is not None else None
            if name is not None:
                return self.definition(range(index), name, part_id)
        return None

    def definition(self, indices: Iterable[int], name: str, part_id: str = "") -> str | None:
        """The last module-level def/class of ``name`` in these cells, unless rebound after."""
        found: tuple[ast.AST, str] | None = None
        for index in indices:
            text = str(self.cells[index].get("source", ""))
            if (name not in text and "*" not in text) or not may_bind(text, name):
                continue  # it cannot bind the name: not parsed
            if len(text) > MAX_CELL_CHARS:
                self.problems[part_id] = (
                    f"code cell {index + 1} holds {len(text)} characters and may define "
                    f"{name}: the grader reads cells of at most {MAX_CELL_CHARS} characters, "
                    "so split or shorten it")
                return None
            parsed = self.parsed(index)
            if parsed is None:
                continue
            tree, code = parsed
            try:
                events = bindings(tree, name)
            except RecursionError:
                return None
            for node in events:
                found = (node, code) if node is not None else None
            if events and events[-1] is None and self.package_name:
                where = imported_from(tree, name, self.package_name)
                found = self.from_package(*where) if where is not None else None
        return segment(found[1], found[0]) if found is not None else None


def find_source(nb: Notebook, part_id: str,
                package: tuple[str, Mapping[str, bytes]] | None = None) -> str | None:
    """The source text of the function the graded test cell for ``part_id`` checks, or None
    (``package``: the student's own, as :class:`SourceReader` takes it)."""
    return SourceReader(nb, package).find(part_id)


def definition(cells: Iterable[Any], name: str) -> str | None:
    """The last module-level def/class of ``name`` in these code cells, unless rebound after."""
    reader = SourceReader(Notebook(cells=list(cells)))
    return reader.definition(range(len(reader.cells)), name)
