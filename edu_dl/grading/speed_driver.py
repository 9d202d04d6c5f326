"""One timed run of a speed task, inside a sandbox: ``python -m edu_dl.grading.speed_driver``.

``ROLE`` is ``reference`` (the task's given version) or ``submission`` (the function
``task.function`` of the module file given). Every role draws ``--inputs`` inputs from ``SEED``
(default: CALLS) and calls the function on the first CALLS of them; a spot check (``--only``, not
timed) draws and calls only the indices it names. All outputs, stacked as one ``.npy``, go to the
result descriptor: the grader checks them, and reads the CPU time this process tree cost from the
kernel, outside. Two runs that draw the same inputs and make a different number of calls differ
by the cost of those calls alone.
Nothing here measures time: any timer in this process is the student's to patch.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROLES = ("reference", "submission")


def _module(path: str | Path, name: str) -> ModuleType:
    """The module in the file ``path``, imported under ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# Run as a file (``python -P .../speed_driver.py``, as the grader runs it), the two course
# modules it needs are loaded alone: importing them as part of the package would import the
# package (its engines: 0.15 s of CPU in each of a speed task's five sandboxed runs).
if __package__:
    from edu_dl.grading.protocol import RESULT_FD_VAR
    from edu_dl.speed.tasks import TASKS, call_input
else:
    _HERE = Path(__file__).resolve().parent
    RESULT_FD_VAR = _module(_HERE / "protocol.py", "edu_dl_driver_protocol").RESULT_FD_VAR
    _tasks = _module(_HERE.parent / "speed" / "tasks.py", "edu_dl_driver_tasks")
    TASKS, call_input = _tasks.TASKS, _tasks.call_input


def _load(path: str, name: str) -> Callable[..., Any]:
    # import-time work counts: the baseline never does it
    function: Callable[..., Any] = getattr(_module(path, "submission"), name)
    return function


def main(argv: list[str] | None = None) -> int:
    """The driver's command line (TASK ROLE SEED CALLS [--inputs N] [--only I,J] [--module
    FILE]): the role's outputs for the seed's inputs, written as one .npy to the result
    descriptor; returns 0."""
    parser = argparse.ArgumentParser(prog="python -m edu_dl.grading.speed_driver")
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("seed", type=int)
    parser.add_argument("calls", type=int)
    parser.add_argument("--module", help="the submission's module file")
    parser.add_argument("--inputs", type=int, default=0, help="inputs drawn (default: CALLS)")
    parser.add_argument("--only", default="", help="call these input indices only (comma list)")
    args = parser.parse_args(argv)
    task = TASKS[args.task]
    result_fd = int(os.environ[RESULT_FD_VAR])
    function = (_load(args.module, task.function) if args.role == "submission"
                else task.reference)

    def output(index: int) -> np.ndarray:  # one call's arguments held at a time
        return np.asarray(function(*call_input(task, args.seed, index)), dtype=np.float32)

    if args.only:  # a spot check: nothing is timed, so only the inputs it calls are drawn
        results = [output(int(i)) for i in args.only.split(",")]
    else:  # the small run draws every input the big run does, and calls the first CALLS
        results = [output(index) for index in range(args.calls)]
        for index in range(args.calls, args.inputs):
            call_input(task, args.seed, index)
    outputs = np.stack(results)
    buffer = io.BytesIO()
    np.save(buffer, outputs, allow_pickle=False)
    with open(result_fd, "wb", buffering=0) as out:
        view = memoryview(buffer.getvalue())
        while view:  # a pipe may take less than all at once
            view = view[out.write(view) or 0:]
    return 0


if __name__ == "__main__":
    sys.exit(main())
