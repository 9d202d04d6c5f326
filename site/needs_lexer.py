"""The notebooks' code cells as the site highlights them: IPython's lexer, plus ``%%needs``.

IPython's lexer shows the whole cell after a cell magic it does not know as plain text. The
course's ``%%needs tensorflow`` (edu_dl.notebook.lecture) runs the cell below it as Python, so
the site highlights it like ``%%time``: the magic's line, then the cell as Python.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ipython_pygments_lexers import IPython3Lexer
from pygments.lexer import bygroups, using
from pygments.lexers import Python3Lexer
from pygments.token import Operator, Text


class CourseIPythonLexer(IPython3Lexer):
    """IPython 3 code, where a ``%%needs ...`` line is followed by Python."""

    tokens: ClassVar[dict[str, Any]] = {**IPython3Lexer.tokens, "root": [
        (r"(?s)(\s*)(%%needs)([^\n]*\n)(.*)", bygroups(Text, Operator, Text, using(Python3Lexer))),
        *IPython3Lexer.tokens["root"],
    ]}
