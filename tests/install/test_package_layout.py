"""The package's shape (issue 27): homes by role, a map that names every module, layers one way.

These read the source, not the running package: an import added anywhere, even inside a function,
counts, and a module added without a line in the README's map fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "edu_dl"

# Layers, bottom first: a module may import its own layer and the ones below, never above.
LAYERS: list[set[str]] = [
    {"util", "backend"},
    {"autograd", "graph", "nn", "optim", "data", "datasets", "attention", ""},
    {"models", "machine", "gpu", "twins", "caffe", "parallel", "notebook", "speed"},
    {"harness", "bench", "grading"},
    {"cli"},
]
# Tools that must not import each other although they share a layer. (importer, imported): the
# harness builds on grading's spec and hints, so grading importing the harness is an arrow up
# (it once did, for the speed tasks, which now live below both in ``speed``).
APART = [("bench", "grading"), ("grading", "bench"), ("bench", "harness"), ("harness", "bench"),
         ("grading", "harness")]
# Rooms inside a home that import nothing of the rest of it but what is named here: the sandbox
# runs untrusted code, so it must not depend on what judges that code, only on the wire format
# (and on the package ``edu_dl`` itself, whose folder it shows inside).
ROOMS = {"edu_dl.grading.sandbox": {"edu_dl", "edu_dl.grading.protocol"}}


# The grading wing in rooms by role (issue 42), bottom first: a grading module may import its own
# rung and the ones below. A room is a sub-package (trust/, sandbox/, authoring/, stages/, term/);
# the few modules at grading's top are named one by one; "" is the package itself (check, Part).
GRADING_RUNGS: list[set[str]] = [
    {"protocol", "notebooks", "cost"},  # the wire format, notebook files, the grader's own cost
    {"model"},  # jobs, rows, names
    {"nbgrader"},  # nbgrader's metadata and markers
    {"trust"},  # every byte a student or a sandbox wrote, parsed
    {"sandbox", "runner", "speed_driver"},  # the sandbox and what runs inside it
    {"settings"},  # a run's limits, and whether the sandbox works here (asked once)
    {"authoring"},  # what an instructor writes: parts, hints, source checks, the release
    {"checking"},  # a student's check()
    {"stages"},  # one submission: load, prepare, run, receive, judge, feedback; speed; a cluster
    {"term"},  # the term: grade(), validate, gradebooks, hand grades, policies, reports, LMS, CLI
    {""},
]
MAX_GRADING_TOP = 12  # modules at grading's top, __init__.py included
MAX_MODULE_LINES = 600


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def home(module: str) -> str:
    """A module's top-level home: ``edu_dl.gpu.timing`` -> ``gpu``; the package -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every edu_dl module ``path`` imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from edu_dl import backend` imports the module backend; `from edu_dl import
            # Tensor` imports the package's __init__ (the parent package itself, which every
            # submodule's import runs first, is not counted as an edge).
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                     else node.module for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif (named := imported_by_name(node)) is not None:
            names = [named]  # importlib.import_module("edu_dl.x"): an edge all the same
        for name in names:
            if name.split(".")[0] != "edu_dl":
                continue
            while name not in known and "." in name:
                name = name.rsplit(".", 1)[0]
            found.add(name)
    return found


def imported_by_name(node: ast.AST) -> str | None:
    """The module a call such as ``importlib.import_module("edu_dl.grading.term.batch")`` or
    ``__import__("...")`` imports, when it is written out as a string; else None."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return node.args[0].value if name in ("import_module", "__import__") else None


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def rank_in(ladder: list[set[str]], place: str, module: str) -> int:
    """The rung of ``ladder`` (bottom first) that holds ``place``, the home or room of
    ``module``; a place no rung names fails the test, so a new home must be placed."""
    for rank, places in enumerate(ladder):
        if place in places:
            return rank
    raise AssertionError(f"{module}: {place!r} is on no rung of this test")


def layer_of(module: str) -> int:
    return rank_in(LAYERS, home(module), module)


def test_no_edu_dl_module_is_imported_by_a_string() -> None:
    """An import written as a string hides an edge from a reader (cluster.py once imported
    batch so); the edges above count them anyway, and none is left to count."""
    by_name = [f"{path.relative_to(ROOT)}:{node.lineno} {named}"
               for path in modules().values()
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if (named := imported_by_name(node)) and named.split(".")[0] == "edu_dl"]
    assert by_name == [], "import these with an import statement: " + ", ".join(by_name)


def test_no_relative_imports() -> None:
    relative = [f"{path.relative_to(ROOT)}:{node.lineno}"
                for path in modules().values()
                for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) and node.level]
    assert relative == [], "absolute imports survive a module's move: " + ", ".join(relative)


def test_at_most_eight_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def test_layers_point_one_way() -> None:
    upward = [f"{a} -> {b}" for a, targets in graph().items() for b in targets
              if layer_of(b) > layer_of(a)]
    assert upward == [], "imports that point up a layer:\n" + "\n".join(sorted(upward))


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize(("importer", "imported"), APART)
def test_tools_do_not_import_each_other(importer: str, imported: str) -> None:
    found = [f"{a} -> {b}" for a, targets in graph().items() if home(a) == importer
             for b in targets if home(b) == imported]
    assert found == []


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_a_room_imports_only_itself_and_what_it_names(room: str) -> None:
    def inside(module: str) -> bool:
        return module == room or module.startswith(f"{room}.")

    edges = graph()
    members = [a for a in edges if inside(a)]
    assert len(members) > 1, f"{room}: no modules found"
    outside = [f"{a} -> {b}" for a in members for b in edges[a]
               if not inside(b) and b not in ROOMS[room]]
    assert outside == [], f"{room} imports outside its room:\n" + "\n".join(sorted(outside))


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over every import, function-level ones included."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert cycles == []


def readme_map() -> set[str]:
    """The paths the README's package map names (relative to the repository)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## The package\n.*?```text\n(.*?)```", text, re.S)
    assert block, "README.md has no '## The package' section with a ```text map"
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.group(1).splitlines():
        names = line.strip().split("  ")[0]  # "load.py, collect.py  what they do" -> the names
        if not names or not re.fullmatch(r"[\w./]+(, [\w./]+)*", names):
            continue
        indent = len(line) - len(line.lstrip())
        while folders and folders[-1][0] >= indent:
            folders.pop()
        prefix = "".join(name for _, name in folders)
        for name in names.split(", "):
            if name.endswith("/"):
                listed.add(prefix + name)
            elif name.endswith(".py"):
                listed.add(prefix + name)
        if names.endswith("/") and ", " not in names:
            folders.append((indent, names))
    return listed


def test_the_readme_map_names_every_module() -> None:
    listed = readme_map()
    files = [p for p in modules().values() if not p.name.endswith("_pb2.py")]  # generated
    actual = {str(p.relative_to(ROOT)) for p in files
              if p.name != "__init__.py" or p.parent == PACKAGE}
    folders = {str(p.parent.relative_to(ROOT)) + "/" for p in files if p.name == "__init__.py"}
    assert sorted(actual - listed) == [], "modules the README's map leaves out"
    assert sorted(folders - listed) == [], "folders the README's map leaves out"
    assert sorted(listed - actual - folders) == [], "the README's map names what is not there"


def test_the_speed_tasks_old_address_is_the_same_objects() -> None:
    """Exercises copied before issue 42 import ``edu_dl.harness.speed``: the same tasks."""
    from edu_dl.harness import speed as old
    from edu_dl.speed import tasks

    public = [name for name in vars(tasks) if not name.startswith("_") and
              getattr(getattr(tasks, name), "__module__", None) == tasks.__name__]
    assert public and all(getattr(old, name) is getattr(tasks, name) for name in public), \
        sorted(set(public) - set(vars(old)))


def grading_room(module: str) -> str:
    """``edu_dl.grading.stages.judge`` -> ``stages``; ``edu_dl.grading.model`` -> ``model``."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def grading_rung(module: str) -> int:
    return rank_in(GRADING_RUNGS, grading_room(module), module)


def test_the_grading_wing_is_a_few_rooms_with_arrows_one_way() -> None:
    """Issue 42: the folder listing reads as the roles, and no grading import points up a rung
    (an authoring module importing a stage, a stage importing the term, trust importing a
    policy, ...)."""
    grading = {name: targets for name, targets in graph().items() if home(name) == "grading"}
    upward = [f"{a} -> {b}" for a, targets in grading.items() for b in targets
              if home(b) == "grading" and grading_rung(b) > grading_rung(a)]
    assert upward == [], "grading imports that point up a rung:\n" + "\n".join(sorted(upward))
    top = sorted(p.name for p in (PACKAGE / "grading").glob("*.py"))
    assert len(top) <= MAX_GRADING_TOP, top
    rooms = sorted(p.name for p in (PACKAGE / "grading").iterdir()
                   if p.is_dir() and (p / "__init__.py").exists())
    assert rooms == ["authoring", "sandbox", "stages", "term", "trust"], rooms


def test_no_grading_module_is_over_six_hundred_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for name, p in modules().items()
            if home(name) == "grading"
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, long


def test_every_public_function_has_a_docstring() -> None:
    """A module-level function whose name has no leading underscore is the package's to offer,
    so it says what it returns or does (generated ``*_pb2.py`` files aside)."""
    bare = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
            for path in sorted(modules().values()) if not path.name.endswith("_pb2.py")
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and not node.name.startswith("_") and ast.get_docstring(node) is None]
    assert bare == [], "public functions without a docstring:\n" + "\n".join(bare)
