"""pip's sources as uv's flags (edu_dl/util/pip_sources.py): uv reads no pip.conf, and without
them it would take other builds from PyPI than the machine's pip would (torch's CUDA build)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from edu_dl.util import pip_sources

SCRIPT = Path(pip_sources.__file__)


def test_a_variable_beats_the_install_section_which_beats_global() -> None:
    listing = "\n".join([
        "global.index-url='https://global.example/simple'",
        "global.find-links='/global/wheels'",
        "install.find-links='/install/wheels'",
        "global.constraint='/etc/caps.txt'",
        ":env:.index-url='https://env.example/simple'",
    ])
    chosen = pip_sources.settings(listing)
    assert chosen == {"index-url": "https://env.example/simple",
                      "find-links": "/install/wheels", "constraint": "/etc/caps.txt"}


def test_each_value_of_a_list_option_is_one_flag_and_pip_picks_the_best_of_all() -> None:
    chosen = pip_sources.settings("global.extra-index-url='file:///a/simple file:///b/simple'\n"
                                  "global.no-index='true'\nglobal.timeout='60'\n"
                                  "not a setting line\n")
    flags = pip_sources.uv_flags(chosen)
    assert flags == ["--index-strategy", "unsafe-best-match", "--no-index",
                     "--extra-index-url", "file:///a/simple", "--extra-index-url",
                     "file:///b/simple"]
    assert pip_sources.uv_flags({}) == ["--index-strategy", "unsafe-best-match"]


def test_a_value_with_quotes_and_newlines_as_pip_writes_it() -> None:
    value = "/with space/wheels\n/other"
    chosen = pip_sources.settings(f"global.find-links={value!r}")
    assert pip_sources.uv_flags(chosen)[2:] == ["--find-links", "/with", "--find-links",
                                                "space/wheels", "--find-links", "/other"]


def test_the_script_reads_pips_own_view_of_its_settings(tmp_path: Path) -> None:
    """Run as make runs it (a file, before the course is importable): a PIP_* variable and a
    config file reach uv's flags."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = file:///from/the/file\n")
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": str(conf),
           "PIP_FIND_LINKS": "/from/the/variable", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-P", str(SCRIPT)], env=env, capture_output=True,
                          text=True, check=True)
    flags = shlex.split(done.stdout)
    assert ["--find-links", "/from/the/variable"] == flags[flags.index("--find-links"):][:2]
    assert "file:///from/the/file" in flags
