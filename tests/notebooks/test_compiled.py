"""edu_dl.notebook.compiled: what lecture 14 shows of torch.compile.

The trimming is checked on a module shaped as Inductor writes one (the lecture shows a real one);
the compiler search in a process whose PATH has no compiler; one real compilation, and lecture
14 run without JAX and without a compiler, are slow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from edu_dl.notebook.compiled import cpp_compiler, first_call, kernels_and_call

ROOT = Path(__file__).resolve().parents[2]

GENERATED = textwrap.dedent('''\
    # AOT ID: ['0_inference']
    from ctypes import c_void_p, c_long, c_int
    import torch
    async_compile = AsyncCompile()


    cpp_fused_add_mul_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
    extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)
    {
        for(int64_t x0=0; x0<8; x0+=1)
        {
            out_ptr0[x0] = in_ptr0[x0] * 2 + 1;
        }
    }
    \'\'\')


    async_compile.wait(globals())
    del async_compile

    class Runner:
        def __init__(self, partitions):
            self.partitions = partitions

        def call(self, args):
            arg0_1, = args
            buf0 = empty_strided_cpu((8, ), (1, ), torch.float32)

            cpp_fused_add_mul_0(arg0_1, buf0)
            return (buf0, )

    runner = Runner(partitions=[])
    call = runner.call


    def get_args():
        from torch._dynamo.testing import rand_strided
        return [rand_strided((8, ), (1, ), device='cpu', dtype=torch.float32)]
    ''')


def test_the_kernel_and_call_are_kept_and_the_rest_dropped() -> None:
    shown = kernels_and_call(GENERATED)
    lines = shown.splitlines()
    assert lines[0].startswith("cpp_fused_add_mul_0 = async_compile.cpp_pybinding(")
    assert "out_ptr0[x0] = in_ptr0[x0] * 2 + 1;" in shown
    assert "''')" in lines
    # call() dedented to the margin, its blank line kept, nothing of the class around it
    call = lines.index("def call(self, args):")
    assert lines[call:] == ["def call(self, args):", "    arg0_1, = args",
                            "    buf0 = empty_strided_cpu((8, ), (1, ), torch.float32)", "",
                            "    cpp_fused_add_mul_0(arg0_1, buf0)", "    return (buf0, )"]
    for dropped in ("import torch", "AsyncCompile", "class Runner", "get_args", "rand_strided",
                    "__init__"):
        assert dropped not in shown, dropped


def test_a_long_module_is_cut_and_says_so() -> None:
    shown = kernels_and_call(GENERATED, max_lines=5).splitlines()
    assert len(shown) == 5
    full = kernels_and_call(GENERATED).splitlines()
    assert shown[:4] == full[:4]
    assert shown[4] == f"... ({len(full) - 4} more lines)"
    with pytest.raises(ValueError, match="max_lines"):
        kernels_and_call(GENERATED, max_lines=0)


def test_no_compiler_is_none_and_a_compiler_is_named() -> None:
    found = cpp_compiler()
    assert found == ("g++" if shutil.which("g++") else None)
    # The search is cached per process: a fresh one, with no compiler on its PATH.
    code = "from edu_dl.notebook.compiled import cpp_compiler; print(cpp_compiler())"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out == "None\n"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="Inductor's CPU code needs a C++ compiler")
def test_the_first_call_is_timed_and_its_code_kept() -> None:
    import torch

    def affine(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + 1.0

    ticks = iter([10.0, 12.5])
    x = torch.arange(8, dtype=torch.float32)
    first = first_call(torch.compile(affine), x, clock=lambda: next(ticks))
    assert torch.equal(first.result, affine(x))
    assert first.seconds == 2.5
    (module,) = first.code
    shown = kernels_and_call(module)
    assert "def call(self, args):" in shown and "async_compile.cpp_pybinding(" in shown




@pytest.mark.slow
def test_lecture_14_runs_without_jax_and_without_a_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each missing piece costs its cells one sentence, never an error: JAX hidden from the
    kernel, and a PATH on which Inductor finds no C++ compiler."""
    import nbformat
    from fixtures.hidden_packages import hide
    from nbclient import NotebookClient

    hidden = hide(tmp_path, ("jax", "jaxlib"), dict(os.environ))
    monkeypatch.setenv("PYTHONPATH", hidden["PYTHONPATH"])
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no g++ on it
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    path = ROOT / "lectures" / "14_compiling_dynamic_code.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", shutdown_kernel="immediate",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    printed = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                        for o in c.get("outputs", []))
    assert "Traceback" not in printed
    assert "There is no C++ compiler here" in printed
    jax_cells = [c for c in nb.cells if c.cell_type == "code" and
                 c.source.startswith("%%needs jax")]
    assert jax_cells and all(
        "".join(o.get("text", "") for o in c.outputs).startswith("jax is missing here")
        for c in jax_cells)
