"""pip's package sources as uv's flags: ``make`` installs with uv, which reads no pip.conf.

uv installs the same locked packages as pip (``constraints.txt`` pins every one) in parallel:
the student's 150 packages in about 11 s against pip's minute on 2 cores. But a machine's pip
settings (a local index, a folder of wheels, a constraint file the administrator put in
``/etc/xdg/pip``, the ``PIP_*`` variables) are invisible to uv, which would then fetch other
builds from PyPI (torch's CUDA build: gigabytes). ``make`` runs this file as a script before uv:
it reads pip's own view of its settings (``pip config list``, every file and ``PIP_*`` variable)
and prints them as uv's flags, with pip's rule for choosing among sources (the best version
from any of them: ``--index-strategy unsafe-best-match``).

Run as a file by the environment's Python before the course is installed: it imports nothing
from ``edu_dl``.
"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys

# pip's option -> uv's flag; each value of a list option becomes one flag.
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
YES = {"1", "true", "yes", "on"}
# Where a setting comes from, most binding first: a PIP_* variable, then pip install's own
# section of a file, then the files' [global] section (pip's precedence for `pip install`).
SCOPES = (":env:", "install", "global")


def settings(listing: str) -> dict[str, str]:
    """The value pip uses for each option, from ``pip config list``'s lines
    (``scope.option='value'``)."""
    found: dict[tuple[str, str], str] = {}
    for line in listing.splitlines():
        name, sep, value = line.partition("=")
        scope, dot, option = name.rpartition(".")
        if not (sep and dot):
            continue
        try:  # pip writes each value as Python's repr
            found[scope, option] = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            continue
    chosen: dict[str, str] = {}
    for scope in reversed(SCOPES):  # the most binding is written last
        chosen.update({option: value for (where, option), value in found.items()
                       if where == scope})
    return chosen


def uv_flags(chosen: dict[str, str]) -> list[str]:
    """uv's flags for pip's settings: its sources, its constraints, pip's choice among them."""
    flags = ["--index-strategy", "unsafe-best-match"]
    if chosen.get("no-index", "").lower() in YES:
        flags.append("--no-index")
    for option, flag in FLAGS.items():
        for value in chosen.get(option, "").split():
            flags += [flag, value]
    return flags


def flags_for(python: str = sys.executable) -> list[str]:
    """uv's flags for the pip settings that ``python -m pip`` sees."""
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=120, check=True).stdout
    return uv_flags(settings(listing))


def main() -> int:
    """Print uv's flags for this Python's pip settings, shell-quoted; returns 0."""
    print(shlex.join(flags_for()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
