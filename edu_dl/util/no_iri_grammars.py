"""jsonschema without rfc3987_syntax's grammars, in every Python of the course's environment.

Jupyter's packages ask for ``jsonschema[format-nongpl]``, which installs rfc3987_syntax for
jsonschema's IRI format check. Importing it compiles about 35 Earley grammars (lark): 1.5-2 s
of CPU in every process that loads jsonschema's format checkers, which is every JupyterLab
server (jupyter_events), every ``nbformat`` reader with validation (nbconvert, nbval, the
site's build) and every test worker. No schema in Jupyter or in this course uses an IRI format
(jupyter-server/jupyter_server#1559, python-jsonschema/jsonschema#1428).

``make install`` runs this file as a script: it writes a one-line ``.pth`` into the
environment's site-packages, so that every interpreter there starts with ``rfc3987_syntax``
marked missing. jsonschema then skips that one check, as where the package is not installed
(``import rfc3987_syntax`` raises ImportError). Measured: importing JupyterLab's server took
2.4-2.5 s of CPU, 0.9-1.1 s with the mark. ``edu_dl.grading.protocol.skip_slow_optional_imports``
does the same inside the grader's own processes, for an environment without the ``.pth``.
"""

from __future__ import annotations

PTH_NAME = "edu_dl_no_iri_grammars.pth"
# The whole hook: nothing to read from the checkout, so a moved checkout cannot break it.
PTH_LINE = "import sys; sys.modules.setdefault('rfc3987_syntax', None)\n"


if __name__ == "__main__":  # python edu_dl/util/no_iri_grammars.py: this Python's site-packages
    import sysconfig

    from edu_dl.util.triton_first import write_pth

    print("wrote", write_pth(sysconfig.get_paths()["purelib"], PTH_LINE, PTH_NAME))
