"""`make lab` as a student meets it: the lectures and the exercises side by side, a terminal that
starts beside them and finds `edu-dl`, and no announcements popping up.

The test runs `make lab` itself (without its install step, `-o install`), on a free port with a
token, with Jupyter's own folders in tmp_path, and with the virtual environment taken off PATH
first: whatever a terminal finds comes from what `make lab` sets up. It lists the file browser's
top folder through Jupyter's contents API, opens a terminal through the REST API, types `pwd` and
`command -v edu-dl` over the terminal's websocket, and reads the answers; it reads the notification
settings through JupyterLab's settings API.

A control starts the same JupyterLab without the course's server configuration: there, a terminal
(a login shell whose /etc/profile resets PATH) does not find `edu-dl`, which is the bug this guards.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from test_browser import free_port, stop_server, wait_for_server

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def jupyter_env(tmp_path: Path) -> dict[str, str]:
    """No user configuration, settings or workspaces; the virtual environment off PATH."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and Path(p).resolve() != (VENV / "bin").resolve()]
    # Nor an outer make's variables (`make test GPU=1` would hand GPU=1 to `make lab`).
    dropped = ("VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GPU", "CUDA", "PYTHON")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return env | {"PATH": os.pathsep.join(path),
                  "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
                  "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),
                  "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
                  "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "lab-settings"),
                  "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces")}


def server_args(port: int, token: str) -> list[str]:
    return ["--no-browser", f"--port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", "--ServerApp.ip=127.0.0.1"]


async def _terminal_says(base: str, token: str, command: str) -> str:
    from tornado.websocket import websocket_connect

    request = urllib.request.Request(f"{base}/api/terminals", method="POST", data=b"",
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        name = json.load(reply)["name"]
    ws_base = base.replace("http://", "ws://")
    ws = await websocket_connect(f"{ws_base}/terminals/websocket/{name}?token={token}")
    # The answer sits between two markers that the typed line itself (echoed back) never shows.
    await ws.write_message(json.dumps(["stdin", f"echo BEGIN'-'; {command}; echo END'-'\r"]))
    out = ""
    try:
        while "END-" not in out:
            message = await asyncio.wait_for(ws.read_message(), 60)
            if message is None:
                break
            kind, *rest = json.loads(message)
            if kind == "stdout":
                out += rest[0]
    finally:
        ws.close()
    match = re.search(r"BEGIN-\r?\n(.*?)END-", out, re.S)
    assert match, f"no answer from the terminal: {out[-2000:]!r}"
    return match[1].strip()


def terminal_says(base: str, token: str, command: str) -> str:
    return asyncio.run(_terminal_says(base, token, command))


def notification_defaults(base: str, token: str) -> dict:
    """The notification plugin's settings as JupyterLab hands them to the page (overrides applied
    to the schema's defaults; the user has set nothing)."""
    url = f"{base}/lab/api/settings/{NOTIFICATION}?token={token}"
    with urllib.request.urlopen(url, timeout=30) as reply:
        data = json.load(reply)
    assert data["raw"] in ("{}", {}), f"user settings leaked into the test: {data['raw']}"
    return {k: v.get("default") for k, v in data["schema"]["properties"].items()}


def top_folder(base: str, token: str) -> set[str]:
    """What the file browser lists when JupyterLab opens (its root folder)."""
    with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=30) as reply:
        return {item["name"] for item in json.load(reply)["content"]}


def start(cmd: list[str], env: dict[str, str], log: Path, port: int, token: str):
    with open(log, "w") as log_file:
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_for_server(f"{base}/api/status?token={token}", server, log)
    return server, base


def make_lab(port: int, token: str, *more: str) -> list[str]:
    """`make lab` as the course's README gives it, without its install step, on port and token."""
    return ["make", "--no-print-directory", "-o", "install", "lab", f"VENV={VENV}",
            "LAB_ARGS=" + " ".join([*server_args(port, token), *more])]


@pytest.mark.slow
def test_make_lab_terminals_find_edu_dl_and_no_announcements(tmp_path: Path) -> None:
    port, token = free_port(), secrets.token_hex(16)
    env = jupyter_env(tmp_path)
    server, base = start(make_lab(port, token), env, tmp_path / "make-lab.log", port, token)
    try:
        # Every lecture ends by sending the student to exercises/: both are in the file browser,
        # and a terminal starts beside them (where `edu-dl validate exercises/...` works).
        assert {"lectures", "exercises"} <= top_folder(base, token)
        assert terminal_says(base, token, "pwd") == str(ROOT)
        found = terminal_says(base, token, "command -v edu-dl")
        assert found == str(VENV / "bin" / "edu-dl"), (
            f"a terminal of `make lab` finds {found!r} for edu-dl, not the course's")
        assert terminal_says(base, token, "edu-dl --help >/dev/null && echo ok") == "ok"
        defaults = notification_defaults(base, token)
        assert defaults["fetchNews"] == "false", "JupyterLab would ask about or show its news"
        assert defaults["checkForUpdates"] is False
    finally:
        stop_server(server, base, token)


@pytest.mark.slow
def test_control_without_the_course_config_a_terminal_misses_edu_dl(tmp_path: Path) -> None:
    """What `make lab` used to start: JupyterLab on lectures/ alone (no exercises/ in sight), and
    a terminal whose login shell resets PATH (Debian's /etc/profile does), so that
    `edu-dl: command not found` follows."""
    profile = Path("/etc/profile")
    if not (profile.exists() and re.search(r"^\s*PATH=", profile.read_text(), re.M)):
        pytest.skip("this machine's /etc/profile does not reset PATH: nothing to show")
    port, token = free_port(), secrets.token_hex(16)
    env = jupyter_env(tmp_path)
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env['PATH']}"
    cmd = [str(VENV / "bin" / "jupyter"), "lab", "lectures/", *server_args(port, token)]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    server, base = start(cmd, env, tmp_path / "lab.log", port, token)
    try:
        assert "exercises" not in top_folder(base, token)
        assert terminal_says(base, token, "command -v edu-dl || echo missing") == "missing"
    finally:
        stop_server(server, base, token)
