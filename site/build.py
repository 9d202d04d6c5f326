"""Build the course website (`make site`): the executed lectures and the exercises as static HTML,
with the students' page, the instructors' and the developers'.

Sphinx reads only inside its source folder, so the pages' sources are gathered in
site/_build/src/ first: site/index.md, site/instructors.md, site/developers.md, the students' page
(students.md: the README's part between its two "students' part" markers), and the notebooks of
lectures/ and exercises/, under the same relative paths as in the repository (so that the Colab
and GitHub links of each page point at the notebook itself). A Markdown page's relative links are
written for GitHub, relative to its own file; here a link to another page of the site becomes that
page (students.md, written by this script, included: site/index.md's "Start here" links to it), and
a link to any other file of the repository its address on GitHub (site/addresses.py, from
pyproject.toml). Then Sphinx builds them with site/conf.py into site/_build/html/ (or --out).
Nothing is executed and nothing is fetched: the pages show the outputs the notebooks were
committed with.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import shutil
import sys
from pathlib import Path

from addresses import BRANCH, REPOSITORY

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
FOLDERS = ("lectures", "exercises")
# site/NAME.md -> the page NAME of the site.
PAGES = ("index", "instructors", "developers")
# The site's page that no file of site/ holds: gather() writes it from the README. A link from
# site/ to students.md is to this page, never to GitHub (where site/students.md does not exist).
STUDENTS = "students"
# The README's part for students, between these two lines, is the site's page students.md.
STUDENTS_FROM = "<!-- students' part"
STUDENTS_TO = "<!-- end of the students' part"
# A Markdown link or image with a relative target: ](target) or ](target "title").
RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)")


def students_part(readme: str) -> str:
    """The README's part for students, as a page: its title and that part."""
    start, end = readme.find(STUDENTS_FROM), readme.find(STUDENTS_TO)
    if start < 0 or end < start:
        raise SystemExit(f"error: README.md lacks the lines {STUDENTS_FROM!r} and {STUDENTS_TO!r}")
    part = readme[readme.index("\n", start) + 1:end].strip()
    return "# The course, for students\n\n" + part + "\n"


def site_links(text: str, folder: str) -> str:
    """The relative links of a page whose source sits in `folder` (of the repository), as the
    site (at the root of the sources) needs them."""
    def target(match: re.Match[str]) -> str:
        path, hash_, anchor = match[1].partition("#")
        resolved = posixpath.normpath(posixpath.join(folder, path))
        stem = resolved.removeprefix("site/").removesuffix(".md")
        if resolved.startswith("site/") and stem in (*PAGES, STUDENTS):
            new = f"{stem}.md"
        elif resolved == "README.md":
            new = f"{STUDENTS}.md"
        elif resolved.split("/")[0] in FOLDERS and resolved.endswith(".ipynb"):
            new = resolved
        else:
            new = f"{REPOSITORY}/blob/{BRANCH}/{resolved}"
        return f"]({new}{hash_}{anchor}"
    return RELATIVE_LINK.sub(target, text)


def gather(src: Path) -> list[Path]:
    """The pages and the notebooks (with any files beside them) into `src`, afresh."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    for page in PAGES:
        text = (SITE / f"{page}.md").read_text(encoding="utf-8")
        text = text.replace("{{ repository }}", REPOSITORY)
        (src / f"{page}.md").write_text(site_links(text, "site"), encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (src / f"{STUDENTS}.md").write_text(site_links(students_part(readme), "."), encoding="utf-8")
    notebooks = []
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        notebooks += sorted((src / folder).glob("*.ipynb"))
    return notebooks


def build(out: Path, work: Path, quiet: bool = False) -> int:
    from sphinx.cmd.build import build_main

    notebooks = gather(work / "src")
    if not notebooks:
        print("error: no notebooks in " + ", ".join(FOLDERS), file=sys.stderr)
        return 1
    args = ["-b", "html", "-c", str(SITE), "-d", str(work / "doctrees"), "--fail-on-warning",
            "--keep-going", *(["-q"] if quiet else []), str(work / "src"), str(out)]
    return build_main(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=SITE / "_build" / "html",
                        help="the HTML folder (default: site/_build/html)")
    parser.add_argument("--work", type=Path, default=None,
                        help="sources and Sphinx's cache (default: beside --out)")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    work = args.work or args.out.parent
    status = build(args.out.resolve(), work.resolve(), args.quiet)
    if status == 0:
        print(f"the site is in {args.out}/ (open {args.out / 'index.html'})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
