"""Collecting the tests imports no framework (issue 36): each xdist worker collects every module,
and torch, TensorFlow and JAX cost seconds each to import. Tests get them from
tests/fixtures/frameworks.py, imported on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("torch", "tensorflow", "jax")
COLLECT = """
import sys, pytest
code = pytest.main(["--collect-only", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                    *sys.argv[1:]])
print("imported:", *[name for name in {frameworks!r} if name in sys.modules])
sys.exit(code)
"""


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_collecting_the_modules_that_use_a_framework_imports_none() -> None:
    # The modules whose text names a framework: collecting them is where one could sneak in
    # (a module-level `import torch`, a dtype in a parametrize, a skipif that asks torch).
    modules = sorted(str(p) for p in TESTS.rglob("test_*.py")
                     if any(name in p.read_text(encoding="utf-8") for name in FRAMEWORKS))
    assert len(modules) > 20
    done = subprocess.run([sys.executable, "-c", COLLECT.format(frameworks=FRAMEWORKS), *modules],
                          cwd=TESTS.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "imported:", done.stdout[-3000:]
