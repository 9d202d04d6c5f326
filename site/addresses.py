"""The course's addresses for the website, from pyproject.toml: a fork sets them there alone.

The repository is `[project.urls] Source` (edu_dl.notebook.hosted writes the notebooks' install cell from
the same entry); the website is where .github/workflows/site.yml publishes it, GitHub Pages'
address for that repository. Read with tomllib, not from an installed edu_dl: the Pages workflow
installs only the site's tools.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
with open(ROOT / "pyproject.toml", "rb") as _file:
    PROJECT = tomllib.load(_file)["project"]

REPOSITORY: str = PROJECT["urls"]["Source"]  # https://github.com/OWNER/NAME
BRANCH = "main"  # the branch the Pages workflow publishes from


def pages_address(repository: str) -> str:
    """GitHub Pages' address of a repository's site: https://OWNER.github.io/NAME/ (a repository
    named OWNER.github.io is published at the root of that host)."""
    owner, name = repository.removeprefix("https://github.com/").strip("/").split("/")[:2]
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if name.lower() == host else f"https://{host}/{name}/"


WEBSITE = pages_address(REPOSITORY)
