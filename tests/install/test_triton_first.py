"""Triton before TensorFlow (edu_dl/util/triton_first.py): TensorFlow >= 2.20 loads its LLVM with
RTLD_GLOBAL and a later ``import triton`` crashes the process; the .pth that make installs loads
Triton first wherever TensorFlow is imported. Each case runs in a fresh interpreter: a segfault is
a return code there, not a dead test worker."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from edu_dl.util import triton_first

ROOT = Path(__file__).resolve().parents[2]


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_make_installed_the_pth_for_this_checkout() -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / triton_first.PTH_NAME
    source = ROOT / "edu_dl" / "util" / "triton_first.py"
    assert pth.read_text() == triton_first.pth_line(str(source))


@pytest.mark.slow  # TensorFlow's import, twice
def test_tensorflow_then_torch_training_then_triton_runs() -> None:
    pytest.importorskip("triton")
    pytest.importorskip("tensorflow")
    done = python("import sys, tensorflow as tf\n"
                  "import torch\n"
                  "opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)\n"
                  "import triton\n"
                  "names = list(sys.modules)\n"
                  "print(names.index('triton') < names.index('tensorflow'), "
                  "float(tf.constant([2.0])[0]))")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["True", "2.0"]
    # Without the finder (the crash the .pth prevents; tensorflow/tensorflow#124205):
    crashed = python("import sys\n"
                     "sys.meta_path[:] = [f for f in sys.meta_path\n"
                     "                    if type(f).__name__ != 'TritonFirst']\n"
                     "import tensorflow, triton")
    assert crashed.returncode == -11, (crashed.returncode, crashed.stderr[-2000:])


def test_the_finder_steps_aside_after_the_first_tensorflow_import() -> None:
    finder = triton_first.TritonFirst()
    sys.meta_path.insert(0, finder)
    try:
        assert finder.find_spec("numpy") is None and finder in sys.meta_path
        assert finder.find_spec("tensorflow") is None  # triton imported (or absent), never TF
        assert finder not in sys.meta_path
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if f is not finder]


def test_a_pth_whose_file_is_gone_does_nothing(tmp_path: Path) -> None:
    line = triton_first.pth_line(str(tmp_path / "moved" / "triton_first.py"))
    done = python(line)
    assert done.returncode == 0 and done.stdout == done.stderr == ""
