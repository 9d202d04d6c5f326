"""What the instructor chose on the command line, and the grader's version."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from edu_dl.grading import sandbox

GRADER_VERSION = "5"  # bump to force a regrade of everything (5: speed rows per call, with a band)
MB = 1 << 20
# Why students' code may run without the sandbox (Settings.without_sandbox): never by default.
NO_SANDBOX = "--no-sandbox"  # the instructor's explicit opt-in (edu-dl grade, edu-dl assign)
OWN_NOTEBOOK = "validate"  # a student validating their own notebook: the labelled fallback


class NoSandbox(RuntimeError):
    """Grading other people's code was refused: the sandbox cannot be built here. The message
    is one sentence: the cause, the fix and the opt-in."""


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
    # Does the sandbox work here: asked once per run (``checked``) and carried down; None: not
    # asked yet, "" it works, else one sentence on why not (sandbox.bwrap_problem).
    sandbox_problem: str | None = None
    without_sandbox: str = ""  # "", NO_SANDBOX or OWN_NOTEBOOK: see ``checked``

    def limits(self) -> sandbox.Limits:
        # The runner stops running cells a little before the budget, to pack what it has; the
        # watchdog kills the sandbox at the budget, whatever the notebook does.
        return sandbox.Limits(wall_s=self.budget_s, memory_mb=self.memory_mb, cpu_s=self.cpu_s,
                              processes=self.processes, file_mb=self.file_mb, tmp_mb=self.tmp_mb)

    def runner_budget(self) -> float:
        return self.budget_s - min(15.0, 0.25 * self.budget_s)

    def checked(self) -> Settings:
        """These settings with the answer to "does the sandbox work here" (asked now, once
        for the run, unless it was already). Fails closed: raises NoSandbox where it does not
        and nothing allows running without it, or where the fallback cannot drop root."""
        done = self if self.sandbox_problem is not None else replace(
            self, sandbox_problem=sandbox.bwrap_problem())
        if done.sandbox_problem:
            if not done.without_sandbox:
                raise NoSandbox(refusal(done.sandbox_problem))
            unfit = sandbox.fallback_problem()
            if unfit:
                raise NoSandbox(f"refusing to run notebooks without the sandbox "
                                f"({done.sandbox_problem}) here: {unfit}.")
        return done

    @property
    def boxed(self) -> bool:
        """Do students' notebooks run in bwrap (else: the fallback, as another uid)?"""
        return not self.checked().sandbox_problem

    def isolation(self) -> str:
        """The gradebook's sandbox column for a run under these settings."""
        problem = self.checked().sandbox_problem if self.sandbox_problem is None \
            else self.sandbox_problem
        if not problem:
            return "bwrap"
        if self.without_sandbox == OWN_NOTEBOOK:
            return "rlimits only"
        if os.geteuid() == 0:
            return f"none ({NO_SANDBOX})"  # as a uid of its own (sandbox.sandbox_ids)
        return f"none ({NO_SANDBOX}, as uid {os.getuid()})"

    def key_fields(self) -> dict[str, object]:
        """What a grade depends on of these settings: the limits, and whether the sandbox held
        the run (not why it could not: a grade kept from an unisolated run is graded again
        once it works, and a sandboxed grade's key is the same as before it was asked)."""
        fields = {k: v for k, v in self.__dict__.items()
                  if k not in ("sandbox_problem", "without_sandbox")}
        if not self.boxed:
            fields["unisolated"] = self.isolation()
        return fields


def refusal(problem: str) -> str:
    """The one sentence ``edu-dl grade`` and ``assign`` exit with when the sandbox cannot be
    built: the cause and its fix (in ``problem``), and the opt-in."""
    return (f"refusing to run notebooks without the sandbox: {problem}; to run them anyway, "
            f"unisolated with resource limits only (never as root), accepting the risk, pass "
            f"{NO_SANDBOX}.")
