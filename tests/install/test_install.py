"""Installing the course where students already are: what pip would do, asked offline.

pip's own resolver answers (`pip install --dry-run --report`), run against a throw-away virtual
environment that holds PyTorch, NumPy and TensorFlow at versions other than constraints.txt's (as
installed `.dist-info` folders: pip reads their metadata, not their code), with an index of stub
wheels in a temporary folder (`--no-index --find-links`): no network, a few seconds. The course's
own metadata is written from pyproject.toml, as setuptools writes it (Requires-Dist, with
`extra == "..."` markers for the extras), so the resolver sees exactly pyproject's requirements.

Each check has a control that makes it fail: the same question asked of pyproject as it was (torch
pinned exactly) replaces PyTorch; the GPU extras without their cap take numpy 2.5.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
GPU_EXTRAS = ("cuda12", "cuda13")

# What a hosted notebook or a lab machine might already hold: supported, but not constraints.txt's.
ALREADY_THERE = {"torch": "2.11.0", "numpy": "2.3.5", "tensorflow": "2.20.0"}
# TensorFlow 2.20's own requirements on the packages the course also asks for (its METADATA).
TENSORFLOW_REQUIRES = ["numpy>=1.26.0", "protobuf>=5.28.0"]


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def constraint_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.split("#", 1)[0].strip())
        if match:
            pins[canonicalize_name(match[1])] = match[2]
    return pins


def course_metadata(project: dict) -> str:
    """The core metadata setuptools would write for the course (the parts pip resolves with)."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {req}" for req in project["dependencies"]]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for text in reqs:
            req = Requirement(text)
            marker = f'extra == "{extra}"'
            if req.marker:
                marker = f"({req.marker}) and {marker}"
            req.marker = None
            lines.append(f"Requires-Dist: {req}; {marker}")
    return "\n".join(lines) + "\n"


def stub_wheel(folder: Path, name: str, version: str, metadata: str | None = None) -> None:
    """A wheel that installs nothing: a .dist-info folder with METADATA, WHEEL and RECORD."""
    norm = canonicalize_name(name).replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    metadata = metadata or f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    with zipfile.ZipFile(folder / f"{norm}-{version}-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{info}/METADATA", metadata)
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: edu-dl-tests\n"
                                      "Root-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", f"{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")


def installed(site_packages: Path, name: str, version: str, requires: list[str] = ()) -> None:
    """A distribution as pip sees an installed one (its .dist-info folder)."""
    info = site_packages / f"{canonicalize_name(name).replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")


def stub_version(req: Requirement, pins: dict[str, str]) -> str:
    """constraints.txt's version where it has one, else the lowest version the range names."""
    pin = pins.get(canonicalize_name(req.name))
    if pin and req.specifier.contains(pin, prereleases=True):
        return pin
    floors = [s.version for s in req.specifier if s.operator in (">=", "==", "~=")]
    return floors[0] if floors else "1.0"


def index_for(project: dict, folder: Path, extra_stubs: dict[str, list[str]] = {}) -> Path:  # noqa: B006
    """Stub wheels for the course and every requirement it names (one version each, plus any
    extra versions asked for)."""
    folder.mkdir(parents=True)
    stub_wheel(folder, project["name"], project["version"], course_metadata(project))
    pins = constraint_pins()
    versions: dict[str, set[str]] = {}
    reqs = [*project["dependencies"], *(r for rs in project["optional-dependencies"].values()
                                         for r in rs)]
    for text in reqs:
        req = Requirement(text)
        if req.name == project["name"]:
            continue
        versions.setdefault(req.name, set()).add(stub_version(req, pins))
    for name, extra in extra_stubs.items():
        versions.setdefault(name, set()).update(extra)
    for name, vs in versions.items():
        for v in vs:
            stub_wheel(folder, name, v)
    return folder


def environment(folder: Path, dists: dict[str, tuple[str, list[str]]]) -> Path:
    """A virtual environment (no pip, nothing else) holding `dists`; returns its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    site_packages = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    for name, (version, requires) in dists.items():
        installed(site_packages, name, version, requires)
    return python


def dry_run(python: Path, index: Path, requirement: str, tmp: Path) -> dict[str, str]:
    """What `pip install requirement` into `python`'s environment would install: {name: version}."""
    report = tmp / f"report-{len(list(tmp.glob('report-*')))}.json"
    # No pip configuration (this machine's points at local indexes and caps torch): only `index`.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--dry-run",
           "--no-index", "--find-links", str(index), "--report", str(report), "--quiet",
           requirement]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip could not resolve {requirement}:\n{done.stdout}{done.stderr}"
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
            for item in json.loads(report.read_text())["install"]}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def existing_environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A student's environment: torch, numpy and TensorFlow already there, not at our pins."""
    pins = constraint_pins()
    for name, version in ALREADY_THERE.items():
        assert pins.get(name) != version, f"{name} {version} is constraints.txt's own version"
    dists = {name: (version, TENSORFLOW_REQUIRES if name == "tensorflow" else [])
             for name, version in ALREADY_THERE.items()}
    dists["protobuf"] = ("5.29.5", [])
    return environment(tmp_path_factory.mktemp("existing") / "env", dists)


def test_requires_python_is_311_and_later() -> None:
    assert pyproject()["requires-python"] == ">=3.11"


def test_pyproject_asks_for_ranges_and_constraints_hold_the_pins() -> None:
    project = pyproject()
    reqs = [*project["dependencies"], *(r for rs in project["optional-dependencies"].values()
                                         for r in rs)]
    exact = [r for r in reqs if any(s.operator in ("==", "===") for s in Requirement(r).specifier)]
    assert not exact, f"exact versions belong in constraints.txt, not pyproject.toml: {exact}"
    assert "torch" in constraint_pins()  # its version: test_environment.py, the pin's one test


def test_installing_the_course_replaces_none_of_torch_numpy_tensorflow(
    existing_environment: Path, tmp_path: Path
) -> None:
    project = pyproject()
    index = index_for(project, tmp_path / "index")
    would = dry_run(existing_environment, index, project["name"], tmp_path)
    assert canonicalize_name(project["name"]) in would, would  # the resolver did install the course
    replaced = {name: would[name] for name in ALREADY_THERE if name in would}
    assert not replaced, f"installing the course would replace {replaced} (had {ALREADY_THERE})"


def test_control_an_exact_torch_in_pyproject_would_replace_it(
    existing_environment: Path, tmp_path: Path
) -> None:
    """The check above can fail: pyproject as it was (torch==<the pin>) replaces the student's."""
    pin = constraint_pins()["torch"]
    project = pyproject()
    project["dependencies"] = [d for d in project["dependencies"]
                               if Requirement(d).name != "torch"] + [f"torch=={pin}"]
    index = index_for(project, tmp_path / "index")
    would = dry_run(existing_environment, index, project["name"], tmp_path)
    assert would.get("torch") == pin, would


def test_the_cpu_extra_keeps_an_installed_tensorflow_cpu(tmp_path: Path) -> None:
    """Where TensorFlow came as tensorflow-cpu (another version), `.[cpu]` keeps it too."""
    python = environment(tmp_path / "env", {"tensorflow-cpu": ("2.20.0", TENSORFLOW_REQUIRES),
                                            "numpy": ("2.3.5", [])})
    project = pyproject()
    index = index_for(project, tmp_path / "index")
    would = dry_run(python, index, f"{project['name']}[cpu]", tmp_path)
    assert "tensorflow-cpu" not in would and "numpy" not in would, would


# A hosted service with a TensorFlow older than 2.20 (Colab's 2.19 asks for protobuf below 6).
OLD_TENSORFLOW = {"tensorflow": ("2.19.0", ["numpy>=1.26.0", "protobuf>=3.20.3,<6.0.0dev"]),
                  "protobuf": ("5.29.5", []), "numpy": ("2.0.2", [])}


@pytest.mark.parametrize("as_it_was", [False, True], ids=["as-is", "control-protobuf-required"])
def test_a_tensorflow_before_2_20_keeps_its_protobuf(as_it_was: bool, tmp_path: Path) -> None:
    """Beside such a TensorFlow the hosted cell installs the course without the `caffe` extra
    (tests/notebooks/test_hosted.py), and pip then leaves protobuf alone. The control: with
    protobuf 7 a hard dependency, as it was, pip would install it over the one that TensorFlow
    accepts."""
    project = pyproject()
    if as_it_was:
        project["dependencies"] += project["optional-dependencies"]["caffe"]
    index = index_for(project, tmp_path / "index")
    python = environment(tmp_path / "env", OLD_TENSORFLOW)
    would = dry_run(python, index, project["name"], tmp_path)
    assert canonicalize_name(project["name"]) in would, would
    assert "tensorflow" not in would and "numpy" not in would, would
    assert ("protobuf" in would) == as_it_was, would


# ---------------------------------------------------------------------------------------------
# GPU extras: CUDA 12 and CUDA 13, numpy capped below 2.5 while numba-cuda is below 0.31


def test_gpu_extras_for_cuda_12_and_13() -> None:
    extras = {k: {canonicalize_name(Requirement(r).name): Requirement(r) for r in v}
              for k, v in pyproject()["optional-dependencies"].items()}
    assert "cupy-cuda12x" in extras["cuda12"] and "cupy-cuda13x" in extras["cuda13"]
    for extra in GPU_EXTRAS:
        assert "tensorflow" in extras[extra], f"{extra} lacks tensorflow[and-cuda]"
        assert extras[extra]["tensorflow"].extras == {"and-cuda"}
        assert extras[extra]["tensorflow"].specifier == extras["cpu"]["tensorflow-cpu"].specifier
        cuda = extra.removeprefix("cuda")
        assert extras[extra]["numba-cuda"].extras == {f"cu{cuda}"}, (
            f"{extra}: numba-cuda[cu{cuda}] brings the CUDA {cuda} bindings, NVRTC and NVVM")


def test_gpu_extras_cap_numpy_while_numba_cuda_is_below_0_31() -> None:
    project = pyproject()
    numba_cuda = next(Requirement(r) for r in project["dependencies"]
                      if Requirement(r).name == "numba-cuda")
    below_031 = any(numba_cuda.specifier.contains(f"0.30.{i}") for i in range(10))
    for extra in GPU_EXTRAS:
        numpy = SpecifierSet()
        for text in project["optional-dependencies"][extra]:
            if Requirement(text).name == "numpy":
                numpy &= Requirement(text).specifier
        if below_031:
            assert not numpy.contains("2.5.0"), (
                f"{extra} allows numpy 2.5 with {numba_cuda}: numba-cuda below 0.31 fails to "
                "import its CUDA target there (np.row_stack was removed); add numpy<2.5")
            assert numpy.contains("2.4.6"), f"{extra}'s numpy cap {numpy} excludes numpy 2.4"


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("capped", [True, False], ids=["as-is", "control-without-cap"])
def test_the_resolver_keeps_numpy_2_5_off_a_gpu_install(capped: bool, tmp_path: Path) -> None:
    """With numpy 2.5.0 on the index: the CPU install may take it, the GPU extras must not (and
    would, without the cap: the control)."""
    project = pyproject()
    if not capped:
        for extra in GPU_EXTRAS:
            project["optional-dependencies"][extra] = [
                r for r in project["optional-dependencies"][extra]
                if Requirement(r).name != "numpy"]
    index = index_for(project, tmp_path / "index", {"numpy": ["2.4.6", "2.5.0"]})
    empty = environment(tmp_path / "env", {})
    assert dry_run(empty, index, project["name"], tmp_path)["numpy"] == "2.5.0"
    for extra in GPU_EXTRAS:
        numpy = dry_run(empty, index, f"{project['name']}[{extra}]", tmp_path)["numpy"]
        assert (Version(numpy) < Version("2.5")) == capped, f"{extra} would install numpy {numpy}"


# ---------------------------------------------------------------------------------------------
# make: which Python, which extra (`make -n` prints what it would run; PATH holds only stand-ins)

MAKE = shutil.which("make") or "make"
NVIDIA_SMI = ("| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: {cuda}     |\n")


def make_would(tmp_path: Path, tools: dict[str, str], *args: str, dry: bool = True,
               target: str = "install") -> subprocess.CompletedProcess[str]:
    """`make [-n] TARGET ARGS` in the repository with PATH holding only `tools` (name -> output)
    and the text tools the Makefile pipes through."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("sed", "head"):
        (bin_dir / name).symlink_to(shutil.which(name) or f"/usr/bin/{name}")
    for name, output in tools.items():
        tool = bin_dir / name
        tool.write_text(f"#!/bin/sh\nprintf '%s' '{output}'\n")
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "GPU", "CUDA", "MAKEFLAGS")}
    env["PATH"] = str(bin_dir)
    cmd = [MAKE, "--no-print-directory", *(["-n"] if dry else []), target,
           f"VENV={tmp_path / 'venv'}", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("pythons", "expected"), [
    (["python3.11", "python3.12", "python3.13"], "python3.11"),
    (["python3.12", "python3.13"], "python3.13"),
    (["python3.12"], "python3.12"),
])
def test_make_takes_python_3_11_else_the_newest_supported(
    tmp_path: Path, pythons: list[str], expected: str
) -> None:
    done = make_would(tmp_path, dict.fromkeys(pythons, ""))
    assert done.returncode == 0, done.stderr
    assert f"{tmp_path / 'bin' / expected} -m venv" in done.stdout, done.stdout


def test_make_takes_the_python_it_is_given(tmp_path: Path) -> None:
    done = make_would(tmp_path, {"python3.11": ""}, "PYTHON=/opt/py/bin/python3.12")
    assert "/opt/py/bin/python3.12 -m venv" in done.stdout, done.stdout


@pytest.mark.parametrize(("smi", "args", "extra"), [
    (None, [], "cpu"),
    ("13.0", ["GPU=1"], "cuda13"),
    ("12.4", ["GPU=1"], "cuda12"),
    ("14.1", ["GPU=1"], "cuda13"),  # a newer driver runs CUDA 13 programs
    (None, ["GPU=1", "CUDA=12"], "cuda12"),
    ("13.0", ["GPU=1", "CUDA=12"], "cuda12"),
])
def test_make_gpu_picks_the_extra_for_the_drivers_cuda(
    tmp_path: Path, smi: str | None, args: list[str], extra: str
) -> None:
    tools = {"python3.11": ""} | ({"nvidia-smi": NVIDIA_SMI.format(cuda=smi)} if smi else {})
    done = make_would(tmp_path, tools, *args)
    assert done.returncode == 0, done.stderr
    install = next(line for line in done.stdout.splitlines() if "pip install" in line
                   and " -e " in line)
    extras = re.search(r'-e "\.\[([^\]]*)\]"', install)
    assert extras, install
    # `make install` (and so `make lab`) is the student's: no developers' tools (issue 36).
    assert extras[1].split(",") == [extra, "caffe", "lab", "triton"], install
    if extra == "cuda12":
        # CUDA 12: constraints.txt without its CUDA 13 bindings (numba-cuda[cu12] needs 12.x)
        filtered = tmp_path / "venv" / "constraints-cuda12.txt"
        assert f"-c {filtered}" in install
        assert f"grep -v -i -E '^cuda[-_]bindings==' constraints.txt > {filtered}" in done.stdout
    else:
        assert "-c constraints.txt" in install


def test_make_test_adds_the_developers_tools_to_the_students_environment(tmp_path: Path) -> None:
    done = make_would(tmp_path, {"python3.11": ""}, target="install-dev")
    assert done.returncode == 0, done.stderr
    installs = [re.search(r'-e "\.\[([^\]]*)\]"', line) for line in done.stdout.splitlines()
                if "pip install" in line and " -e " in line]
    assert [m[1] for m in installs if m] == ["cpu,caffe,lab,triton",
                                                "cpu,caffe,lab,triton,dev,site,cluster,postgres"]
    assert "[install 3/3]" in done.stdout and "[install] the developers' tools" in done.stdout


def test_make_gpu_without_a_driver_says_to_give_cuda(tmp_path: Path) -> None:
    done = make_would(tmp_path, {"python3.11": ""}, "GPU=1", dry=False)
    assert done.returncode != 0
    assert "GPU=1 CUDA=12 (or CUDA=13)" in done.stderr, done.stderr
    assert not (tmp_path / "venv").exists(), "nothing is installed before the question is settled"
