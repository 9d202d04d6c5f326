"""The trusted side's view of a submission's source: the text of the function a part checks.

Some parts grade *how* an answer was computed (a thread, a Session, ``get_xp``, shared memory):
behaviour the student's process could fake, so the grader judges it from the submitted source
instead. :func:`find_source` finds, in the restored notebook, the test cell that checks the part,
the name it passes to ``check("exNN.part", NAME)``, and the last module-level ``def``/``class``
of that name in the code cells before it; a later rebinding of the name (an assignment, an import,
a ``global`` statement) or a definition the parser cannot see (``exec``, a lambda) gives None, and
the part fails with :data:`NOT_FOUND`. Nothing is executed: cells are parsed with ``ast`` after
IPython's own text transformations of magics, and the ``*_check`` helpers only ``compile()``.

What stays out of reach of any static reading (code that rebinds the name through ``globals()``
or ``exec``, dead code that merely names a thread) is visible in the submission itself, for the
instructor; the grade never rests on what the student's process reports.
"""

from __future__ import annotations

import ast
import functools
import textwrap
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .spec import Part, Verdict, global_names

if TYPE_CHECKING:
    from .notebooks import Notebook

NOT_FOUND = ("the grader could not find the source of the function you pass to check() for "
             "this part: define it with a plain top-level `def` (or `class`) of that name in a "
             "cell before the test cell, and do not assign, import or redefine that name later "
             "(this part judges how the function computes its result, from its source)")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


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


def _segment(code: str, node: ast.AST) -> str:
    """The node's lines, decorators included, dedented (a def inside a top-level ``if``)."""
    assert isinstance(node, SCOPES)
    lines = code.splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno or node.lineno
    return textwrap.dedent("\n".join(lines[first - 1:last])) + "\n"


# --------------------------------------------------------------------------- finding the source


def find_source(nb: Notebook, part_id: str) -> str | None:
    """The source text of the function the graded test cell for ``part_id`` checks, or None."""
    from .notebooks import grade_id

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
    return _segment(found[1], found[0]) if found is not None else None


def judge_source(part: Part, source: str | None) -> Verdict:
    """The part's source check on the found source; a clear failure when there is none."""
    if part.source_check is None:
        return Verdict(True)
    if source is None:
        return Verdict(False, NOT_FOUND)
    try:
        return part.source_check(source)
    except Exception as exc:  # a check that cannot read this source does not pass it
        return Verdict(False, f"could not read the function's source ({type(exc).__name__}: "
                              f"{exc})")


# --------------------------------------------------------------------------- reading a definition


def definition_node(source: str) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef:
    """The def or class statement a source text holds (ValueError otherwise)."""
    tree = ast.parse(source)
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


def names_check(required: Iterable[tuple[Iterable[str], str]] = (),
                forbidden: Iterable[tuple[Iterable[str], str]] = (),
                ) -> Callable[[str], Verdict]:
    """A source check on :func:`code_names`: for each (alternatives, message) of ``required``
    one of the names must be looked up, for each of ``forbidden`` none may be."""
    required, forbidden = list(required), list(forbidden)

    def check(source: str) -> Verdict:
        names = code_names(source)
        for alternatives, message in forbidden:
            if names & set(alternatives):
                return Verdict(False, message)
        for alternatives, message in required:
            if not names & set(alternatives):
                return Verdict(False, message)
        return Verdict(True)

    return check


def all_checks(*checks: Callable[[str], Verdict]) -> Callable[[str], Verdict]:
    """Source checks in order; the first failure decides."""
    def check(source: str) -> Verdict:
        for one in checks:
            verdict = one(source)
            if not verdict.ok:
                return verdict
        return Verdict(True)

    return check


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
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    line = code.co_firstlineno
    for node in ast.walk(tree):
        if not isinstance(node, SCOPES) or node.name != name:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        inside = first < line <= (node.end_lineno or node.lineno)
        if first == line if not isinstance(target, type) else inside:
            return _segment(text, node)
    return None
