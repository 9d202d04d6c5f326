"""Build the course website (`make site`): the executed lectures and the exercises as static HTML.

Sphinx reads only inside its source folder, so the pages' sources are gathered in
site/_build/src/ first: site/index.md and the notebooks of lectures/ and exercises/, under the
same relative paths as in the repository (so that the Colab and GitHub links of each page point at
the notebook itself). Then Sphinx builds them with site/conf.py into site/_build/html/ (or --out).
Nothing is executed and nothing is fetched: the pages show the outputs the notebooks were
committed with.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
FOLDERS = ("lectures", "exercises")


def gather(src: Path) -> list[Path]:
    """site/index.md and the notebooks (with any files beside them) into `src`, afresh."""
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy2(SITE / "index.md", src / "index.md")
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
