"""Sphinx configuration of the course website: `make site` (site/build.py) builds with it.

MyST-NB renders the notebooks with the outputs they were committed with and executes nothing. The
build needs no network, and neither do the pages: MathJax is served from the site itself
(sphinx-mathjax-offline), and the theme's files come with the theme.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from addresses import BRANCH, PROJECT, REPOSITORY  # pyproject.toml's, as read there
from needs_lexer import CourseIPythonLexer

COLAB = "https://colab.research.google.com"

project = "edu-dl"
author = "edu-dl contributors"
copyright = "edu-dl contributors"
release = PROJECT["version"]

extensions = ["myst_nb", "sphinx-mathjax-offline"]
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# Render what the notebooks hold; never run them.
nb_execution_mode = "off"
# $x$ and $$x$$ as in Jupyter's Markdown cells.
myst_enable_extensions = ["dollarmath", "amsmath"]
# Links to a heading (`#python-versions`) work as on GitHub; one to a missing heading is an error.
myst_heading_anchors = 3
# Progress-bar widgets keep no state in the notebooks (`make notebooks` saves none), so MyST-NB
# loads no widget script and they show nothing, rather than a bar stuck at 0%.
# Notebook headings go from a title (#) to any level below.
suppress_warnings = ["myst.header"]

html_theme = "sphinx_book_theme"
html_title = "edu-dl: deep-learning software, from the inside"
html_copy_source = True
html_sourcelink_suffix = ""  # the download button hands out the .ipynb itself
html_theme_options = {
    "repository_url": REPOSITORY,
    "repository_branch": BRANCH,
    "path_to_docs": "",  # the site's lectures/ and exercises/ are the repository's
    "use_repository_button": True,
    "use_download_button": True,
    "launch_buttons": {"colab_url": COLAB},
}
# Plots have white backgrounds; and without a default mode the theme's script logs an error.
html_context = {"default_mode": "light"}


def open_the_notebook(app, pagename, templatename, context, doctree):
    """Under each notebook page's title: open it in Colab, download it, see it on GitHub."""
    source = context.get("sourcename") or ""
    if not source.endswith(".ipynb") or "body" not in context:
        return
    download = context["pathto"](f"_sources/{source}", 1)
    links = [
        (f"{COLAB}/github/{REPOSITORY.removeprefix('https://github.com/')}/blob/{BRANCH}/"
         f"{pagename}.ipynb", "Open in Colab"),
        (download, "Download the notebook"),
        (f"{REPOSITORY}/blob/{BRANCH}/{pagename}.ipynb", "See it on GitHub"),
    ]
    bar = ('<p class="edu-dl-open-notebook">' + " · ".join(
        f'<a href="{href}"{" download" if href == download else ""}>{text}</a>'
        for href, text in links) + "</p>")
    body = context["body"]
    at = body.find("</h1>")
    context["body"] = body[: at + 5] + bar + body[at + 5:] if at >= 0 else bar + body


def setup(app):
    app.connect("html-page-context", open_the_notebook)
    # the notebooks' language (ipython3), with `%%needs` cells highlighted as Python
    app.add_lexer("ipython3", CourseIPythonLexer)
