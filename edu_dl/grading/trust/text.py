"""Text a student wrote, made safe for every place the grader writes it.

A student controls exception messages, printed output, file names (undecodable bytes arrive as
lone surrogates) and cell sources. None of it may stop a writer (a lone surrogate makes a strict
UTF-8 encoder raise), drive a terminal (escape sequences clear a screen, forge a line, set the
clipboard) or become markup in a page. Every writer passes such text through one function here:

- :func:`visible`: any string as valid Unicode; each lone surrogate becomes ``\\xNN`` (the byte
  a file name held) or ``\\udNNN``. For files: CSV, JSON state, Markdown and HTML bodies.
- :func:`for_terminal`: :func:`visible`, and every control character but newline and tab, and
  every bidirectional override, written as an escape (``\\x1b``, ``\\u202e``).
- :func:`for_markdown`: :func:`for_terminal`, then HTML-escaped, with table pipes and newlines
  made harmless: the text of one Markdown table cell.
"""

from __future__ import annotations

import html
import re
import sys
from typing import TextIO

SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls and DEL (but newline and tab), and the bidirectional controls that reorder
# what a reader sees (a "trojan source" line).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _surrogate(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    # surrogateescape maps an undecodable byte b to U+DC00 + b (b >= 0x80)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _control(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``text`` as a string that encodes as UTF-8, lone surrogates written as escapes."""
    text = text if isinstance(text, str) else str(text)
    return SURROGATE.sub(_surrogate, text)


def for_terminal(text: object) -> str:
    """``text`` safe to print: control characters (but newline and tab) as escapes."""
    return CONTROL.sub(_control, visible(text))


def say(text: object, file: TextIO | None = None) -> None:
    """Print for a person at a terminal (stdout unless ``file``): whatever a student wrote
    into ``text`` (a name, an exception) is shown with its control characters escaped."""
    print(for_terminal(text), file=file or sys.stdout)


def say_to_stderr(text: object) -> None:
    """:func:`say` on stderr: the batch's log."""
    say(text, sys.stderr)


def for_markdown(text: object) -> str:
    """``text`` as the body of one Markdown table cell: no markup, no pipes, no newlines."""
    return html.escape(for_terminal(text)).replace("|", "\\|").replace("\n", "<br>")
