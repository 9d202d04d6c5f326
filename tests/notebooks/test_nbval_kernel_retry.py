"""The nbval plugin of `make test-notebooks` starts a kernel again when one dies starting."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import nbval.kernel
import pytest

PLUGIN = Path(__file__).with_name("nbval_kernel_retry.py")
MAKEFILE = Path(__file__).parents[2] / "Makefile"


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plugin module, loaded fresh; nbval's own start_new_kernel is put back afterwards."""
    monkeypatch.setattr(nbval.kernel, "start_new_kernel", nbval.kernel.start_new_kernel)
    spec = importlib.util.spec_from_file_location("nbval_kernel_retry_under_test", PLUGIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dies(times: int, calls: list[dict[str, Any]]) -> Any:
    """A start_new_kernel whose kernel dies `times` times (writing to its stderr), then starts."""
    def start(**kwargs: Any) -> tuple[str, str]:
        calls.append(kwargs)
        if len(calls) <= times:
            kwargs["stderr"].write(b"zmq.error.ZMQError: Address already in use\n")
            kwargs["stderr"].flush()
            raise RuntimeError("Kernel died before replying to kernel_info")
        return ("km", "kc")
    return start


def test_loading_the_plugin_patches_what_nbval_calls(plugin: Any) -> None:
    assert nbval.kernel.start_new_kernel is plugin.start_new_kernel_retrying


def test_a_kernel_that_dies_once_is_started_again_and_the_reason_warned(
        plugin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(plugin, "_start_new_kernel", dies(1, calls))
    devnull = open("/dev/null", "w")  # nbval passes an open file
    with pytest.warns(pytest.PytestWarning, match=r"start 1 of 3 failed.*Address already in use"):
        assert plugin.start_new_kernel_retrying(startup_timeout=5, kernel_name="python3",
                                                stderr=devnull, cwd="/tmp") == ("km", "kc")
    assert len(calls) == 2 and devnull.closed
    assert all(c["kernel_name"] == "python3" and c["cwd"] == "/tmp" for c in calls)


def test_a_kernel_that_never_starts_fails_with_its_stderr(plugin: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(plugin, "_start_new_kernel", dies(99, calls))
    with pytest.warns(pytest.PytestWarning), \
            pytest.raises(RuntimeError, match=r"3 starts.*Address already in use"):
        plugin.start_new_kernel_retrying()
    assert len(calls) == plugin.ATTEMPTS


def test_make_test_notebooks_loads_the_plugin() -> None:
    recipe = MAKEFILE.read_text()
    assert "-p nbval_kernel_retry" in recipe and "PYTHONPATH=tests/notebooks" in recipe
