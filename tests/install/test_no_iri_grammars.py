"""jsonschema without rfc3987_syntax's grammars (edu_dl/util/no_iri_grammars.py): the .pth make
installs marks the module missing in every Python of the environment, so JupyterLab's server,
nbformat's validator and nbconvert start without compiling its grammars, and a schema with an IRI
format is still checked for everything else. Each case runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from edu_dl.util import no_iri_grammars

ROOT = Path(__file__).resolve().parents[2]


def python(code: str, *flags: str) -> str:
    done = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, check=True)
    return done.stdout.strip()


def test_make_installed_the_pth() -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / no_iri_grammars.PTH_NAME
    assert pth.read_text() == no_iri_grammars.PTH_LINE


def test_jupyterlab_and_nbconvert_start_without_the_grammars() -> None:
    probe = ("import sys, jupyter_server.serverapp, jupyterlab.labapp, nbconvert, "
             "jsonschema._format; print(sys.modules['rfc3987_syntax'])")
    assert python(probe) == "None"


def test_the_mark_comes_from_the_pth_alone() -> None:
    # -S skips site-packages' .pth files: the module is then imported for real (the control).
    site = sysconfig.get_paths()["purelib"]
    probe = (f"import sys; sys.path.append({site!r}); import jsonschema._format; "
             "print(type(sys.modules.get('rfc3987_syntax')).__name__)")
    assert python(probe, "-S") == "module"


def test_other_formats_are_still_checked() -> None:
    probe = ("import jsonschema\n"
             "schema = {'properties': {'when': {'format': 'date'}, 'link': {'format': 'iri'}}}\n"
             "check = jsonschema.Draft7Validator(schema, "
             "format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)\n"
             "print(len(list(check.iter_errors({'when': 'not a date', 'link': 'x y'}))))")
    assert python(probe) == "1"  # the date is refused; the IRI check is skipped
