# The course's JupyterLab server settings: `make lab` starts JupyterLab with --config=this file.
# `c` is the configuration object Jupyter hands to this file.
from pathlib import Path

# Terminals run bash with lab/terminal.bashrc, which reads the user's ~/.bashrc and then puts the
# course's virtual environment first on PATH: `edu-dl validate`, as every exercise asks, works
# there. (Left to itself, Jupyter starts a login shell, whose /etc/profile resets PATH.)
RCFILE = Path(__file__).resolve().with_name("terminal.bashrc")
c.ServerApp.terminado_settings = {"shell_command": ["bash", "--rcfile", str(RCFILE), "-i"]}  # noqa: F821
