"""The set-up files agree: pyproject.toml, environment.yml, constraints.txt, README, CI."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# PEP 508: a name, optional [extras], then the version specifier (no environment markers here).
REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[(?P<extras>[^\]]*)\])?\s*(?P<spec>[^;#]*?)\s*$"
)


def normalize(name: str) -> str:
    """PEP 503: lowercase, runs of '-', '_', '.' become one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirement(line: str) -> tuple[str, str]:
    """'tensorflow[and-cuda] >= 2.16' -> ('tensorflow[and-cuda]', '>=2.16')."""
    match = REQUIREMENT.match(line)
    assert match, f"cannot parse requirement {line!r}"
    name = normalize(match["name"])
    if match["extras"]:
        extras = ",".join(sorted(normalize(e) for e in match["extras"].split(",") if e.strip()))
        name = f"{name}[{extras}]"
    spec = ",".join(sorted(s.replace(" ", "") for s in match["spec"].split(",") if s.strip()))
    return name, spec


def requirements(lines: list[str]) -> dict[str, str]:
    parsed = [parse_requirement(line) for line in lines]
    names = [name for name, _ in parsed]
    assert len(names) == len(set(names)), f"a package is listed twice: {names}"
    return dict(parsed)


def bare(name: str) -> str:
    """'tensorflow[and-cuda]' -> 'tensorflow'."""
    return name.split("[", 1)[0]


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def extras(project: dict) -> dict[str, dict[str, str]]:
    return {k: requirements(v) for k, v in project["optional-dependencies"].items()}


# The extras `make install` adds to the runtime for the course on a CPU (beside the website's
# and Dask's): TensorFlow, Caffe's protobuf, JupyterLab, the test tools.
COURSE_EXTRAS = ("cpu", "caffe", "lab", "triton", "dev")


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def course_stack(project: dict, extras: dict[str, dict[str, str]]) -> dict[str, str]:
    """What `make install` installs for the course: dependencies + COURSE_EXTRAS."""
    stack = requirements(project["dependencies"])
    for extra in COURSE_EXTRAS:
        overlap = stack.keys() & extras[extra].keys()
        assert not overlap, f"extra {extra!r} repeats {sorted(overlap)}"
        stack |= extras[extra]
    return stack


def conda_pip_lines(text: str) -> list[str]:
    """The entries of the `- pip:` list in environment.yml (a small parse: no YAML dependency)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"\s*-\s+pip:\s*(#.*)?", line)]
    assert len(starts) == 1, "environment.yml needs exactly one '- pip:' list"
    start = starts[0]
    parent_indent = len(lines[start]) - len(lines[start].lstrip())
    entries = []
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(line) - len(line.lstrip()) <= parent_indent:
            break
        assert stripped.startswith("- "), f"unexpected line in the pip list: {line!r}"
        entries.append(re.sub(r"\s+#.*$", "", stripped[2:]).strip().strip("'\""))
    return entries


def conda_dependencies(text: str) -> list[str]:
    """The conda-level entries (`- python=3.11`, `- pip`) of environment.yml."""
    out = []
    in_deps = False
    for line in text.splitlines():
        if re.match(r"^dependencies:\s*$", line):
            in_deps = True
            continue
        if in_deps and line and not line[0].isspace() and not line.startswith("#"):
            break
        match = re.fullmatch(r"  - ([^\s:]+)\s*(#.*)?", line)
        if in_deps and match:
            out.append(match[1])
    return out


def constraint_pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        assert not line.startswith("-"), f"constraints.txt must hold only pins, not {line!r}"
        assert "file:" not in line and " @ " not in line, f"a local path in constraints: {line!r}"
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert match, f"constraints.txt lines must be name==version, not {line!r}"
        name = normalize(match[1])
        assert name not in pins, f"{name} is pinned twice in constraints.txt"
        pins[name] = match[2]
    return pins


# ---------------------------------------------------------------------------------------------
# pyproject.toml itself


def test_torch_is_a_range_in_pyproject(project: dict) -> None:
    """The exact version is in constraints.txt (the pin's one test: the constraints' below)."""
    deps = requirements(project["dependencies"])
    assert deps.get("torch", "").startswith(">="), "a range in pyproject (test_install.py)"


def test_make_and_conda_install_with_the_constraints() -> None:
    """The exact versions reach every install of the course's own: make (and so CI), conda."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install [^\n]*-c \$\(CONSTRAINTS\) -e", makefile), "make lost -c"
    assert re.search(r"^CONSTRAINTS := .*constraints\.txt", makefile, re.M)
    assert "-c constraints.txt" in conda_pip_lines((ROOT / "environment.yml").read_text())


def test_gpu_extras_are_cpu_extra_with_gpu_tensorflow_cupy_and_capped_numpy(
    extras: dict[str, dict[str, str]],
) -> None:
    cpu = extras["cpu"]
    assert "tensorflow-cpu" in cpu
    for cuda in ("12", "13"):
        gpu = extras[f"cuda{cuda}"]
        expected = {k: v for k, v in cpu.items() if k != "tensorflow-cpu"}
        expected["tensorflow[and-cuda]"] = cpu["tensorflow-cpu"]
        extra = {f"cupy-cuda{cuda}x", f"numba-cuda[cu{cuda}]", "numpy"}
        assert extra <= gpu.keys(), f"cuda{cuda} lacks {sorted(extra - gpu.keys())}"
        assert {k: v for k, v in gpu.items() if k not in extra} == expected


def test_the_issue_stack_is_named(course_stack: dict[str, str]) -> None:
    needed = {"torch", "tensorflow-cpu", "numpy", "matplotlib", "jupyterlab", "nbval", "pytest",
              "scikit-learn", "tqdm"}
    assert needed <= course_stack.keys(), f"missing: {sorted(needed - course_stack.keys())}"


def test_the_runtime_is_what_a_notebook_needs(project: dict,
                                              extras: dict[str, dict[str, str]]) -> None:
    """A hosted service installs the dependencies alone: no JupyterLab, no test tools, and no
    protobuf 7 over the service's TensorFlow (issue 26); `make` adds them as extras."""
    runtime = requirements(project["dependencies"])
    for tool in ("jupyterlab", "pytest", "nbval", "protobuf"):
        assert tool not in runtime, f"{tool} is a hard dependency: it belongs in an extra"
    assert "jupyterlab" in extras["lab"]
    assert {"pytest", "nbval"} <= extras["dev"].keys()
    assert extras["caffe"] == {"protobuf": ">=7.35.1"}
    # What the course's own code imports at run time, hosted services included.
    assert {"nbformat", "nbclient", "ipykernel"} <= runtime.keys()


def makefile_list(name: str) -> set[str]:
    """The comma-separated items of a Makefile variable, other variables expanded."""
    text = (ROOT / "Makefile").read_text()
    line = re.search(rf"^{name} := (.*)$", text, re.M)
    assert line, f"the Makefile lost its {name}"
    items: set[str] = set()
    for item in line[1].split(","):
        inner = re.fullmatch(r"\$\((\w+)\)", item)
        items |= makefile_list(inner[1]) if inner and inner[1] != "CUDA_EXTRA" else {item}
    return items


def test_make_installs_the_course_extras() -> None:
    """`make lab` and `make test` still get JupyterLab, the test tools and protobuf 7."""
    installed = makefile_list("EXTRAS")
    assert set(COURSE_EXTRAS) - {"cpu"} <= installed, installed
    assert "$(CUDA_EXTRA)" in installed  # cpu, or a GPU extra with GPU=1


def test_make_lab_installs_only_what_a_student_needs() -> None:
    """`make lab` leaves the developers' tools out (issue 36: 0.4 GB no student uses)."""
    student = makefile_list("STUDENT_EXTRAS")
    assert student == {"$(CUDA_EXTRA)", "caffe", "lab", "triton"}, student
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab: install ", text, re.M), "make lab must install the student's extras"
    for target in ("test", "test-fast", "test-notebooks", "notebooks", "site"):
        assert re.search(rf"^{target}: install-dev\b", text, re.M), f"make {target} needs dev"



def test_every_pip_install_of_make_is_byte_compiled_after() -> None:
    """pip installs without compiling (one file at a time) and make compiles on every core
    after each install; without that step every sandboxed kernel, reading the environment
    read-only, would compile IPython and NumPy again in every graded notebook."""
    text = (ROOT / "Makefile").read_text()
    definition = re.search(r"^PIP_INSTALL = (?:.*\\\n)*.*", text, re.M)
    assert definition and "--no-compile" in definition.group(), "pip compiles one by one again"
    recipes = re.split(r"\n(?=\S)", text)  # a rule and its recipe lines, one block each
    installing = [r for r in recipes if "$(call PIP_INSTALL" in r]
    assert len(installing) == 2, "the student's and the developers' steps"
    for recipe in installing:
        after = recipe.split("$(call PIP_INSTALL", 1)[1]
        assert "$(COMPILE)" in after, recipe.splitlines()[0]
    compile_step = re.search(r"^COMPILE = (?:.*\\\n)*.*", text, re.M)
    # what it compiles is edu_dl/util/uncompiled.py's list (tests/install/test_uncompiled.py:
    # the packages' own tests/ folders left out, everything a second install added kept in)
    assert compile_step and "edu_dl/util/uncompiled.py --compile" in compile_step.group(), \
        "the packages are not compiled from uncompiled.py's list"

# ---------------------------------------------------------------------------------------------
# environment.yml


def test_environment_yml_names_the_same_packages_as_pyproject(course_stack: dict[str, str]) -> None:
    entries = conda_pip_lines((ROOT / "environment.yml").read_text())
    assert "-e ." in entries, "environment.yml must install the course itself (-e .)"
    conda = requirements([e for e in entries if not e.startswith("-")])
    assert conda == course_stack, (
        f"only in environment.yml: {sorted(conda.items() - course_stack.items())}; "
        f"only in pyproject.toml: {sorted(course_stack.items() - conda.items())}"
    )


def test_environment_yml_uses_python_311_and_pip() -> None:
    deps = conda_dependencies((ROOT / "environment.yml").read_text())
    assert "python=3.11" in deps
    assert "pip" in deps


def test_conda_pip_list_parser_sees_every_entry() -> None:
    text = "dependencies:\n  - pip\n  - pip:\n      - a>=1  # why\n\n      - B_c==2\n  - other\n"
    assert conda_pip_lines(text) == ["a>=1", "B_c==2"]
    assert conda_dependencies(text) == ["pip", "other"]


# ---------------------------------------------------------------------------------------------
# constraints.txt


def test_constraints_pin_every_installed_package(course_stack: dict[str, str]) -> None:
    pins = constraint_pins()
    missing = sorted(bare(name) for name in course_stack if bare(name) not in pins)
    assert not missing, f"constraints.txt lacks pins for {missing}: run `make constraints`"


def test_constraints_satisfy_pyproject(course_stack: dict[str, str]) -> None:
    from packaging.specifiers import SpecifierSet

    pins = constraint_pins()
    bad = [f"{name}{spec} but pinned =={pins[bare(name)]}"
           for name, spec in course_stack.items()
           if bare(name) in pins and pins[bare(name)] not in SpecifierSet(spec)]
    assert not bad, bad


def test_constraints_pin_torch_without_local_label_and_both_tensorflows() -> None:
    pins = constraint_pins()
    # The course's one assertion of the torch pin: an unpinned torch pulls a multi-GB CUDA build.
    assert pins["torch"] == "2.13.0", "write torch==2.13.0, not a local build such as +cpu"
    assert not [f"{k}=={v}" for k, v in pins.items() if "+" in v], "no local version labels"
    assert "tensorflow-cpu" in pins
    assert pins.get("tensorflow") == pins["tensorflow-cpu"], "GPU=1 must get the same TensorFlow"
    assert "edu-dl" not in pins


# ---------------------------------------------------------------------------------------------
# README.md, Makefile, .ci/run


def readme_commands() -> list[str]:
    """Shell commands in README.md's fenced code blocks, in order."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```(?:bash|sh|shell|console)?\n(.*?)^```", text, re.M | re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip().removeprefix("$ ")
            if line:
                commands.append(line)
    return commands


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return {m for m in re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M)}


def test_readme_opens_with_make_lab_and_make_test() -> None:
    assert readme_commands()[:2] == ["make lab", "make test"]


def test_every_make_target_in_the_docs_exists() -> None:
    """The README and the website's pages for instructors and developers (site/*.md)."""
    docs = [ROOT / "README.md", *sorted((ROOT / "site").glob("*.md"))]
    used = {path.name: set(re.findall(r"(?:^|`)make ([a-z][a-z0-9_-]*)", path.read_text(), re.M))
            for path in docs}
    assert {"lab", "test", "site"} <= used["README.md"]
    assert {"test-fast", "constraints", "notebooks"} <= used["developers.md"]
    missing = set().union(*used.values()) - makefile_targets()
    assert not missing, f"the docs name Makefile targets that do not exist: {sorted(missing)}"


def test_makefile_keeps_its_targets() -> None:
    expected = {"install", "lab", "test", "test-fast", "test-notebooks", "lint", "typecheck",
                "bench", "constraints", "clean"}
    assert expected <= makefile_targets()


def test_ci_runs_make_test() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert lines[0] == "#!/usr/bin/env bash"
    assert "set -euo pipefail" in lines
    assert "make test" in lines
    # The install first, on its own, so that CI prints its time apart from the tests'.
    assert lines.index("make install-dev system-deps") < lines.index("make test")


# The triton each torch release's Linux CUDA wheels require (torch's own pin, its
# .ci/docker/triton_version.txt at the release): the CPU wheel names none, so nothing here can
# read it from the installed torch. A torch upgrade adds its line.
TORCHS_TRITON = {"2.13.0": "3.7.1"}


def test_triton_is_the_one_torchs_cuda_build_requires(extras: dict[str, dict[str, str]]) -> None:
    """The triton extra (lecture 23) never contradicts torch's pin on a GPU: constraints.txt pins
    the same triton as the pinned torch's CUDA wheels require."""
    pins = constraint_pins()
    assert pins["torch"] in TORCHS_TRITON, f"torch {pins['torch']}: add its triton above"
    assert pins["triton"] == TORCHS_TRITON[pins["torch"]], pins["triton"]
    assert set(extras["triton"]) == {"triton"}
    for cuda in ("cuda12", "cuda13"):
        assert "triton" not in extras[cuda], "torch's CUDA build brings triton: pin it once"
