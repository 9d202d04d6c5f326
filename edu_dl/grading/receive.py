"""Receive: what came back from the sandbox, read with every bound and saved for the instructor.

The result (``trust.result``) and the executed notebook (``trust.notebook``) were written by the
student's process: nothing of them is trusted, and a broken or forged one can only cost that
student points.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from . import sandbox
from .notebooks import NotebookError, notebook_bytes, write_atomic
from .prepare import Prepared
from .settings import MB, Settings
from .trust.notebook import parse_notebook
from .trust.result import RunResult, read_run


@dataclass
class Ran:
    """What came back from the sandbox, read with every bound."""

    done: sandbox.Result
    returned: RunResult
    isolation: str


def received(prepared: Prepared, done: sandbox.Result, settings: Settings) -> Ran:
    """The sandbox's result read back with every bound; the executed notebook and run.json
    saved beside the submission's other files."""
    returned = read_run(done.output, done.output_size, settings.file_mb * MB,
                        settings.notebook_mb * MB + 2 * settings.output_cap)
    if returned.executed:  # the notebook with its outputs replaces the unexecuted copy
        try:
            executed = notebook_bytes(parse_notebook(returned.executed, "executed notebook"))
            write_atomic(prepared.autograded, executed)
        except (NotebookError, RecursionError):
            pass  # a forged or broken one: the restored notebook stays
    (prepared.work / "run.json").write_text(json.dumps(
        {"seed": prepared.seed, "record": returned.record, "sandbox": asdict(done) | {
            "log": done.log[-4000:], "output": f"{done.output_size} bytes",
            "uids_seen": sorted(done.uids_seen)}}, indent=1, default=str))
    return Ran(done, returned, "bwrap" if done.isolated else "rlimits only")
