"""The course website: built offline, every page read in Chromium.

`site/build.py` (what `make site` runs) builds the site into tmp_path with the network off: in a
new network namespace (`unshare -rn`) where one can be made, else with Python's sockets refusing
to connect. Then Debian's Chromium, driven by Playwright, opens every page from file:// with every
request other than file:// refused and recorded, and the test asserts for each page: no console
error, no uncaught exception, no failed or outside request, every image decoded (naturalWidth > 0),
as many output images as the notebook holds PNG outputs, MathJax typeset where the notebook has
math, and the links to open the notebook (Colab, the .ipynb itself, GitHub). The students' page
(the README's part for them), the instructors' and the developers' pages are read the same way,
with what each must hold. A control page with a missing image, a script error and an outside
script proves that the check sees each of them. The addresses come from pyproject.toml, as the
site takes them (site/addresses.py).
"""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from fixtures.chromium import launch
from fixtures.once import folder_once_per_session

from edu_dl.notebook import hosted

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "site"))
import addresses  # noqa: E402  (site/addresses.py: the site's addresses, from pyproject.toml)
import build  # noqa: E402  (site/build.py)

FOLDERS = ("lectures", "exercises")
REPOSITORY = addresses.REPOSITORY
OWNER_NAME = REPOSITORY.removeprefix("https://github.com/")
MATH = re.compile(r"\$[^$\n]+\$")
# The pages besides the notebooks, and a heading or sentence each must hold.
PAGES = {"students.html": "How an exercise works",
         "instructors.html": "What the sandbox promises (the threat model)",
         "developers.html": "Repository layout"}

# Python's sockets refuse every connection (where no network namespace can be made).
NO_NETWORK = """\
import socket
def _refuse(*args, **kwargs):
    raise OSError("network is off for this build")
socket.socket.connect = socket.socket.connect_ex = _refuse
socket.create_connection = socket.getaddrinfo = _refuse
"""


def notebooks() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


def network_off_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for both workers (10 CPU-s): the tests only read it."""
    return folder_once_per_session(tmp_path_factory, "site", build_site) / "html"


def build_site(tmp: Path) -> None:
    out = tmp / "html"
    env = dict(os.environ)
    prefix = network_off_prefix()
    if not prefix:
        guard = tmp / "guard"
        guard.mkdir()
        (guard / "sitecustomize.py").write_text(NO_NETWORK)
        env["PYTHONPATH"] = os.pathsep.join([str(guard), env.get("PYTHONPATH", "")])
    cmd = [*prefix, sys.executable, str(ROOT / "site" / "build.py"), "--out", str(out),
           "--work", str(tmp), "--quiet"]
    done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"the site did not build:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")


@dataclass
class Page:
    problems: list[str] = field(default_factory=list)
    images: int = 0  # decoded images in notebook outputs
    math: int = 0  # formulas MathJax typeset
    links: dict[str, str] = field(default_factory=dict)  # text -> href of the open-notebook links


def refuse_outside(problems: Callable[[], list[str]]):
    """A route handler: file:// goes through; anything else is refused and recorded in the
    list ``problems()`` gives (the page being read)."""
    def route(r) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            problems().append(f"request outside the site: {r.request.url}")
            r.abort()
    return route


def read_pages(paths: list[Path]) -> dict[Path, Page]:
    """Open each page in Chromium from file://; refuse and record anything not from file://.

    One tab reads every page in turn: a tab per page started a renderer and parsed the theme's
    and MathJax's scripts again for each, twice the CPU (1.3 against 0.6 s a page). What a page
    does is recorded on that page: its events arrive before the evaluations that follow its
    load, and the tab goes to about:blank between pages, so nothing of one is left for the
    next."""
    from playwright.sync_api import sync_playwright  # the dev extra installs it

    pages: dict[Path, Page] = {}
    current = Page()  # the page being read: the handlers below record on it

    def problems() -> list[str]:
        return current.problems

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            tab = browser.new_page(viewport={"width": 1300, "height": 1000})
            tab.route("**/*", refuse_outside(problems))
            tab.on("console", lambda m: problems().append(f"console {m.type}: {m.text}")
                   if m.type == "error" else None)
            tab.on("pageerror", lambda e: problems().append(f"uncaught: {e}"))
            tab.on("requestfailed", lambda r: problems().append(
                f"failed to load {r.url}") if r.url.startswith("file://") else None)
            for path in paths:
                current = pages[path] = Page()
                tab.goto(path.as_uri(), wait_until="load")
                tab.evaluate("() => window.MathJax?.startup?.promise")
                # MathJax asks for its fonts as it typesets: wait for them too, or leaving the
                # page cancels their requests and they read as failed loads (seen once, CI-like)
                tab.evaluate("() => document.fonts.ready.then(() => true)")
                broken = tab.evaluate("() => [...document.images].filter(i => !i.complete || "
                                      "i.naturalWidth === 0).map(i => i.getAttribute('src'))")
                current.problems += [f"image not decoded: {src}" for src in broken]
                current.images = tab.evaluate(
                    "() => [...document.querySelectorAll('.cell_output img')]"
                    ".filter(i => i.naturalWidth > 0).length")
                current.math = tab.evaluate("() => document.querySelectorAll('mjx-container')"
                                            ".length")
                current.links = dict(tab.evaluate(
                    "() => [...document.querySelectorAll('.edu-dl-open-notebook a')]"
                    ".map(a => [a.textContent, a.getAttribute('href')])"))
                tab.goto("about:blank")
        finally:
            browser.close()
    return pages


def png_outputs(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {})
               for cell in nb.cells if cell.cell_type == "code"
               and "remove-cell" not in cell.metadata.get("tags", [])
               for out in cell.get("outputs", []))


@pytest.mark.slow
def test_every_notebook_page_renders_offline_with_images_math_and_links(site: Path) -> None:
    sources = notebooks()
    assert len(sources) >= 2 * 10, f"expected the lectures and exercises, found {len(sources)}"
    paths = [site / "index.html", *(site / page for page in PAGES)]
    paths += [site / p.parent.name / f"{p.stem}.html" for p in sources]
    missing = [str(p.relative_to(site)) for p in paths if not p.exists()]
    assert not missing, f"pages missing: {missing}"
    pages = read_pages(paths)

    problems = [f"{path.relative_to(site)}: {problem}"
                for path, page in pages.items() for problem in page.problems]
    assert not problems, "\n".join(problems)

    index_links = (site / "index.html").read_text()
    for source in sources:
        rel = f"{source.parent.name}/{source.name}"
        page = pages[site / source.parent.name / f"{source.stem}.html"]
        nb = nbformat.read(source, as_version=4)
        assert f'href="{source.parent.name}/{source.stem}.html"' in index_links, f"{rel} not listed"
        assert page.images == png_outputs(nb), (
            f"{rel}: {page.images} decoded output images, the notebook has {png_outputs(nb)}")
        if any(MATH.search(c.source) for c in nb.cells if c.cell_type == "markdown"):
            assert page.math > 0, f"{rel}: math in the notebook, none typeset on the page"
        assert page.links.get("Open in Colab") == (
            f"https://colab.research.google.com/github/{OWNER_NAME}/blob/main/{rel}"), page.links
        assert page.links.get("See it on GitHub") == f"{REPOSITORY}/blob/main/{rel}", page.links
        download = (site / source.parent.name / page.links["Download the notebook"]).resolve()
        assert download.suffix == ".ipynb", page.links
        assert json.loads(download.read_text()) == json.loads(source.read_text()), (
            f"{rel}: the download is not the notebook")
        html = (site / source.parent.name / f"{source.stem}.html").read_text()
        assert hosted.MARK.removeprefix("#@title ") not in html, f"{rel}: the install cell shows"


def visible_text(path: Path) -> str:
    """A page's text without its tags, whitespace collapsed (enough to find a sentence)."""
    text = re.sub(r"<[^>]+>", " ", path.read_text())
    return " ".join(html_lib.unescape(text).split())


@pytest.mark.slow
def test_the_students_instructors_and_developers_pages(site: Path) -> None:
    """Listed on the index, each with what it is for; the students' page is the README's part."""
    index = (site / "index.html").read_text()
    for page, holds in PAGES.items():
        assert f'href="{page}"' in index, f"{page} is not listed on the index"
        assert holds in visible_text(site / page), f"{page} lacks {holds!r}"
    students = visible_text(site / "students.html")
    readme = (ROOT / "README.md").read_text()
    part = readme[readme.index(build.STUDENTS_FROM):readme.index(build.STUDENTS_TO)]
    for command in ("make lab", "make test", "edu-dl validate", "cp -r exercises my-exercises"):
        assert command in part and command in students, command
    assert "The engine in 10 lines" in students
    assert f"git clone {REPOSITORY} edu-dl" in visible_text(site / "index.html")
    # Links to the repository's other files go to GitHub, never to a page that does not exist.
    developers = (site / "developers.html").read_text()
    assert f'href="{REPOSITORY}/blob/main/benchmarks/RESULTS.md"' in developers
    # The index's "Start here" opens the students' page beside it, not the repository.
    assert re.search(r'<a [^>]*href="students.html"[^>]*>(?:<[^>]+>)*Start here<', index), (
        "index.html's Start here does not link to students.html")
    assert "/blob/main/site/" not in index


def test_a_pages_links_are_the_sites_or_githubs() -> None:
    """site/build.py turns relative links written for GitHub into the site's pages or GitHub."""
    text = ("[a](../README.md#open-book) [b](instructors.md#grading) [c](../lectures/x.ipynb) "
            "[d](../benchmarks/RESULTS.md) [e](https://example.org/x) [f](#here) "
            "![g](../lab/shot.png)")
    assert build.site_links(text, "site") == (
        f"[a](students.md#open-book) [b](instructors.md#grading) [c](lectures/x.ipynb) "
        f"[d]({REPOSITORY}/blob/main/benchmarks/RESULTS.md) [e](https://example.org/x) "
        f"[f](#here) ![g]({REPOSITORY}/blob/main/lab/shot.png)")
    assert build.site_links("[i](site/instructors.md) [l](LICENSE)", ".") == (
        f"[i](instructors.md) [l]({REPOSITORY}/blob/main/LICENSE)")
    # The students' page is the site's own (written from the README), never site/students.md on
    # GitHub: site/index.md's "Start here" stays within the site.
    assert build.site_links("[Start here](students.md) [s](students.md#open-book)", "site") == (
        "[Start here](students.md) [s](students.md#open-book)")
    index = build.site_links((ROOT / "site" / "index.md").read_text(), "site")
    assert "[Start here](students.md)" in index and "/blob/" not in index


def test_the_readme_gives_the_addresses_pyproject_sets() -> None:
    """The README cannot read pyproject.toml: a fork that sets its own address there is told here
    which of the README's to change."""
    readme = (ROOT / "README.md").read_text()
    assert f"<{addresses.WEBSITE}>" in readme, "the README does not give the website's address"
    websites = re.findall(r"https://[\w.-]+\.github\.io/[^\s>)]*", readme)
    assert websites and all(w.startswith(addresses.WEBSITE) for w in websites), (
        f"README.md names {websites}; pyproject.toml's repository has {addresses.WEBSITE}")
    installs = re.findall(r"git\+(https://[^\s\"']+)", readme)
    assert installs == [REPOSITORY], f"README.md installs from {installs}, not {REPOSITORY}"


@pytest.mark.parametrize(("repository", "website"), [
    ("https://github.com/edu-dl/edu-dl", "https://edu-dl.github.io/edu-dl/"),
    ("https://github.com/Some-One/deep-course", "https://some-one.github.io/deep-course/"),
    ("https://github.com/someone/someone.github.io", "https://someone.github.io/")])
def test_the_website_is_where_github_pages_publishes_it(repository: str, website: str) -> None:
    assert addresses.pages_address(repository) == website


@pytest.mark.slow
def test_the_page_check_sees_broken_images_script_errors_and_outside_requests(
    tmp_path: Path,
) -> None:
    page = tmp_path / "broken.html"
    page.write_text('<html><body><img src="missing.png">'
                    '<script>undefined_function()</script>'
                    '<script src="https://cdn.example.org/lib.js"></script></body></html>')
    problems = read_pages([page])[page].problems
    assert any("image not decoded: missing.png" in p for p in problems), problems
    assert any("uncaught" in p and "undefined_function" in p for p in problems), problems
    assert any("request outside the site: https://cdn.example.org/lib.js" in p
               for p in problems), problems


def test_the_pages_workflow_builds_with_site_build_py_and_deploys_its_output() -> None:
    """.github/workflows/site.yml (not run here): the `site` extra at constraints.txt's
    versions, site/build.py into the folder it uploads, and GitHub's Pages deployment."""
    import tomllib

    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "site.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["push"]["branches"] == ["main"]
    assert workflow["permissions"]["pages"] == "write"
    build = workflow["jobs"]["build"]["steps"]
    runs = [step.get("run", "") for step in build]
    install = next(r for r in runs if "pip install" in r)
    assert "-c constraints.txt" in install
    listing = install.splitlines()[0].split(">", 1)[0].strip()  # python -c "...print(site extra)"
    printed = subprocess.run(listing, shell=True, cwd=ROOT, capture_output=True, text=True,
                             env=dict(os.environ, PATH=f"{Path(sys.executable).parent}"
                                                       f"{os.pathsep}{os.environ['PATH']}"))
    with open(ROOT / "pyproject.toml", "rb") as f:
        site_extra = tomllib.load(f)["project"]["optional-dependencies"]["site"]
    assert printed.stdout.split() == site_extra, printed.stderr
    built = next(r for r in runs if "site/build.py" in r)
    out = built.split("--out", 1)[1].split()[0]
    upload = next(s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    assert upload["with"]["path"] == out
    deploy = workflow["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert any(s.get("uses", "").startswith("actions/deploy-pages") for s in deploy["steps"])


def test_needs_cells_are_highlighted_as_python() -> None:
    """IPython's own lexer shows a cell after an unknown cell magic as plain text."""
    from needs_lexer import CourseIPythonLexer  # site/needs_lexer.py, registered by site/conf.py
    from pygments.token import Keyword

    cell = "%%needs tensorflow\nimport tensorflow as tf\nx = tf.constant(1)\n"
    tokens = list(CourseIPythonLexer().get_tokens(cell))
    assert tokens[0][1] == "%%needs"
    assert (Keyword.Namespace, "import") in tokens
    conf = (ROOT / "site" / "conf.py").read_text()
    assert 'app.add_lexer("ipython3", CourseIPythonLexer)' in conf
