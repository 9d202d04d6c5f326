"""A real-browser check: JupyterLab, headless Chromium, one lecture run from the Run menu.

nbval talks to a kernel directly; this test goes the way a student does. It starts JupyterLab on a
temporary copy of one lecture (outputs cleared, so that everything on screen comes from this run),
opens it in Debian's Chromium driven by Playwright, clicks Run > Run All Cells, waits until every
code cell has its execution count (or an error shows), and asserts that a plot was rendered (a
decoded <img> in an output area) and that no error output appeared: neither an output of type error
in the notebook the browser holds, nor a stderr output on the page showing a Traceback. A second
test proves that the check sees an error. Screenshots are left in the tests' tmp directories.

A third test is a student's first minutes in `make lab`'s own JupyterLab (the Makefile's target
with the course's configuration, started as tests/notebooks/test_lab.py starts it, on the
repository): from
the file browser it opens an exercise (its install cell collapsed), runs a check cell from the Run
menu (unsolved: "not implemented yet"), types the answer and runs it again (a pass); then it opens
lecture 1, which must not be marked modified, and whose `edu-dl doctor` page must fit its output
column without wrapping (with a control: a line as wide as the old table would not). Nothing is
saved: the repository's files are compared before and after.

Nothing here downloads a browser: Playwright drives /usr/bin/chromium (`apt-get install chromium`;
`make test` installs it when run as root). The test is skipped only when no Chromium can be found.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from fixtures.chromium import chromium, free_port, launch, launch_kept

ROOT = Path(__file__).resolve().parents[2]
# A short lecture that draws pictures (the computational graphs) and loads TensorFlow and PyTorch.
LECTURE = ROOT / "lectures" / "07_computational_graphs.ipynb"
RUN_TIMEOUT_S = 600
ERROR_OUTPUT = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"

# JupyterLab settings for the test's own settings directory: every cell in the DOM (no
# virtual scrolling), no autosave, no news fetched from the internet.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}


def wait_for_server(url: str, server: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with {server.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"JupyterLab did not answer within {timeout} s:\n{log.read_text()[-4000:]}")


def stop_server(server: subprocess.Popen, base: str, token: str) -> None:
    """Shut down through the API (which stops the kernels too), then by signal if need be."""
    try:
        request = urllib.request.Request(f"{base}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
        urllib.request.urlopen(request, timeout=10).close()
        server.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def kernel_states(base: str, token: str) -> list[str]:
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as reply:
        return [session["kernel"]["execution_state"] for session in json.load(reply)]


def wait_for_kernel(page, base: str, token: str, timeout: float = 180) -> None:
    """Until the notebook's kernel has started and the page is connected to it.

    The toolbar's execution indicator reads 'idle' already before any kernel exists; Run All at
    that moment only asks which kernel to start. So first the server must report the session's
    kernel idle, then the page's indicator must be idle (it was 'connecting' in between).
    """
    deadline = time.monotonic() + timeout
    while kernel_states(base, token) != ["idle"]:
        if time.monotonic() > deadline:
            pytest.fail(f"no idle kernel within {timeout} s: {kernel_states(base, token)}")
        time.sleep(0.5)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for()


def run_all_cells(page) -> None:
    """Run > Run All Cells, from the menu bar as a student would."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()


def notebook_model(page) -> dict:
    """The open notebook as the browser holds it, in nbformat JSON (window.jupyterapp is there
    because of --LabApp.expose_app_in_browser)."""
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.toJSON()")


def executed(nb: dict) -> int:
    return sum(c["cell_type"] == "code" and c.get("execution_count") is not None
               for c in nb["cells"])


def error_outputs(nb: dict) -> list[str]:
    """'NameError: ...' for each output of type error."""
    return [f"{out.get('ename')}: {out.get('evalue')}"
            for cell in nb["cells"] if cell["cell_type"] == "code"
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def accept_dialogs(page) -> bool:
    """Accept a dialog such as "Select Kernel" (it offers the notebook's own kernel)."""
    accepted = False
    for button in page.locator(".jp-Dialog .jp-mod-accept").all():
        if button.is_visible():
            button.click()
            accepted = True
    return accepted


def cleared_copy(source: Path, folder: Path) -> Path:
    """The lecture without outputs or execution counts: what shows later comes from this run."""
    nb = nbformat.read(source, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    target = folder / source.name
    nbformat.write(nb, target)
    return target


@dataclass
class BrowserRun:
    cells: int  # code cells in the notebook
    ran: int  # code cells with an execution count after Run All
    images: int  # decoded <img> elements in output areas
    errors: list[str]  # outputs of type error, and stderr outputs showing a traceback
    screenshot: Path


def run_in_jupyterlab(source: Path, tmp_path: Path) -> BrowserRun:
    """Open a cleared copy of `source` in JupyterLab in Chromium, Run All Cells, and look."""
    chromium()  # skipped, saying why, without it
    from playwright.sync_api import sync_playwright  # the dev extra installs it

    work = tmp_path / "work"
    work.mkdir(parents=True)
    notebook = cleared_copy(source, work)
    n_code = sum(c.cell_type == "code" for c in nbformat.read(notebook, as_version=4).cells)

    settings = tmp_path / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    # Jupyter's own folders in tmp_path: no user config, kernelspec, workspace or settings applies.
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"))

    port, token = free_port(), secrets.token_hex(16)
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
           "--ServerApp.port_retries=0", f"--ServerApp.token={token}", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = tmp_path / "jupyterlab.log"
    with open(log, "w") as log_file:
        server = subprocess.Popen(cmd, cwd=work, env=env, stdout=log_file,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_server(f"{base}/api/status?token={token}", server, log)
        with sync_playwright() as pw:
            browser = launch_kept(pw, tmp_path / "chromium-profile")
            try:
                page = browser.new_page()
                page.set_default_timeout(120_000)
                page.goto(f"{base}/lab/tree/{notebook.name}?token={token}")
                page.locator(".jp-Notebook .jp-CodeCell").first.wait_for()
                wait_for_kernel(page, base, token)
                run_all_cells(page)

                tracebacks = page.locator(ERROR_OUTPUT).filter(has_text="Traceback")
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while True:
                    nb = notebook_model(page)
                    ran, errors = executed(nb), error_outputs(nb)
                    if ran == n_code or errors or tracebacks.count():
                        break
                    if time.monotonic() > deadline:
                        break
                    if ran == 0 and accept_dialogs(page):  # Run All was only a kernel choice
                        wait_for_kernel(page, base, token)
                        run_all_cells(page)
                    time.sleep(1)
                page.wait_for_timeout(1000)  # let the last outputs render
                nb = notebook_model(page)

                images = page.locator(".jp-OutputArea-output img")
                decoded = images.evaluate_all("imgs => imgs.filter(i => i.naturalWidth > 0).length")
                stderr = page.locator(ERROR_OUTPUT)
                if stderr.count():
                    stderr.last.scroll_into_view_if_needed()
                elif images.count():
                    images.first.scroll_into_view_if_needed()
                screenshot = tmp_path / "lecture.png"
                page.screenshot(path=screenshot)
                return BrowserRun(n_code, executed(nb), decoded,
                                  error_outputs(nb) + tracebacks.all_inner_texts(), screenshot)
            finally:
                browser.close()
    finally:
        stop_server(server, base, token)


@pytest.mark.slow
def test_lecture_runs_in_jupyterlab_in_chromium(tmp_path: Path) -> None:
    assert LECTURE.exists(), f"{LECTURE.name} is gone: point LECTURE at another lecture with a plot"
    run = run_in_jupyterlab(LECTURE, tmp_path)
    assert not run.errors, "error output in the browser:\n" + "\n".join(
        text[-3000:] for text in run.errors)
    assert run.ran == run.cells, f"only {run.ran} of {run.cells} cells ran (see {run.screenshot})"
    assert run.images >= 1, f"no plot rendered: no decoded <img> in any output ({run.screenshot})"


@pytest.mark.slow
def test_the_browser_check_sees_a_traceback(tmp_path: Path) -> None:
    """The same check on a two-cell notebook whose second cell raises: it must see the error."""
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_code_cell("import matplotlib.pyplot as plt\n\n_ = plt.plot([0, 1], [1, 0])\n"
                         "plt.show()"),
        v4.new_code_cell("def relu_backward(dout, x):\n    return dout * mask\n\n"
                         "relu_backward(1.0, 2.0)"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    source = tmp_path / "broken.ipynb"
    nbformat.write(nb, source)
    run = run_in_jupyterlab(source, tmp_path / "run")
    assert run.images == 1
    assert run.ran == 2
    assert run.errors[0] == "NameError: name 'mask' is not defined", run.errors
    assert "Traceback" in run.errors[1]  # as the page shows it


# ---------------------------------------------------------------------------------------------
# A student in `make lab`'s JupyterLab

EXERCISE = ROOT / "exercises" / "08_autograd_from_scratch.ipynb"
FIRST_LECTURE = ROOT / "lectures" / "01_getting_started.ipynb"
# The notebook on screen (the others' panels stay in the page, hidden).
SHOWN = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# A laptop's window, with JupyterLab's file browser open beside the notebook.
LAPTOP = {"width": 1280, "height": 800}
# The width of the frameworks table `edu-dl doctor` printed before issue 26.
OLD_TABLE_COLUMNS = 140
# How wide an output's text would be unwrapped, and how wide its column is (a hidden copy of the
# <pre>, or of one holding `text`, laid out on one line per line).
UNWRAPPED_WIDTH = """(pre, text) => {
    const copy = pre.cloneNode(true);
    if (text !== null) copy.textContent = text;
    Object.assign(copy.style, {whiteSpace: "pre", width: "max-content", position: "absolute",
                               visibility: "hidden"});
    pre.parentElement.appendChild(copy);
    const needed = copy.getBoundingClientRect().width;
    copy.remove();
    return [needed, pre.clientWidth];
}"""


def use_menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-item:visible", has_text=item).first.click()


def open_from_file_browser(page, *names: str) -> None:
    """Double-click each name in turn in the file browser, from its top folder."""
    page.locator(".jp-BreadCrumbs-home").first.click()
    for name in names:
        page.locator(".jp-DirListing-item", has_text=name).first.dblclick()


def wait_for_kernels(base: str, token: str, count: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while (states := kernel_states(base, token)) != ["idle"] * count:
        if time.monotonic() > deadline:
            pytest.fail(f"not {count} idle kernels within {timeout} s: {states}")
        time.sleep(0.5)


def current_is_dirty(page) -> bool:
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")


@pytest.mark.slow
def test_a_student_in_make_labs_jupyterlab(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright
    from test_lab import jupyter_env, make_lab, start

    chromium()  # skipped, saying why, without it
    before = {path: path.read_bytes() for path in (EXERCISE, FIRST_LECTURE)}
    env = jupyter_env(tmp_path)
    for name, values in LAB_SETTINGS.items():  # every cell in the DOM, no autosave, no news
        path = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token = free_port(), secrets.token_hex(16)
    # JupyterLab checkpoints a notebook it opens: into tmp_path, not beside the course's own.
    checkpoints = f"--FileCheckpoints.checkpoint_dir={tmp_path / 'checkpoints'}"
    server, base = start(make_lab(port, token, "--LabApp.expose_app_in_browser=True",
                                  checkpoints), env, tmp_path / "make-lab.log", port, token)
    try:
        with sync_playwright() as pw:
            browser = launch(pw)
            try:
                page = browser.new_page(viewport=LAPTOP)
                page.set_default_timeout(120_000)
                page.goto(f"{base}/lab?token={token}")

                # The exercise, as every lecture's last cell names it.
                open_from_file_browser(page, "exercises", EXERCISE.name)
                cells = page.locator(f"{SHOWN} .jp-Cell")
                cells.first.wait_for()
                wait_for_kernels(base, token, 1)
                page.locator(f"{SHOWN} .jp-Notebook-ExecutionIndicator[data-status='idle']"
                             ).wait_for()
                install = cells.first.locator(".jp-InputPlaceholder")
                assert install.count() == 1, "the install cell is not collapsed"
                assert "Install the course" in install.inner_text()

                check = cells.filter(has_text='check("ex08.mul_backward", mul_backward)').first
                check.locator(".jp-InputPrompt").click()
                use_menu(page, "Run", "Run All Above Selected Cell")
                use_menu(page, "Run", "Run Selected Cell and Do not Advance")
                said = check.locator(".jp-OutputArea-output")
                said.first.wait_for()
                # A failing check() raises: an error output, shown as its report alone (no
                # traceback), and Run All would stop here.
                assert [t.strip() for t in said.all_inner_texts()] == [
                    "✗ ex08.mul_backward: not implemented yet"]
                assert said.first.get_attribute("data-mime-type") == (
                    "application/vnd.jupyter.stderr")

                stub = cells.filter(has_text="def mul_backward").first
                stub.locator(".cm-content").click()
                page.keyboard.press("Control+a")
                page.keyboard.type("def mul_backward(dout, x, y):\nreturn dout * y, dout * x")
                page.keyboard.press("Shift+Enter")
                check.locator(".jp-InputPrompt").click()
                use_menu(page, "Run", "Run Selected Cell and Do not Advance")
                check.locator(".jp-OutputArea-output", has_text="✓").wait_for()
                assert said.all_inner_texts() == ["✓ ex08.mul_backward: 3 cases passed\n"]
                page.screenshot(path=tmp_path / "exercise.png")

                # Lecture 1, opened as it is committed: not modified, its doctor page unwrapped.
                open_from_file_browser(page, "lectures", FIRST_LECTURE.name)
                page.locator(f"{SHOWN} .jp-Cell").first.wait_for()
                assert FIRST_LECTURE.name.startswith(page.locator(
                    ".lm-TabBar-tab.jp-mod-current").first.inner_text().strip()[:20])
                wait_for_kernels(base, token, 2)
                page.locator(f"{SHOWN} .jp-Notebook-ExecutionIndicator[data-status='idle']"
                             ).wait_for()
                page.wait_for_timeout(2000)  # JupyterLab writes kernel metadata after the start
                assert not current_is_dirty(page), (
                    "JupyterLab marks the lecture modified on opening (the kernelspec or the "
                    "language_info it writes differs from the committed one)")
                assert page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() == 0
                doctor = page.locator(f"{SHOWN} .jp-OutputArea-output pre",
                                      has_text="Frameworks and the GPUs they see").first
                doctor.scroll_into_view_if_needed()
                needed, column = doctor.evaluate(UNWRAPPED_WIDTH, None)
                page.screenshot(path=tmp_path / "lecture-01-doctor.png")
                assert needed <= column, (
                    f"edu-dl doctor's page needs {needed:.0f} px, its column is {column} px")
                wide, _ = doctor.evaluate(UNWRAPPED_WIDTH, "x" * OLD_TABLE_COLUMNS)
                assert wide > column, "control: the old table's width should not fit"
            finally:
                browser.close()
    finally:
        stop_server(server, base, token)
    for path, data in before.items():
        assert path.read_bytes() == data, f"{path.name} was written"
        assert not (path.parent / ".ipynb_checkpoints").exists(), "a checkpoint in the course"
