"""What the instructor chose on the command line, and the grader's version."""

from __future__ import annotations

from dataclasses import dataclass

from edu_dl.grading import sandbox

GRADER_VERSION = "4"  # bump to force a regrade of everything
MB = 1 << 20


@dataclass(frozen=True)
class Settings:
    """What the instructor chose on the command line."""

    timeout_s: float = 60.0  # per cell
    budget_s: float = 600.0  # per submission, everything included: however many cells it has
    memory_mb: int = 4096
    cpu_s: int = 900
    processes: int = 512  # threads count: TF and torch start dozens
    file_mb: int = 64  # per written file, and the result the sandbox returns
    tmp_mb: int = 512
    output_cap: int = 1 << 20  # bytes of cell output the runner keeps
    notebook_mb: int = 16  # a larger submission is refused unread
    beside_files: int = 256  # files beside the source notebooks: each reaches every sandbox
    beside_mb: float = 64  # ... and their size in all
    skip_after_timeout: bool = True  # a cell timed out: later cells are not run (in the key)

    def limits(self) -> sandbox.Limits:
        # The runner stops running cells a little before the budget, to pack what it has; the
        # watchdog kills the sandbox at the budget, whatever the notebook does.
        return sandbox.Limits(wall_s=self.budget_s, memory_mb=self.memory_mb, cpu_s=self.cpu_s,
                              processes=self.processes, file_mb=self.file_mb, tmp_mb=self.tmp_mb)

    def runner_budget(self) -> float:
        return self.budget_s - min(15.0, 0.25 * self.budget_s)
