"""Run: the restored notebook executed by ``edu_dl.grading.runner`` inside a sandbox.

The one stage a cluster worker does (``edu_dl.grading.stages.cluster``): it needs only the files the
sandbox gets, as bytes, and the limits.
"""

from __future__ import annotations

import sys
from pathlib import Path

from edu_dl.grading import runner, sandbox
from edu_dl.grading.settings import MB, Settings
from edu_dl.grading.stages.prepare import Prepared

GRADING_TMP_MB = 128  # the grading dir's own tmpfs: a student filling /tmp cannot block results


def run(prepared: Prepared, settings: Settings, hide: list[Path],
        gate: sandbox.Gate | None = None) -> sandbox.Result:
    """Execute the restored notebook in a sandbox (where bwrap does not work here and the
    settings allow it: unisolated in its private folder ``prepared.root``, as another uid);
    ``gate``: started ahead, its cells wait for a slot (sandbox.Gate)."""
    return run_sandboxed(prepared.files, settings, hide, prepared.root, prepared.boxed, gate)


def run_sandboxed(files: dict[str, bytes], settings: Settings, hide: list[Path],
                  root: str = "/tmp", boxed: bool = True,
                  gate: sandbox.Gate | None = None) -> sandbox.Result:
    """The runner on ``files`` in a sandbox of this machine (its Python, its environment): the
    one step a cluster worker does (``edu_dl.grading.stages.cluster``)."""
    # As a file, not "-m": the runner then needs nothing of the package (runner.py says why).
    argv = [sandbox.python(), "-P", str(Path(runner.__file__)), f"{root}/work/notebook.ipynb",
            f"{root}/grading", "--timeout", f"{settings.timeout_s:g}",
            "--budget", f"{settings.runner_budget():g}", "--output-cap", str(settings.output_cap),
            "--result-limit", str(settings.file_mb * MB),
            *(["--skip-after-timeout"] if settings.skip_after_timeout else [])]
    return sandbox.run(
        argv, limits=settings.limits(), hide=hide,
        env=sandbox_env(f"{root}/tmp" if not boxed else "/tmp"),
        files=files, cwd=f"{root}/work", fallback_dir=None if boxed else Path(root),
        output_limit=settings.file_mb * MB,
        tmpfs=[("/tmp/grading", GRADING_TMP_MB)] if boxed else (), gate=gate,
    )


def sandbox_env(tmp: str = "/tmp") -> dict[str, str]:
    """The sandbox's whole environment: no secrets of the grader, one thread per library."""
    package_root = str(Path(__file__).resolve().parents[3])  # the folder holding edu_dl/
    venv_bin = str(Path(sys.executable).parent)
    one = "1"
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": f"{tmp}/home",
        "USER": "student", "LOGNAME": "student",
        "PYTHONPATH": package_root, "PYTHONNOUSERSITE": one, "PYTHONDONTWRITEBYTECODE": one,
        "JUPYTER_RUNTIME_DIR": f"{tmp}/runtime", "IPYTHONDIR": f"{tmp}/ipython",
        "MPLCONFIGDIR": f"{tmp}/mpl", "TMPDIR": tmp, "MPLBACKEND": "Agg",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        # Parallel jobs share the cores: one thread per library keeps them from fighting.
        "OMP_NUM_THREADS": one, "OPENBLAS_NUM_THREADS": one, "MKL_NUM_THREADS": one,
        "TF_NUM_INTRAOP_THREADS": one, "TF_NUM_INTEROP_THREADS": one, "LANG": "C.UTF-8",
        # Triton kernels (exercise 23) run in Triton's interpreter on the CPU: it reads this when
        # a kernel is decorated, so it must be set before any cell runs.
        "TRITON_INTERPRET": one,
    }
